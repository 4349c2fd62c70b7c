"""Parked pairs: the quiet and steady (rule, series) pairs of the service's chain of evaluations, judged column-wise.

The service's tick steps every pair whose series has a new sample, and most change nothing but the note of it: quiet
(their alert inactive, their condition false) or steadily firing (the condition holding). Such a pair, once a tick
has stepped it so (`_Run.quiet_ticks`, or `_Run.track` leaving it steady with no time-based change due), is parked:
its track is left as it is, and each tick judges each rule's parked pairs at once on the buffer's inbox
(`alertd.inbox`: each append's rows, a series slot and the sample), with numpy (`column_judge` says how):
- a threshold, `nonfinite`, `increasing`/`decreasing`: the condition on the new value (and the one before), the
  streak towards `consecutive`; quiet or steadily firing (`ValueColumn`);
- a spike over a median, a min, max, quantile or avg window compared with a number: a bound of the values its window
  can hold keeps the condition false, as the condition's own `_settled_still` settles one sample; quiet only
  (`SpikeColumn`, `WindowColumn`);
- an absence: its timer, moved on by each sample; quiet only (`AbsentColumn`).
A series' several rows since the last tick are judged in their order (`_levels`). A pair that stops being quiet or
steady at a row (or can't be told so), whose series is stirred (a restart, many samples appended at once, an eviction
down to one sample, the series forgotten), whose timer falls due or whose run ends is handed back (`_unpark`) as the
sample before left it, and the tick steps it through the rest as any other. A series whose pairs
are all parked (or that no rule watches) is not visited at all: the tick's cost follows the pairs that can change.

A parked track is settled for any reader: the parking keeps, by slot, the last sample its pairs saw and the series'
end after it and, by rule and slot, the streak or the timer; `ParkedTracks` and `ParkedTimers`, the state's tracks
and timers while pairs are parked, write them on a track as it is read (`settle`), so every reader but the
evaluation sees what a chain that steps every pair (`evaluate`'s `park=False`) would have. What a save must write
(`take_changed`) is the parked pairs whose series had rows since the last save, beside the pairs the evaluations
wrote (`EvalState.written`).

A parking belongs to one chain (`evaluate`'s `in_place`, under one `RuleSet`, at the buffer version it saw last):
anything else (another rule set, a version it did not see, an inbox that dropped rows before it read them) releases
it, every parked track settled and handed back first, with its timer.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, KeysView, Mapping
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from alertd._np import np
from alertd.buffer import NO_STEP, Series
from alertd.inbox import Inbox, Rows
from alertd.model import AlertState, Sample, SeriesKey
from alertd.rules.compare import OPS
from alertd.rules.conditions import HALF_MAX, Absent, Nonfinite, Spike, Threshold, Trend, WindowAggregate
from alertd.rules.rule import Rule
from alertd.rules.state import Track

if TYPE_CHECKING:
    from alertd.rules.evaluate import RuleSet

PairKey = tuple[str, SeriesKey]
Ended = tuple[set[tuple[str | None, str | None]], set[SeriesKey]]
"""The runs that ended and the series taken over (`SeriesBuffer.ended_since`)."""
Judge = Callable[[Any, Any], Any]
"""(the new values, the values before them) -> where the condition holds (numpy arrays)."""
Kind = Judge | Spike | WindowAggregate | Absent
"""How a rule's pairs are judged parked (`column_judge`)."""


def column_judge(rule: Rule) -> Kind | None:
    """How the rule's pairs are judged parked: a threshold, `nonfinite` and a trend by a `Judge` that gives the
    answers of the condition's `check` on a series' newest sample (the sample before it in the buffer); a spike over
    a median and a window settled by its extremes by the condition itself (`BoundColumn`); an absence by its timer;
    None where the rule is never parked (any other window, a zscore, a plateau, an `expr` or `peers` rule)."""
    if rule.expr is not None or rule.peers is not None:
        return None
    if rule.absent is not None:
        return rule.absent
    cond = rule.condition
    if isinstance(cond, Threshold):
        op, value = OPS[cond.op], cond.value
        return lambda v, _: (v == v) & op(v, value)
    if isinstance(cond, Nonfinite):
        return lambda v, _: ~np.isfinite(v)
    if isinstance(cond, Trend):
        delta = cond.min_delta
        if cond.direction == "increasing":
            return lambda v, before: np.isfinite(v) & np.isfinite(before) & (v - before > delta)
        return lambda v, before: np.isfinite(v) & np.isfinite(before) & (before - v > delta)
    if isinstance(cond, Spike) and cond.stat == "median":
        return cond
    if isinstance(cond, WindowAggregate) and (cond._settles is not None or _ratio_settles(cond)):
        return cond
    return None


