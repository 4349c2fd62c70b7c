"""What the actions (kill, stop_file, wandb_stop, slurm) share: acting once per firing, refusing, reporting.

The contract every action keeps, beside the notifier's (`send`, `aclose`): it acts on each alert that newly
fires, once per firing (`Firings`); a target it can't or mustn't act on is a `Refused`, reported and never
retried (a delivery failure a retry could mend is a `NotifyError(recoverable=True)`); every outcome, done or
refused, is one report (`Reports`), handed to the service, which announces it to the alert's receivers that
take reports (`alertd.dispatch.announce`)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, Protocol, TypeVar, runtime_checkable

from alertd.dispatch.announce import ActionReport
from alertd.model import Notification, Transition, TransitionKind

ACTED_MAX = 10_000
"""Firings remembered per notifier; the oldest are forgotten first."""


R = TypeVar("R", bound=ActionReport)


@runtime_checkable
class Action(Protocol):
    """An action notifier: a notifier (`send`, `aclose`) that acts on each alert newly firing, once per firing,
    refuses (`Refused`) what it can't or mustn't act on, and keeps every outcome as one report in `history`,
    which it also hands to its `report` callback (the service announces it through the dispatcher)."""

    name: str

    @property
    def history(self) -> Sequence[ActionReport]: ...

    async def send(self, notification: Notification) -> None: ...

    async def aclose(self) -> None: ...


class Firings:
    """The firings (an alert's fingerprint and start) a notifier has acted on, at most `limit`."""

    def __init__(self, limit: int = ACTED_MAX) -> None:
        self.limit = limit
        self._seen: dict[tuple[str, float], None] = {}

    def __contains__(self, key: object) -> bool:
        return key in self._seen

    def fresh(self, notification: Notification, log: logging.Logger | None = None, what: str = "") -> list[Transition]:
        """The alerts of `notification` newly firing: firing, and not acted on yet. With `log`, each one already
        acted on is logged there as such, by `what` (`kill k8s`)."""
        out = []
        for alert in notification.alerts:
            if alert.state is not TransitionKind.FIRING:
                continue
            if alert.firing_id in self._seen:
                if log is not None:
                    log.info("%s: already acted on %s (%s), nothing to do", what, alert.rule, alert.fingerprint)
                continue
            out.append(alert)
        return out

    def add(self, key: tuple[str, float]) -> None:
        self._seen[key] = None
        while len(self._seen) > self.limit:
            del self._seen[next(iter(self._seen))]


class Reports(Generic[R]):
    """Each report is kept in `history`, logged (refusals at error level) and handed to `callback`, whose
    failure is logged, never raised."""

    def __init__(self, what: str, log: logging.Logger, callback: Callable[[R], Awaitable[None]] | None) -> None:
        self.what, self.log, self.callback = what, log, callback
        self.history: list[R] = []

    async def emit(self, report: R) -> None:
        self.history.append(report)
        self.log.log(logging.ERROR if report.refused else logging.WARNING, "%s", report.summary())
        if self.callback is None:
            return
        try:
            await self.callback(report)
        except Exception:
            self.log.exception("%s: the report callback failed", self.what)


class Refused(Exception):
    """The target can't or mustn't be acted on: reported, never retried. `pid`: the process it concerns, if any."""

    def __init__(self, reason: str, pid: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.pid = pid
