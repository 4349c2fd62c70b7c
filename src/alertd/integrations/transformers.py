"""alertd for the Hugging Face `Trainer`: raw per-step values, the run's start and end, a stop that saves.

    from alertd.integrations.transformers import AlertdCallback
    trainer = Trainer(model=model, args=args, train_dataset=ds, callbacks=[AlertdCallback()])
    trainer.train()     # then: alertd --rules ... with a `samples` source on <output_dir>/alertd-samples.jsonl

What it writes (to `samples_path`, else `$ALERTD_SAMPLES_FILE`, else `<output_dir>/alertd-samples.jsonl`;
labels `run` (the `run` argument, else `$ALERTD_RUN`, else the output directory's name), `host`, `pid`):

- `train/loss` at every optimizer step: the sum of what `Trainer.training_step` returned for the step's
  micro-batches, which is exactly what the Trainer adds to the loss it logs, but taken before its
  `logging_nan_inf_filter` (on by default) turns a NaN or Inf loss into the average of the earlier ones
  (so the Trainer's own log shows a finite number, 0.0 with `logging_steps=1`). Per process.
- `train/grad_norm` at every optimizer step: the total L2 norm of the gradients BEFORE clipping, the value
  the Trainer computes and logs, taken where it computes it (`accelerator.clip_grad_norm_`). The norm
  seen in `on_pre_optimizer_step` is the clipped one (never above `max_grad_norm`, 1.0 by default), which
  would hide an exploding gradient.
- `train/step_time` at every optimizer step: the seconds since the previous step end, the rank's heartbeat;
  in a distributed run also `train/step_busy`, the rank's share of it (`alertd.integrations.busy`).
- On every rank of a distributed run (each process writes its own values, appended to the same file), with the
  labels `rank`, `local_rank`, `world_size` and `node` (`alertd.integrations.recorder`); none in one process.
- `run.started`, and at the end `run.finished` with `run.crashed` (0, or 1 with label `exception`);
  `run.stopped` when a stop request is honoured. The step is the Trainer's `state.global_step`, the `step`
  of its own log history.

Both values are taken by wrapping two methods of this Trainer instance, found on the call stack at
`on_train_begin` (callbacks are not handed the Trainer) and put back at the end: `trainer.training_step`
and `trainer.accelerator.clip_grad_norm_`. Each value costs one `.item()` (a device sync) per step.

A crash: the Trainer has no exception hook. An exception out of `training_step` (forward, backward: OOM,
a NaN check, Ctrl-C) is recorded by the wrapper the moment it passes, before anything else can hang or
kill the process. Any other exception that ends training (data loading, a callback, saving) is recorded
when the interpreter exits (`atexit`), with its type from `sys.last_exc` / `sys.last_type`, which Python
sets for an exception that ends the program; "unknown" when it was caught and the program ended otherwise.

A stop request (the stop file `stop_file`, else `$ALERTD_STOP_FILE`, else `<output_dir>/ALERTD_STOP`,
looked for at every step end; or SIGINT / SIGUSR1, see `alertd.integrations.stop`) is honoured at the
next `on_step_end`: `control.should_save = True` and `control.should_training_stop = True`, so the Trainer
itself saves `<output_dir>/checkpoint-<step>` (model, optimizer, scheduler, RNG and trainer state: the
regular, resumable checkpoint, whatever `save_strategy` says, "no" included) and leaves its loop;
`train()` then returns normally. In a multi-process run the request is shared by an all-reduce each
step, so every rank saves and stops at the same step.

Checkpoints whose weights are not finite are vetoed: the Trainer instance's `_save_checkpoint` (which saves
`checkpoint-<step>` and then rotates the old ones away, `save_total_limit`) is wrapped too, and skipped, with
its rotation, when a floating tensor of the model's parameters or of the optimizer's state is NaN or infinite
(`alertd.integrations.finite`: computed at most once per global step, one device sync, all-reduced with MIN in
a multi-process run so that every rank vetoes together). Callbacks are then not told `on_save` either. This
covers every save (`save_strategy` steps, epoch, best) and the stop: a stop whose weights are not finite saves
nothing (`control.should_save = False`) and still stops. Every save and veto is recorded in the checkpoint
ledger `<output_dir>/alertd-checkpoints.jsonl` (`alertd.integrations.ledger`, written by process 0), and the
stop's log line and `run.stopped` (labels `checkpoint`, `saved`) name the checkpoint saved at the stop, or the
last good one when nothing was saved.

alertd's in-process actions (`alertd.integrations.steering`; commands in `commands_dir`, else
`$ALERTD_COMMANDS_DIR`, else `<output_dir>/alertd-commands`) are taken at every `on_step_end`: `lr_scale`
changes the optimizer's param groups and the scheduler's base LRs at once (the Trainer logs the new
`learning_rate` from the next step on); `skip_step` drops the next step's update (in `on_pre_optimizer_step`,
after clipping: every gradient set to None, so the optimizer moves nothing); `save` sets `control.should_save`
(the regular `checkpoint-<step>`, only with finite weights); `stop` is a stop request. With `guard=Guard(...)`,
a step whose raw loss or pre-clip gradient norm is not finite or an outlier is dropped the same way.

alertd's recovery plan (`alertd.integrations.plan`: `$ALERTD_RECOVERY_PLAN`, or `<output_dir>/alertd-recovery.json`
not yet acknowledged) is applied in `on_train_begin`, which the Trainer calls after it restored the optimizer, the
scheduler and its state from `resume_from_checkpoint` (`_prepare_for_training`, then the callbacks): when
`state.global_step` is the plan's checkpoint step, every LR is multiplied by its `lr_factor` (the Trainer logs the
new `learning_rate`), and each planned update (number `global_step + 1`) is dropped: the wrapped `training_step`
returns a zero loss on `args.device` without calling the Trainer's (no forward, no backward), its gradients are
set to None in `on_pre_optimizer_step`, `train/step_skipped` (reason=plan) is written at its step, and its loss and
gradient norm are not. Otherwise the plan is refused. Either way `<output_dir>/alertd-recovery.ack.json` says so
(process 0). `$ALERTD_RUN_INFO`, when set, is written at `on_train_begin` (process 0).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterable
from typing import Any

from alertd.integrations import finite
from alertd.integrations.guard import Guard
from alertd.integrations.ledger import COMMAND, SCHEDULE, STOP, Ledger
from alertd.integrations.patches import Patches
from alertd.integrations.plan import current_plan, write_run_info
from alertd.integrations.recorder import GRAD_NORM, LOSS, RunRecorder
from alertd.integrations.steering import Steering
from alertd.integrations.stop import COMMAND as STOP_COMMAND
from alertd.integrations.stop import DEFAULT_SIGNALS

log = logging.getLogger("alertd.integrations")


def _trainer_callback() -> Any:
    try:
        from transformers import TrainerCallback
    except ImportError:
        return object
    return TrainerCallback


_Base: Any = _trainer_callback()


class AlertdCallback(_Base):  # type: ignore[misc]  # the framework is optional: its class is Any here
    """A `transformers.TrainerCallback` that records the run for alertd and stops it with a checkpoint on request.

    `Trainer(..., callbacks=[AlertdCallback()])`; every argument is optional: `samples_path`, `stop_file`, `run`
    (see the module's documentation for their defaults) and `signals`, the signals taken as a stop request
    (default SIGINT and SIGUSR1; `()` for none).
    """

    def __init__(
        self,
        samples_path: str | os.PathLike[str] | None = None,
        stop_file: str | os.PathLike[str] | None = None,
        run: str | None = None,
        signals: Iterable[str] = DEFAULT_SIGNALS,
        commands_dir: str | os.PathLike[str] | None = None,
        guard: Guard | None = None,
    ) -> None:
        if _Base is object:
            raise ImportError(
                "alertd.integrations.transformers.AlertdCallback needs the `transformers` package "
                "(pip install transformers)"
            )
        self.recorder = RunRecorder(samples_path, stop_file, run, signals)
        self.steering = Steering(commands_dir, guard)
        self._patches = Patches()
        self._trainer: Any = None
        self._ledger = Ledger(".", "hf", write=False)
        self._loss: Any = None
        self._grad_norm: Any = None
        self._reset_run()

    def _reset_run(self) -> None:
        self._stopping = False
        self._stop_step: int | None = None
        self._pending_stop: str | None = None  # the reason of a stop whose checkpoint the Trainer is to save
        self._finite_at: int | None = None  # the global step whose weights `_finite` tells about
        self._finite = True
        self._vetoed_save = False
        self._saved_path: str | None = None
        self._saves: list[Any] = []  # save commands the Trainer is to carry out at this step
        self._save_step: int | None = None
        self._planned: str | None = None  # why the recovery plan drops the update running now

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Open the samples file, write `run.started`, listen for a stop, wrap the Trainer's methods."""
        self._patches.restore()
        self._loss = self._grad_norm = None
        self._reset_run()
        output_dir = args.output_dir or "."
        self.recorder.start(output_dir, state.global_step)
        self.steering.start(output_dir, self.recorder)
        trainer = _find_trainer(self)
        self.recorder.watch(kwargs.get("model") or getattr(trainer, "model", None))
        rank_zero = getattr(args, "process_index", 0) == 0
        self._ledger = Ledger(output_dir, "hf", write=rank_zero)
        self._trainer = trainer
        if rank_zero:
            write_run_info(output_dir, "hf")
        # The Trainer restored the optimizer, the scheduler and its state (global_step) before on_train_begin.
        optimizer = kwargs.get("optimizer") or getattr(trainer, "optimizer", None)
        scheduler = kwargs.get("lr_scheduler") or getattr(trainer, "lr_scheduler", None)
        self.steering.recover(
            current_plan(output_dir),
            state.global_step,
            [o for o in (optimizer,) if o is not None],
            [s for s in (scheduler,) if s is not None],
            os.path.abspath(output_dir),
            ack=rank_zero,
        )
        if trainer is None:
            log.warning(
                "alertd: the Trainer is not on the call stack: train/loss and train/grad_norm are not recorded, "
                "and checkpoints are saved without a look at their weights"
            )
        else:
            self._patch(trainer)

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """A new optimizer step: its micro-batches' losses add up from here."""
        self._loss = self._grad_norm = None
        self.recorder.last_step = state.global_step + 1  # the step a crash from here on is recorded at
        self._planned = self.steering.planned(state.global_step + 1)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Write the step's loss and gradient norm; honour a stop request."""
        step = state.global_step
        self.recorder.step_end(step)
        if self._planned is None:  # a dropped planned update has no loss and no gradient norm
            if self._loss is not None:
                self.recorder.write(LOSS, float(self._loss), step)
            if self._grad_norm is not None:
                self.recorder.write(GRAD_NORM, float(self._grad_norm), step)
        self._loss = self._grad_norm = None
        self._planned = None
        reason = self._commands(step, control, kwargs, args)
        if reason is None or self._stopping:
            return
        self._stopping = True
        self._stop_step = step
        control.should_training_stop = True
        if self._trainer is not None and not self._weights_finite():
            control.should_save = False  # and should the schedule save here, `_save_checkpoint` vetoes it
            self._ledger.vetoed(step, _checkpoint_path(self._trainer, None, step), STOP)
            not_saved = "weights not finite, no checkpoint saved"
            self.recorder.stopped(step, reason, self._ledger.last_good(), saved=False, not_saved=not_saved)
        else:
            control.should_save = True
            self._pending_stop = reason  # reported once the Trainer saved (on_save), or did not (on_train_end)

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """The gradients are complete and clipped: drop the update if the recovery plan, a `skip_step` command or the
        guard says so."""
        step = state.global_step + 1
        if self._planned is not None:
            optimizer = kwargs.get("optimizer") or getattr(self._trainer, "optimizer", None)
            self.steering.skipped(step, self._planned, [optimizer])
            return
        if not self.steering.judging:
            return
        loss = float(self._loss) if self._loss is not None else None
        norm = float(self._grad_norm) if self._grad_norm is not None else None
        why = self.steering.judge(step, loss, norm)
        if why is not None:
            self.steering.skipped(step, why, [kwargs.get("optimizer") or getattr(self._trainer, "optimizer", None)])

    def _commands(self, step: int, control: Any, kwargs: dict[str, Any], args: Any) -> str | None:
        """Take alertd's new commands at the end of `step` (the ranks agree on them and on a stop); a save a step
        ago that the Trainer did not make is refused. The reason to stop now, or None."""
        for command in self._saves:
            self.steering.refuse(command, self._save_step, "the Trainer saved no checkpoint")
        self._saves = []
        optimizer = kwargs.get("optimizer") or getattr(self._trainer, "optimizer", None)
        scheduler = kwargs.get("lr_scheduler") or getattr(self._trainer, "lr_scheduler", None)
        orders = self.steering.boundary(
            step,
            [o for o in (optimizer,) if o],
            [s for s in (scheduler,) if s],
            self.recorder.stop_reason(),
            getattr(args, "device", None),
        )
        for command in orders.stop:
            self.steering.done(command, step)
            self.recorder.stop.reason = self.recorder.stop.reason or STOP_COMMAND
        if not orders.save:
            return orders.reason
        if self._trainer is not None and not self._weights_finite():
            for command in orders.save:
                self.steering.refuse(command, step, "weights not finite, no checkpoint saved")
            return orders.reason
        control.should_save = True
        self._saves, self._save_step = orders.save, step
        return orders.reason

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """The Trainer saved a checkpoint: if it is the stop's or a save command's, say so."""
        if self._saves:
            path = self._saved_path or os.path.join(args.output_dir or ".", f"checkpoint-{state.global_step}")
            for command in self._saves:
                self.steering.done(command, state.global_step, checkpoint=os.path.abspath(path))
            self._saves = []
        if self._pending_stop is not None and self._stop_step is not None:
            reason, self._pending_stop = self._pending_stop, None
            path = self._saved_path or os.path.join(args.output_dir or ".", f"checkpoint-{self._stop_step}")
            self.recorder.stopped(self._stop_step, reason, os.path.abspath(path), saved=True)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Write `run.crashed` = 0 and `run.finished` = 1; put everything back."""
        if self._pending_stop is not None and self._stop_step is not None:
            # save_strategy="best" and an evaluation at that step said "not best": the Trainer saved nothing.
            reason, self._pending_stop = self._pending_stop, None
            not_saved = f"the Trainer saved no checkpoint (save_strategy={args.save_strategy})"
            self.recorder.stopped(self._stop_step, reason, self._ledger.last_good(), saved=False, not_saved=not_saved)
        self._patches.restore()
        self._trainer = None
        self.recorder.finish(state.global_step)

    def _weights_finite(self) -> bool:
        """Whether the model's parameters and the optimizer's state are finite now, on every rank (once a step)."""
        trainer = self._trainer
        step = trainer.state.global_step
        if self._finite_at != step:
            optimizer = getattr(trainer, "optimizer", None)
            optimizers = [optimizer] if optimizer is not None else []
            flag = finite.weights_flag([trainer.model], optimizers, trainer.args.device)
            flag = finite.all_ranks_min(flag)
            self._finite, self._finite_at = bool(flag.item()), step
        return self._finite

    # The wrappers of the Trainer's methods.

    def _patch(self, trainer: Any) -> None:
        training_step = trainer.training_step

        def recording_training_step(*args: Any, **kwargs: Any) -> Any:
            if self._planned is not None:  # the recovery plan drops this update: no forward, no backward
                import torch

                return torch.zeros((), device=trainer.args.device)
            try:
                loss = training_step(*args, **kwargs)
            except BaseException as exc:
                self._crashed(type(exc).__name__, trainer.state.global_step + 1)
                raise
            if loss is not None:
                self._loss = loss if self._loss is None else self._loss + loss
            return loss

        self._patches.set(trainer, "training_step", recording_training_step)
        self._guard_saves(trainer)
        accelerator = getattr(trainer, "accelerator", None)
        clip = getattr(accelerator, "clip_grad_norm_", None)
        if clip is None:
            log.warning("alertd: the Trainer has no accelerator.clip_grad_norm_: train/grad_norm is not recorded")
            return

        def recording_clip_grad_norm_(*args: Any, **kwargs: Any) -> Any:
            norm = clip(*args, **kwargs)
            if norm is not None:
                self._grad_norm = norm
            return norm

        self._patches.set(accelerator, "clip_grad_norm_", recording_clip_grad_norm_)

    def _guard_saves(self, trainer: Any) -> None:
        """Wrap `trainer._save_checkpoint` (the save and the rotation) to veto a save of weights that are not finite,
        and `callback_handler.on_save` so that callbacks are not told of a save that did not happen."""
        save_checkpoint = getattr(trainer, "_save_checkpoint", None)
        handler = getattr(trainer, "callback_handler", None)
        on_save = getattr(handler, "on_save", None)
        if save_checkpoint is None or on_save is None:
            log.warning("alertd: this Trainer has no _save_checkpoint: checkpoints are saved without a look at them")
            return

        def guarded_save_checkpoint(*args: Any, **kwargs: Any) -> Any:
            step = trainer.state.global_step
            trial = kwargs["trial"] if "trial" in kwargs else args[1] if len(args) > 1 else None
            path = _checkpoint_path(trainer, trial, step)
            by = STOP if step == self._stop_step else COMMAND if self._saves else SCHEDULE
            if not self._weights_finite():
                self._ledger.vetoed(step, path, by)
                self._vetoed_save = True
                return None
            result = save_checkpoint(*args, **kwargs)
            self._ledger.saved(step, path, by)
            self._saved_path = path
            return result

        def on_save_unless_vetoed(args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            if self._vetoed_save:
                self._vetoed_save = False
                control.should_save = False  # what CallbackHandler.on_save does, without the callbacks
                return control
            return on_save(args, state, control, **kwargs)

        self._patches.set(trainer, "_save_checkpoint", guarded_save_checkpoint)
        self._patches.set(handler, "on_save", on_save_unless_vetoed)

    def _crashed(self, exception: str, step: int) -> None:
        self._patches.restore()
        self.recorder.crash(exception, step)


def _checkpoint_path(trainer: Any, trial: Any, step: int) -> str:
    """The absolute path of the `checkpoint-<step>` folder the Trainer's `_save_checkpoint` writes."""
    get_output_dir = getattr(trainer, "_get_output_dir", None)
    run_dir = get_output_dir(trial=trial) if callable(get_output_dir) else trainer.args.output_dir
    return os.path.abspath(os.path.join(run_dir or ".", f"checkpoint-{step}"))  # transformers' PREFIX_CHECKPOINT_DIR


def _find_trainer(callback: object) -> Any:
    """The `transformers.Trainer` whose callback handler holds `callback`, from the call stack; else None."""
    from transformers import Trainer

    frame = sys._getframe(1)
    while frame is not None:
        candidate = frame.f_locals.get("self")
        if isinstance(candidate, Trainer):
            handler = getattr(candidate, "callback_handler", None)
            if any(cb is callback for cb in getattr(handler, "callbacks", ())):
                return candidate
        frame = frame.f_back  # type: ignore[assignment]
    return None
