"""The collector and the service's long-lived objects: what the start-up read made is kept out of its passes.

Python's cyclic collector walks every object it tracks in a full pass; after a start-up read of a large logdir
that is hundreds of thousands of long-lived objects (series keys, tracks, tails, and the modules' own), and a full
pass then pauses the event loop for tens of milliseconds, wherever it falls: between a NaN's read and its
webhook. `HeapFreezer` moves the objects alive once the start-up read is over (every source polled once, its
samples taken, no file left behind) into the permanent generation (`gc.freeze`), after one full collection:
later passes skip them. At a housekeeping where the number of buffered series has doubled since (1,000 more at
least) and held still since the previous housekeeping (a logdir that grew), it freezes again: at most a
logarithmic number of times. Only the process's own service does it (`alertd run`, `alertd exec`: the service's
`freeze_heap`), never one that a library or a test runs inside its own process.

After each freeze the C heap's free pages go back to the system (`malloc_trim`, glibc): what the start-up read's
transient objects (a poll's samples, decoded events) left behind, so the service's resident memory after reading a
large logdir is near what it keeps (`bench/bench_memory.py`: 58 bytes a buffered sample after 1M, 81 without).

What it costs: a frozen object that becomes part of a reference cycle later is freed only by reference counting,
never by the collector (most are freed that way: an evicted series' arrays and dicts hold no cycle). The bound
on that is what was alive at each freeze.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc

GROWTH = 1000
"""Series more than at the last freeze (and twice as many) before a housekeeping freezes again."""


class HeapFreezer:
    """When to freeze the heap: once the start-up read is over, then when the buffered series grew."""

    def __init__(self) -> None:
        self.frozen_at: int | None = None
        """The number of series at the last freeze (None: never frozen)."""
        self._last = -1

    def started(self, read_once: bool, series: int) -> bool:
        """A tick: freeze if it has not yet and the start-up read is over (`read_once`); whether it froze."""
        if self.frozen_at is not None or not read_once:
            return False
        self._freeze(series)
        return True

    def housekeeping(self, series: int) -> bool:
        """A housekeeping with `series` buffered series: freeze again if they doubled (by `GROWTH` at least) since
        the last freeze and held still since the previous housekeeping; whether it froze."""
        settled, self._last = series == self._last, series
        if self.frozen_at is None or not settled or series < max(2 * self.frozen_at, self.frozen_at + GROWTH):
            return False
        self._freeze(series)
        return True

    def _freeze(self, series: int) -> None:
        gc.collect()
        gc.freeze()
        self.frozen_at = series
        trim()


def trim() -> bool:
    """Hand the C heap's free pages back to the system (glibc's `malloc_trim`): what a start-up read's transient
    objects left free; whether any was (False on a C library without it)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(libc.malloc_trim(0))
    except (OSError, AttributeError):
        return False
