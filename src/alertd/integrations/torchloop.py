"""alertd for a plain PyTorch loop (or Lightning Fabric): the run's records, alertd's commands and the step guard.

    from alertd.integrations.torchloop import AlertdLoop
    with AlertdLoop(optimizer, scheduler, output_dir="out", model=model, save_every=500, keep=2,
                    guard=Guard(sigma=6, window=100)) as run:
        for step in range(run.start_step, total):  # start_step: 0, or the step of the checkpoint resumed from
            loss = model(next(batches)).loss
            loss.backward()                      # Fabric: fabric.backward(loss)
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            if run.update(step, loss, norm):     # False: this update is dropped (recovery plan, skip_step, guard)
                optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            if run.boundary(step):               # True: stop (alertd asked; a checkpoint was saved if finite)
                break

`update()` writes the step's `train/loss` and `train/grad_norm` (pass the norm BEFORE clipping:
`clip_grad_norm_` returns it) and says whether to take the update; a dropped update has every gradient set to
None, so even an `optimizer.step()` called anyway moves nothing. `boundary()` takes alertd's commands
(`alertd.integrations.steering`: `lr_scale` at once on the optimizers and schedulers, `save`, `stop`, `skip_step`
for the next update) and the stop request (the stop file, SIGINT, SIGUSR1: `alertd.integrations.stop`). Saves
(`<output_dir>/alertd-save-step=N.pt`, `alertd-stop-step=N.pt`, and with `save_every`, `alertd-step=N.pt` after
every `save_every` updates, N the updates done) are made by `save(path)` when given, else, with `model`, as
`torch.save` of `{"step", "model", "optimizers", "schedulers"}` (the state dicts); only with finite weights (a
scheduled save of weights that are not finite is vetoed), each recorded in the checkpoint ledger (`framework`:
torch, `by`: schedule, command or stop). After each scheduled save the `alertd-step=*.pt` files older than the
`keep` newest are deleted (never the ledger's last good checkpoint).

Resuming (`start()`, with `model` and no `save` function): when alertd's recovery plan applies
(`alertd.integrations.plan`) or `$ALERTD_RESUME_FROM` names a checkpoint the ledger says is good
(`alertd.integrations.resume`), that `.pt` file is loaded into the model, the optimizers and the schedulers, and
`start_step` is its step (otherwise `start_step` is the `step` given to `start()`, 0 by default). The plan is then
applied (refused unless `start_step` is its checkpoint step): the LR cut at once, and `update()` returns False for
each update it drops (update number `step + 1`; no loss recorded, `train/step_skipped` with reason=plan at `step`).
`$ALERTD_RUN_INFO` is written at `start()`. The files and the environment variables are the callbacks':
`<output_dir>/alertd-samples.jsonl`, `ALERTD_STOP`, `alertd-commands`, `alertd-checkpoints.jsonl`,
`alertd-recovery.json`.

Distributed (torchrun, DDP; `torch.distributed` initialised before `start()`, or torchrun's or Slurm's
environment): every rank records its own `train/loss`, `train/grad_norm`, `train/step_time` (each step end: the
rank's heartbeat) and, with `model`, `train/step_busy` (its share of the step: `alertd.integrations.busy`), with
the labels `rank`, `local_rank`, `world_size`, `node`, appended to the same samples file
(`alertd.integrations.recorder`). Global rank 0 alone writes the checkpoint ledger, `$ALERTD_RUN_INFO` and the
recovery plan's acknowledgement, and makes the default `torch.save` checkpoints (the replicas are alike); a `save`
function given is called on every rank (a sharded model saves its shards). The ranks agree at every
`boundary()` (one all-reduce of two numbers: `alertd.integrations.agree`), so every rank stops at the same step
even when the stop file or a signal reached only some of them (the others' reason is `other_rank`), and every
rank carries out alertd's commands at the same step, whichever ranks read them; nothing is exchanged in a
one-process run.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import Any

from alertd.integrations import finite
from alertd.integrations.guard import Guard
from alertd.integrations.ledger import COMMAND, SCHEDULE, STOP, Ledger
from alertd.integrations.plan import current_plan, write_run_info
from alertd.integrations.ranks import rank_labels
from alertd.integrations.recorder import GRAD_NORM, LOSS, RunRecorder
from alertd.integrations.resume import checkpoint_for
from alertd.integrations.steering import Steering
from alertd.integrations.stop import COMMAND as STOP_COMMAND
from alertd.integrations.stop import DEFAULT_SIGNALS

log = logging.getLogger("alertd.integrations")
SCHEDULED = re.compile(r"alertd-step=(\d+)\.pt")
"""The file name of a scheduled save (`save_every`)."""


def _number(value: Any) -> float | None:
    if value is None:
        return None
    return float(value.detach()) if hasattr(value, "detach") else float(value)


def _listed(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, list | tuple) else [value]


class AlertdLoop:
    """One plain training loop's link to alertd; a context manager (`start()` on entry, `finish()` or `crash()`
    on exit)."""

    def __init__(
        self,
        optimizers: Any,
        schedulers: Any = None,
        *,
        output_dir: str | os.PathLike[str],
        model: Any = None,
        save: Callable[[str], None] | None = None,
        samples_path: str | os.PathLike[str] | None = None,
        stop_file: str | os.PathLike[str] | None = None,
        run: str | None = None,
        signals: Iterable[str] = DEFAULT_SIGNALS,
        commands_dir: str | os.PathLike[str] | None = None,
        guard: Guard | None = None,
        save_every: int | None = None,
        keep: int = 1,
    ) -> None:
        if save_every is not None and save_every < 1:
            raise ValueError(f"save_every must be a positive number of updates (got {save_every!r})")
        if keep < 1:
            raise ValueError(f"keep must be at least 1 (got {keep!r})")
        self.save_every = save_every
        self.keep = keep
        self.start_step = 0
        """The step training starts at: 0, or the step of the checkpoint `start()` resumed from."""
        self.optimizers = _listed(optimizers)
        self.schedulers = _listed(schedulers)
        self.output_dir = os.path.abspath(os.fspath(output_dir))
        self.model = model
        self.save_fn = save
        self.recorder = RunRecorder(samples_path, stop_file, run, signals)
        self.steering = Steering(commands_dir, guard)
        self.ledger = Ledger(self.output_dir, "torch", write=True)
        self.rank_zero = True
        """Whether this process is global rank 0 (or the only one): `start()` says."""
        self.stopped = False

    def start(self, step: int = 0) -> None:
        """Training begins (at `step`, when resumed by the caller): resume from the recovery plan's checkpoint or
        `$ALERTD_RESUME_FROM` (with `model` and no `save` function; `start_step` is then its step), apply the plan."""
        self.start_step = step
        self.rank_zero = rank_labels().get("rank", "0") == "0"
        self.ledger = Ledger(self.output_dir, "torch", write=self.rank_zero)
        if self.rank_zero:
            write_run_info(self.output_dir, "torch")
        plan = current_plan(self.output_dir)
        if self.model is not None and self.save_fn is None:
            checkpoint = checkpoint_for(plan)
            if checkpoint is not None:
                self.start_step = self._load(checkpoint)
        self.recorder.start(self.output_dir, self.start_step)
        if self.model is not None:
            self.recorder.watch(self.model)
        self.steering.start(self.output_dir, self.recorder)
        self.steering.recover(
            plan, self.start_step, self.optimizers, self.schedulers, self.output_dir, ack=self.rank_zero
        )
        self.stopped = False

    def _load(self, path: str) -> int:
        """Load a checkpoint `_save` wrote into the model, the optimizers and the schedulers; its step."""
        import torch

        state = torch.load(path, map_location="cpu", weights_only=False)  # alertd wrote it (`_save`)
        self.model.load_state_dict(state["model"])
        for optimizer, optimizer_state in zip(self.optimizers, state["optimizers"], strict=True):
            optimizer.load_state_dict(optimizer_state)
        for scheduler, scheduler_state in zip(self.schedulers, state["schedulers"], strict=True):
            scheduler.load_state_dict(scheduler_state)
        step = int(state["step"])
        log.warning("alertd: resumed from %s at step %d", path, step)
        return step

    def update(self, step: int, loss: Any = None, grad_norm: Any = None) -> bool:
        """Record the loss and the pre-clip gradient norm of update `step` (tensors or numbers); whether to take it
        (False: dropped, its gradients set to None)."""
        planned = self.steering.planned(step + 1)
        if planned is not None:  # the recovery plan drops it: nothing recorded but the skip
            self.steering.skipped(step, planned, self.optimizers)
            return False
        loss_value, norm_value = _number(loss), _number(grad_norm)
        if loss_value is not None:
            self.recorder.write(LOSS, loss_value, step)
        if norm_value is not None:
            self.recorder.write(GRAD_NORM, norm_value, step)
        if not self.steering.judging:
            return True
        why = self.steering.judge(step, loss_value, norm_value, step + 1)
        if why is None:
            return True
        self.steering.skipped(step, why, self.optimizers)
        return False

    def boundary(self, step: int) -> bool:
        """After update `step`: take alertd's commands; whether to stop now (a checkpoint saved if the weights are
        finite)."""
        if self.stopped:
            return True
        self.recorder.step_end(step)
        done = step + 1
        orders = self.steering.boundary(done, self.optimizers, self.schedulers, self.recorder.stop_reason())
        for command in orders.stop:
            self.steering.done(command, done)
            self.recorder.stop.reason = self.recorder.stop.reason or STOP_COMMAND
        for command in orders.save:
            path, why = self._save(done, f"alertd-save-step={done}.pt", COMMAND)
            if path is None:
                self.steering.refuse(command, done, why)
            else:
                self.steering.done(command, done, checkpoint=path)
        if self.save_every is not None and done % self.save_every == 0:
            path, _ = self._save(done, f"alertd-step={done}.pt", SCHEDULE)
            if path is not None:
                self._rotate()
        reason = orders.reason
        if reason is None:
            return False
        self.stopped = True
        path, why = self._save(done, f"alertd-stop-step={done}.pt", STOP)
        if path is not None:
            self.recorder.stopped(done, reason, path, saved=True)
        else:
            self.recorder.stopped(done, reason, self.ledger.last_good(), saved=False, not_saved=why)
        return True

    def finish(self, step: int | None = None) -> None:
        """Training ended normally."""
        self.recorder.finish(step if step is not None else self.recorder.last_step)

    def crash(self, exception: str, step: int | None = None) -> None:
        """Training ended by an exception of type `exception`."""
        self.recorder.crash(exception, step if step is not None else self.recorder.last_step)

    def __enter__(self) -> AlertdLoop:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if kind is None:
            self.finish()
        else:
            self.crash(kind.__name__)

    def _save(self, step: int, name: str, by: str) -> tuple[str | None, str]:
        """Save `<output_dir>/<name>` if the weights are finite: its path, else None and why."""
        path = os.path.join(self.output_dir, name)
        if self.save_fn is None and self.model is None:
            return None, "no model and no save function given, no checkpoint saved"
        models = [self.model] if self.model is not None else []
        if not bool(finite.weights_flag(models, self.optimizers, "cpu").item()):
            self.ledger.vetoed(step, path, by)
            return None, "weights not finite, no checkpoint saved"
        if self.save_fn is not None:
            self.save_fn(path)
        elif not self.rank_zero:
            return path, ""  # rank 0 saves the replicated model
        else:
            import torch

            state = {
                "step": step,
                "model": self.model.state_dict(),
                "optimizers": [o.state_dict() for o in self.optimizers],
                "schedulers": [s.state_dict() for s in self.schedulers],
            }
            torch.save(state, path)
        self.ledger.saved(step, path, by)
        return path, ""

    def _rotate(self) -> None:
        """Delete the `alertd-step=N.pt` files older than the `keep` newest, but never the last good checkpoint."""
        try:
            names = os.listdir(self.output_dir)
        except OSError:
            return
        saved = sorted((int(m.group(1)), n) for n in names if (m := SCHEDULED.fullmatch(n)))
        last_good = self.ledger.last_good()
        for _, name in saved[: -self.keep]:
            path = os.path.join(self.output_dir, name)
            if last_good is not None and os.path.abspath(last_good) == path:
                continue
            try:
                os.unlink(path)
            except OSError as e:
                log.warning("alertd: can't delete the old checkpoint %s: %s", path, e)


__all__ = ["AlertdLoop", "Guard"]