def _ratio_settles(window: WindowAggregate) -> bool:
    """Whether a window compared with its baseline is settled by extremes (`RatioColumn`)."""
    return (
        window.baseline is not None
        and window.ratio is not None
        and window.kind in ("avg", "min", "max", "quantile")
        and window.op in (">", ">=", "<", "<=")
        and window.over.samples is not None
        and window.baseline.samples is not None
    )


class Column:
    """One rule's parked pairs, by slot."""

    __slots__ = ("count", "owner", "parked", "pending", "rule", "tracks")

    def __init__(self, owner: Parking, rule: Rule, size: int) -> None:
        self.owner = owner
        self.rule = rule
        self.parked = np.zeros(size, bool)
        self.tracks: dict[int, tuple[PairKey, Track]] = {}
        self.count = 0
        self.pending: list[tuple[int, PairKey, Track, Any, int]] = []
        """The pairs parked by this evaluation, their state written at its end (`Parking.flush`): (slot, pair, track,
        the column's number for it (`prepare`), the pairs a tick steps on its series)."""

    def grow(self, size: int) -> None:
        self.parked = _grown(self.parked, size)

    def prepare(self, tr: Track, series: Series) -> Any:
        """What the column keeps of a pair to park (its track `tr`, just stepped to the series' newest sample): a
        number or numbers (`store`), or None where it can't be parked."""
        raise NotImplementedError

    def store(self, slots: Any, numbers: list[Any], trs: list[Track]) -> None:
        """Keep the numbers `prepare` gave for the pairs parked at `slots` (their tracks `trs`)."""
        raise NotImplementedError

    def judge(self, at: Any, values: Any, before: Any, samples: Any, now: float) -> Any:
        """For rows of parked pairs, one a slot (their slots `at`, new values, the values before, the samples) at `now`:
        where a pair must be handed back; the others' state moved on."""
        raise NotImplementedError

    def streak(self, slot: int) -> int:
        return 0

    def steady(self, tr: Track, due: float | None, finished: float | None) -> bool:
        """Whether a pair `_Run.track` just stepped may be parked (`_Run._park_stepped`), its timer `due` (if any) and
        when its run ended (`finished`, asked where it has a timer or fires): with no time-based change to come, and,
        firing, its run not ended (a sample from before the end resolves it, as `_Run.quiet_ticks` sees); `prepare`
        tells the rest."""
        return due is None and (finished is None or tr.state is not AlertState.FIRING)

    def unparked(self, slot: int, pair: PairKey) -> None:
        """`pair`, parked at `slot`, is handed back."""

    def ended(self, ended: Ended) -> None:
        """Hand back the pairs an end of their run (or a series taken over) changes."""

    def _hand_back_ended(self, slots: Iterable[int], ended: Ended) -> None:
        runs, taken = ended
        for slot in slots:
            key = self.tracks[slot][0][1]
            if key in taken or (key.label("source"), key.label("run")) in runs:
                self.owner._unpark(self, slot)


class ValueColumn(Column):
    """A threshold, `nonfinite` or trend: the condition judged on each new value (and the one before), and the
    streak counted towards `consecutive`. A quiet pair is handed back where its streak reaches it; a steadily firing
    one (`firing`: its condition holding, no `keep_firing_for` running) where its condition stops holding."""

    __slots__ = ("firing", "need", "streaks", "test")

    def __init__(self, owner: Parking, rule: Rule, test: Judge, size: int) -> None:
        super().__init__(owner, rule, size)
        self.test = test
        self.need = rule.consecutive
        self.streaks = np.zeros(size, np.int64)
        self.firing = np.zeros(size, bool)

    def grow(self, size: int) -> None:
        super().grow(size)
        self.streaks = _grown(self.streaks, size)
        self.firing = _grown(self.firing, size)

    def prepare(self, tr: Track, series: Series) -> float | None:
        return 0.0

    def store(self, slots: Any, numbers: list[float], trs: list[Track]) -> None:
        self.streaks[slots] = [tr.streak for tr in trs]
        self.firing[slots] = [tr.state is AlertState.FIRING for tr in trs]

    def judge(self, at: Any, values: Any, before: Any, samples: Any, now: float) -> Any:
        holds = self.test(values, before)
        streak = np.where(holds, self.streaks[at] + 1, 0)
        out = np.where(self.firing[at], ~holds, streak >= self.need)
        stay = ~out
        self.streaks[at[stay]] = streak[stay]
        return out

    def ended(self, ended: Ended) -> None:
        """The firing pairs: their run's end resolves them."""
        if self.count:
            self._hand_back_ended(np.flatnonzero(self.parked & self.firing).tolist(), ended)

    def streak(self, slot: int) -> int:
        return int(self.streaks[slot])


