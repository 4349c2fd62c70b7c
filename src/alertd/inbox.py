"""The buffer's inbox: what each append brought, one row a sample (its series' slot, the sample), for a reader that
judges new samples column-wise (`alertd.rules.parking`) without visiting each series.

Opened by the first reader that asks (`SeriesBuffer.open_inbox`); from then on every series has a slot (a small
integer, the index of the reader's arrays) and every append writes its rows as it appends each sample (the series is
at hand then: no second visit; two list appends, the sample object itself kept, its numbers taken out by the reader
in columns). Where a series' samples must be looked at, the buffer writes a stir (its slot among `stirs`): the series
restarted (a step going back cut its tail), or an eviction took the sample before the append's first (a comparison
with the sample before has nothing to compare with; any eviction between appends too), or many samples went in at
once (the column-wise append), or it was
forgotten at the series limits (its slot is given to another series only after the inbox was next cleared, so a
reader that saw the stir never meets the slot's new series under the old one's rows). A stir made between appends (an
eviction by age of every series, `SeriesBuffer.evict_all`) is read at once and again with the next append's rows.

Bounded: once it holds more than `KEPT_ROWS` rows and one per series, an append clears it first (the service's
chain has read them: it evaluates after each append), so it holds about two ticks' rows at most. A reader whose
version is older than a clear (`since` says None) has lost rows and must take every series as stirred; readers on one
buffer do not hold rows back for each other.
"""

from __future__ import annotations

from operator import itemgetter
from typing import TYPE_CHECKING, Any, NamedTuple

from alertd._np import np
from alertd.model import Sample

if TYPE_CHECKING:
    from alertd.buffer import Series

KEPT_ROWS = 4096
"""Rows the inbox holds at least before an append clears it (and one per series)."""


class Rows(NamedTuple):
    """The inbox's rows since a version: the slots and values as numpy arrays, the samples (an object array), and the
    slots stirred."""

    slots: Any
    values: Any
    samples: Any
    stirred: Any


class Inbox:
    """The rows of the appends since `base` (see the module docstring), and the series by slot."""

    __slots__ = ("base", "freed", "marks", "open_from", "samples", "series", "slots", "spare", "stirs")

    def __init__(self, version: int) -> None:
        self.slots: list[int] = []
        self.samples: list[Sample] = []
        self.stirs: list[int] = []
        self.base = version
        """Readers at this buffer version or after find every row they have not seen."""
        self.marks: list[tuple[int, int, int]] = []
        """Per append that wrote rows: the buffer version it made, the offsets of its first row and first stir."""
        self.open_from = (0, 0)
        """Where the rows and stirs no append has marked yet start (a stir between appends goes with the next's)."""
        self.series: list[Series | None] = []
        """The series by slot (None: a slot whose series was forgotten)."""
        self.spare: list[int] = []
        """Slots free to give to new series."""
        self.freed: list[int] = []
        """Slots freed since the last clear: spare after the next."""

    def __len__(self) -> int:
        return len(self.slots)

    def take(self, series: Series) -> None:
        """Give `series` a slot."""
        if self.spare:
            slot = self.spare.pop()
            self.series[slot] = series
        else:
            slot = len(self.series)
            self.series.append(series)
        series.slot = slot

    def drop(self, series: Series) -> None:
        """`series` is forgotten: a stir for its slot, which is given again after the next clear."""
        slot = series.slot
        if 0 <= slot < len(self.series) and self.series[slot] is series:
            self.stirs.append(slot)
            self.series[slot] = None
            self.freed.append(slot)
        series.slot = -1

    def stir(self, slot: int) -> None:
        """Look at this series' samples (see the module docstring)."""
        self.stirs.append(slot)

    def begin(self, version: int, series_count: int) -> None:
        """Before an append at buffer `version`: cleared first when full (not while a stir made between appends
        waits for the next one's mark)."""
        n = len(self.slots)
        if n > KEPT_ROWS and n > series_count and self.open_from == (n, len(self.stirs)):
            self.slots.clear()
            self.samples.clear()
            self.stirs.clear()
            self.marks.clear()
            self.open_from = (0, 0)
            self.base = version
            self.spare.extend(self.freed)
            self.freed.clear()

    def mark(self, version: int) -> None:
        """The append that made buffer `version` is over: the rows and stirs not marked yet are its."""
        now = (len(self.slots), len(self.stirs))
        if self.open_from != now:
            self.marks.append((version, *self.open_from))
            self.open_from = now

    def since(self, version: int) -> Rows | None:
        """The rows of the append after buffer `version`, or None where some were cleared before a reader there saw
        them, or where more than one append came since (each append's stirs are of its own rows: an eviction by a
        later one may take an earlier one's rows away)."""
        if version < self.base:
            return None
        marks = self.marks
        k = len(marks)
        while k and marks[k - 1][0] > version:
            k -= 1
        if len(marks) - k > 1:
            return None
        end = self.open_from[0]  # and every stir, those made since the last append too (seen again with the next)
        first, stir_first = marks[k][1:] if k < len(marks) else self.open_from
        rows = self.samples[first:end]
        samples = np.fromiter(rows, object, len(rows))
        return Rows(
            np.array(self.slots[first:end], np.int64),
            np.fromiter(map(_value, rows), np.float64, len(rows)),
            samples,
            np.array(self.stirs[stir_first:], np.int64),
        )


_value = itemgetter(3)
"""A `Sample`'s value."""
assert Sample._fields[3] == "value"
