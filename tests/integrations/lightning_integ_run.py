"""Real, tiny Lightning runs with ``alertd.integrations.lightning.AlertdCallback``.

Usage::

    python lightning_integ_run.py OUTDIR nan_crash     # phases nan, crash; exits 1 (the crash is not caught)
    python lightning_integ_run.py OUTDIR stop          # phases abort, stopfile, sigint; exits 0
    python lightning_integ_run.py OUTDIR guard         # phase guard; exits 0

Each phase fits the one linear layer of ``tests/writers/lightning_run.py`` on the CPU with
``default_root_dir=OUTDIR/<phase>``, no logger, and a fresh ``AlertdCallback()`` with its defaults, so the
samples file is ``OUTDIR/<phase>/alertd-samples.jsonl``, the stop file ``OUTDIR/<phase>/ALERTD_STOP`` and the
run label the phase's name. The phases:

- nan: 8 steps of 2 batches each (``accumulate_grad_batches=2``) with ``gradient_clip_val=1.0``, the loss NaN
  from ``global_step`` ``NAN_AT`` on (0-based, as Lightning counts). ``OUTDIR/nan/logged.json`` holds, per
  step, the losses ``training_step`` returned and the gradient norm Lightning's own ``grad_norm`` utility
  gives in the module's ``on_before_optimizer_step`` (before clipping).
- crash: ``training_step`` raises RuntimeError at ``global_step`` 3; nothing catches it.
- abort: ``training_step`` sleeps up to 60 s at ``global_step`` 2 (after creating ``OUTDIR/abort/in_long_step``),
  long enough for two SIGINTs; Lightning turns the KeyboardInterrupt of the second into ``sys.exit(1)``, which
  is caught here.
- stopfile, sigint: up to 2,000 steps of about 20 ms; they end when the test asks them to stop (stop file, SIGINT).
  stopfile runs without a ``ModelCheckpoint`` (the checkpoint goes to ``default_root_dir``), sigint with one
  (the checkpoint goes to its directory, ``OUTDIR/sigint/checkpoints``).
- guard: up to 2,000 steps with Adam and ``ModelCheckpoint(every_n_train_steps=10, save_top_k=1, save_last=True)``
  (no monitor: the newest replaces the previous one) in ``OUTDIR/guard/checkpoints``; the loss is NaN from
  ``global_step`` ``GUARD_NAN_AT`` (39) on, so the weights are NaN from global step 40, a save step, on; from then
  on each step takes about 50 ms. It ends when the test asks it to stop (SIGINT).
"""

from __future__ import annotations

import json
import math
import signal
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "writers"))

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.utilities import grad_norm
from lightning_run import TinyRegression, random_loader

from alertd.integrations.lightning import AlertdCallback

NAN_AT = 4
GUARD_NAN_AT = 39


class Model(TinyRegression):
    """The writers' TinyRegression, which can also raise or sleep long at one step, and record what it logs."""

    def __init__(self, nan_at: int | None = None, sleep: float = 0.0, raise_at: int | None = None) -> None:
        super().__init__(nan_at=nan_at, sleep=sleep)
        self.raise_at = raise_at
        self.long_step_marker: Path | None = None
        self.losses: dict[int, list[float]] = {}
        self.grad_norms: dict[int, float] = {}

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        """TinyRegression's step, then raise or sleep where asked."""
        if self.raise_at is not None and self.global_step >= self.raise_at:
            raise RuntimeError(f"raised by training_step at step {self.global_step}")
        if self.long_step_marker is not None and self.global_step == 2:
            self.long_step_marker.parent.mkdir(parents=True, exist_ok=True)
            self.long_step_marker.touch()
            time.sleep(60)
        loss = super().training_step(batch, batch_idx)
        self.losses.setdefault(self.global_step, []).append(float(loss))
        return loss

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        """Lightning's own measure of the gradients' total norm, before they are clipped."""
        self.grad_norms[self.global_step] = float(grad_norm(self, norm_type=2)["grad_2.0_norm_total"])


class GuardModel(Model):
    """Model, trained with Adam (whose state turns NaN with the weights), slow from its NaN step on."""

    def configure_optimizers(self) -> torch.optim.Optimizer:
        """Adam: moments that a NaN gradient turns NaN."""
        return torch.optim.Adam(self.parameters(), lr=0.01)

    def on_train_batch_end(self, outputs: object, batch: object, batch_idx: int) -> None:
        """Wait 50 ms after each step from the NaN one on."""
        if self.nan_at is not None and self.global_step > self.nan_at:
            time.sleep(0.05)


def fit(
    outdir: Path,
    steps: int,
    model: Model,
    checkpointing: bool = False,
    clip: float | None = None,
    accumulate: int = 1,
    checkpoint: ModelCheckpoint | None = None,
) -> L.Trainer:
    """Fit ``model`` for ``steps`` optimizer steps with AlertdCallback (and ``checkpoint``)."""
    L.seed_everything(0, verbose=False)
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=steps,
        default_root_dir=outdir,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=checkpointing or checkpoint is not None,
        gradient_clip_val=clip,
        accumulate_grad_batches=accumulate,
        callbacks=[AlertdCallback(), *([checkpoint] if checkpoint is not None else [])],
    )
    trainer.fit(model, train_dataloaders=random_loader(steps * accumulate, seed=1))
    return trainer


def nan_crash(out: Path) -> None:
    """Phases nan and crash."""
    model = Model(nan_at=NAN_AT)
    fit(out / "nan", 8, model, clip=1.0, accumulate=2)
    losses = {step: sum(v) / len(v) for step, v in model.losses.items()}
    logged = {
        name: {step: "NaN" if math.isnan(v) else v for step, v in values.items()}
        for name, values in (("loss", losses), ("grad_norm", model.grad_norms))
    }
    logged["batches"] = {step: len(v) for step, v in model.losses.items()}
    (out / "nan" / "logged.json").write_text(json.dumps(logged))
    fit(out / "crash", 8, Model(raise_at=3))


def stop(out: Path) -> None:
    """Phases abort, stopfile and sigint."""
    model = Model()
    model.long_step_marker = out / "abort" / "in_long_step"
    try:
        fit(out / "abort", 8, model)
    except SystemExit as e:
        print(f"abort: SystemExit({e.code})", flush=True)
    else:
        raise SystemExit("abort: the long step was not interrupted")
    # Lightning ignores SIGINT from a KeyboardInterrupt on ("disable KeyboardInterrupt for shutdown"): undo that.
    signal.signal(signal.SIGINT, signal.default_int_handler)

    fit(out / "stopfile", 2000, Model(sleep=0.02))
    fit(out / "sigint", 2000, Model(sleep=0.02), checkpointing=True)
    print("stopped cleanly", flush=True)


def guard(out: Path) -> None:
    """Phase guard: NaN weights from global step 40, checkpoints every 10 steps, stopped by the test."""
    checkpoint = ModelCheckpoint(
        dirpath=out / "guard" / "checkpoints", every_n_train_steps=10, save_top_k=1, save_last=True
    )
    fit(out / "guard", 2000, GuardModel(nan_at=GUARD_NAN_AT), checkpoint=checkpoint)
    print("stopped cleanly", flush=True)


def main() -> None:
    """Parse the command line and run the phases of the mode."""
    out, mode = Path(sys.argv[1]), sys.argv[2]
    torch.set_num_threads(1)
    {"nan_crash": nan_crash, "stop": stop, "guard": guard}[mode](out)


if __name__ == "__main__":
    main()
