"""In-process actions at a step boundary: alertd's commands and the step guard, as a training loop applies them.

Framework-free; the HF and Lightning callbacks and `alertd.integrations.torchloop` drive it. At each step boundary
`boundary()` takes the new commands of the run's commands directory (`alertd.integrations.commands`), in order:

- `lr_scale` is applied at once: every param group's `lr` (and `initial_lr`) of every optimizer and every
  scheduler's `base_lrs` (its last LRs too) are multiplied by `factor`, floored at `min_lr` (a LR already at or
  below `min_lr` is left alone; when every one is, the command is refused);
- `skip_step`, `save` and `stop` are returned (`Orders`) for the framework to carry out: the next update is
  dropped (`drop_update`: every gradient of the optimizers set to None, so no torch optimizer moves a weight or
  its state), a checkpoint saved (only with finite weights: `alertd.integrations.finite`), the run stopped.

At the start of training, `recover()` applies alertd's recovery plan (`alertd.integrations.plan`), once the
framework restored the optimizer and scheduler state, if training really started at the plan's checkpoint step
(else it is refused: acknowledged `applied: false`, a WARNING, nothing skipped): every LR is multiplied by its
`lr_factor` (`scale_lrs`, the same code as `lr_scale`'s), `train/lr` (label reason=recover) and `alertd.recovery` =
the attempt (labels `attempt`, `checkpoint`: its base name) are recorded, and `alertd-recovery.ack.json` written
(old_lr, new_lr, resumed_step, skip, lr_factor). `planned(update)` then names the updates the plan drops.

In a distributed run the ranks agree at every boundary (`alertd.integrations.agree`): each rank's new commands go
to every rank, and each carries out their union at the same step (a command is taken once per process, however
many ranks read it); the files a rank read itself are acknowledged by it (alertd's notifier reads the `.ack`).

`judge()` says, just before an update, whether to drop it: the recovery plan ("recovery attempt N"), a `skip_step`
command, or the `Guard` (off unless given). Each command is acknowledged to alertd (`Inbox.acknowledge`) and
recorded in the samples file: metric `alertd.action` = 1 (labels `action`, `command`, `outcome`: applied or
refused), `train/lr` after a `lr_scale` (the first param group's new LR), `train/step_skipped` = 1 at each dropped
update (labels `reason`: plan, command or guard, and `why`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from alertd.integrations.agree import OTHER_RANK, agree
from alertd.integrations.commands import COMMANDS_DIR_ENV, DEFAULT_COMMANDS_NAME, Command, Inbox
from alertd.integrations.guard import Guard
from alertd.integrations.plan import RecoveryPlan, acknowledge, skips
from alertd.integrations.recorder import RunRecorder, resolve
from alertd.integrations.stop import COMMAND as STOP_COMMAND

log = logging.getLogger("alertd.integrations")

ACTION = "alertd.action"
LR = "train/lr"
STEP_SKIPPED = "train/step_skipped"
RECOVERY = "alertd.recovery"
PLANNED = "recovery attempt "
MAX_TAKEN = 4096
"""The names of commands taken that a process remembers (a command read again is not taken twice)."""


def _name(item: Command | tuple[str, str]) -> str:
    return item.name if isinstance(item, Command) else item[0]


@dataclass
class Orders:
    """What the framework is to do at this boundary: drop the next update, save, stop (each a command to
    acknowledge once done)."""

    skip: list[Command] = field(default_factory=list)
    save: list[Command] = field(default_factory=list)
    stop: list[Command] = field(default_factory=list)
    reason: str | None = None
    """Why to stop at this boundary (the ranks agreed: `alertd.integrations.agree`; "command" for a stop
    command), or None."""


class Steering:
    """One run's in-process actions: its commands directory, its guard, its recorder."""

    def __init__(self, commands_dir: str | os.PathLike[str] | None, guard: Guard | None) -> None:
        self.commands_dir_arg = commands_dir
        self.guard = guard
        self.inbox: Inbox | None = None
        self.recorder: RunRecorder | None = None
        self._skip: list[Command] = []
        self.plan: RecoveryPlan | None = None
        """The recovery plan applied at this training start (`recover`), or None."""
        self._taken: dict[str, None] = {}  # the commands taken, oldest first (at most MAX_TAKEN)
        self._mine: set[str] = set()  # those this process read itself: it acknowledges them

    def start(self, base_dir: str | os.PathLike[str], recorder: RunRecorder) -> None:
        """Training begins in `base_dir`: the commands directory is `commands_dir`, `$ALERTD_COMMANDS_DIR` or
        `<base_dir>/alertd-commands` (created)."""
        default = os.path.join(os.path.abspath(os.fspath(base_dir)), DEFAULT_COMMANDS_NAME)
        self.inbox = Inbox(resolve(self.commands_dir_arg, COMMANDS_DIR_ENV, default))
        self.inbox.prepare()
        self.recorder = recorder
        self._skip = []
        self.plan = None
        self._taken, self._mine = {}, set()

    def boundary(
        self,
        step: int,
        optimizers: Iterable[Any],
        schedulers: Iterable[Any],
        stop: str | None = None,
        device: Any = None,
    ) -> Orders:
        """Take the new commands at the boundary after `step` (every rank's: `agree`, with this rank's stop reason
        `stop` and the flag's `device`): apply `lr_scale`, acknowledge refusals, return the rest and the reason to
        stop."""
        orders = Orders()
        read = [i for i in self.inbox.poll() if _name(i) not in self._taken] if self.inbox is not None else []
        orders.reason, items = agree(stop, read, _name, device)
        self._mine.update(_name(i) for i in read)
        optimizers, schedulers = list(optimizers), list(schedulers)
        for item in items:
            if _name(item) in self._taken:
                continue
            self._taken[_name(item)] = None
            if len(self._taken) > MAX_TAKEN:
                del self._taken[next(iter(self._taken))]
            if not isinstance(item, Command):
                name, why = item
                self.refuse(Command(name, "unknown"), step, why)
            elif item.action == "lr_scale":
                self._lr_scale(item, step, optimizers, schedulers)
            else:
                getattr(orders, {"skip_step": "skip"}.get(item.action, item.action)).append(item)
        self._skip.extend(orders.skip)
        if orders.stop and orders.reason in (None, OTHER_RANK):
            orders.reason = STOP_COMMAND
        return orders

    @property
    def judging(self) -> bool:
        """Whether `judge` may drop the coming update (a guard, or a `skip_step` command waiting)."""
        return self.guard is not None or bool(self._skip)

    def judge(self, step: int, loss: float | None, grad_norm: float | None, update: int | None = None) -> str | None:
        """Whether to drop the update of `step` (about to happen; its update number `update`, default `step`): why
        ("recovery attempt N" for a planned one, "command", or the guard's reason), or None."""
        planned = self.planned(step if update is None else update)
        if planned is not None:
            return planned
        why = self.guard.judge(step, loss=loss, grad_norm=grad_norm) if self.guard is not None else None
        if self._skip:
            return "command"
        return why

    def skipped(self, step: int, why: str, optimizers: Iterable[Any]) -> None:
        """Drop the update of `step` (`judge` said `why`), record it, acknowledge the skip_step commands."""
        drop_update(optimizers)
        reason = "command" if why == "command" else "plan" if why.startswith(PLANNED) else "guard"
        log.warning("alertd: step %d: update skipped (%s)", step, why)
        self._write(STEP_SKIPPED, 1.0, step, {"reason": reason, "why": why[:200]})
        for command in self._skip:
            self.done(command, step)
        self._skip = []

    def done(self, command: Command, step: int | None, **fields: Any) -> None:
        """`command` was carried out at `step`: acknowledge it (with `fields`) and record it."""
        self._ack(command, step, applied=True, **fields)

    def refuse(self, command: Command, step: int | None, why: str) -> None:
        """`command` can't be carried out: acknowledge the refusal, log it, record it."""
        log.warning("alertd: command %s refused: %s", command.name, why)
        self._ack(command, step, applied=False, refused=why)

    def _lr_scale(self, command: Command, step: int, optimizers: list[Any], schedulers: list[Any]) -> None:
        factor, min_lr = command.number("factor", 0.5), command.number("min_lr", 0.0)
        if not 0 < factor < float("inf"):
            self.refuse(command, step, f"factor must be a positive number (got {command.body.get('factor')!r})")
            return
        groups = [g for opt in optimizers for g in getattr(opt, "param_groups", ())]
        if not groups:
            self.refuse(command, step, "no optimizer to change")
            return
        if not any(float(g["lr"]) > min_lr for g in groups):
            self.refuse(command, step, f"the LR is already at or below min_lr {min_lr:g}")
            return
        old, new = scale_lrs(optimizers, schedulers, factor, min_lr)
        log.warning("alertd: step %d: LR scaled by %g: %g -> %g (command %s)", step, factor, old, new, command.name)
        if new is not None:  # groups were found above
            self._write(LR, new, step, {"reason": "lr_scale"})
        self.done(command, step, old_lr=old, new_lr=new, factor=factor)

    def recover(
        self,
        plan: RecoveryPlan | None,
        step: int,
        optimizers: Iterable[Any],
        schedulers: Iterable[Any],
        ack_dir: str,
        *,
        ack: bool = True,
    ) -> bool:
        """Training starts at `step` (the optimizer and scheduler state restored): apply the recovery `plan` if the
        run resumed at its checkpoint step (LR x `lr_factor`, its updates to skip), else refuse it; acknowledge either
        in `ack_dir` when `ack` (global rank 0). Whether it applies."""
        self.plan = None
        if plan is None:
            return False
        if step != plan.checkpoint_step:
            why = (
                f"training started at step {step}, not at the plan's checkpoint step {plan.checkpoint_step} "
                "(pass resume_from() to the trainer)"
            )
            log.warning("alertd: recovery plan for attempt %d refused: %s", plan.attempt, why)
            if ack:
                acknowledge(ack_dir, plan, False, refused=why)
            return False
        optimizers, schedulers = list(optimizers), list(schedulers)
        old, new = scale_lrs(optimizers, schedulers, plan.lr_factor, 0.0)
        self.plan = plan
        skip = f"updates {plan.skip[0]}-{plan.skip[1]} skipped" if plan.skip else "no update skipped"
        log.warning(
            "alertd: recovery attempt %d: resumed from %s at step %d, LR x%g (%s -> %s), %s",
            plan.attempt,
            plan.checkpoint,
            step,
            plan.lr_factor,
            old,
            new,
            skip,
        )
        if new is not None:
            self._write(LR, new, step, {"reason": "recover"})
        labels = {"attempt": str(plan.attempt), "checkpoint": os.path.basename(plan.checkpoint.rstrip("/"))}
        self._write(RECOVERY, float(plan.attempt), step, labels)
        if ack:
            acknowledge(
                ack_dir,
                plan,
                True,
                resumed_step=step,
                checkpoint=plan.checkpoint,
                old_lr=old,
                new_lr=new,
                lr_factor=plan.lr_factor,
                skip=list(plan.skip) if plan.skip else [],
            )
        return True

    def planned(self, update: int) -> str | None:
        """Why the applied recovery plan drops update number `update` ("recovery attempt N"), or None."""
        if self.plan is not None and skips(self.plan, update):
            return f"{PLANNED}{self.plan.attempt}"
        return None

    def _ack(self, command: Command, step: int | None, **fields: Any) -> None:
        outcome = "applied" if fields.get("applied") else "refused"
        self._write(ACTION, 1.0, step, {"action": command.action, "command": command.name, "outcome": outcome})
        if self.inbox is not None and command.name in self._mine:
            self._mine.discard(command.name)
            self.inbox.acknowledge(command.name, step, command.action, **fields)

    def _write(self, metric: str, value: float, step: int | None, labels: dict[str, str]) -> None:
        if self.recorder is not None:
            self.recorder.write(metric, value, step, labels)


