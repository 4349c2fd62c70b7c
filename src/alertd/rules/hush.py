"""Hushed series: a series whose rules are all quiet, and whose next sample can't stir them, is not looked at.

The service's tick looked at each series with a new sample, at each of its rules, and noted the sample on each
quiet pair's track: 12,000 pairs a tick, and at 10,000 series much of it waiting on memory (a series' objects, its
arrays, its tracks: 1.1 us a series where they stay in the caches, 2.2 us where they don't). A series is hushed
where its rules are all quiet (their alerts inactive, their conditions false, no streak, no absence timed) and each
judges a sample by its value alone (`Threshold`, `Nonfinite`: `quiet_interval`), or no rule watches it: a sample
whose value lies where none of them holds leaves every one as it was but for the note of it. The buffer's append,
which has that sample at hand, compares its value and notes it once on the series' `Quiet` (this `Hush`: its value,
step and time, the series' end), and the tick passes the series by; any other sample (two in one append, a
restart, a value out, a time back) leaves it stirred, and the tick ends the hush.

A hush belongs to one chain of evaluations, each handing its state to the next (`evaluate`, `in_place`): its
`Parking`. Ended (`Hush.release`), each track gets the hush's note, as the notes of its own would have left it,
and the series goes on as any other: the same transitions and tracks as judging each sample. Whoever reads the
tracks but the next evaluation sees them settled: an evaluation that hushes hands its tracks on as `ParkedTracks`,
which ends every hush first (`Parking.settle`). What is saved needs no more: a hush begins at a tick that notes its
pairs (among the pairs the evaluation says it wrote, `EvalState.written`) and a save settles every hush
(`settled_tracks`), so the pairs of a hush a save settles are among those written since the save before. A chain
let go of leaves its hushes to whichever chain looks next; another live chain's hush is left alone (two chains on
one buffer: the series goes each sample's way for the other).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator, KeysView, Mapping, ValuesView
from typing import TYPE_CHECKING, Any

from alertd.buffer import Quiet, Series
from alertd.model import SeriesKey
from alertd.rules.state import Track

if TYPE_CHECKING:
    from alertd.rules.evaluate import RuleSet

PairKey = tuple[str, SeriesKey]


class Parking:
    """The hushes of one chain of evaluations under one rule set."""

    __slots__ = ("__weakref__", "hushes", "ref", "ruleset")

    def __init__(self, ruleset: RuleSet) -> None:
        self.ruleset = ruleset
        self.ref = weakref.ref(self)
        """What a hush of this chain is owned by (a chain let go of leaves its hushes to be taken over)."""
        self.hushes: set[Hush] = set()

    def settle(self) -> None:
        """End every hush: each track as its own notes would have left it."""
        for hush in list(self.hushes):
            hush.release()


class Hush(Quiet):
    """One series hushed (its `Series.quiet`): its tracks (`pairs`), whose notes the buffer's appends keep for them."""

    __slots__ = ("owner", "pairs", "series")

    def __init__(
        self,
        parking: Parking,
        series: Series,
        pairs: list[tuple[PairKey, Track]],
        interval: tuple[float, float],
        noted: tuple[float, int | None, float],
    ) -> None:
        """`pairs`: every pair of the series, just noted with its newest sample (`noted`): none where no rule
        watches it."""
        super().__init__(series, *interval, noted)
        self.owner = parking.ref
        self.series = series
        self.pairs = pairs
        for _, tr in pairs:
            tr.park = self
        parking.hushes.add(self)
        series.quiet = self

    def release(self) -> None:
        """End the hush: each track gets its note (the last sample it stood for, and the series' end after it)."""
        value, step, time, generation, end = self.value, self.step, self.time, self.generation, self.end
        for _, tr in self.pairs:
            tr.value, tr.step, tr.time, tr.position, tr.generation = value, step, time, end, generation
            tr.last_time = tr.clock = time
            tr.park = None
        self.pairs = []
        if self.series.quiet is self:
            self.series.quiet = None
        parking = self.owner()
        if parking is not None:
            parking.hushes.discard(self)


class ParkedTracks(Mapping[PairKey, Track]):
    """The tracks of a state with hushed series: every read of a track settles them first (`Parking.settle`)."""

    __slots__ = ("parking", "raw")

    def __init__(self, raw: dict[PairKey, Track], parking: Parking) -> None:
        self.raw = raw
        self.parking = parking

    def settled(self) -> dict[PairKey, Track]:
        """The tracks, every hush ended."""
        if self.parking.hushes:
            self.parking.settle()
        return self.raw

    def __getitem__(self, pair: PairKey) -> Track:
        return self.settled()[pair]

    def get(self, pair: PairKey, default: Any = None) -> Any:
        return self.settled().get(pair, default)

    def __contains__(self, pair: object) -> bool:
        return pair in self.raw

    def __iter__(self) -> Iterator[PairKey]:
        return iter(self.raw)

    def __len__(self) -> int:
        return len(self.raw)

    def keys(self) -> KeysView[PairKey]:
        return self.raw.keys()

    def items(self) -> Any:
        return self.settled().items()

    def values(self) -> ValuesView[Track]:
        return self.settled().values()


def raw_tracks(tracks: Mapping[PairKey, Track]) -> Mapping[PairKey, Track]:
    """The tracks as they are, hushed ones not settled: for what reads only an alert's state, never its notes."""
    return tracks.raw if type(tracks) is ParkedTracks else tracks


def settled_tracks(tracks: Mapping[PairKey, Track]) -> Mapping[PairKey, Track]:
    """The tracks, every hush ended (what a save writes)."""
    return tracks.settled() if type(tracks) is ParkedTracks else tracks