class BoundColumn(Column):
    """A condition settled by the extremes of a window: a new value can't make it hold while a bound of every value the
    window can hold keeps it false (`low`: the least value, else the greatest; `sure`), as the condition's own
    `_settled_still` settles one sample; anything else is handed back, judged exactly. The bound, found at parking
    over the window of the newest sample (which holds every older value a later window can: a window by samples moves
    on, one by time too while the times ascend, which a row going back in time breaks), takes in each new value."""

    __slots__ = ("bound", "low", "samples", "seconds")

    def __init__(self, owner: Parking, rule: Rule, size: int, span: tuple[int | None, float | None], low: bool) -> None:
        super().__init__(owner, rule, size)
        self.samples, self.seconds = span
        self.low = low
        self.bound = np.zeros(size)

    def grow(self, size: int) -> None:
        super().grow(size)
        self.bound = _grown(self.bound, size)

    def prepare(self, tr: Track, series: Series) -> float | None:
        i = len(series.times) - 1
        if tr.streak or tr.state is not AlertState.INACTIVE or i < series.start:
            return None
        if self.seconds is not None:
            lo = bisect_left(series.times, series.times[i] - self.seconds, series.start, i)
            if series.disorder > series.base + lo - series.start:  # times not ascending from the window's start
                return None
        else:
            lo = max(series.start, i - (self.samples or 0))
        window = np.frombuffer(series.values[lo : i + 1], np.float64)  # (a copy's view)
        window = window[np.isfinite(window)]
        if not len(window):
            return None
        return float(window.min() if self.low else window.max())

    def store(self, slots: Any, numbers: list[float], trs: list[Track]) -> None:
        self.bound[slots] = numbers

    def sure(self, values: Any, bound: Any, finite: Any) -> Any:
        """Where each new value (`finite` or not) leaves the condition false, whatever the window's other values
        within `bound`."""
        raise NotImplementedError

    def judge(self, at: Any, values: Any, before: Any, samples: Any, now: float) -> Any:
        finite = np.isfinite(values)
        sure = self.sure(values, self.bound[at], finite)
        if self.seconds is not None:  # a row back in time: the window's start may go back
            times = np.fromiter(map(_time, samples), np.float64, len(samples))
            last = np.fromiter(map(_time, self.owner.last[at]), np.float64, len(at))
            sure &= times >= last
        out = ~sure
        stay = ~out & finite
        moved = values[stay]
        kept = self.bound[at[stay]]
        self.bound[at[stay]] = np.minimum(kept, moved) if self.low else np.maximum(kept, moved)
        return out


class SpikeColumn(BoundColumn):
    """A spike over a median (`Spike._settled_still`): up, no spike below `ratio` times the least value of its
    baseline; down, none above `ratio` times the greatest."""

    __slots__ = ("ratio",)

    def __init__(self, owner: Parking, rule: Rule, spike: Spike, size: int) -> None:
        super().__init__(owner, rule, size, (spike.samples, spike.seconds), spike.direction == "up")
        self.ratio = spike.ratio

    def sure(self, values: Any, bound: Any, finite: Any) -> Any:
        if self.low:
            sure = (values >= 0) & (bound > 0) & (bound < np.inf) & (values / bound < self.ratio)
        else:
            sure = (values > 0) & (bound > 0) & (bound < HALF_MAX) & (values / bound > self.ratio)
        return sure | ~finite  # a non-finite latest value is no spike


