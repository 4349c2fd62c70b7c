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
- `train/step_time` at every optimizer step: the seconds since the previous step end, the rank's heartbeat;
  in a distributed run also `train/step_busy`, the rank's share of it (`alertd.integrations.busy`).
- On every rank of a distributed run (each process writes its own values, appended to the same file), with the
  labels `rank`, `local_rank`, `world_size` and `node` (`alertd.integrations.recorder`); none in one process.
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

Checkpoints whose weights are not finite are vetoed. On every `ModelCheckpoint` of the trainer (Lightning runs
them after all other callbacks), the two methods that save and then rotate, `_save_topk_checkpoint` (top-k,
and the latest with `monitor=None`) and `_save_last_checkpoint` (`last.ckpt`), are wrapped from `on_train_start`
to `teardown`, and skipped whole when a floating tensor of the module's parameters or of an optimizer's state is
NaN or infinite (`alertd.integrations.finite`: at most once per global step, one device sync, agreed by all
ranks with `reduce_boolean_decision`): the `ModelCheckpoint` does not believe it saved, so it deletes nothing.
The stop's own checkpoint is saved only with finite weights; otherwise nothing is saved and the run still
stops. Every save and veto is recorded in the checkpoint ledger `<default_root_dir>/alertd-checkpoints.jsonl`
(`alertd.integrations.ledger`, written by global rank 0), and the stop's log line and `run.stopped` (labels
`checkpoint`, `saved`) name the checkpoint saved at the stop, or the last good one when nothing was saved.

alertd's in-process actions (`alertd.integrations.steering`; commands in `commands_dir`, else
`$ALERTD_COMMANDS_DIR`, else `<default_root_dir>/alertd-commands`) are taken in `on_train_batch_end` after each
optimizer step: `lr_scale` changes the optimizers' param groups and the LR schedulers' base LRs at once; `skip_step`
drops the next update (in `on_before_optimizer_step`, before clipping: every gradient set to None, so the optimizer
moves nothing); `save` saves `<dir>/alertd-save-step=N.ckpt` (only with finite weights); `stop` is a stop request.
With `guard=Guard(...)`, a step whose loss (from `on_before_backward`) or pre-clip gradient norm is not finite or
an outlier is dropped the same way. One process: the commands are not shared between ranks.