def scale_lrs(
    optimizers: Iterable[Any], schedulers: Iterable[Any], factor: float, min_lr: float
) -> tuple[float | None, float | None]:
    """Multiply every param group's `lr` and `initial_lr` of `optimizers` and every scheduler's `base_lrs` by `factor`,
    floored at `min_lr` (`scaled`), the schedulers' last LRs set to the new ones; the first group's LR before and
    after (None, None without a param group)."""
    optimizers = list(optimizers)
    groups = [g for opt in optimizers for g in getattr(opt, "param_groups", ())]
    if not groups:
        return None, None
    old = float(groups[0]["lr"])
    for group in groups:
        for key in ("lr", "initial_lr"):
            if key in group:
                group[key] = scaled(float(group[key]), factor, min_lr)
    for scheduler in schedulers:
        inner = getattr(scheduler, "scheduler", scheduler)  # accelerate's AcceleratedScheduler wraps one
        if isinstance(getattr(inner, "base_lrs", None), list):
            inner.base_lrs = [scaled(float(lr), factor, min_lr) for lr in inner.base_lrs]
        if isinstance(getattr(inner, "_last_lr", None), list):
            inner._last_lr = [float(g["lr"]) for g in getattr(inner, "optimizer", optimizers[0]).param_groups]
    return old, float(groups[0]["lr"])


def scaled(lr: float, factor: float, min_lr: float) -> float:
    """`lr * factor`, not below `min_lr`; a LR already at or below `min_lr` as it is."""
    return lr if lr <= min_lr else max(lr * factor, min_lr)


def drop_update(optimizers: Iterable[Any]) -> None:
    """Set every gradient of the optimizers' parameters to None: the coming `optimizer.step()` leaves every weight
    and every state (Adam's moments, its step count) as it is."""
    for optimizer in optimizers:
        for group in getattr(optimizer, "param_groups", ()):
            for parameter in group.get("params", ()):
                parameter.grad = None
