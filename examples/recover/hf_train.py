"""A Hugging Face Trainer that alertd rolls back and goes on: `python hf_train.py OUTDIR [--nan-at 40]`.

A one-layer GPT-2 built from a config (nothing is downloaded), 60 steps on random tokens, a checkpoint every 10
steps (`save_total_limit=1`), `AlertdCallback()`, and the one line a script changes for `recover`:
`trainer.train(resume_from_checkpoint=resume_from())`. Run it under alertd:

    alertd exec --rules examples/recover/recover.yaml -- \
        python examples/recover/hf_train.py .state/recover --nan-at 40 --pace 0.05

`--nan-at N` makes the loss of update N NaN, as a bad batch would; `--nan-from N` of every update from N on (a
fault no rollback gets past); `--pace S`: each step takes S seconds at least (as long as a real one).
"""

from __future__ import annotations

import argparse
import math
import os
import time
from typing import Any

import torch
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

from alertd.integrations.resume import resume_from
from alertd.integrations.transformers import AlertdCallback

STEPS, BATCH, SEQ, VOCAB = 60, 4, 16, 64


class RandomTokens(Dataset[dict[str, torch.Tensor]]):
    def __init__(self, n: int) -> None:
        self.ids = torch.randint(0, VOCAB, (n, SEQ), generator=torch.Generator().manual_seed(0))

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


class Model(GPT2LMHeadModel):
    """GPT-2 whose loss is NaN while `poisoned` is set (the fault to recover from)."""

    poisoned = False

    def forward(self, input_ids: Any = None, labels: Any = None, **kwargs: Any) -> Any:
        out = super().forward(input_ids=input_ids, labels=labels, **kwargs)
        if self.poisoned and out.loss is not None:
            out.loss = out.loss * math.nan
        return out


class Fault(TrainerCallback):
    def __init__(self, at: int | None, since: int | None, pace: float) -> None:
        self.at, self.since, self.pace, self.began = at, since, pace, 0.0

    def on_step_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        update = state.global_step + 1
        model.poisoned = update == self.at or (self.since is not None and update >= self.since)
        self.began = time.monotonic()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        time.sleep(max(0.0, self.pace - (time.monotonic() - self.began)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--nan-at", type=int)
    parser.add_argument("--nan-from", type=int)
    parser.add_argument("--pace", type=float, default=0.0)
    a = parser.parse_args()
    torch.manual_seed(0)
    config = GPT2Config(
        n_layer=1, n_head=2, n_embd=32, vocab_size=VOCAB, n_positions=32, bos_token_id=0, eos_token_id=0
    )
    model = Model(config)
    args = TrainingArguments(
        output_dir=a.out,
        max_steps=STEPS,
        per_device_train_batch_size=BATCH,
        learning_rate=1e-3,
        lr_scheduler_type="constant",
        logging_steps=1,
        save_steps=10,
        save_total_limit=1,
        report_to="none",
        disable_tqdm=True,
        use_cpu=True,
        seed=0,
    )
    callbacks = [Fault(a.nan_at, a.nan_from, a.pace), AlertdCallback()]
    trainer = Trainer(model=model, args=args, train_dataset=RandomTokens(STEPS * BATCH), callbacks=callbacks)
    checkpoint = resume_from()  # None on a first start; the plan's checkpoint after a recovery
    print(f"attempt={os.environ.get('ALERTD_ATTEMPT')} resume_from={checkpoint}", flush=True)
    trainer.train(resume_from_checkpoint=checkpoint)
    finite = all(bool(torch.isfinite(p).all()) for p in model.parameters())
    print(f"done at step {trainer.state.global_step} finite={finite}", flush=True)


if __name__ == "__main__":
    main()