class WindowColumn(BoundColumn):
    """A min, max, quantile or avg of a window (its judged value in it) compared `>`, `>=`, `<`, `<=` with a number
    (`WindowAggregate._settled_still`): false where the window's greatest value (least, for `<`, `<=`), with the same
    margin, is not past it."""

    __slots__ = ("value",)

    def __init__(self, owner: Parking, rule: Rule, window: WindowAggregate, size: int) -> None:
        assert window._settles is not None
        above, self.value = window._settles
        super().__init__(owner, rule, size, (window.over.samples, window.over.seconds), not above)

    def sure(self, values: Any, bound: Any, finite: Any) -> Any:
        finite_values = np.where(finite, values, bound)  # the judged value is in the window, if finite
        bound = np.minimum(bound, finite_values) if self.low else np.maximum(bound, finite_values)
        if self.low:
            return bound - np.abs(bound) * 1e-12 > self.value
        return bound + np.abs(bound) * 1e-12 < self.value


class RatioColumn(Column):
    """A min, max, quantile or avg of a window compared with the same over the window before it (`baseline`), both by
    samples: `>` or `>=` a ratio is false where the greatest value the recent window can hold, over the least the
    baseline can (positive), is short of it, with a margin; `<` or `<=`, where the least recent over the greatest
    baseline is past it. Each bound, found at parking over the newest sample's window (and its baseline), takes in
    each new value, as `BoundColumn`'s."""

    __slots__ = ("above", "base", "base_samples", "ratio", "recent", "samples")

    def __init__(self, owner: Parking, rule: Rule, window: WindowAggregate, size: int) -> None:
        super().__init__(owner, rule, size)
        assert window.baseline is not None and window.ratio is not None
        self.above = window.op in (">", ">=")
        self.ratio = float(window.ratio)
        self.samples, self.base_samples = window.over.samples or 0, window.baseline.samples or 0
        self.recent = np.zeros(size)
        self.base = np.zeros(size)

    def grow(self, size: int) -> None:
        super().grow(size)
        self.recent = _grown(self.recent, size)
        self.base = _grown(self.base, size)

    def prepare(self, tr: Track, series: Series) -> Any:
        i = len(series.times) - 1
        if tr.streak or tr.state is not AlertState.INACTIVE or i < series.start:
            return None
        values = np.frombuffer(series.values[max(series.start, i - self.samples - self.base_samples) : i + 1])
        recent = values[-self.samples - 1 :]
        values, recent = values[np.isfinite(values)], recent[np.isfinite(recent)]
        if not len(recent):
            return None
        if self.above:
            return float(recent.max()), float(values.min())
        return float(recent.min()), float(values.max())

    def store(self, slots: Any, numbers: list[Any], trs: list[Track]) -> None:
        self.recent[slots] = [n[0] for n in numbers]
        self.base[slots] = [n[1] for n in numbers]

    def judge(self, at: Any, values: Any, before: Any, samples: Any, now: float) -> Any:
        finite = np.isfinite(values)
        moved = np.where(finite, values, np.nan)
        high, low = (np.fmax, np.fmin) if self.above else (np.fmin, np.fmax)
        recent, base = high(self.recent[at], moved), low(self.base[at], moved)  # (fmax, fmin: NaN left out)
        if self.above:
            sure = (base > 0) & (recent * (1 + 1e-12) < self.ratio * base * (1 - 1e-12))
        else:
            sure = (recent > 0) & (base > 0) & (recent * (1 - 1e-12) > self.ratio * base * (1 + 1e-12))
        out = ~sure
        stay = ~out
        self.recent[at[stay]] = recent[stay]
        self.base[at[stay]] = base[stay]
        return out


