"""Real, tiny Hugging Face ``Trainer`` runs with ``alertd.integrations.transformers.AlertdCallback``.

Usage::

    python hf_integ_run.py OUTDIR nan_crash     # phases nan, caught, crash; exits 1 (the crash is not caught)
    python hf_integ_run.py OUTDIR stop          # phases abort, stopfile, sigint; exits 0
    python hf_integ_run.py OUTDIR guard         # phases savestep, between; exits 0

Each phase trains the one-layer GPT-2 of ``tests/writers/hf_trainer_run.py`` with a Trainer whose
``output_dir`` is ``OUTDIR/<phase>`` and a fresh ``AlertdCallback()`` with its defaults, so the samples file
is ``OUTDIR/<phase>/alertd-samples.jsonl``, the stop file ``OUTDIR/<phase>/ALERTD_STOP`` and the run label
the phase's name. The phases:

- nan: 8 steps of 2 micro-batches each (``gradient_accumulation_steps=2``), the loss NaN from step ``NAN_AT``
  (1-based, as the Trainer counts), ``logging_steps=1``, gradients clipped to ``max_grad_norm=0.1``; the
  Trainer's own log history is saved to ``OUTDIR/nan/trainer_state.json``.
- caught: the model raises RuntimeError in its forward pass at step 2; this script catches it and goes on.
- crash: a callback raises RuntimeError at the end of step 3; nothing catches it.
- abort: step 3 sleeps up to 60 s in the forward pass (after creating ``OUTDIR/abort/in_long_step``), long
  enough for two SIGINTs; the KeyboardInterrupt of the second is caught here and printed.
- stopfile, sigint: up to 2,000 steps of about 20 ms; they end when the test asks them to stop (stop file, SIGINT).
  stopfile runs with ``save_strategy="no"``, sigint with ``save_strategy="steps"`` and a ``save_steps`` never reached.
- savestep, between: ``save_steps=10, save_total_limit=1``, up to 2,000 steps, the loss NaN from step ``GUARD_NAN_AT``
  (40, a save step) and 42, after which each step takes about 50 ms; they end when the test asks them to stop
  (SIGINT for savestep, the stop file for between). A NaN loss makes the weights NaN as it does in a real run:
  the Trainer backpropagates it, clips the NaN gradients (NaN) and AdamW steps on them.
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "writers"))

from hf_trainer_run import BATCH_SIZE, SEQ_LEN, VOCAB_SIZE, RandomTokens
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

from alertd.integrations.transformers import AlertdCallback

NAN_AT = 4
GUARD_NAN_AT = {"savestep": 40, "between": 42}


class StepHooks(TrainerCallback):
    """Knows the step being trained (1-based); sleeps after each step from ``sleep_from`` on; raises at the end of step
    ``raise_at``."""

    def __init__(self, sleep: float = 0.0, raise_at: int | None = None, sleep_from: int = 0) -> None:
        self.sleep = sleep
        self.raise_at = raise_at
        self.sleep_from = sleep_from
        self.step = 0

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """The update starting now is number ``global_step + 1``."""
        self.step = state.global_step + 1

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Sleep; raise at step ``raise_at``."""
        if self.raise_at is not None and state.global_step >= self.raise_at:
            raise RuntimeError(f"raised by a callback at step {state.global_step}")
        if state.global_step >= self.sleep_from:
            time.sleep(self.sleep)


def train(
    outdir: Path, steps: int, hooks: StepHooks, forward: Any = None, alertd: Any = None, **overrides: Any
) -> Trainer:
    """Train the tiny GPT-2 for ``steps`` steps with AlertdCallback (``alertd``, else one with its defaults) and
    ``hooks``; ``forward(output)`` may change (or raise on) the model's output."""
    config = GPT2Config(
        n_layer=1, n_head=2, n_embd=32, vocab_size=VOCAB_SIZE, n_positions=32, bos_token_id=0, eos_token_id=0
    )
    torch.manual_seed(0)
    model = GPT2LMHeadModel(config)
    if forward is not None:
        model.register_forward_hook(lambda module, inputs, output: forward(output))
    settings: dict[str, Any] = {
        "output_dir": str(outdir),
        "max_steps": steps,
        "per_device_train_batch_size": BATCH_SIZE,
        "learning_rate": 1e-3,
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": "none",
        "disable_tqdm": True,
        "use_cpu": True,
        "dataloader_num_workers": 0,
        "dataloader_pin_memory": False,
        "seed": 0,
    }
    args = TrainingArguments(**{**settings, **overrides})
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=RandomTokens(steps * BATCH_SIZE * args.gradient_accumulation_steps, SEQ_LEN, VOCAB_SIZE),
        callbacks=[hooks, alertd or AlertdCallback()],
    )
    trainer.train()
    return trainer


def nan_crash(out: Path) -> None:
    """Phases nan, caught and crash."""
    hooks = StepHooks()

    def poison(output: Any) -> Any:
        if hooks.step >= NAN_AT:
            output.loss = output.loss * math.nan
        return output

    trainer = train(out / "nan", 8, hooks, poison, gradient_accumulation_steps=2, max_grad_norm=0.1)
    trainer.state.save_to_json(str(out / "nan" / "trainer_state.json"))

    caught = StepHooks()

    def explode(output: Any) -> Any:
        if caught.step >= 2:
            raise RuntimeError("raised by the model at step 2")
        return output

    try:
        train(out / "caught", 8, caught, explode)
    except RuntimeError as e:
        print(f"caught: {e}", flush=True)

    train(out / "crash", 8, StepHooks(raise_at=3))


def stop(out: Path) -> None:
    """Phases abort, stopfile and sigint."""
    hooks = StepHooks()
    marker = out / "abort" / "in_long_step"

    def long_step(output: Any) -> Any:
        if hooks.step == 3:
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.touch()
            time.sleep(60)
        return output

    try:
        train(out / "abort", 8, hooks, long_step)
    except KeyboardInterrupt:
        print("abort: KeyboardInterrupt", flush=True)
    else:
        raise SystemExit("abort: the long step was not interrupted")

    train(out / "stopfile", 2000, StepHooks(sleep=0.02))
    train(out / "sigint", 2000, StepHooks(sleep=0.02), save_strategy="steps", save_steps=100_000)
    print("stopped cleanly", flush=True)


def guard(out: Path) -> None:
    """Phases savestep and between: NaN weights, checkpoints every 10 steps, stopped by the test."""
    for phase, nan_at in GUARD_NAN_AT.items():
        hooks = StepHooks(sleep=0.05, sleep_from=nan_at)

        def poison(output: Any, hooks: StepHooks = hooks, nan_at: int = nan_at) -> Any:
            if hooks.step >= nan_at:
                output.loss = output.loss * math.nan
            return output

        train(out / phase, 2000, hooks, poison, save_strategy="steps", save_steps=10, save_total_limit=1)
    print("stopped cleanly", flush=True)


def main() -> None:
    """Parse the command line and run the phases of the mode."""
    out, mode = Path(sys.argv[1]), sys.argv[2]
    torch.set_num_threads(1)
    {"nan_crash": nan_crash, "stop": stop, "guard": guard}[mode](out)


if __name__ == "__main__":
    main()
