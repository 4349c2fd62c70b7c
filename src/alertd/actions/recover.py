"""The `recover` notifier: roll the run back to its last good checkpoint and go on (exec's child, or a Slurm job).

For each alert that turns FIRING (once per firing: `Firings`), the notifier hands the incident to the run's
supervisor (`Supervisor`: alertd exec's for `target: child`, `alertd.service.recovery`; the service's for
`target: slurm`, `alertd.service.slurm_recovery`), which proves the alert is its child's, plans
the recovery (`alertd.runs.recovery`), writes the plan, stops the child without a poisoned save and starts it
again. Each step is one `RecoverReport`: the plan made (or why none: refused, or given up, which stops the run
for good), and later what the new attempt's trainer acknowledged (the checkpoint it resumed from, its step, its
LR before and after). Without a supervisor (alertd not running as exec) every firing is refused: alertd restarts
only a run it started.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import Protocol

from alertd.actions.base import Firings, Reports
from alertd.actions.config import RecoverConfig
from alertd.actions.stop_file import StopFileNotifier
from alertd.errors import NotifyError
from alertd.model import Notification, Transition

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RecoverReport:
    """One step of a recovery: `planned` (the plan, `attempt` next), `resumed` (the trainer's acknowledgement),
    `refused` (no plan: why), `gave_up` (no plan, and the run is stopped for good)."""

    notifier: str
    fingerprint: str
    rule: str
    stamp: str = ""
    phase: str = "planned"
    attempt: int | None = None
    plan: str = ""
    """The plan in words (`Plan.describe`)."""
    checkpoint: str = ""
    step: int | None = None
    """The step the new attempt resumed at (its acknowledgement)."""
    old_lr: float | None = None
    new_lr: float | None = None
    refused: str | None = None
    action: str = "recover"
    signals: tuple[()] = ()

    def summary(self) -> str:
        """One line for people."""
        head = f"recover {self.notifier} for {self.rule}: "
        if self.phase == "gave_up":
            return f"{head}GAVE UP, the run is stopped for good: {self.refused}"
        if self.refused is not None:
            return f"{head}REFUSED: {self.refused}"
        if self.phase == "resumed":
            lr = (
                f", LR {self.old_lr:g} -> {self.new_lr:g}"
                if self.old_lr is not None and self.new_lr is not None
                else ""
            )
            return f"{head}attempt {self.attempt} resumed from {self.checkpoint} at step {self.step}{lr}"
        return f"{head}stopping the run to restart it: {self.plan}"

    def as_json(self) -> dict[str, object]:
        """For `/api/v1/runs` and the run page."""
        return {
            "action": self.action,
            "notifier": self.notifier,
            "rule": self.rule,
            "phase": self.phase,
            "attempt": self.attempt,
            "plan": self.plan or None,
            "checkpoint": self.checkpoint or None,
            "step": self.step,
            "old_lr": self.old_lr,
            "new_lr": self.new_lr,
            "refused": self.refused,
            "summary": self.summary(),
        }


Emit = Callable[[RecoverReport], Awaitable[None]]


def ledger_dir(name: str, cfg: RecoverConfig, labels: Mapping[str, str]) -> str | None:
    """The checkpoint ledger's directory `cfg.checkpoints` names for an alert with `labels` (a `{label}` template
    with `target: slurm`, expanded and checked as a `stop_file` path); None without `checkpoints`. NotifyError
    when the template can't be expanded for these labels."""
    if cfg.checkpoints is None:
        return None
    if cfg.target == "child":
        return os.path.abspath(cfg.checkpoints)
    return os.path.abspath(StopFileNotifier(name, cfg.checkpoints_config()).path_for_labels(labels))


class Supervisor(Protocol):
    """What restarts the run: alertd exec (`alertd.service.recovery.ExecRecovery`), or Slurm (`scontrol requeue`:
    `alertd.service.slurm_recovery.SlurmRecovery`)."""

    async def recover(self, cfg: RecoverConfig, alert: Transition, report: RecoverReport, emit: Emit) -> None:
        """Act on `alert` as `cfg` says; every report (the first at once, the acknowledgement later) to `emit`.
        NotifyError: nothing was done (recoverable: it may pass, the firing is handed over again)."""
        ...


class RecoverNotifier:
    """Hands each newly firing alert to the supervisor; refuses all when there is none."""

    def __init__(
        self,
        name: str,
        cfg: RecoverConfig,
        *,
        supervisor: Callable[[RecoverConfig], Supervisor | None] | None = None,
        report: Callable[[RecoverReport], Awaitable[None]] | None = None,
    ) -> None:
        self.name = name
        self.cfg = cfg
        self._supervisor = supervisor
        self._acted = Firings()
        self._reports: Reports[RecoverReport] = Reports(f"recover {name}", log, report)
        self.history = self._reports.history

    async def send(self, notification: Notification) -> None:
        """Hand each newly firing alert to the supervisor, once per firing. A supervisor's failure that may pass
        (`NotifyError(recoverable=True)`: Slurm's controller out of reach) leaves that firing not acted on and is
        raised after the rest: the delivery is retried."""
        failure: NotifyError | None = None
        for alert in self._acted.fresh(notification, log, f"recover {self.name}"):
            base = RecoverReport(self.name, alert.fingerprint, alert.rule, stamp=f"{alert.since:.3f}")
            supervisor = self._supervisor(self.cfg) if self._supervisor is not None else None
            if supervisor is None:
                self._acted.add(alert.firing_id)
                why = "alertd restarts only a run it started: run the training under `alertd exec -- ...`"
                if self.cfg.target == "slurm":
                    why = "no Slurm supervisor here (target: slurm needs the service, not a test harness)"
                await self._reports.emit(replace(base, refused=why))
                continue
            try:
                await supervisor.recover(self.cfg, alert, base, self._reports.emit)
            except NotifyError as exc:
                if not exc.recoverable:
                    self._acted.add(alert.firing_id)
                    await self._reports.emit(replace(base, refused=str(exc)))
                    continue
                log.error("recover %s: %s (retried)", self.name, exc)
                failure = failure or exc
                continue
            self._acted.add(alert.firing_id)
        if failure is not None:
            raise failure

    async def aclose(self) -> None:
        """Nothing to close: the supervisor owns the child."""
