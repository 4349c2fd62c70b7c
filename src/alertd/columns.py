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
from collections.abc import Iterable, Sequence
from operator import attrgetter
from typing import Any, Self

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

    def take(self, rows: Any, samples: Sequence[Sample]) -> Columns:
        """These columns' `rows` (an index array), in that order, for `samples`: those rows' samples, in order."""
        steps = None if self.steps is None else self.steps[rows]
        return Columns(samples, 0, self.ids[rows], self.times[rows], steps, self.values[rows])

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


class ColumnList(list[Sample]):
    """A list of samples that holds the columns of the rows a source decoded a column at a time (`note`), so that
    a replay does not take those rows apart again: `columns()` takes apart only the other rows.

    Only appends may follow a `note` (a source's list, read by a replay); `columns()` checks the first and the
    last row of each noted run against its columns and, where the list no longer matches them, takes every row
    apart (`Columns.of`): the same columns, slower."""

    __slots__ = ("_noted",)

    def __init__(self, samples: Iterable[Sample] = ()) -> None:
        super().__init__(samples)
        self._noted: list[tuple[int, Any, Any, Any, Any]] = []

    def __repr__(self) -> str:
        """Short: asyncio's `reprlib` writes out a list subclass whole (a task's result: a million samples)."""
        return f"<ColumnList of {len(self)} samples, {len(self._noted)} noted runs>"

    def note(self, start: int, ids: Any, times: Any, steps: Any, values: Any) -> None:
        """Rows [start, start + len(ids)) are (the key object of id `ids[k]`, `times[k]`, `steps[k]`, `values[k]`):
        uint64, float64, int64 and float64 numpy arrays."""
        if len(ids):
            self._noted.append((start, ids, times, steps, values))

    def __iadd__(self, other: Iterable[Sample]) -> Self:  # type: ignore[override,misc]
        """Append `other`'s rows, with its notes where it is a `ColumnList` too."""
        if isinstance(other, ColumnList):
            at = len(self)
            self._noted += [(start + at, *rest) for start, *rest in other._noted]
        return super().__iadd__(other)

    def columns(self) -> Columns | None:
        """All of this list's rows as `Columns` (None where `Columns.of` gives None), the noted ones from their
        columns."""
        parts: list[tuple[Any, Any, Any, Any]] = []
        pos, n = 0, len(self)
        for noted in sorted(self._noted, key=lambda noted: noted[0]):
            start, size = noted[0], len(noted[1])
            if start < pos or start + size > n or not (self._matches(noted, 0) and self._matches(noted, size - 1)):
                return Columns.of(self)  # the list changed under its notes
            if pos < start and not self._taken_apart(pos, start, parts):
                return None
            parts.append(noted[1:])
            pos = start + size
        if not parts:
            return Columns.of(self)
        if pos < n and not self._taken_apart(pos, n, parts):
            return None
        ids, times, steps, values = zip(*parts, strict=True)
        known = None if any(s is None for s in steps) else np.concatenate(steps)
        return Columns(self, 0, np.concatenate(ids), np.concatenate(times), known, np.concatenate(values))

    def _matches(self, noted: tuple[int, Any, Any, Any, Any], k: int) -> bool:
        start, ids, times, steps, values = noted
        s = self[start + k]
        v, w = s.value, float(values[k])
        same_value = v == w or (v != v and w != w)
        return id(s.series) == int(ids[k]) and s.time == float(times[k]) and s.step == int(steps[k]) and same_value

    def _taken_apart(self, a: int, b: int, parts: list[tuple[Any, Any, Any, Any]]) -> bool:
        got = Columns.of(self[a:b])
        if got is None:
            return False
        parts.append((got.ids, got.times, got.steps, got.values))
        return True
