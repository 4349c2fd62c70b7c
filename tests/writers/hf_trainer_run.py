"""A tiny, real Hugging Face ``transformers.Trainer`` run whose console output tests can read.

Usage::

    python hf_trainer_run.py OUTDIR [--steps N] [--nan-at STEP]

It trains a one-layer GPT-2 built from a config (nothing is downloaded) on random token ids, on the CPU, and
prints exactly what ``Trainer`` prints: the tqdm bar, one ``{'loss': ..., 'grad_norm': ..., ...}`` dict per
optimizer step (``logging_steps=1``) and the final ``{'train_runtime': ...}`` summary.

With ``--nan-at K`` the training loss is multiplied by NaN from optimizer step K on (K is 1-based, the ``step``
that ``Trainer`` records in its log history for that update). The Trainer keeps its default
``logging_nan_inf_filter=True``, so what it prints for those steps is what a real run with a NaN loss prints.

Besides the console output, ``OUTDIR/trainer_state.json`` holds the Trainer's own log history. No checkpoints
are written (``save_strategy="no"``).
"""

from __future__ import annotations

import argparse
import math
import os
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    Trainer,
    TrainerCallback,
    TrainerControl,
    TrainerState,
    TrainingArguments,
)

SEQ_LEN = 16
N_SAMPLES = 32
BATCH_SIZE = 4
VOCAB_SIZE = 64


class RandomTokens(Dataset[dict[str, torch.Tensor]]):
    """Random token ids; the labels are the inputs (the model shifts them itself)."""

    def __init__(self, n: int, seq_len: int, vocab_size: int, seed: int = 0) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(0, vocab_size, (n, seq_len), generator=generator)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[index], "labels": self.ids[index]}


class NanFromStep(TrainerCallback):
    """Turns on NaN loss from optimizer step ``step`` (1-based) on; the model's forward hook reads ``active``."""

    def __init__(self, step: int | None) -> None:
        self.step = step
        self.active = False

    def on_step_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        """``state.global_step`` counts finished updates, so the update starting now is number ``global_step + 1``."""
        self.active = self.step is not None and state.global_step + 1 >= self.step


def _alertd(wanted: bool) -> list[Any]:
    if not wanted:
        return []
    from alertd.integrations.transformers import AlertdCallback

    return [AlertdCallback()]


def main() -> None:
    """Parse the command line and run the training."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir", type=Path, help="Trainer output_dir (only trainer_state.json is written there)")
    parser.add_argument("--steps", type=int, default=20, help="number of optimizer steps (max_steps)")
    parser.add_argument("--nan-at", type=int, default=None, help="1-based optimizer step from which the loss is NaN")
    parser.add_argument("--sleep", type=float, default=0.0, help="seconds to wait in each forward pass")
    parser.add_argument("--alertd", action="store_true", help="add alertd's AlertdCallback (its defaults)")
    args = parser.parse_args()

    torch.set_num_threads(1)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    # GPT-2's bos/eos id (50256) lies outside this tiny vocabulary; left alone, transformers warns about it.
    config = GPT2Config(
        n_layer=1, n_head=2, n_embd=32, vocab_size=VOCAB_SIZE, n_positions=32, bos_token_id=0, eos_token_id=0
    )
    torch.manual_seed(0)
    model = GPT2LMHeadModel(config)

    nan_switch = NanFromStep(args.nan_at)

    def poison_loss(module: torch.nn.Module, inputs: Any, output: Any) -> Any:
        """Multiply the loss the model returns by NaN while the switch is on."""
        if nan_switch.active and output.loss is not None:
            output.loss = output.loss * math.nan
        if args.sleep:
            time.sleep(args.sleep)
        return output

    model.register_forward_hook(poison_loss)

    training_args = TrainingArguments(
        output_dir=str(args.outdir),
        max_steps=args.steps,
        per_device_train_batch_size=BATCH_SIZE,
        learning_rate=1e-3,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=False,
        use_cpu=True,
        dataloader_num_workers=0,
        dataloader_pin_memory=False,
        seed=0,
    )
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=RandomTokens(N_SAMPLES, SEQ_LEN, VOCAB_SIZE),
        callbacks=[nan_switch, *_alertd(args.alertd)],
    )
    trainer.train()
    args.outdir.mkdir(parents=True, exist_ok=True)
    trainer.state.save_to_json(str(args.outdir / "trainer_state.json"))


if __name__ == "__main__":
    main()
