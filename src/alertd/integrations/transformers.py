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
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Iterable
from typing import Any

from alertd.integrations.recorder import GRAD_NORM, LOSS, RunRecorder
from alertd.integrations.stop import DEFAULT_SIGNALS

log = logging.getLogger("alertd.integrations")
_MISSING = object()


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
    ) -> None:
        if _Base is object:
            raise ImportError(
                "alertd.integrations.transformers.AlertdCallback needs the `transformers` package "
                "(pip install transformers)"
            )
        self.recorder = RunRecorder(samples_path, stop_file, run, signals)
        self._patches: list[tuple[object, str, object, object]] = []
        self._loss: Any = None
        self._grad_norm: Any = None
        self._stopping = False
        self._saved = False

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Open the samples file, write `run.started`, listen for a stop, wrap the Trainer's two methods."""
        self._unpatch()
        self._loss = self._grad_norm = None
        self._stopping = self._saved = False
        self.recorder.start(args.output_dir or ".", state.global_step)
        trainer = _find_trainer(self)
        if trainer is None:
            log.warning("alertd: the Trainer is not on the call stack: train/loss and train/grad_norm are not recorded")
        else:
            self._patch(trainer)

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """A new optimizer step: its micro-batches' losses add up from here."""
        self._loss = self._grad_norm = None
        self.recorder.last_step = state.global_step + 1  # the step a crash from here on is recorded at

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Write the step's loss and gradient norm; honour a stop request."""
        step = state.global_step
        if self._loss is not None:
            self.recorder.write(LOSS, float(self._loss), step)
        if self._grad_norm is not None:
            self.recorder.write(GRAD_NORM, float(self._grad_norm), step)
        self._loss = self._grad_norm = None
        reason = _any_rank(self.recorder.stop_reason(), args)
        if reason is not None and not self._stopping:
            self._stopping = True
            control.should_save = True
            control.should_training_stop = True
            checkpoint = os.path.join(args.output_dir or ".", f"checkpoint-{step}")
            self.recorder.stopped(step, reason, checkpoint)

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """The Trainer saved a checkpoint."""
        self._saved = self._stopping

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Write `run.crashed` = 0 and `run.finished` = 1; put everything back."""
        if self._stopping and not self._saved:  # save_strategy="best" and an evaluation at that step said "not best"
            log.warning(
                "alertd: the Trainer saved no checkpoint when it stopped (save_strategy=%s)", args.save_strategy
            )
        self._unpatch()
        self.recorder.finish(state.global_step)

    # The wrappers of the Trainer's methods.

    def _patch(self, trainer: Any) -> None:
        training_step = trainer.training_step

        def recording_training_step(*args: Any, **kwargs: Any) -> Any:
            try:
                loss = training_step(*args, **kwargs)
            except BaseException as exc:
                self._crashed(type(exc).__name__, trainer.state.global_step + 1)
                raise
            if loss is not None:
                self._loss = loss if self._loss is None else self._loss + loss
            return loss

        self._set(trainer, "training_step", recording_training_step)
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

        self._set(accelerator, "clip_grad_norm_", recording_clip_grad_norm_)

    def _set(self, obj: object, name: str, value: Callable[..., Any]) -> None:
        previous = vars(obj).get(name, _MISSING)
        setattr(obj, name, value)
        self._patches.append((obj, name, previous, value))

    def _unpatch(self) -> None:
        while self._patches:
            obj, name, previous, value = self._patches.pop()
            if vars(obj).get(name) is not value:
                continue  # replaced by someone else since: theirs now
            if previous is _MISSING:
                delattr(obj, name)
            else:
                setattr(obj, name, previous)

    def _crashed(self, exception: str, step: int) -> None:
        self._unpatch()
        self.recorder.crash(exception, step)


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


def _any_rank(reason: str | None, args: Any) -> str | None:
    """`reason`, or "other_rank" when only another process of a distributed run was asked to stop."""
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return reason
    flag = torch.tensor([0 if reason is None else 1], device=args.device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    if reason is None and int(flag.item()):
        return "other_rank"
    return reason
