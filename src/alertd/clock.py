"""The one reader of the wall clock. Everything else takes `now` as an argument."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """Something that tells the time in epoch seconds (UTC)."""

    def now(self) -> float: ...


class SystemClock:
    """The wall clock."""

    def now(self) -> float:
        """Seconds since the epoch, UTC."""
        return time.time()


class FakeClock:
    """A clock that moves only when told to: for tests and replays."""

    def __init__(self, start: float = 0.0) -> None:
        self.t = start

    def now(self) -> float:
        """The time the clock was last set to."""
        return self.t

    def advance(self, seconds: float) -> None:
        """Move the clock forward."""
        self.t += seconds
