"""A tiny Hugging Face Trainer run for `recover`: `python recover_hf_child.py OUTDIR MODE`.

The one-layer GPT-2 of `tests/writers/hf_trainer_run.py`, `STEPS` steps, `save_steps=10, save_total_limit=1`,
constant LR 1e-3, `AlertdCallback()`, and `trainer.train(resume_from_checkpoint=resume_from())`: the one line a
script changes. The loss of update `NAN_AT` is NaN (the model's forward multiplies it, as a bad batch would);
MODE `always`: of every update from `NAN_AT` on, whatever the attempt (a fault no rollback gets past). Each step
takes `PACE` s at least. Prints `attempt=<N> resume_from=<path or None>` first and `done at step <N>
finite=<bool>` at the end of each attempt; the Trainer prints its own `{'loss': ..., 'grad_norm': ...,
'learning_rate': ...}` per step.
"""

from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "writers"))

from hf_trainer_run import BATCH_SIZE, SEQ_LEN, VOCAB_SIZE, RandomTokens
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

from alertd.integrations.resume import resume_from
from alertd.integrations.transformers import AlertdCallback

STEPS = 60
NAN_AT = 40
PACE = 0.05


class Poisoned(GPT2LMHeadModel):
    """GPT-2 whose loss is NaN while `poisoned` is set."""

    poisoned = False

    def forward(self, input_ids: Any = None, labels: Any = None, **kwargs: Any) -> Any:
        out = super().forward(input_ids=input_ids, labels=labels, **kwargs)
        if self.poisoned and out.loss is not None:
            out.loss = out.loss * math.nan
        return out


class Poison(TrainerCallback):
    def __init__(self, always: bool) -> None:
        self.always = always

    def on_step_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        update = state.global_step + 1
        model.poisoned = update == NAN_AT or (self.always and update >= NAN_AT)
        self.began = time.monotonic()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        time.sleep(max(0.0, PACE - (time.monotonic() - self.began)))  # as long as a real step, at least


def main(out: str, mode: str) -> None:
    config = GPT2Config(n_layer=1, n_head=2, n_embd=32, vocab_size=VOCAB_SIZE, n_positions=32, bos_token_id=0)
    torch.manual_seed(0)
    args = TrainingArguments(
        output_dir=out,
        max_steps=STEPS,
        per_device_train_batch_size=BATCH_SIZE,
        learning_rate=1e-3,
        lr_scheduler_type="constant",
        logging_steps=1,
        save_strategy="steps",
        save_steps=10,
        save_total_limit=1,
        report_to="none",
        disable_tqdm=True,
        use_cpu=True,
        dataloader_num_workers=0,
        dataloader_pin_memory=False,
        seed=0,
    )
    model = Poisoned(config)
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=RandomTokens(STEPS * BATCH_SIZE, SEQ_LEN, VOCAB_SIZE),
        callbacks=[Poison(mode == "always"), AlertdCallback()],
    )
    checkpoint = resume_from()
    print(f"attempt={os.environ.get('ALERTD_ATTEMPT')} resume_from={checkpoint}", flush=True)
    trainer.train(resume_from_checkpoint=checkpoint)
    finite = all(bool(torch.isfinite(p).all()) for p in model.parameters())
    print(f"done at step {trainer.state.global_step} finite={finite}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "once")
