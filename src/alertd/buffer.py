"""The series buffer: every sample of every series, bounded per series by age and by count.

Each series keeps three parallel arrays (time and value as C doubles, step as a C long long), so a
buffered sample costs 24 bytes plus the arrays' spare capacity. Old samples are evicted from the
front by moving a start offset; the arrays are compacted once the dead prefix is large.

A step that goes backwards means the run resumed from a checkpoint: the samples at and after the new
step are dropped (the new history replaces them) and a `Restart` is returned to the caller, so the
rules see a continuous history instead of a false spike.

Bounds on what the sources may make of it: at most `max_series` series in all and
`max_series_per_source` per `source` label (a source's own `max_series` overrides it). At a limit, a new
series takes the place of the series idle longest (least recently appended to, of that source at its
own limit, of any source at `max_series`) whose newest sample is `IDLE_EVICTABLE` seconds older than the
arrival time or more, and on which no alert is pending or firing (`pinned`, the service's to say): it is
forgotten (counted per source in `evicted`, logged once per source, reported as the series
`alertd.series.evicted{source=...}`), so a new run's NaN is still seen when old runs fill the limit.
Where no series is that idle, the samples of NEW series are dropped (series already held keep updating),
counted per source in `dropped`, logged once per source, and reported as the series
`alertd.series.dropped{source=...}` (the total so far) so a rule can alert on it. Series named `alertd.*`
(alertd's own) are exempt. A series that comes back after it was forgotten goes on at the position it had
reached, in a new generation, so a rule's reader sees its new samples and none twice.

Sample times a rule could not use (NaN, infinite, after the year 9999 as when a writer gives
milliseconds, or more than `max_future_skew` ahead of the arrival time `now`) are replaced by the
arrival time, so `for:` and `absent` run on the arrival clock and a NaN value is still seen; without
an arrival time (a replay) by the series' previous time, or the sample is dropped when it has none.
Each such series is logged once, with the time it gave.

Speed: a batch of `_BULK_SMALL` samples or more (a list) with at least `_BULK_PER_SERIES` samples a series on
average (the dry-run's chunks of a few long series, a file read from its start) is first tried as columns
(numpy): per series, all times usable, steps present and never going back, no series limit reached, no writer
lineage shared within the batch. Then each series' samples are appended at once, with exactly the
effects the sample-by-sample loop has on such a batch; any other batch goes through that loop.

Positions: every sample has an absolute position in its series (0 for the first sample ever
appended). Evicting from the front keeps positions; a restart cuts the tail, bumps the series'
`generation` and records the cut, so a reader that remembers `(generation, position)` can tell
exactly which samples are new to it.
"""

from __future__ import annotations

import logging
import math
from array import array
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from alertd._np import np
from alertd.columns import Columns
from alertd.inbox import Inbox
from alertd.model import Restart, Sample, SeriesKey

log = logging.getLogger("alertd.buffer")

NO_STEP = -(2**63)
"""The step stored for samples that have none (NVML)."""

FINISHED_METRIC = "run.finished"
MAX_ENDS = 100_000
"""Ends (`ended_since`) remembered at most; the oldest are forgotten first."""
"""A sample of this metric with value 1 marks its run (same `source` and `run` labels) as finished."""

DROPPED_METRIC = "alertd.series.dropped"
"""Per source, how many samples of new series were dropped at the series limits (a running total)."""
EVICTED_METRIC = "alertd.series.evicted"
"""Per source, how many idle series gave their place to new ones at the series limits (a running total)."""
IDLE_EVICTABLE = 60.0
"""Seconds without a new sample (by the samples' times, against the arrival time) after which a series may
give its place to a new one at the series limits."""
_EVICT_SCAN = 256
"""Idle series one look over the buffer picks at most (the next ones to give their place)."""

MAX_TIME = 253402300799.0
"""9999-12-31T23:59:59Z: a later sample time is unusable (a writer in milliseconds, or garbage)."""

