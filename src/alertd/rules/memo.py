"""A windowed condition's memo: running state per series, a cache that changes no result.

A condition such as `{avg: {over: 20 samples}}` keeps, per series, the running state of its window
(exact sums, the sorted finite values) so that judging the next sample costs what enters and leaves the
window, not the window's length. The state is only ever a faster way to the answer the window's
samples give: it is rebuilt from the buffer whenever it can't be advanced (first sight of a series, a
restart that rewinds it, another buffer's series under the same key, an entry dropped at the bound).

Bounded (`MEMO_MAX` entries per condition, the oldest dropped first; an entry goes with its series, as
when a dry-run's buffer is dropped) and safe to share between threads (one lock per condition: two
evaluations never advance the same entry at once).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from threading import Lock
from typing import Any

from alertd.buffer import Series
from alertd.model import SeriesKey

MEMO_MAX = 200_000
"""Series remembered per condition (twice the buffer's default `max_series`)."""


class Memo:
    """Entries by series key; each one is valid only for the very series object (and generation) it was
    made from: a series of another buffer with the same key, or one that restarted, gets a fresh entry."""

    __slots__ = ("_entries", "limit", "lock")

    def __init__(self, limit: int = MEMO_MAX) -> None:
        self.lock = Lock()
        self.limit = limit
        self._entries: dict[SeriesKey, tuple[weakref.ref[Any], int, Any]] = {}

    def get(self, series: Series) -> Any | None:
        """The entry kept for this series object at its current generation, or None."""
        hit = self._entries.get(series.key)
        if hit is None or hit[0]() is not series.values or hit[1] != series.generation:
            return None
        return hit[2]

    def entry(self, series: Series, make: Callable[..., Any], *args: Any) -> Any:
        """The entry kept for this series, or a new one from `make(*args)`, kept (call with the lock held). The
        arguments, not a closure: a condition asks at every sample it judges."""
        hit = self.get(series)
        if hit is None:
            hit = make(*args)
            self.put(series, hit)
        return hit

    def put(self, series: Series, entry: Any) -> None:
        """Keep `entry` for this series (its values array is held weakly: a dropped series frees it)."""
        entries = self._entries
        if series.key not in entries and len(entries) >= self.limit:
            del entries[next(iter(entries))]
        key = series.key

        def forget(ref: weakref.ref[Any]) -> None:  # the series is gone (a finished dry-run's buffer)
            if entries.get(key, (None,))[0] is ref:
                entries.pop(key, None)

        entries[key] = (weakref.ref(series.values, forget), series.generation, entry)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Memo({len(self._entries)} series)"
