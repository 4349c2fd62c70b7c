"""A windowed condition's memo: running state per series, a cache that changes no result.

A condition such as `{avg: {over: 20 samples}}` keeps, per series, the running state of its window
(exact sums, the sorted finite values) so that judging the next sample costs what enters and leaves the
window, not the window's length. The state is only ever a faster way to the answer the window's
samples give: it is rebuilt from the buffer whenever it can't be advanced (first sight of a series, a
restart that rewinds it, another buffer's series under the same key).

Where the entries live: on the series itself (`Series.memo`, a small dict by each condition's token), so
looking one up is one look-up in a dict of a few ints, with no lock: an entry is only ever advanced by an
evaluation of its own series, and one buffer is evaluated by one evaluation at a time (the service's engine;
a dry-run or a replay has a buffer of its own: the same rules may judge several buffers at once, in several
threads, each advancing its own series' entries). Bounded by the buffer: an entry goes with its series (an
evicted series, a dropped dry-run's buffer), and a condition's entries go with the condition (a rules file
reloaded: `weakref.finalize` takes its token off the series it left entries on).
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable
from threading import Lock
from typing import Any

from alertd.buffer import Series

_TOKENS = itertools.count(1)


def _forget(token: int, held: weakref.WeakSet[Series]) -> None:
    """The condition is gone: take its entries off the series that still hold one."""
    for series in list(held):
        if series.memo is not None:
            series.memo.pop(token, None)


class Memo:
    """A condition's entries, one per series: each is valid only for the series object it is kept on, in the
    generation it was made in (a series that restarts drops its entries: `Series.memo` is emptied with the cut,
    so it gets fresh ones)."""

    __slots__ = ("__weakref__", "_held", "_lock", "token")

    def __init__(self) -> None:
        self.token = next(_TOKENS)
        self._held: weakref.WeakSet[Series] = weakref.WeakSet()
        """The series this condition left an entry on (to take it off them when the condition goes)."""
        self._lock = Lock()  # around `_held` alone: a new entry is rare, a look-up is not
        weakref.finalize(self, _forget, self.token, self._held)

    def get(self, series: Series) -> Any | None:
        """The entry kept on this series, or None."""
        memo = series.memo
        return memo.get(self.token) if memo is not None else None

    def entry(self, series: Series, make: Callable[..., Any], *args: Any) -> Any:
        """The entry kept on this series, or a new one from `make(*args)`, kept. The arguments, not a closure: a
        condition asks at every sample it judges."""
        memo = series.memo
        hit = memo.get(self.token) if memo is not None else None  # `get`, inline
        if hit is not None:
            return hit
        entry = make(*args)
        self.put(series, entry)
        return entry

    def put(self, series: Series, entry: Any) -> None:
        """Keep `entry` on this series (until its next cut)."""
        if series.memo is None:
            series.memo = {}
        if self.token not in series.memo:
            with self._lock:
                self._held.add(series)
        series.memo[self.token] = entry

    def __len__(self) -> int:
        """The live series holding an entry of this condition."""
        return len(self._held)

    def __repr__(self) -> str:
        return f"Memo({len(self)} series)"
