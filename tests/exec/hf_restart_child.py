"""A tiny Hugging Face Trainer run under `alertd exec` with a restart policy: `python hf_restart_child.py OUTDIR`.

The one-layer GPT-2 of `tests/writers/hf_trainer_run.py`, 20 steps, `save_steps=5, save_total_limit=1`, with
`AlertdCallback()` (so the checkpoint ledger is `OUTDIR/alertd-checkpoints.jsonl`). The first attempt
(`ALERTD_ATTEMPT=1`) raises at the end of step `CRASH_AT`; every attempt trains with
`trainer.train(resume_from_checkpoint=resume_from())`, the one line a script changes. Prints `resume_from=<path or
None>` first and `done at step <N>` at the end.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "writers"))

from hf_trainer_run import BATCH_SIZE, SEQ_LEN, VOCAB_SIZE, RandomTokens
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

from alertd.integrations.resume import resume_from
from alertd.integrations.transformers import AlertdCallback

STEPS = 20
CRASH_AT = 12


class Crash(TrainerCallback):
    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if os.environ.get("ALERTD_ATTEMPT") == "1" and state.global_step == CRASH_AT:
            raise RuntimeError(f"the node fell over at step {state.global_step}")


def main(out: str) -> None:
    config = GPT2Config(n_layer=1, n_head=2, n_embd=32, vocab_size=VOCAB_SIZE, n_positions=32, bos_token_id=0)
    torch.manual_seed(0)
    args = TrainingArguments(
        output_dir=out,
        max_steps=STEPS,
        per_device_train_batch_size=BATCH_SIZE,
        learning_rate=1e-3,
        logging_steps=1,
        save_strategy="steps",
        save_steps=5,
        save_total_limit=1,
        report_to="none",
        disable_tqdm=True,
        use_cpu=True,
        dataloader_num_workers=0,
        dataloader_pin_memory=False,
        seed=0,
    )
    trainer = Trainer(
        model=GPT2LMHeadModel(config),
        args=args,
        train_dataset=RandomTokens(STEPS * BATCH_SIZE, SEQ_LEN, VOCAB_SIZE),
        callbacks=[Crash(), AlertdCallback()],
    )
    checkpoint = resume_from()
    print(f"resume_from={checkpoint}", flush=True)
    trainer.train(resume_from_checkpoint=checkpoint)
    print(f"done at step {trainer.state.global_step}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