class AbsentColumn(Column):
    """An absence: a parked pair's timer (`EvalState.timers`) is kept here, by slot (`dues`), and moved on by each new
    sample as `_Run.quiet_ticks` moves a quiet one's, while the absence it timed is not due before the sample. A timer
    that falls due by the tick's `now` (`due`), a run that ends or a series taken over (`ended`) hand the pair back,
    with its timer (`Parking.restore`): the evaluation's timers then run the absence as any other's."""

    __slots__ = ("dues", "seconds")

    def __init__(self, owner: Parking, rule: Rule, absent: Absent, size: int) -> None:
        super().__init__(owner, rule, size)
        self.seconds = absent.seconds
        self.dues = np.zeros(size)

    def grow(self, size: int) -> None:
        super().grow(size)
        self.dues = _grown(self.dues, size)

    def prepare(self, tr: Track, series: Series) -> float | None:
        if tr.last_time is None or tr.state is not AlertState.INACTIVE:
            return None
        return tr.last_time + self.seconds

    def store(self, slots: Any, numbers: list[float], trs: list[Track]) -> None:
        self.dues[slots] = numbers

    def judge(self, at: Any, values: Any, before: Any, samples: Any, now: float) -> Any:
        times = np.fromiter(map(_time, samples), np.float64, len(samples))
        out = self.dues[at] < times  # (one due by `now` is handed back after the rows: `due`)
        stay = ~out
        self.dues[at[stay]] = times[stay] + self.seconds
        return out

    def unparked(self, slot: int, pair: PairKey) -> None:
        self.owner.restore.append((pair, float(self.dues[slot])))

    def steady(self, tr: Track, due: float | None, finished: float | None) -> bool:
        """Quiet, its timer (the absence its last sample times, as `_Run._absence_timed`) due, its run going on."""
        return tr.state is AlertState.INACTIVE and due is not None and finished is None

    def due(self, now: float) -> None:
        """Hand back the pairs whose timer is due by `now`."""
        if self.count:
            for slot in np.flatnonzero(self.parked & (self.dues <= now)).tolist():
                self.owner._unpark(self, slot)

    def ended(self, ended: Ended) -> None:
        """Every pair: an absence stops at its run's end."""
        self._hand_back_ended(list(self.tracks), ended)


def _levels(slots: Any) -> list[Any]:
    """The rows in levels, each a slot's row at most, in their order: every slot's first row, then every second..."""
    n = len(slots)
    if n == len(np.unique(slots)):
        return [np.arange(n)]
    order = np.argsort(slots, kind="stable")
    ranked = slots[order]
    rank = np.empty(n, np.int64)
    rank[order] = np.arange(n) - np.searchsorted(ranked, ranked, side="left")
    return [np.flatnonzero(rank == r) for r in range(int(rank.max()) + 1)]


_time = itemgetter(1)
"""A `Sample`'s time."""


def _grown(a: Any, size: int) -> Any:
    out = np.zeros(size, a.dtype)
    out[: len(a)] = a
    return out