alertd's recovery plan (`alertd.integrations.plan`: `$ALERTD_RECOVERY_PLAN`, or
`<default_root_dir>/alertd-recovery.json` not yet acknowledged) is applied in `on_train_start`, which Lightning calls
after it restored the optimizers, the schedulers and the loops from `ckpt_path`: when `trainer.global_step` is the
plan's checkpoint step, every LR (param groups, the schedulers' base LRs) is multiplied by its `lr_factor`, and the
LightningModule's `training_step` is wrapped (on the instance, put back at `teardown`) to return None for each
planned update (number `global_step + 1`): automatic optimization then skips the backward pass, the optimizer steps
on no gradient (nothing moves) and `global_step` still advances; Lightning warns once "`training_step` returned
`None`". `train/step_skipped` (reason=plan) is written at its step, no loss or gradient norm. Otherwise the plan is
refused. Either way `<default_root_dir>/alertd-recovery.ack.json` says so (global rank 0). `$ALERTD_RUN_INFO`, when
set, is written at `on_train_start` (global rank 0).
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from alertd.integrations import finite
from alertd.integrations.guard import Guard
from alertd.integrations.ledger import COMMAND, SCHEDULE, STOP, Ledger
from alertd.integrations.patches import Patches
from alertd.integrations.plan import current_plan, write_run_info
from alertd.integrations.recorder import GRAD_NORM, LOSS, RunRecorder
from alertd.integrations.steering import Steering, drop_update
from alertd.integrations.stop import COMMAND as STOP_COMMAND
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
        commands_dir: str | os.PathLike[str] | None = None,
        guard: Guard | None = None,
    ) -> None:
        if _Base is object:
            raise ImportError(
                "alertd.integrations.lightning.AlertdCallback needs the `lightning` package "
                "(pip install lightning; or pytorch_lightning)"
            )
        super().__init__()
        self.recorder = RunRecorder(samples_path, stop_file, run, signals)
        self.steering = Steering(commands_dir, guard)
        self.checkpoint_dir = os.fspath(checkpoint_dir) if checkpoint_dir is not None else None
        self._fitting = False
        self._stopping = False
        self._ledger = Ledger(".", "lightning", write=False)
        self._patches = Patches()
        self._finite_at: int | None = None  # the global step whose weights `_finite` tells about
        self._finite = True
        self._recording = 0  # > 0 inside a wrapped save of a ModelCheckpoint
        self._recording_saves = 0
        self._reset(None)

    def _reset(self, step: int | None) -> None:
        self._step = step
        self._loss_sum: Any = None
        self._loss_count = 0
        self._grad_norms: list[Any] = []
        self._judged = False
        self._guard_loss: Any = None
        self._planned: str | None = None  # why the recovery plan drops this update (step_skipped written)

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        """Note that `fit` runs, so that a crash before training starts is recorded too."""
        self._fitting = True

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        """`fit` is over."""
        self._fitting = False

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        """Open the samples file, write `run.started`, listen for a stop, guard the ModelCheckpoints' saves."""
        self._stopping = False
        self._finite_at = None
        self._reset(None)
        self.recorder.start(trainer.default_root_dir, trainer.global_step)
        self.recorder.watch(pl_module)
        self.steering.start(trainer.default_root_dir, self.recorder)
        self._ledger = Ledger(trainer.default_root_dir, "lightning", write=bool(trainer.is_global_zero))
        self._patches.restore()
        for callback in getattr(trainer, "checkpoint_callbacks", ()):
            self._guard(trainer, callback)
        if trainer.is_global_zero:
            write_run_info(trainer.default_root_dir, "lightning")
        # Lightning restored the optimizers, the schedulers and the loops (global_step) before on_train_start.
        schedulers = [config.scheduler for config in getattr(trainer, "lr_scheduler_configs", ())]
        root = os.path.abspath(os.fspath(trainer.default_root_dir))
        plan = current_plan(root)
        if self.steering.recover(
            plan, trainer.global_step, trainer.optimizers, schedulers, root, ack=bool(trainer.is_global_zero)
        ):
            self._skip_planned(trainer, pl_module)

    def _skip_planned(self, trainer: Any, pl_module: Any) -> None:
        """Make the module's `training_step` return None for the updates the recovery plan drops (automatic
        optimization then skips backward; the optimizer steps on no gradient, global_step advances)."""
        training_step = pl_module.training_step

        def planned_training_step(*args: Any, **kwargs: Any) -> Any:
            update = trainer.global_step + 1
            why = self.steering.planned(update)
            if why is None:
                return training_step(*args, **kwargs)
            if self._planned is None:  # once per update (micro-batches of one update share it)
                self._planned = why
                self.steering.skipped(trainer.global_step, why, trainer.optimizers)
            return None

        self._patches.set(pl_module, "training_step", planned_training_step)

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        """Put the ModelCheckpoints' methods back (after an exception they stay guarded until the next fit)."""
        self._patches.restore()

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        """Remember the step this batch trains for (micro-batches of one step share it)."""
        if trainer.global_step != self._step:
            self._reset(trainer.global_step)

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        """The gradients are complete and not yet clipped: take their norm."""
        norm = _grad_norm(optimizer)
        if norm is not None:
            self._grad_norms.append(norm)
        if self._planned is not None:
            drop_update(trainer.optimizers)  # no gradient anyway: training_step returned None
            return
        if self.steering.judging and not self._judged and self._step is not None:
            self._judged = True
            loss = float(self._guard_loss) if self._guard_loss is not None else None
            why = self.steering.judge(self._step, loss, float(norm) if norm is not None else None, self._step + 1)
            if why is not None:
                self.steering.skipped(self._step, why, trainer.optimizers)

    def on_before_backward(self, trainer: Any, pl_module: Any, loss: Any) -> None:
        """A micro-batch's loss, before its backward pass: the guard judges their sum (automatic optimization)."""
        if self.steering.judging and hasattr(loss, "detach"):
            loss = loss.detach()
            self._guard_loss = loss if self._guard_loss is None else self._guard_loss + loss

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
        self.recorder.step_end(step)
        self._reset(trainer.global_step)
        self._maybe_stop(trainer, self._commands(trainer))

    def _commands(self, trainer: Any) -> str | None:
        """Take alertd's new commands (the ranks agree on them and on a stop); the reason to stop now, or None."""
        step = trainer.global_step
        schedulers = [config.scheduler for config in getattr(trainer, "lr_scheduler_configs", ())]
        device = getattr(trainer.strategy, "root_device", None)
        orders = self.steering.boundary(step, trainer.optimizers, schedulers, self.recorder.stop_reason(), device)
        for command in orders.stop:
            self.steering.done(command, step)
            self.recorder.stop.reason = self.recorder.stop.reason or STOP_COMMAND
        if not orders.save:
            return orders.reason
        path = os.path.abspath(os.path.join(self._checkpoint_dir(trainer), f"alertd-save-step={step}.ckpt"))
        if self._weights_finite(trainer):
            trainer.save_checkpoint(path, weights_only=False)
            self._ledger.saved(step, path, COMMAND)
            for command in orders.save:
                self.steering.done(command, step, checkpoint=path)
        else:
            self._ledger.vetoed(step, path, COMMAND)
            for command in orders.save:
                self.steering.refuse(command, step, "weights not finite, no checkpoint saved")
        return orders.reason

    def _maybe_stop(self, trainer: Any, reason: str | None) -> None:
        if reason is None or self._stopping:
            return
        self._stopping = True
        step = trainer.global_step
        path = os.path.abspath(os.path.join(self._checkpoint_dir(trainer), f"alertd-stop-step={step}.ckpt"))
        if self._weights_finite(trainer):
            trainer.save_checkpoint(path, weights_only=False)  # the full, resumable checkpoint
            self._ledger.saved(step, path, STOP)
            self.recorder.stopped(step, reason, path, saved=True)
        else:
            self._ledger.vetoed(step, path, STOP)
            not_saved = "weights not finite, no checkpoint saved"
            self.recorder.stopped(step, reason, self._ledger.last_good(), saved=False, not_saved=not_saved)
        trainer.should_stop = True

    def _weights_finite(self, trainer: Any) -> bool:
        """Whether the module's parameters and the optimizers' state are finite now, on every rank (once a step)."""
        step = trainer.global_step
        if self._finite_at != step:
            flag = finite.weights_flag([trainer.lightning_module], trainer.optimizers, trainer.strategy.root_device)
            self._finite = bool(trainer.strategy.reduce_boolean_decision(bool(flag.item()), all=True))
            self._finite_at = step
        return self._finite

    def _guard(self, trainer: Any, checkpoint: Any) -> None:
        """Wrap a ModelCheckpoint's `_save_topk_checkpoint` and `_save_last_checkpoint` (each saves, then deletes
        what it replaced) to skip them when the weights are not finite, and its `_save_checkpoint` to record the
        saves they make in the ledger."""
        topk = getattr(checkpoint, "_save_topk_checkpoint", None)
        last = getattr(checkpoint, "_save_last_checkpoint", None)
        save = getattr(checkpoint, "_save_checkpoint", None)
        if topk is None or last is None or save is None:
            log.warning(
                "alertd: %s has no _save_topk_checkpoint / _save_last_checkpoint: its checkpoints are saved "
                "without a look at their weights",
                type(checkpoint).__name__,
            )
            return

        def guarded_topk(trainer: Any, candidates: Any) -> Any:
            if getattr(checkpoint, "save_top_k", 1) == 0:
                return topk(trainer, candidates)
            if self._weights_finite(trainer):
                return self._recorded(topk, trainer, candidates)
            monitor = getattr(checkpoint, "monitor", None)
            if monitor is None or (
                monitor in candidates and checkpoint.check_monitor_top_k(trainer, candidates.get(monitor))
            ):  # it would have saved (and maybe deleted one)
                self._ledger.vetoed(trainer.global_step, checkpoint.format_checkpoint_name(candidates), SCHEDULE)
            return None

        def guarded_last(trainer: Any, candidates: Any) -> Any:
            if not getattr(checkpoint, "save_last", None):
                return last(trainer, candidates)
            if self._weights_finite(trainer):
                saves = self._recording_saves
                result = self._recorded(last, trainer, candidates)
                if self._recording_saves == saves and checkpoint.last_model_path:  # save_last="link": it linked
                    self._ledger.saved(trainer.global_step, checkpoint.last_model_path, SCHEDULE)
                return result
            name = checkpoint.format_checkpoint_name(candidates, checkpoint.CHECKPOINT_NAME_LAST)
            self._ledger.vetoed(trainer.global_step, name, SCHEDULE)
            return None

        def recording_save(trainer: Any, filepath: Any) -> Any:
            result = save(trainer, filepath)
            if self._recording:
                self._recording_saves += 1
                self._ledger.saved(trainer.global_step, os.fspath(filepath), SCHEDULE)
            return result

        self._patches.set(checkpoint, "_save_topk_checkpoint", guarded_topk)
        self._patches.set(checkpoint, "_save_last_checkpoint", guarded_last)
        self._patches.set(checkpoint, "_save_checkpoint", recording_save)

    def _recorded(self, method: Callable[..., Any], *args: Any) -> Any:
        self._recording += 1
        try:
            return method(*args)
        finally:
            self._recording -= 1

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
