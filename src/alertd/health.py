"""What the service knows about each source's polls, and how long it waits after a failure."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from alertd.errors import SourceError
from alertd.model import Sample

log = logging.getLogger("alertd")

BACKOFF_MAX = 300.0
"""The longest wait between two polls of a failing source (and the wait after a non-recoverable error)."""


@dataclass
class SourceHealth:
    """One source's polls: failures in a row, when to try again, counters for the API and /metrics."""

    name: str
    interval: float
    failures: int = 0
    retry_at: float = 0.0
    last_poll: float | None = None
    last_error: str | None = None
    samples: int = 0
    errors: int = 0
    polls: int = 0
    """Reads started: scheduled polls and wake-ups by file-system notifications."""
    lag: float | None = None
    busy: bool = False
    cut: str | None = None
    """The limit the source's data last went over (a message naming it: `alertd.sources.limits`), until a
    poll reads data within its limits; the source is then not up (`alertd.source.up` 0) and this is its error."""

    @property
    def up(self) -> bool:
        """Whether its last poll worked and its data is within its limits."""
        return self.failures == 0 and self.cut is None

    def due(self, now: float) -> bool:
        """Whether a poll may start now (none is running, no backoff is pending)."""
        return not self.busy and now >= self.retry_at

    def failed(self, exc: Exception, now: float) -> None:
        """A poll failed: back off (doubling the interval, at most BACKOFF_MAX); log when the error changes."""
        self.failures += 1
        self.errors += 1
        recoverable = exc.recoverable if isinstance(exc, SourceError) else True
        delay = min(BACKOFF_MAX, self.interval * 2 ** min(self.failures, 10)) if recoverable else BACKOFF_MAX
        self.retry_at = now + delay
        message = f"{type(exc).__name__}: {exc}"
        if message != self.last_error:
            log.error("source %s failed: %s (retry in %.0fs)", self.name, message, delay, extra={"source": self.name})
        self.last_error = message

    def succeeded(self, samples: Sequence[Sample], now: float) -> None:
        """A poll worked: reset the backoff, count the samples, note the lag of the newest."""
        if self.failures:
            log.info("source %s recovered after %d failed polls", self.name, self.failures, extra={"source": self.name})
        self.failures, self.last_error, self.last_poll = 0, self.cut, now
        self.samples += len(samples)
        if samples:  # a sample stamped after the poll began (its writer's clock ran on) is no lag at all
            self.lag = max(0.0, now - max(s.time for s in samples))

    def limited(self, messages: Sequence[str], read: bool) -> None:
        """What a poll that worked left out at the source's limits (each message names its limit); none: it
        was within them, which ends a cut only when the poll read something (`read`)."""
        if messages:
            shown = list(dict.fromkeys(messages))
            message = "; ".join(shown[:3]) + (f" (and {len(shown) - 3} more)" if len(shown) > 3 else "")
            if message != self.cut:
                log.error("source %s: data over a limit left out: %s", self.name, message, extra={"source": self.name})
            self.cut = self.last_error = message
        elif read and self.cut is not None:
            log.info("source %s: its data is within its limits again", self.name, extra={"source": self.name})
            self.cut = self.last_error = None
