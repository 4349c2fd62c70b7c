"""The receivers the service delivers to: each `notifiers:` entry built (`alertd.receivers`) with what it needs
from the service (the verified writers, alertd exec's child, the console), rebuilt on reload, and the actions'
reports turned into notifications for people."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TextIO

from alertd.actions.config import ACTION_TYPES, KillConfig, RecoverConfig, SlurmNotifierConfig, StacksConfig
from alertd.actions.recover import Supervisor
from alertd.clock import Clock
from alertd.config import Config
from alertd.dispatch.announce import ActionReport, announcements
from alertd.dispatch.dispatcher import Dispatcher
from alertd.model import Alert, Transition, TransitionKind
from alertd.notify.base import Notifier, Resending
from alertd.notify.config import LogConfig
from alertd.receivers import NotifierConfig, build_notifier, takes_reports
from alertd.runs.writers import WriterRegistry
from alertd.service.engine import log


class Notifiers:
    """The notifiers of the configuration in force, by name.

    `exec_mode`: a `kill` without a `target` acts on alertd exec's child (`child()`: its pid and start time).
    `collective_lines()`: alertd exec's child's last watchdog / flight recorder lines, for the `stacks` reports.
    `supervisor(cfg)`: what restarts the run for a `recover` (alertd exec's, or Slurm's), None when nothing can.
    `report(report)` is what the service does with an action's report (`announce`).
    """

    def __init__(
        self,
        writers: WriterRegistry,
        child: Callable[[], tuple[int, int] | None],
        *,
        exec_mode: bool = False,
        console: TextIO | None = None,
        supervisor: Callable[[RecoverConfig], Supervisor | None] | None = None,
        collective_lines: Callable[[], list[str]] | None = None,
    ) -> None:
        self.writers = writers
        self._collective_lines = collective_lines
        self._supervisor = supervisor
        self._child = child
        self.exec_mode = exec_mode
        self.console = console
        self.by_name: dict[str, Notifier] = {}
        self._config: Config | None = None
        self.report: Callable[[ActionReport], Any] | None = None

    def build(self, config: Config) -> dict[str, Notifier]:
        """Every notifier of `config`."""
        self._config = config
        self.by_name = {name: self._notifier(name, cfg) for name, cfg in config.notifiers.items()}
        return self.by_name

    def reconfigure(self, old: Config, new: Config, close: Callable[[Notifier], None]) -> None:
        """Rebuild the notifiers a reload changed, drop (`close`) the ones it removed."""
        self._config = new
        for name, cfg in new.notifiers.items():
            if name not in self.by_name or old.notifiers.get(name) != cfg:
                if name in self.by_name:
                    close(self.by_name[name])
                self.by_name[name] = self._notifier(name, cfg)
        for name in set(self.by_name) - set(new.notifiers):
            close(self.by_name.pop(name))

    def resending(self) -> dict[str, Resending]:
        """The notifiers that post firing alerts again while they fire (their `resend_every`)."""
        return {name: n for name, n in self.by_name.items() if isinstance(n, Resending)}

    async def resend(self, name: str, clock: Clock) -> None:
        """Post the firing alerts of notifier `name` again (a scheduler job every `resend_every`)."""
        notifier = self.resending().get(name)
        if notifier is None:
            return
        try:
            await notifier.resend(clock.now())
        except Exception as exc:
            log.warning("notifier %s: re-sending firing alerts failed: %s", name, exc)

    def _notifier(self, name: str, cfg: NotifierConfig) -> Notifier:
        kwargs: dict[str, Any] = {}
        if isinstance(cfg, KillConfig | StacksConfig):
            if self.exec_mode and "target" not in cfg.model_fields_set:
                cfg = cfg.model_copy(update={"target": "child"})  # under exec, the trainer is the child
            kwargs |= {"writers": self.writers.writer, "claims": self.writers.claims, "child": self._child}
            if isinstance(cfg, StacksConfig) and self._collective_lines is not None:
                kwargs["collective_lines"] = self._collective_lines  # in the report under target: child
        elif isinstance(cfg, SlurmNotifierConfig):
            kwargs["writers"] = self.writers.writer  # the job id from the verified writer's environment
            kwargs["claims"] = self.writers.claims  # ... when the alert's data is the writer's own
            kwargs["slurm_sources"] = self._slurm_sources  # the only sources whose slurm_job_id label counts
        elif isinstance(cfg, RecoverConfig):
            kwargs["supervisor"] = self._supervisor  # alertd exec's (its child), or the service's (Slurm jobs)
        elif isinstance(cfg, LogConfig) and self.console is not None:
            kwargs["stream"] = self.console
        if cfg.type in ACTION_TYPES:  # every action reports what it did
            kwargs["report"] = self._report
        return build_notifier(name, cfg, **kwargs)

    def _slurm_sources(self) -> frozenset[str]:
        config = self._config
        return frozenset(s.name for s in config.sources if s.type == "slurm") if config is not None else frozenset()

    async def _report(self, report: ActionReport) -> None:
        if self.report is not None:
            await self.report(report)


def announce(
    report: ActionReport,
    dispatcher: Dispatcher,
    notifiers: Mapping[str, NotifierConfig],
    alerts: list[Alert],
    recent: Any,
    now: float,
) -> None:
    """Tell people what an action did (a kill, a W&B run stopped, ...): a notification to every receiver the alert
    routes to that takes reports (`takes_reports`: not the actions, not pagers), committed to the outbox.
    `recent`: the newest transitions (the alert as it fired, when it has resolved meanwhile)."""
    extra = {"rule": report.rule, "action": report.action, "notifier": report.notifier}
    pid = getattr(report, "pid", None)  # kill's reports name the process
    if pid is not None:
        extra["pid"] = pid
    log.warning("%s", report.summary(), extra=extra)
    alert: Alert | Transition | None = next((a for a in alerts if a.fingerprint == report.fingerprint), None)
    if alert is None:  # resolved meanwhile (the run it stopped has ended): as it was when it fired
        fired = (t for t in reversed(recent) if t.state is TransitionKind.FIRING)
        alert = next((t for t in fired if t.fingerprint == report.fingerprint), None)
    skip = [n for n, cfg in notifiers.items() if not takes_reports(cfg)]
    notes = announcements(report, alert, dispatcher.route, skip, now)
    dispatcher.outbox.commit_plan(notes, {})