class Parking:
    """The parked pairs of one chain of evaluations (see the module docstring)."""

    __slots__ = ("absences", "changed", "cols", "end", "inbox", "last", "nparked", "pairs", "restore", "ruleset",
                 "settled", "size", "value", "version")  # fmt: skip

    def __init__(self, ruleset: RuleSet, inbox: Inbox) -> None:
        self.ruleset = ruleset
        self.inbox = inbox
        self.version = -1
        """The buffer version the chain last saw (`evaluate` sets it)."""
        self.size = size = max(64, len(inbox.series))
        self.cols: list[Column] = [_column(self, rule, kind, size) for rule, kind in ruleset.columns]
        self.absences = [col for col in self.cols if isinstance(col, AbsentColumn)]
        self.restore: list[tuple[PairKey, float]] = []
        """The timers of the pairs handed back (`AbsentColumn`), for the evaluation's timers."""
        # the last sample the parked pairs of each slot saw (its value apart, for the trends), the series' end after it
        self.last = np.zeros(size, object)
        self.value = np.zeros(size)
        self.end = np.zeros(size, np.int64)
        self.nparked = np.zeros(size, np.int64)
        """The parked pairs of each slot."""
        self.pairs = np.zeros(size, np.int64)
        """The pairs a tick steps on each slot's series (-1: some are never parked), as the last to park said."""
        self.settled = np.zeros(size, bool)
        """The slots whose pairs are all parked (or that no rule watches): not visited."""
        self.changed = np.zeros(size, bool)
        """The slots with rows since the last save (`take_changed`)."""

    def _grow(self) -> None:
        size = self.size
        while size < len(self.inbox.series):
            size *= 2
        if size == self.size:
            return
        self.size = size
        for name in ("last", "value", "end", "nparked", "pairs", "settled", "changed"):
            setattr(self, name, _grown(getattr(self, name), size))
        for col in self.cols:
            col.grow(size)

    def tick(self, rows: Rows, now: float, ended: Ended) -> list[Series]:
        """Judge the parked pairs on the rows since the last tick at `now`; hand back those that stop being quiet, whose
        series is stirred, whose timer is due or whose run `ended`; the series the tick must still visit (each
        once)."""
        self.flush()  # (where an evaluation stopped before its end)
        self._grow()
        if ended[0] or ended[1]:
            for col in self.cols:
                col.ended(ended)
        visit = self._rows(rows, now)
        for col in self.absences:
            col.due(now)
        return visit

    def _rows(self, rows: Rows, now: float) -> list[Series]:
        slots, stirred = rows.slots, rows.stirred
        if len(stirred):
            for col in self.cols:  # each pair on a stirred slot handed back, whether or not it has rows
                if col.count:
                    for slot in dict.fromkeys(stirred[col.parked[stirred]].tolist()):
                        self._unpark(col, slot)
            self.settled[stirred] = False  # (a slot with no rule too: it may be another series' now)
        if not len(slots):
            return []
        with np.errstate(all="ignore"):
            for level in _levels(slots):
                self._level(rows, level, now)
        visit = np.unique(slots[~self.settled[slots]])
        series = self.inbox.series
        return [s for slot in visit.tolist() if (s := series[slot]) is not None]

    def _level(self, rows: Rows, level: Any, now: float) -> None:
        """Judge the rows at `level` (indices of rows, one at most a slot: each slot's first, then second, ...)."""
        slots = rows.slots[level]
        values, samples = rows.values[level], rows.samples[level]
        for col in self.cols:
            if not col.count:
                continue
            mine = np.flatnonzero(col.parked[slots])
            if not len(mine):
                continue
            at = slots[mine]
            out = col.judge(at, values[mine], self.value[at], samples[mine], now)
            for slot in at[out].tolist():
                self._unpark(col, slot)
        self.value[slots] = values
        self.last[slots] = samples
        self.end[slots] += 1
        self.changed[slots] = True

    def park(self, col: int, series: Series, pair: PairKey, tr: Track, pairs: int) -> bool:
        """Park `pair`, quiet after its step to the series' newest sample; `pairs`: the pairs a tick steps on the
        series (-1: some are never parked). Whether it is parked (its timer, if any, is then the parking's)."""
        slot = series.slot
        if slot < 0 or slot >= self.size or self.inbox.series[slot] is not series:
            return False
        column = self.cols[col]
        number = column.prepare(tr, series)
        if number is None:
            return False
        column.pending.append((slot, pair, tr, number, pairs))
        tr.park, tr.slot = column, slot
        return True

    def flush(self) -> None:
        """Write down the pairs parked by this evaluation (`park`), all at once."""
        touched = []
        for column in self.cols:
            pending = column.pending
            if not pending:
                continue
            column.pending = []
            slots = np.fromiter((p[0] for p in pending), np.int64, len(pending))
            trs = [p[2] for p in pending]
            column.parked[slots] = True
            column.tracks.update((p[0], (p[1], p[2])) for p in pending)
            column.count += len(pending)
            column.store(slots, [p[3] for p in pending], trs)
            self.value[slots] = [tr.value for tr in trs]
            self.last[slots] = [Sample(p[1][1], tr.time, tr.step, tr.value) for p, tr in zip(pending, trs, strict=True)]
            self.end[slots] = [tr.position for tr in trs]
            self.nparked[slots] += 1
            self.pairs[slots] = [p[4] for p in pending]
            touched.append(slots)
        if touched:
            at = np.concatenate(touched) if len(touched) > 1 else touched[0]
            self.settled[at] = self.nparked[at] == self.pairs[at]

    def idle(self, series: Series) -> None:
        """`series` has no rule: not visited again."""
        slot = series.slot
        if 0 <= slot < self.size and self.inbox.series[slot] is series:
            self.settled[slot] = True

    def _unpark(self, col: Column, slot: int) -> None:
        pair, tr = col.tracks.pop(slot)
        col.unparked(slot, pair)
        self._settle(col, slot, tr)
        tr.park = None
        col.parked[slot] = False
        col.count -= 1
        self.nparked[slot] -= 1
        self.settled[slot] = False

    def _settle(self, col: Column, slot: int, tr: Track) -> None:
        end = int(self.end[slot])
        if tr.position == end:
            return  # nothing noted since it was parked (or settled): it stands as it is
        last = self.last[slot]
        tr.value = float(last.value)
        step = last.step
        tr.step = None if step is None or step == NO_STEP else int(step)
        tr.time = tr.last_time = tr.clock = float(last.time)
        tr.position = end
        tr.streak = col.streak(slot)

    def settle(self, tr: Track) -> None:
        """Write on a parked track the last sample its pair saw (a reader's view: it stays parked)."""
        col = tr.park
        if col is not None and col.owner is self:
            self._settle(col, tr.slot, tr)

    def settle_all(self) -> None:
        """`settle` every parked track."""
        for col in self.cols:
            for slot, (_, tr) in col.tracks.items():
                self._settle(col, slot, tr)

    def release(self) -> list[tuple[PairKey, float]]:
        """Hand every parked pair back, settled: the chain goes on without this parking; their timers."""
        for col in self.cols:
            for slot, (pair, tr) in col.tracks.items():
                col.unparked(slot, pair)
                self._settle(col, slot, tr)
                tr.park = None
            col.tracks.clear()
            col.parked[:] = False
            col.count = 0
        self.nparked[:] = 0
        self.settled[:] = False
        restore, self.restore = self.restore, []
        return restore

    def timers(self) -> Iterator[tuple[PairKey, float]]:
        """The parked pairs' timers."""
        for col in self.absences:
            for slot, (pair, _) in col.tracks.items():
                yield pair, float(col.dues[slot])

    def take_changed(self) -> set[PairKey]:
        """The parked pairs whose series had rows since the last call (a save writes them)."""
        out: set[PairKey] = set()
        changed = self.changed
        for col in self.cols:
            if col.count:
                for slot in np.flatnonzero(changed & col.parked).tolist():
                    out.add(col.tracks[slot][0])
        changed[:] = False
        return out


