"""What the action notifiers (kill, wandb_stop, slurm) share: acting once per firing, and reporting."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Generic, Protocol, TypeVar

ACTED_MAX = 10_000
"""Firings remembered per notifier; the oldest are forgotten first."""


class _Report(Protocol):
    @property
    def refused(self) -> str | None: ...

    def summary(self) -> str: ...


R = TypeVar("R", bound=_Report)


class Firings:
    """The firings (an alert's fingerprint and start) a notifier has acted on, at most `limit`."""

    def __init__(self, limit: int = ACTED_MAX) -> None:
        self.limit = limit
        self._seen: dict[tuple[str, float], None] = {}

    def __contains__(self, key: object) -> bool:
        return key in self._seen

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
