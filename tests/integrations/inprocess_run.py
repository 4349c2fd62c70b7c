"""Real, tiny trainings that take alertd's in-process commands (lr_scale, skip_step, save) and run the step guard.

Usage::

    python inprocess_run.py OUTDIR hf_spike        # HF Trainer, grad-norm spikes at SPIKES; alertd sends lr_scale
    python inprocess_run.py OUTDIR hf_skip         # HF Trainer; a skip_step and a save command after step SKIP_AT
    python inprocess_run.py OUTDIR hf_guard        # HF Trainer; guard on, NaN loss at GUARD_NAN
    python inprocess_run.py OUTDIR lightning       # Lightning; guard on, NaN loss at GUARD_NAN; commands after step 5

hf_spike trains the one-layer GPT-2 of ``tests/writers/hf_trainer_run.py`` for ``SPIKE_STEPS`` steps of about
0.15 s with a constant LR of 1e-3 and ``AlertdCallback()`` (its defaults: the commands directory is
``OUTDIR/alertd-commands``); the loss is multiplied by 1e4 at the (1-based) steps ``SPIKES``, so the pre-clip
gradient norm jumps above 100 there. The Trainer's own log history is saved to ``OUTDIR/trainer_state.json``.

hf_skip writes, at the end of step ``SKIP_AT``, a ``skip_step`` and a ``save`` command into the commands directory
(as alertd's notifiers do) and records every parameter's sum at each step end to ``OUTDIR/weights.json``.

lightning fits one linear layer (SGD, lr 0.1, a StepLR scheduler) with ``AlertdCallback(guard=Guard(sigma=6,
window=10))``; the loss is NaN at step ``GUARD_NAN`` (0-based, as Lightning counts); after step 5 it writes a
``lr_scale`` (factor 0.5) and a ``skip_step`` command; the weights at each step end go to ``OUTDIR/weights.json``,
the optimizer's LR to ``OUTDIR/lrs.json``.
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "writers"))

from alertd.integrations import commands  # noqa: E402

SPIKES = (10, 25, 40)
SPIKE_STEPS = 55
SKIP_AT = 5
GUARD_NAN = 12


def weight_sum(model: Any) -> float:
    """One number that changes with every update: the sum of every parameter."""
    return float(sum(float(p.detach().double().sum()) for p in model.parameters()))


def hf_spike(out: Path) -> None:
    """Grad-norm spikes in a HF run; alertd (driven by the test) halves the LR."""
    from hf_integ_run import StepHooks, train

    hooks = StepHooks(sleep=0.15)

    def spike(output: Any) -> Any:
        if hooks.step in SPIKES:
            output.loss = output.loss * 1e4
        return output

    trainer = train(out, SPIKE_STEPS, hooks, spike, lr_scheduler_type="constant")
    trainer.state.save_to_json(str(out / "trainer_state.json"))


def hf_skip(out: Path) -> None:
    """A skip_step and a save command after step SKIP_AT of a HF run."""
    from hf_integ_run import StepHooks, train

    weights: dict[int, float] = {}

    class Commands(StepHooks):
        def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
            weights[state.global_step] = weight_sum(model)
            if state.global_step == SKIP_AT:
                for action in ("skip_step", "save"):
                    commands.send(str(out / "alertd-commands"), "test", action, {"rule": "test"})

    train(out, 10, Commands())
    (out / "weights.json").write_text(json.dumps(weights))


def hf_guard(out: Path) -> None:
    """A HF run with AlertdCallback(guard=Guard(sigma=6, window=10)) whose loss is NaN at step GUARD_NAN (1-based)."""
    from hf_integ_run import StepHooks, train

    from alertd.integrations.guard import Guard
    from alertd.integrations.transformers import AlertdCallback

    weights: dict[int, float] = {}

    class Weights(StepHooks):
        def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
            weights[state.global_step] = weight_sum(model)

    hooks = Weights()

    def poison(output: Any) -> Any:
        if hooks.step == GUARD_NAN:
            output.loss = output.loss * math.nan
        return output

    train(out, 20, hooks, poison, AlertdCallback(guard=Guard(sigma=6, window=10)))
    (out / "weights.json").write_text(json.dumps(weights))


def lightning(out: Path) -> None:
    """Lightning with the guard on, a NaN loss at GUARD_NAN, and lr_scale + skip_step commands after step 5."""
    import lightning as L
    from lightning_run import TinyRegression, random_loader

    from alertd.integrations.guard import Guard
    from alertd.integrations.lightning import AlertdCallback

    weights: dict[int, float] = {}
    lrs: dict[int, float] = {}

    class Poisoned(TinyRegression):  # type: ignore[misc]
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.layer(x), y)
            return loss * math.nan if self.global_step == GUARD_NAN else loss

        def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
            step = self.global_step  # updates done
            weights[step] = weight_sum(self)
            lrs[step] = self.trainer.optimizers[0].param_groups[0]["lr"]
            if step == 5:
                for action, body in (("lr_scale", {"factor": 0.5}), ("skip_step", {})):
                    commands.send(str(out / "alertd-commands"), "test", action, body)

        def configure_optimizers(self) -> Any:
            optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
            return {"optimizer": optimizer, "lr_scheduler": torch.optim.lr_scheduler.StepLR(optimizer, 1000)}

    torch.set_num_threads(1)
    L.seed_everything(0, verbose=False)
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=20,
        default_root_dir=out,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        callbacks=[AlertdCallback(guard=Guard(sigma=6, window=10))],
    )
    model = Poisoned()
    trainer.fit(model, train_dataloaders=random_loader(20, seed=1))
    (out / "weights.json").write_text(json.dumps(weights))
    (out / "lrs.json").write_text(json.dumps(lrs))
    final = [bool(torch.isfinite(p).all()) for p in model.parameters()]
    (out / "finite.json").write_text(json.dumps(all(final)))


if __name__ == "__main__":
    outdir, mode = Path(sys.argv[1]), sys.argv[2]
    t0 = time.monotonic()
    {"hf_spike": hf_spike, "hf_skip": hf_skip, "hf_guard": hf_guard, "lightning": lightning}[mode](outdir)
    print(f"done in {time.monotonic() - t0:.1f}s", flush=True)
