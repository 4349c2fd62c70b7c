"""alertd for Lightning: raw per-step values, the run's start and end, a stop that saves a checkpoint.

    from alertd.integrations.lightning import AlertdCallback
    trainer = L.Trainer(callbacks=[AlertdCallback()])
    trainer.fit(model)  # then: alertd --rules ... with a `samples` source on <default_root_dir>/alertd-samples.jsonl

What it writes (to `samples_path`, else `$ALERTD_SAMPLES_FILE`, else `<default_root_dir>/alertd-samples.jsonl`;
labels `run` (the `run` argument, else `$ALERTD_RUN`, else the name of `default_root_dir`), `host`, `pid`):

- `train/loss` at every optimizer step: the loss `training_step` returned (`outputs["loss"]` in
  `on_train_batch_end`), before any logger or progress bar sees it; with gradient accumulation, the sum
  of the micro-batches' losses Lightning already divided by `accumulate_grad_batches` (their mean), with
  manual optimization, their mean. Per process.
- `train/grad_norm` at every optimizer step: the total L2 norm of the gradients of the optimizer's
  parameters in `on_before_optimizer_step`, which Lightning calls after the backward pass (and AMP's
  unscaling) and BEFORE it clips them. Under FSDP or DeepSpeed a process holds only its shard: the norm
  is that shard's.
- `run.started`, and at the end `run.finished` with `run.crashed` (0 from `on_train_end`, or 1 with label
  `exception` from `on_exception`, which Lightning calls for every exception out of `fit`, Ctrl-C
  included); `run.stopped` when a stop request is honoured. The step is `trainer.global_step` as
  `training_step` saw it, the step Lightning's loggers give `train_loss`.

A stop request (the stop file `stop_file`, else `$ALERTD_STOP_FILE`, else `<default_root_dir>/ALERTD_STOP`,
looked for after every optimizer step; or SIGINT / SIGUSR1, see `alertd.integrations.stop`) is honoured in
`on_train_batch_end` after the next optimizer step: `trainer.save_checkpoint(<dir>/alertd-stop-step=N.ckpt)`
(a full, resumable checkpoint; `<dir>` is `checkpoint_dir`, else the `ModelCheckpoint`'s directory, else
`default_root_dir`; N is `trainer.global_step`, as in Lightning's own `step=N` names) then
`trainer.should_stop = True`. Lightning then runs validation if it was due to, and ends `fit` normally,
unless `min_steps` / `min_epochs` are not met yet (it says so, and trains on). In a multi-process run the
request is shared with `trainer.strategy.reduce_boolean_decision` every step, so all ranks save and stop
together.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Iterable, Mapping
from typing import Any

from alertd.integrations.recorder import GRAD_NORM, LOSS, RunRecorder
from alertd.integrations.stop import DEFAULT_SIGNALS

log = logging.getLogger("alertd.integrations")


def _lightning_callback() -> Any:
    try:
        from lightning.pytorch import Callback
    except ImportError:
        try:
            from pytorch_lightning import Callback as LegacyCallback
        except ImportError:
            return object
        return LegacyCallback
    return Callback


_Base: Any = _lightning_callback()


class AlertdCallback(_Base):  # type: ignore[misc]  # the framework is optional: its class is Any here
    """A Lightning `Callback` that records the run for alertd and stops it with a checkpoint on request.

    `L.Trainer(callbacks=[AlertdCallback()])`; every argument is optional: `samples_path`, `stop_file`, `run`,
    `checkpoint_dir` (see the module's documentation for their defaults) and `signals`, the signals taken as a
    stop request (default SIGINT and SIGUSR1; `()` for none).
    """

    def __init__(
        self,
        samples_path: str | os.PathLike[str] | None = None,
        stop_file: str | os.PathLike[str] | None = None,
        run: str | None = None,
        signals: Iterable[str] = DEFAULT_SIGNALS,
        checkpoint_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        if _Base is object:
            raise ImportError(
                "alertd.integrations.lightning.AlertdCallback needs the `lightning` package "
                "(pip install lightning; or pytorch_lightning)"
            )
        super().__init__()
        self.recorder = RunRecorder(samples_path, stop_file, run, signals)
        self.checkpoint_dir = os.fspath(checkpoint_dir) if checkpoint_dir is not None else None
        self._fitting = False
        self._stopping = False
        self._reset(None)

    def _reset(self, step: int | None) -> None:
        self._step = step
        self._loss_sum: Any = None
        self._loss_count = 0
        self._grad_norms: list[Any] = []

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        """Note that `fit` runs, so that a crash before training starts is recorded too."""
        self._fitting = True

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        """`fit` is over."""
        self._fitting = False

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        """Open the samples file, write `run.started`, listen for a stop."""
        self._stopping = False
        self._reset(None)
        self.recorder.start(trainer.default_root_dir, trainer.global_step)

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        """Remember the step this batch trains for (micro-batches of one step share it)."""
        if trainer.global_step != self._step:
            self._reset(trainer.global_step)

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        """The gradients are complete and not yet clipped: take their norm."""
        norm = _grad_norm(optimizer)
        if norm is not None:
            self._grad_norms.append(norm)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        """Add the batch's loss; once the optimizer stepped, write the step's values and honour a stop request."""
        loss = outputs.get("loss") if isinstance(outputs, Mapping) else outputs
        if loss is not None and hasattr(loss, "detach"):
            loss = loss.detach()
            self._loss_sum = loss if self._loss_sum is None else self._loss_sum + loss
            self._loss_count += 1
        if self._step is None or trainer.global_step == self._step:
            return  # accumulating gradients: not a step boundary
        step = self._step
        if self._loss_sum is not None:
            value = float(self._loss_sum)
            if not pl_module.automatic_optimization:
                value /= self._loss_count
            self.recorder.write(LOSS, value, step)
        if self._grad_norms:  # several optimizers stepping at once: the norm of them all
            self.recorder.write(GRAD_NORM, math.hypot(*(float(n) for n in self._grad_norms)), step)
        self._reset(trainer.global_step)
        self._maybe_stop(trainer)

    def _maybe_stop(self, trainer: Any) -> None:
        reason = self.recorder.stop_reason()
        if bool(trainer.strategy.reduce_boolean_decision(reason is not None, all=False)) and reason is None:
            reason = "other_rank"
        if reason is None or self._stopping:
            return
        self._stopping = True
        step = trainer.global_step
        path = os.path.join(self._checkpoint_dir(trainer), f"alertd-stop-step={step}.ckpt")
        trainer.save_checkpoint(path, weights_only=False)  # the full, resumable checkpoint
        trainer.should_stop = True
        self.recorder.stopped(step, reason, path)

    def _checkpoint_dir(self, trainer: Any) -> str:
        if self.checkpoint_dir:
            return self.checkpoint_dir
        callback = getattr(trainer, "checkpoint_callback", None)
        dirpath = getattr(callback, "dirpath", None)
        return str(dirpath) if dirpath else str(trainer.default_root_dir)

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        """Write `run.crashed` = 0 and `run.finished` = 1."""
        self.recorder.finish(trainer.global_step)

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        """Write `run.crashed` = 1 with the exception's type, and `run.finished` = 1."""
        if not self.recorder.active and self._fitting:  # it failed before training started
            self.recorder.start(trainer.default_root_dir, trainer.global_step)
        self._fitting = False
        self.recorder.crash(type(exception).__name__, trainer.global_step)


def _grad_norm(optimizer: Any) -> Any:
    """The total L2 norm of the gradients of the optimizer's parameters (a 0-d tensor), or None if none."""
    import torch

    grads = [p.grad.detach() for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
    if not grads:
        return None
    norms = [torch.linalg.vector_norm(g, 2.0, dtype=torch.float32) for g in grads]
    device = norms[0].device
    return torch.linalg.vector_norm(torch.stack([n.to(device) for n in norms]), 2.0)