class ParkedTracks(Mapping[PairKey, Track]):
    """The tracks of a state with parked pairs: each track read is settled first (`Parking.settle`)."""

    __slots__ = ("parking", "raw")

    def __init__(self, raw: dict[PairKey, Track], parking: Parking) -> None:
        self.raw = raw
        self.parking = parking

    def __getitem__(self, pair: PairKey) -> Track:
        tr = self.raw[pair]
        if tr.park is not None:
            self.parking.settle(tr)
        return tr

    def get(self, pair: PairKey, default: Any = None) -> Any:
        tr = self.raw.get(pair)
        if tr is None:
            return default
        if tr.park is not None:
            self.parking.settle(tr)
        return tr

    def __contains__(self, pair: object) -> bool:
        return pair in self.raw

    def __iter__(self) -> Iterator[PairKey]:
        return iter(self.raw)

    def __len__(self) -> int:
        return len(self.raw)

    def keys(self) -> KeysView[PairKey]:
        return self.raw.keys()

    def items(self) -> Any:
        self.parking.settle_all()
        return self.raw.items()

    def values(self) -> Any:
        self.parking.settle_all()
        return self.raw.values()


class ParkedTimers(Mapping[PairKey, float]):
    """The timers of a state with parked absences: the evaluation's (`raw`) and the parked pairs' (none of which has
    one in `raw`), each found by its track (`tracks`, the state's, as they are) in a look-up."""

    __slots__ = ("parking", "raw", "tracks")

    def __init__(self, raw: dict[PairKey, float], parking: Parking, tracks: Mapping[PairKey, Track]) -> None:
        self.raw = raw
        self.parking = parking
        self.tracks = tracks

    def __getitem__(self, pair: PairKey) -> float:
        due = self.raw.get(pair)
        if due is not None:
            return due
        tr = self.tracks.get(pair)
        if tr is not None and isinstance(tr.park, AbsentColumn) and tr.park.owner is self.parking:
            return float(tr.park.dues[tr.slot])
        raise KeyError(pair)

    def __iter__(self) -> Iterator[PairKey]:
        yield from self.raw
        for pair, _ in self.parking.timers():
            yield pair

    def __len__(self) -> int:
        return len(self.raw) + sum(col.count for col in self.parking.absences)


def raw_timers(timers: Mapping[PairKey, float]) -> Mapping[PairKey, float]:
    """The evaluation's timers, the parked pairs' left out (the chain's own evaluation)."""
    return timers.raw if type(timers) is ParkedTimers else timers


def _column(owner: Parking, rule: Rule, kind: Kind, size: int) -> Column:
    if isinstance(kind, Spike):
        return SpikeColumn(owner, rule, kind, size)
    if isinstance(kind, WindowAggregate):
        if kind._settles is not None:
            return WindowColumn(owner, rule, kind, size)
        return RatioColumn(owner, rule, kind, size)
    if isinstance(kind, Absent):
        return AbsentColumn(owner, rule, kind, size)
    return ValueColumn(owner, rule, kind, size)


def raw_tracks(tracks: Mapping[PairKey, Track]) -> Mapping[PairKey, Track]:
    """The tracks as they are, parked ones not settled (the chain's own evaluation)."""
    return tracks.raw if type(tracks) is ParkedTracks else tracks