_WARNED_MAX = 10_000
_BULK_SMALL = 64
"""Samples in one `append` from which it tries the column-wise path, where the batch has at least
`_BULK_PER_SERIES` samples per key object."""
_BULK_PER_SERIES = 32
"""Samples a series (on average over a batch) from which the column-wise path is the quicker: its numpy calls cost
a few us a series. 2,000 series x 1 sample: 4.8 us a sample against 0.9 sample by sample; x 16: 0.60 against 0.51;
100 series x 64: 0.33 against 0.51. A service's tick of 10,000 series, one new sample each: 56-60 ms column-wise
(which any batch of 512 samples or more took before), 15 ms sample by sample."""
_BULK_PROBE = 256
"""Samples at the head of a batch whose series are counted first (`_few_series`)."""
_BULK_MASKS = 16
"""Series in one bulk batch up to which each one's samples are found by a mask (beyond: by sorting)."""

WRITER_LABELS = frozenset({"pid", "host"})
"""Labels naming the process that wrote a series. A trainer restarted from a checkpoint writes the same
series under a new pid: the old series is then superseded, not stalled."""


@dataclass(frozen=True, slots=True)
class BufferLimits:
    """How much history each series keeps (at most `max_samples`, none older than `max_age` seconds), how
    many series there may be (in all, per source, per named source), how far ahead of the arrival time
    a sample's time may be."""

    max_samples: int = 1024
    max_age: float = 6 * 3600.0
    max_series: int = 100_000
    max_series_per_source: int = 20_000
    source_max_series: Mapping[str, int] = field(default_factory=dict)
    max_future_skew: float = 300.0
    reach: int = 0
    """The most samples of a series, the judged one included, that a rule reading back by time (a spike's baseline
    of `5m`) reads: the service's `max_samples` (0: `max_samples`). A replay that widens its buffer keeps it at the
    service's, so such a window holds what the service's buffer would (`alertd.replay_chunks.plan`)."""

    def reaches(self) -> int:
        """`reach`, or `max_samples` where it is 0."""
        return self.reach or self.max_samples

    def series_limit(self, source: str) -> int:
        """How many series the source `source` may have."""
        return self.source_max_series.get(source, self.max_series_per_source)


