"""A replay's samples taken apart into columns once, for all its pieces.

A replay feeds its time-ordered samples in pieces (`alertd.replay_chunks`); each piece goes to the run tracker
and to the buffer, and both take a large batch column-wise. Without these columns each of them took every piece
apart again on its own (a `zip` of the samples, an `id()` of every key): a third of the replay of a file of
one tag. `Columns.of` takes the whole replay apart once; `piece(a, b)` is a view of rows [a, b).

A `Columns` always describes exactly the samples it was made of, row for row: the buffer and the tracker take
it only beside those samples (`SeriesBuffer.append`, `RunTracker.observe`), and fall back to the samples
themselves wherever it is None.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from operator import attrgetter
from typing import Any

from alertd._np import np
from alertd.model import Sample, SeriesKey

_SERIES = attrgetter("series")
_STEP = attrgetter("step")
_TIME = attrgetter("time")
_VALUE = attrgetter("value")


class Columns:
    """Rows [start, start + len) of a sequence of samples as columns: each row's key object's `id` (uint64), its
    time and value (float64), its step (int64; `steps` is None where a step is not an int, as a missing one)."""

    __slots__ = ("_groups", "ids", "samples", "start", "steps", "times", "values")

    def __init__(self, samples: Sequence[Sample], start: int, ids: Any, times: Any, steps: Any, values: Any) -> None:
        self.samples = samples
        self.start = start
        self.ids = ids
        self.times = times
        self.steps = steps
        self.values = values
        self._groups: tuple[dict[int, SeriesKey], Any] | None = None

    def __len__(self) -> int:
        return len(self.ids)

    @classmethod
    def of(cls, samples: Sequence[Sample], times: Any | None = None) -> Columns | None:
        """All of `samples` (`times`: their times as float64, where the caller has them); None where a time or a
        value is not a float."""
        try:
            if times is None:
                times = np.frombuffer(array("d", map(_TIME, samples)), np.float64)
            values = np.frombuffer(array("d", map(_VALUE, samples)), np.float64)
        except (TypeError, ValueError, OverflowError):
            return None
        ids = np.frombuffer(array("Q", map(id, map(_SERIES, samples))), np.uint64)
        try:
            steps = np.frombuffer(array("q", map(_STEP, samples)), np.int64)
        except (TypeError, OverflowError):  # a missing step (None), or not an int64
            steps = None
        return cls(samples, 0, ids, times, steps, values)

    def piece(self, a: int, b: int) -> Columns:
        """Rows [a, b) of these columns (views: nothing is copied)."""
        steps = None if self.steps is None else self.steps[a:b]
        return Columns(self.samples, self.start + a, self.ids[a:b], self.times[a:b], steps, self.values[a:b])

    def groups(self) -> tuple[dict[int, SeriesKey], Any]:
        """(each key object by its id, in order of first appearance; each row's place in that order as an intp
        array, or None where every row has one key object). Computed once per piece."""
        if self._groups is None:
            ids = self.ids
            if len(ids) == 0:
                self._groups = {}, None
            elif ids[0] == ids[-1] and bool((ids == ids[0]).all()):
                self._groups = {int(ids[0]): self.samples[self.start].series}, None
            else:
                uniq, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
                order = np.argsort(first, kind="stable")  # the distinct ids in order of first appearance
                place = np.empty(len(order), dtype=np.intp)
                place[order] = np.arange(len(order))
                base, samples = self.start, self.samples
                keys = {int(uniq[k]): samples[base + int(first[k])].series for k in order.tolist()}
                self._groups = keys, place[inverse.reshape(-1)]
        return self._groups
