"""The collector and the service's long-lived objects: what the start-up read made is kept out of its passes.

Python's cyclic collector walks every object it tracks in a full pass; after a start-up read of a large logdir
that is hundreds of thousands of long-lived objects (series keys, tracks, tails), and a full pass then pauses
the event loop for tens of milliseconds, wherever it falls: between a NaN's read and its webhook. `HeapFreezer`
moves the objects alive once the start-up read is over into the permanent generation (`gc.freeze`), after one
full collection: later passes skip them. The start-up read is over at the first housekeeping where the number of
buffered series has not changed since the previous one; it freezes again whenever that number has doubled since
(a logdir that grew), so at most a logarithmic number of times.

What it costs: a frozen object that becomes part of a reference cycle later is freed only by reference counting,
never by the collector (most are freed that way: an evicted series' arrays and dicts hold no cycle). The bound
on that is what was alive at each freeze.
"""

from __future__ import annotations

import gc


class HeapFreezer:
    """When to freeze the heap, from the number of buffered series at each housekeeping."""

    def __init__(self) -> None:
        self.frozen_at = 0
        """The number of series at the last freeze (0: never frozen)."""
        self._last = -1

    def housekeeping(self, series: int) -> bool:
        """A housekeeping with `series` buffered series: freeze now if the start-up read is over and nothing was
        frozen yet, or the series doubled since the last freeze; whether it froze."""
        settled, self._last = series == self._last, series
        if not settled or (self.frozen_at and series < 2 * self.frozen_at):
            return False
        gc.collect()
        gc.freeze()
        self.frozen_at = max(series, 1)
        return True