class Series:
    """One series' samples, oldest first. Read it through `times`, `values`, `steps` from `start` on."""

    __slots__ = (
        "__weakref__",
        "base",
        "changed",
        "cuts",
        "disorder",
        "generation",
        "key",
        "memo",
        "reach",
        "seen_end",
        "slot",
        "start",
        "steps",
        "times",
        "values",
        "watch",
    )

    def __init__(self, key: SeriesKey, reach: int = 1 << 62) -> None:
        self.key = key
        self.reach = reach
        """The most samples, the judged one included, a window by time reads (`BufferLimits.reach`)."""
        self.times = array("d")
        self.values = array("d")
        self.steps = array("q")
        self.start = 0
        self.base = 0
        self.generation = 0
        self.cuts: list[tuple[int, int]] = []
        self.changed = 0
        """The buffer version of the append that last added to it (`SeriesBuffer.changed_since`)."""
        self.disorder = -1
        """The absolute position of the newest sample whose time is not at or after the time before it (-1: none):
        the times are ascending from there on, so from `base` on where it is at or before `base` (what a window by time
        found by steps from where it was needs, `rules/windows.py` `moved_start`)."""
        self.memo: dict[int, Any] | None = None
        """The windowed conditions' running state for this series (`rules/memo.py`), by condition: of the current
        generation (a cut drops it)."""
        self.watch: Any = None
        """The rules that watch this series, by rule set (the last few that looked: `rules/evaluate.py`
        `RuleSet.watch`): a cache, found with no hash of the key."""
        self.slot = -1
        """Its place in the buffer's inbox (`alertd.inbox`; -1: none, as before one is opened)."""
        self.seen_end = 0
        """Its end after the last append that added to it, while an inbox is open (where the next one's rows start)."""

    def __len__(self) -> int:
        return len(self.times) - self.start

    @property
    def end(self) -> int:
        """The absolute position after the newest sample."""
        return self.base + len(self.times) - self.start

    def earliest(self, i: int) -> int:
        """The first array index a window by time up to index `i` reads: the buffer's first, and no more than
        `reach` samples up to and including `i` (what the service's buffer holds when `i` comes alone)."""
        return max(self.start, i - self.reach + 1)

    def index(self, position: int) -> int:
        """The array index of an absolute position."""
        return self.start + position - self.base

    def last_time(self) -> float | None:
        """The time of the newest sample, if any."""
        return self.times[-1] if len(self.times) > self.start else None

    def step_at(self, i: int) -> int | None:
        """The step at array index `i`, or None."""
        s = self.steps[i]
        return None if s == NO_STEP else s

    def first_new(self, generation: int, position: int) -> int:
        """The absolute position of the first sample a reader at (generation, position) has not seen."""
        if generation != self.generation:
            for gen, cut in self.cuts:
                if gen > generation:
                    position = min(position, cut)
            if self.cuts and self.cuts[0][0] > generation + 1:
                position = min(position, self.base)
        return max(position, self.base)

    def append(self, time: float, step: int | None, value: float) -> Restart | None:
        """Add one sample; return a Restart if its step went backwards."""
        restart = None
        s = NO_STEP if step is None else step
        if s != NO_STEP and len(self.steps) > self.start and s < self.steps[-1] != NO_STEP:
            restart = self._cut(time, s)
        if len(self.times) and not time >= self.times[-1]:  # back in time (or not a number)
            self.disorder = self.end
        self.times.append(time)
        self.values.append(value)
        self.steps.append(s)
        return restart

    def note_order(self, times: Any) -> None:
        """Before `times` (a float64 numpy array) are added at the end: note where they go back in time (`disorder`)."""
        back = np.flatnonzero(~(times[1:] >= times[:-1]))
        if len(back):
            self.disorder = self.end + int(back[-1]) + 1
        elif len(self.times) and len(times) and not times[0] >= self.times[-1]:
            self.disorder = self.end

    def _cut(self, time: float, step: int) -> Restart:
        last = self.steps[-1]
        i = bisect_left(self.steps, step, lo=self.start)
        dropped = len(self.steps) - i
        del self.times[i:], self.values[i:], self.steps[i:]
        self.generation += 1
        self.memo = None  # the windows' running state was of the samples cut
        self.cuts.append((self.generation, self.base + i - self.start))
        del self.cuts[:-16]
        return Restart(self.key, time, last, step, dropped)

    def evict(self, limits: BufferLimits, now: float) -> None:
        """Drop samples beyond the count limit and older than the age limit."""
        n = len(self.times)
        drop = max(0, n - self.start - limits.max_samples)
        horizon = now - limits.max_age
        first = self.start + drop
        if first < n and self.times[first] < horizon:
            first = max(first, bisect_left(self.times, horizon, lo=first))
            first = min(first, n - 1)  # Keep the newest sample: `absent` needs its time.
        if first > self.start:
            self.base += first - self.start
            self.start = first
        if self.start > 256 and self.start * 2 > n:
            del self.times[: self.start], self.values[: self.start], self.steps[: self.start]
            self.start = 0

    def nbytes(self) -> int:
        """Bytes held by the arrays (allocated capacity is close to this)."""
        return sum(a.buffer_info()[1] * a.itemsize for a in (self.times, self.values, self.steps))


class SeriesBuffer:
    """All series, by key. Single writer; rule evaluation only reads it."""

    def __init__(self, limits: BufferLimits | None = None) -> None:
        self.limits = limits or BufferLimits()
        self._series: dict[SeriesKey, Series] = {}
        self._finished: dict[tuple[str | None, str | None], float] = {}
        self._lineage: dict[SeriesKey, list[SeriesKey]] = {}
        self._superseded: dict[SeriesKey, float] = {}
        self._ends: dict[tuple[str | None, str | None] | SeriesKey, int] = {}
        """Runs that were marked finished and series another process took over, each with the buffer version
        that saw it, oldest first (re-inserted on change): what `ended_since` walks back."""
        self.version = 0
        self._changed: dict[SeriesKey, Series] = {}
        """Every series, least recently appended to first (re-inserted on change; its version in `Series.changed`)."""
        self._per_source: Counter[str] = Counter()
        self._counted = 0
        self.dropped: Counter[str] = Counter()
        """Samples of new series dropped at the series limits, by source."""
        self.retimed = 0
        """Samples whose own time was unusable and replaced (or, in a replay with nothing to go by, dropped)."""
        self._retime_warned: set[SeriesKey] = set()
        self.evicted: Counter[str] = Counter()
        """Idle series that gave their place to new ones at the series limits, by source."""
        self.pinned: Callable[[SeriesKey], bool] | None = None
        """Series that keep their place at the limits however idle (the service's: those with an active alert)."""
        self._victims: dict[str | None, list[SeriesKey]] = {}
        """Per source (None: any), the idle series found by the last look, the idlest last."""
        self._no_idle_until: dict[str | None, float] = {}
        """Per source (None: any), when the last look found none: the time before which none will be idle."""
        self._forgotten: dict[SeriesKey, tuple[int, int]] = {}
        """Evicted series: their generation and end position, where a series of that key goes on."""
        self._evicted_now: set[str] = set()
        self.inbox: Inbox | None = None
        """What each append brought, for a column-wise reader (`open_inbox`; None until one asks)."""

    def open_inbox(self) -> Inbox:
        """The inbox (`alertd.inbox`), opened at this version where none is: every series given a slot."""
        if self.inbox is None:
            self.inbox = Inbox(self.version)
            for series in self._series.values():
                self.inbox.take(series)
        return self.inbox

    def __len__(self) -> int:
        return len(self._series)

    def __iter__(self) -> Iterator[Series]:
        return iter(self._series.values())

    def get(self, key: SeriesKey) -> Series | None:
        """The series of `key`, or None."""
        return self._series.get(key)

    def append(
        self, samples: Iterable[Sample], now: float | None = None, columns: Columns | None = None
    ) -> list[Restart]:
        """Add samples (each series' samples in order); evict by the limits; return restarts seen.

        `now` is the arrival time (the service's clock); a replay gives none, and gives the samples' `columns`
        (`alertd.columns`: the same samples, row for row), so that a large batch is not taken apart again.
        """
        inbox = self.inbox
        if inbox is not None:
            inbox.begin(self.version, len(self._series))
        if isinstance(samples, list) and len(samples) >= _BULK_SMALL:
            done = self._append_bulk(samples, now, columns)
            if done is not None:
                return []
        restarts: list[Restart] = []
        touched: dict[SeriesKey, Series] = {}
        latest = -math.inf
        series_map = self._series
        limit = MAX_TIME if now is None else min(MAX_TIME, now + self.limits.max_future_skew)
        dropped: set[str] = set()
        if inbox is not None:  # each sample's row (`alertd.inbox`), written as it goes in
            slot_row, sample_row = inbox.slots.append, inbox.samples.append
        for sample in samples:
            key = sample.series
            series = touched.get(key)
            if series is None:
                series = series_map.get(key)
                if series is None:
                    horizon = now if now is not None else sample.time  # NaN or beyond: nothing evicted
                    series = self._new_series(key, dropped, horizon, touched)
                    if series is None:
                        continue
                    self._note_writer(key, sample.time)
                touched[key] = series
            time = sample.time
            if not -MAX_TIME < time <= limit:  # NaN fails every comparison
                fixed = self.retime(key, time, now if now is not None else series.last_time(), arrival=now is not None)
                if fixed is None:
                    continue
                time = fixed
                sample = sample._replace(time=time)
            restart = series.append(time, sample.step, sample.value)
            if inbox is not None:
                slot_row(series.slot)
                sample_row(sample)
            if restart is not None:
                restarts.append(restart)
                if inbox is not None:
                    inbox.stir(series.slot)
            latest = max(latest, sample.time)
            if key.metric == FINISHED_METRIC:
                self._note_finished(key, sample.time, sample.value)
        self._finish(touched, dropped, latest, now)
        return restarts

    def _finish(self, touched: dict[SeriesKey, Series], dropped: set[str], latest: float, now: float | None) -> None:
        """The end of an `append`: the dropped-samples series, the version, eviction, the change order."""
        series_map = self._series
        horizon = now if now is not None else latest
        counts = [(DROPPED_METRIC, source, self.dropped) for source in dropped]
        counts += [(EVICTED_METRIC, source, self.evicted) for source in self._evicted_now]
        self._evicted_now.clear()
        for metric, source, counter in counts:
            key = SeriesKey(metric, (("source", source),))
            series = touched.get(key) or series_map.get(key)
            if series is None:
                series = series_map[key] = Series(key, self.limits.reaches())
                if self.inbox is not None:
                    self.inbox.take(series)
            if math.isfinite(horizon):
                series.append(horizon, None, float(counter[source]))
                touched[key] = series
                if self.inbox is not None:
                    self.inbox.stir(series.slot)
        self.version += 1
        inbox = self.inbox
        for key, series in touched.items():
            base = series.base
            series.evict(self.limits, horizon)
            self._changed.pop(key, None)  # Re-insert: the dict stays ordered by last change.
            self._changed[key] = series
            series.changed = self.version
            if inbox is not None:
                if series.base != base and series.base >= series.seen_end:
                    inbox.stir(series.slot)  # evicted into this append's rows: the first has no sample before it
                series.seen_end = series.base + len(series.times) - series.start
        if inbox is not None:
            inbox.mark(self.version)

    def _append_bulk(self, samples: list[Sample], now: float | None, columns: Columns | None) -> bool | None:
        """`append` column-wise, where the batch allows it (see the module docstring): True when done,
        None (and nothing changed) where it must go sample by sample."""
        if columns is None and not _few_series(samples):
            return None  # many series, a few samples each: quicker sample by sample (before the columns are made)
        got = Columns.of(samples) if columns is None else columns  # as strict as Series.append: floats and ints
        if got is None or got.steps is None:
            return None  # a None step goes sample by sample
        first_seen = got.groups()[0]  # each key object by its id, in order of appearance
        if len(first_seen) * _BULK_PER_SERIES > len(samples):
            return None  # many series, a few samples each: quicker sample by sample
        times, steps, values = got.times, got.steps, got.values
        limit = MAX_TIME if now is None else min(MAX_TIME, now + self.limits.max_future_skew)
        if not bool(((times > -MAX_TIME) & (times <= limit)).all()) or bool((steps == NO_STEP).any()):
            return None
        groups: dict[SeriesKey, list[int]] = {}
        for ident, key in first_seen.items():
            groups.setdefault(key, []).append(ident)
        ids = got.ids if len(groups) > 1 else None
        picks = [None] if ids is None else _group_rows(ids, groups)
        plan = self._bulk_plan(groups, picks, steps)
        if plan is None:
            return None
        touched: dict[SeriesKey, Series] = {}
        dropped: set[str] = set()
        for key, known, rows in plan:
            t = times if rows is None else times[rows]
            v = values if rows is None else values[rows]
            series = known
            if series is None:
                series = self._new_series(key, dropped)
                assert series is not None  # the limits were checked above
                self._note_writer(key, float(t[0]))
            touched[key] = series
            if self.inbox is not None:
                self.inbox.stir(series.slot)  # many samples at once: the reader looks at them
            series.note_order(t)
            series.times.frombytes(t.tobytes())
            series.values.frombytes(v.tobytes())
            series.steps.frombytes((steps if rows is None else steps[rows]).tobytes())
            if key.metric == FINISHED_METRIC:
                for when, value in zip(t.tolist(), v.tolist(), strict=True):
                    self._note_finished(key, when, value)
        self._finish(touched, dropped, float(times.max()), now)
        return True

    def _bulk_plan(
        self, groups: dict[SeriesKey, list[int]], picks: list[Any], steps: Any
    ) -> list[tuple[SeriesKey, Series | None, Any]] | None:
        """Each series of a bulk batch with its rows, or None where the batch must go sample by sample: a step
        going back (a restart), a series limit met, two writers of one lineage new in the batch."""
        plan: list[tuple[SeriesKey, Series | None, Any]] = []
        new_lineages: set[SeriesKey] = set()
        counted = self._counted
        per_source: Counter[str] = Counter()
        for key, rows in zip(groups, picks, strict=True):
            series = self._series.get(key)
            s = steps if rows is None else steps[rows]
            if len(s) > 1 and not bool((s[1:] >= s[:-1]).all()):
                return None  # a restart inside the batch
            if series is not None:
                if len(series.steps) > series.start and series.steps[-1] != NO_STEP and s[0] < series.steps[-1]:
                    return None  # a restart at its first sample
                plan.append((key, series, rows))
                continue
            if not key.metric.startswith("alertd."):
                source = key.label("source") or ""
                if counted >= self.limits.max_series:
                    return None
                if self._per_source[source] + per_source[source] >= self.limits.series_limit(source):
                    return None
                counted += 1
                per_source[source] += 1
            lineage = _lineage(key)
            if lineage is not None:
                if lineage in new_lineages or any(k in groups for k in self._lineage.get(lineage, ())):
                    return None  # which writer took over would depend on the order within the batch
                new_lineages.add(lineage)
            plan.append((key, series, rows))
        return plan

    def _new_series(
        self,
        key: SeriesKey,
        dropped: set[str],
        horizon: float | None = None,
        busy: Mapping[SeriesKey, Series] | None = None,
    ) -> Series | None:
        """A new series; at a series limit in the place of the series idle longest at `horizon` (the arrival
        time: see the module docstring; not one of `busy`, those appended to now), or None (counted, logged
        once per source) when none is idle."""
        source = key.label("source") or ""
        if not key.metric.startswith("alertd."):
            limit = self.limits.series_limit(source)
            total = self._counted >= self.limits.max_series
            full = total or self._per_source[source] >= limit
            if full and horizon is not None and -MAX_TIME < horizon <= MAX_TIME:
                scope = source if self._per_source[source] >= limit else None
                full = not self._make_room(scope, horizon, busy or {}, limit if scope is not None else None)
            if full:
                if not self.dropped[source]:
                    why = f"{self.limits.max_series} in all" if total else f"{limit} for this source"
                    log.warning(
                        "source %s: the series limit (%s) is reached; samples of new series are dropped "
                        "(counted in /metrics as alertd_series_dropped_total and as the series %s)",
                        source,
                        why,
                        DROPPED_METRIC,
                        extra={"source": source},
                    )
                self.dropped[source] += 1
                dropped.add(source)
                return None
            self._per_source[source] += 1
            self._counted += 1
        series = self._series[key] = Series(key, self.limits.reaches())
        if self.inbox is not None:
            self.inbox.take(series)
        gone = self._forgotten.pop(key, None)
        if gone is not None:  # back after it was evicted: on from where it was, in a new generation
            series.generation = gone[0] + 1
            series.base = gone[1]
            series.cuts.append((series.generation, gone[1]))
        return series

    def _make_room(
        self, scope: str | None, horizon: float, busy: Mapping[SeriesKey, Series], limit: int | None
    ) -> bool:
        """Evict the series idle longest of source `scope` (None: of any source); False when none is idle."""
        if self._no_idle_until.get(scope, -math.inf) > horizon:
            return False
        victims = self._victims.get(scope) or []
        looked = False
        while True:
            if not victims:
                if looked:
                    return False
                victims = self._victims[scope] = self._idle_series(scope, horizon)
                looked = True
                continue
            key = victims.pop()
            series = self._series.get(key)
            if series is not None and key not in busy and self._idle(key, series, horizon):
                self._evict(key, scope, limit)
                return True

    def _idle(self, key: SeriesKey, series: Series, horizon: float) -> bool:
        last = series.last_time()
        if last is not None and last > horizon - IDLE_EVICTABLE:
            return False
        return self.pinned is None or not self.pinned(key)

    def _idle_series(self, scope: str | None, horizon: float) -> list[SeriesKey]:
        """Up to `_EVICT_SCAN` idle series of `scope`, least recently appended to last; none found: noted,
        with the time before which none will be, so the next new series do not look again before it."""
        found: list[SeriesKey] = []
        soonest = math.inf
        for key, series in self._changed.items():  # least recently appended to first
            if key.metric.startswith("alertd.") or (scope is not None and (key.label("source") or "") != scope):
                continue
            last = series.last_time()
            if last is not None and last > horizon - IDLE_EVICTABLE:
                soonest = min(soonest, last + IDLE_EVICTABLE)
            elif self.pinned is None or not self.pinned(key):
                found.append(key)
                if len(found) >= _EVICT_SCAN:
                    break
        if not found:  # (an alert that ends frees its series: look again a minute later at the latest)
            self._no_idle_until[scope] = min(soonest, horizon + IDLE_EVICTABLE)
        found.reverse()
        return found

    def _evict(self, key: SeriesKey, scope: str | None, limit: int | None) -> None:
        """Forget `key`'s series (see the module docstring); counted, logged once per source."""
        series = self._series.pop(key)
        self._changed.pop(key, None)
        if self.inbox is not None:
            self.inbox.drop(series)
        source = key.label("source") or ""
        self._per_source[source] -= 1
        self._counted -= 1
        if not self.evicted[source]:
            why = f"{limit} for this source" if limit is not None else f"{self.limits.max_series} in all"
            log.warning(
                "source %s: the series limit (%s) is reached; the series idle longest (no sample for %gs or more, "
                "no alert active) give their place to new ones (counted as the series %s)",
                source,
                why,
                IDLE_EVICTABLE,
                EVICTED_METRIC,
                extra={"source": source},
            )
        self.evicted[source] += 1
        self._evicted_now.add(source)
        self._forgotten[key] = (series.generation, series.end)
        if len(self._forgotten) > MAX_ENDS:
            del self._forgotten[next(iter(self._forgotten))]
        lineage = _lineage(key)
        if lineage is not None and key in self._lineage.get(lineage, ()):
            self._lineage[lineage].remove(key)
            if not self._lineage[lineage]:
                del self._lineage[lineage]
        self._superseded.pop(key, None)
        self._ends.pop(key, None)
        self._retime_warned.discard(key)

    def fix_times(self, samples: list[Sample], now: float) -> list[Sample]:
        """The samples with each unusable time replaced by the arrival time `now` (see the module
        docstring), for what reads them before `append` (the run tracker)."""
        limit = min(MAX_TIME, now + self.limits.max_future_skew)
        if all(-MAX_TIME < s.time <= limit for s in samples):
            return samples
        out = []
        for s in samples:
            if not -MAX_TIME < s.time <= limit:
                self.retime(s.series, s.time, now, arrival=True)
                s = s._replace(time=now)
            out.append(s)
        return out

    def retime(self, key: SeriesKey, time: float, new: float | None, *, arrival: bool) -> float | None:
        """Count and log (once per series) a sample time replaced by `new` (None: the sample is dropped)."""
        self.retimed += 1
        if key not in self._retime_warned and len(self._retime_warned) < _WARNED_MAX:
            self._retime_warned.add(key)
            where = "at its arrival time" if arrival else "at its previous sample's time"
            log.warning(
                "series %s: sample time %r is unusable (not finite, after 9999, or more than buffer."
                "max_future_skew ahead of the clock); %s",
                key,
                time,
                f"kept {where}" if new is not None else "dropped (no time to go by)",
            )
        return new

    def series_by_source(self) -> dict[str, int]:
        """How many series each source has (alertd's own not counted)."""
        return {s: n for s, n in self._per_source.items() if n}

    def _note_finished(self, key: SeriesKey, time: float, value: float) -> None:
        """`run.finished` = 1: the run ended (its earliest end in this episode counts); = 0 at or after that
        end: it runs again (a relaunch, a resume), so its end no longer holds."""
        run = (key.label("source"), key.label("run"))
        done = self._finished.get(run)
        if value == 1.0:
            if done is None or time < done:
                self._finished[run] = time
                self._ended_now(run)
        elif value == 0.0 and done is not None and time >= done:
            del self._finished[run]

    def _ended_now(self, what: tuple[str | None, str | None] | SeriesKey) -> None:
        self._ends.pop(what, None)
        self._ends[what] = self.version + 1  # the version the append under way will have
        if len(self._ends) > MAX_ENDS:
            del self._ends[next(iter(self._ends))]

    def ended_since(self, version: int) -> tuple[set[tuple[str | None, str | None]], set[SeriesKey]]:
        """The runs marked finished (as (source, run) pairs), and the series taken over by another process,
        after buffer version `version`. The cost follows their number, not the buffer's."""
        runs: set[tuple[str | None, str | None]] = set()
        series: set[SeriesKey] = set()
        for what in reversed(self._ends):
            if self._ends[what] <= version:
                break
            if isinstance(what, SeriesKey):
                series.add(what)
            else:
                runs.add(what)
        return runs, series

    def _note_writer(self, key: SeriesKey, time: float) -> None:
        lineage = _lineage(key)
        if lineage is None:
            return
        for older in self._lineage.setdefault(lineage, []):
            last = self._series[older].last_time()
            if last is not None and last < time and older not in self._superseded:
                self._superseded[older] = time
                self._ended_now(older)
        self._lineage[lineage].append(key)

    def any_run_finished(self) -> bool:
        """Whether some run was marked finished (else `run_finished_at` is None for every series)."""
        return bool(self._finished)

    def run_finished_at(self, key: SeriesKey) -> float | None:
        """When the series' run was marked finished (same source and run labels), if it was."""
        if not self._finished:  # the usual case, asked for every pair an evaluation steps: no label look-ups
            return None
        return self._finished.get((key.label("source"), key.label("run")))

    def finished_at(self, key: SeriesKey) -> float | None:
        """When the series stopped for a known reason: its run was marked finished (same source and run
        labels), or another process took over writing it (same labels but `pid`/`host`)."""
        if not self._finished and not self._superseded:
            return None
        done = self._finished.get((key.label("source"), key.label("run")))
        superseded = self._superseded.get(key)
        if done is None or superseded is None:
            return done if superseded is None else superseded
        return min(done, superseded)

    def changed_since(self, version: int) -> list[Series]:
        """The series appended to after buffer version `version`, most recently changed first."""
        out = []
        for series in reversed(self._changed.values()):  # no look-up of each key: no hash
            if series.changed <= version:
                break
            out.append(series)
        return out

    def evict_all(self, now: float) -> None:
        """Apply the age limit to every series (call now and then: idle series age out too)."""
        inbox = self.inbox
        for series in self._series.values():
            base = series.base
            series.evict(self.limits, now)
            if inbox is not None and series.base != base:
                inbox.stir(series.slot)  # (read at once, and with the next append's rows: `alertd.inbox`)

    def sample_count(self) -> int:
        """The number of buffered samples."""
        return sum(len(s) for s in self._series.values())

    def nbytes(self) -> int:
        """Bytes held by the sample arrays."""
        return sum(s.nbytes() for s in self._series.values())


def _few_series(samples: list[Sample]) -> bool:
    """Whether a batch may have `_BULK_PER_SERIES` samples a series or more (its key objects counted: those of its
    head first, which settle a file's few long series at once; the exact count comes from the columns' groups)."""
    head = samples[:_BULK_PROBE]
    if len({id(s.series) for s in head}) * _BULK_PER_SERIES <= len(head):
        return True
    return len({id(s.series) for s in samples}) * _BULK_PER_SERIES <= len(samples)


def _lineage(key: SeriesKey) -> SeriesKey | None:
    """The series `key` with its writer labels left out; None when it has none."""
    if not any(k in WRITER_LABELS for k, _ in key.labels):
        return None
    return SeriesKey(key.metric, tuple(kv for kv in key.labels if kv[0] not in WRITER_LABELS))


def _group_rows(ids: np.ndarray, groups: dict[SeriesKey, list[int]]) -> list[Any]:
    """For each group of key object ids, the indices of the rows whose id is one of them, in order."""
    if len(groups) <= _BULK_MASKS:
        out = []
        for members in groups.values():
            mask = ids == np.uint64(members[0])
            for other in members[1:]:
                mask |= ids == np.uint64(other)
            out.append(np.flatnonzero(mask))
        return out
    group_of = {ident: g for g, members in enumerate(groups.values()) for ident in members}
    uniq, inverse = np.unique(ids, return_inverse=True)
    labels = np.fromiter((group_of[int(u)] for u in uniq), np.int64, len(uniq))[inverse]
    order = np.argsort(labels, kind="stable")
    bounds = np.cumsum(np.bincount(labels, minlength=len(groups)))
    return np.split(order, bounds[:-1])
