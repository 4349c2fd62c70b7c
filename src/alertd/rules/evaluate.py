"""evaluate(): rules x buffer x now x previous state -> next state, transitions and rule errors.

Pure: it reads the buffer, never changes it or the previous state (unless its one owner asks for that,
`in_place`, to save copying every track), and never reads a clock. Its
cost grows with the samples that arrived since the previous evaluation and with the alerts that
have a time-based change due, not with the history kept in the buffer.

An `expr` rule is judged per run (a label set) across several series (`expr_join`): a change to any of
them judges the run's steps that became ready; its alert's track is keyed by the series of the
expression's first name. Its time-based changes (`for`, `keep_firing_for`) wait for its data: they are
applied up to the time of the first sample of that series not yet judged (or `now`, when none is waiting),
so a step judged late is judged on the same clock as when it comes at once.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import NamedTuple

from alertd.buffer import NO_STEP, Series, SeriesBuffer
from alertd.model import (
    RUN_ENDED,
    Alert,
    AlertState,
    Labels,
    SeriesKey,
    Transition,
    TransitionKind,
    format_time,
    value_text,
)
from alertd.rules.conditions import Absent, judge_range
from alertd.rules.expr import Expr
from alertd.rules.expr_join import (
    MAX_STEP,
    Join,
    JoinKey,
    at_step,
    new_join,
    next_index,
    note_metrics,
    resolved,
    rewound,
    watermark,
)
from alertd.rules.parking import (
    Kind,
    ParkedTimers,
    ParkedTracks,
    Parking,
    column_judge,
    raw_timers,
    raw_tracks,
)
from alertd.rules.peers import Group, instants, judge, next_instant
from alertd.rules.rule import Rule
from alertd.rules.state import Track, advance, next_event, set_condition

PairKey = tuple[str, SeriesKey]
GroupKey = tuple[str, str, tuple[str, ...]]
"""(peers rule name, metric, the values of its `by` labels)."""

RUN_LIFE = ("run.", "slurm.job.end")
"""Metric names (prefixes) of the series that tell a run's life and how it ended: their alerts (`run_crashed`,
`slurm_job_failed`) are about the end, so the end does not resolve them; every other alert of a run that
has ended does."""


def ends_with_run(key: SeriesKey) -> bool:
    """Whether the alerts on `key` resolve once its run has ended (all but the run-life series)."""
    return not key.metric.startswith(RUN_LIFE)


Made = dict[PairKey, tuple[Track, Rule, Alert, int]]
"""`EvalState.alerts`' alerts by pair, each with the track and rule it was made of, and the track's position then
(a steady track is noted on in place: `_Run.quiet_ticks`)."""


@dataclass
class AlertMemo:
    """What `EvalState.alerts` keeps from one call to the next (its caller holds it): the alert made of each
    pair's track and rule, and the order of the last call's alerts under the `rules` object it was given."""

    made: Made = field(default_factory=dict)
    order: dict[PairKey, None] = field(default_factory=dict)
    rules: object = None


def _place(kept: Made) -> Callable[[PairKey], tuple[str, Labels]]:
    """Where a pair of `kept` goes in `EvalState.alerts`: by its alert's rule, then labels."""
    return lambda pair: (kept[pair][2].rule, kept[pair][2].labels)


def _sorted(kept: Made) -> dict[PairKey, None]:
    """`kept`'s pairs in their alerts' order."""
    return dict.fromkeys(sorted(kept, key=_place(kept)))


def _reordered(last: dict[PairKey, None], kept: Made) -> dict[PairKey, None]:
    """`_sorted(kept)` from the last call's order (same rules): the pairs gone are dropped and the new ones put in
    their places, each found by a binary search (alerts that come and go one by one among thousands firing cost a
    pass, not a sort). Many new ones: sorted, all of them."""
    order = [pair for pair in last if pair in kept]
    new = [pair for pair in kept if pair not in last]
    if len(new) * 8 > len(order):
        return _sorted(kept)
    place = _place(kept)
    for pair in new:
        order.insert(bisect_right(order, place(pair), key=place), pair)
    return dict.fromkeys(order)


@dataclass(frozen=True)
class EvalState:
    """What one evaluation hands to the next: a track per (rule, series) and the buffer version seen."""

    tracks: Mapping[PairKey, Track] = field(default_factory=dict)
    timers: Mapping[PairKey, float] = field(default_factory=dict)
    version: int = 0
    rule_names: frozenset[str] = frozenset()
    active: frozenset[PairKey] | None = None
    """The pairs whose track is pending or firing (None: not known, look at every track)."""
    written: frozenset[PairKey] = frozenset()
    """The pairs whose track the evaluation that made this state changed (or dropped), but for the parked pairs
    that only noted a sample (`parking`)."""
    joins: Mapping[JoinKey, Join] | None = None
    """Per (expr rule, run), where its judging stands (None: not known, as after a reload or a restart:
    found again from the buffer)."""
    peers: Mapping[GroupKey, Group] | None = None
    """Per (peers rule, group), its members and the instants judged (None: not known, found again from the
    buffer, each group going on from its newest sample)."""
    parking: Parking | None = None
    """The quiet pairs judged column-wise (`rules/parking.py`; the service's chain): `tracks` settles each as it is
    read, and a tick that notes a new sample on a parked pair leaves it out of `written` (`Parking.take_changed`)."""

    def take_parked(self) -> set[PairKey]:
        """The parked pairs that noted samples since the last call (`Parking.take_changed`): with `written`, what a
        save writes."""
        return self.parking.take_changed() if self.parking is not None else set()

    def active_pairs(self) -> frozenset[PairKey]:
        """The pairs whose track is pending or firing."""
        if self.active is not None:
            return self.active
        return frozenset(p for p, tr in self.tracks.items() if tr.state is not AlertState.INACTIVE)

    def alerts(self, rules: Iterable[Rule], memo: AlertMemo | None = None) -> list[Alert]:
        """The alerts that are pending or firing, in rule and label order (the cost follows their number).

        `memo` (the caller's, kept between calls): an alert whose track and rule are the ones it was made of is
        taken from it, not made again (a track is replaced when it changes, but for a new sample noted in place, which
        moves its position: the position is checked too); it is left holding this call's. While
        the same pairs alert under the same `rules` (the same object), the last call's order is taken as well,
        not sorted again (an alert's place follows its rule and labels alone, which its pair and rule fix)."""
        by_name = {r.name: r for r in rules}
        kept: Made = {}
        made = memo.made if memo is not None else None
        tracks = self.tracks  # (a steadily firing pair may be parked: read settled)
        for pair in self.active_pairs():
            name, key = pair
            tr = tracks.get(pair)
            rule = by_name.get(name)
            if rule is None or tr is None or tr.state is AlertState.INACTIVE:
                continue
            if made is not None:
                hit = made.get(pair)
                if hit is not None and hit[0] is tr and hit[1] is rule and hit[3] == tr.position:
                    kept[pair] = hit
                    continue
            alert = Alert(
                rule=name,
                state=tr.state,
                labels=alert_labels(rule, key),
                severity=rule.severity,
                value=tr.value,
                step=tr.step,
                time=tr.time,
                active_at=tr.active_at,
                fired_at=tr.fired_at,
                annotations=tr.annotations,
                notify=rule.notify,
            )
            kept[pair] = (tr, rule, alert, tr.position)
        if memo is not None and memo.rules is rules:
            order = memo.order if kept.keys() == memo.order.keys() else _reordered(memo.order, kept)
        else:
            order = _sorted(kept)
        if memo is not None:
            memo.made, memo.order, memo.rules = kept, order, rules
        return [kept[pair][2] for pair in order]


@dataclass(frozen=True)
class Evaluation:
    """The result of one evaluation."""

    now: float
    state: EvalState
    transitions: tuple[Transition, ...]
    errors: Mapping[str, str]


class RuleSet:
    """Rules plus a memo of which rules watch which series (a cache: it changes no result)."""

    def __init__(self, rules: Sequence[Rule]) -> None:
        self.rules = tuple(rules)
        self.by_name = {r.name: r for r in self.rules}
        self.exprs = tuple(r for r in self.rules if r.expr is not None)
        self.peers = tuple(r for r in self.rules if r.peers is not None)
        self.reads_time = frozenset(r.name for r in self.rules if _reads_time(r))
        """The rules one of whose annotations reads `time` (an RFC 3339 text is made for those only: 2 us an alert)."""
        self._memo: dict[SeriesKey, tuple[Rule, ...]] = {}
        self._labels: dict[PairKey, Labels] = {}
        self.columns: list[tuple[Rule, Kind]] = []
        """The rules whose quiet pairs are parked (`rules/parking.py`), each with its column-wise judge."""
        self._column: dict[str, int] = {}
        for rule in self.rules:
            judged = column_judge(rule)
            if judged is not None:
                self._column[rule.name] = len(self.columns)
                self.columns.append((rule, judged))

    def column(self, name: str) -> int:
        """The column of the rule `name` (`columns`), -1: none."""
        return self._column.get(name, -1)

    def for_series(self, key: SeriesKey) -> tuple[Rule, ...]:
        """The rules that watch `key`."""
        hit = self._memo.get(key)
        if hit is None:
            hit = self._memo[key] = tuple(r for r in self.rules if r.watches(key))
        return hit

    def labels(self, rule: Rule, key: SeriesKey) -> Labels:
        """`alert_labels(rule, key)`, kept for the next transition of the pair (the last `LABELS_KEPT` pairs)."""
        pair = (rule.name, key)
        hit = self._labels.get(pair)
        if hit is None:
            if len(self._labels) >= LABELS_KEPT:
                self._labels.clear()
            hit = self._labels[pair] = alert_labels(rule, key)
        return hit

    def watch(self, series: Series) -> Watch:
        """The rules that watch `series` and their pairs (`Watch`), kept on the series for the next tick (its
        `watch`, by rule set: no hash of its key, and gone with it; the last few rule sets that looked)."""
        kept: dict[RuleSet, Watch] | None = series.watch
        if kept is None:
            kept = series.watch = {}
        hit = kept.get(self)
        if hit is None:
            if len(kept) >= WATCHES_KEPT:
                kept.clear()
            rules = self.for_series(series.key)
            pairs = tuple(
                (r, (r.name, series.key), r.condition.check, r.absent, r.consecutive, self.column(r.name))
                for r in rules
                if r.expr is None and r.peers is None
            )
            others = tuple(r for r in rules if r.expr is not None or r.peers is not None)
            hit = kept[self] = Watch(rules, pairs, others)
        return hit


LABELS_KEPT = 1 << 16
"""The pairs whose alert labels a rule set keeps (`RuleSet.labels`): all of them, where alerts come and go together."""
WATCHES_KEPT = 4
"""The rule sets a series keeps its `Watch` for (the service's one, a reload's next, a bench's two in turns)."""


class Watch(NamedTuple):
    """The rules of one rule set that watch one series (`RuleSet.watch`)."""

    rules: tuple[Rule, ...]
    pairs: tuple[tuple[Rule, PairKey, Callable[[Series, int], bool], Absent | None, int, int], ...]
    """The rules stepped series by series (all but `expr` and `peers` rules), each with its pair, its condition's
    `check`, its `absent`, its `consecutive` (read at every tick) and its column where its quiet pairs are parked
    (`RuleSet.columns`; -1: never)."""
    others: tuple[Rule, ...]
    """The `expr` and `peers` rules, judged per run and per group (each tick hands them on as they are)."""


def alert_labels(rule: Rule, key: SeriesKey) -> Labels:
    """An alert's labels: the series' labels, `metric`, then the rule's own labels."""
    merged = dict(key.labels)
    merged["metric"] = key.metric
    merged.update(rule.labels)
    return tuple(sorted(merged.items()))


class _Run:
    """The working state of one evaluation."""

    def __init__(
        self,
        ruleset: RuleSet,
        buffer: SeriesBuffer,
        prev: EvalState,
        in_place: bool = False,
        parking: Parking | None = None,
    ) -> None:
        self.ruleset = ruleset
        self.buffer = buffer
        self.parking = parking
        """This chain's parked pairs (`rules/parking.py`), where it keeps any."""
        self.prev_tracks = raw_tracks(prev.tracks)
        self.tracks: Mapping[PairKey, Track] = self.prev_tracks  # copied on the first change (_tracks_w)
        self.timers: Mapping[PairKey, float] = raw_timers(prev.timers)  # copied on the first change (_timers_w)
        # True once the mapping is this evaluation's own to change (copied, or handed over: `in_place`)
        self._own_tracks = in_place and type(self.tracks) is dict
        self._own_timers = in_place and type(self.timers) is dict
        old = prev.parking
        if old is not None and old is not parking:  # a chain that does not go on with its parked pairs
            if in_place:
                restore = old.release()  # handed over: each back, settled, with its timer
            else:
                old.settle_all()  # read settled, left parked for their chain
                restore = list(old.timers())
            self.timers, self._own_timers = {**self.timers, **dict(restore)}, True
        # True when the previous state is handed over (`in_place`): its tracks are nobody else's to keep, so a tick's
        # note on a steady one is made on it (`quiet_ticks`), not on a copy
        self._handed = self._own_tracks
        self._timed = {name for name, _ in self.timers}
        """The rules with a timer (or that had one): a pair of any other rule has none, found with no hash of it."""
        self.written: set[PairKey] = set()
        self.prev = prev
        self.transitions: list[Transition] = []
        self.errors: dict[str, str] = {}
        self._rule: Rule | None = None
        self._key: SeriesKey | None = None
        self.joins: Mapping[JoinKey, Join] = prev.joins or {}
        self._own_joins = in_place and type(prev.joins) is dict
        self.groups: Mapping[GroupKey, Group] = prev.peers or {}
        self._own_groups = in_place and type(prev.peers) is dict

    def emit(self, tr: Track, kind: TransitionKind, t: float) -> None:
        rule, key = self._rule, self._key
        assert rule is not None and key is not None
        labels = self.ruleset.labels(rule, key)
        tr.annotations = self._render(rule, key, tr, labels)
        ended = self.buffer.run_finished_at(key) if rule.absent is None and ends_with_run(key) else None
        if kind in (TransitionKind.RESOLVED, TransitionKind.INACTIVE) and ended is not None and t >= ended:
            tr.annotations = _ended_words(tr, key, labels)
        self.transitions.append(
            Transition(
                rule=rule.name,
                state=kind,
                time=t,
                step=tr.step,
                value=tr.value,
                labels=labels,
                severity=rule.severity,
                annotations=tr.annotations,
                active_at=tr.active_at,
                notify=rule.notify,
            )
        )

    def _render(self, rule: Rule, key: SeriesKey, tr: Track, labels: Labels) -> tuple[tuple[str, str], ...]:
        values = {
            "metric": key.metric,
            "value": tr.value,
            "step": tr.step,
            "time": format_time(tr.time) if rule.name in self.ruleset.reads_time and math.isfinite(tr.time) else "",
            "rule": rule.name,
            "severity": rule.severity,
        }
        out = []
        for name, template in rule.annotations:
            text, problem = template.render(values, labels)
            if problem:
                self.errors[rule.name] = f"annotation {name!r}: {problem} (series {key})"
            out.append((name, text))
        return tuple(out)

    def track(self, rule: Rule, series: Series, now: float) -> bool:
        """Step one pair through the series' new samples, then through time up to `now`. Return whether the
        pair was or is now anything but quiet (pending, firing, timed by `absent`): a quiet pair is neither
        among the active ones nor timed, so the evaluation's later passes need not look at it."""
        key = series.key
        pair = (rule.name, key)
        old = self.tracks.get(pair)
        tr = old.copy() if old is not None else Track()
        self._rule, self._key = rule, key
        if tr.generation == series.generation:
            first = tr.position if tr.position > series.base else series.base
        else:
            first = series.first_new(tr.generation, tr.position)
            tr.streak = 0
        absent, inactive = rule.absent, AlertState.INACTIVE
        stirred = absent is not None or tr.state is not inactive
        times, values = series.times, series.values
        i, n = series.start + first - series.base, len(times)
        # When the run ended: to time an alert that is not quiet, and in a batch, where one may start midway
        ended = stirred or n - i > 1
        finished_at = self._finished_at(rule, key) if ended else None
        cond, need, emit = rule.condition, rule.consecutive, self.emit
        if n - i == 1:  # one new sample (the service's tick)
            t = times[i]
            if stirred:
                advance(rule, tr, t, finished_at, emit, inclusive=False)
            s = series.steps[i]
            tr.value, tr.step, tr.time, tr.last_time, tr.clock = values[i], None if s == NO_STEP else s, t, t, t
            tr.streak = tr.streak + 1 if cond.check(series, i) else 0
            if tr.cond or tr.streak >= need:
                set_condition(rule, tr, tr.streak >= need, t, emit)
        elif i < n:
            # Judged at once (`judge_range`): the offsets of the samples where the condition holds. While the alert
            # is quiet (inactive, the condition false, no streak, no absence to time), a stretch of samples
            # where it does not hold changes nothing but the last value seen: skipped to its end.
            trues, start, k = judge_range(cond, series, i, n), i, 0
            while i < n:
                nxt = trues[k] + start if k < len(trues) else n
                if nxt > i and absent is None and tr.state is inactive and not tr.cond and tr.streak == 0:
                    j = nxt - 1
                    t = times[j]
                    tr.value, tr.step, tr.time, tr.last_time, tr.clock = values[j], series.step_at(j), t, t, t
                    i = nxt
                    continue
                t = times[i]
                if absent is not None or tr.state is not inactive:
                    advance(rule, tr, t, finished_at, emit, inclusive=False)
                tr.value, tr.step, tr.time, tr.last_time, tr.clock = values[i], series.step_at(i), t, t, t
                if nxt == i:
                    k += 1
                tr.streak = tr.streak + 1 if nxt == i else 0
                if tr.cond or tr.streak >= need:
                    set_condition(rule, tr, tr.streak >= need, t, emit)
                i += 1
        tr.generation, tr.position = series.generation, series.end
        self._tracks_w()[pair] = tr
        self.written.add(pair)
        quiet = absent is None and tr.state is inactive  # `_settle` then only drops a timer left over
        if not ended and not quiet:
            finished_at = self._finished_at(rule, key)
        self._settle(rule, pair, tr, finished_at, now)
        if self.parking is not None:
            self._park_stepped(rule, series, pair, tr)
        return stirred or not quiet

    def _park_stepped(self, rule: Rule, series: Series, pair: PairKey, tr: Track) -> None:
        """Park a pair that `track` left steady, as the next tick's `quiet_ticks` would (`Column.steady`): no time-based
        change due (a pending alert's `for`, a `keep_firing_for`, a run's end to come) but a quiet absence's timer, so
        it is quiet, or firing while its condition holds. A pair that fires or resolves at a tick, or whose series had
        several samples, is not visited at the next."""
        parking = self.parking
        col = self.ruleset.column(rule.name)
        if parking is None or col < 0 or tr.generation != series.generation or tr.position != series.end:
            return
        due = self.timers.get(pair)
        asked = due is not None or tr.state is AlertState.FIRING
        if not parking.cols[col].steady(tr, due, self._finished_at(rule, series.key) if asked else None):
            return
        watch = self.ruleset.watch(series)
        self._park(parking, col, series, pair, tr, len(watch.pairs) if not watch.others else -1, due)

    def _park(
        self, parking: Parking, col: int, series: Series, pair: PairKey, tr: Track, pairs: int, due: float | None
    ) -> None:
        """`Parking.park`; a timer the pair had (`due`, an absence's) is the parking's once it is parked."""
        if parking.park(col, series, pair, tr, pairs) and due is not None:
            del self._timers_w()[pair]

    def quiet_ticks(  # noqa: C901 (one loop over the tick's series and their pairs: the service's hot path)
        self, changed: Iterable[Series], now: float
    ) -> Iterator[tuple[Series, list[Rule]]]:
        """The service's tick on the steady pairs of the `changed` series, each series' rules at once (its `Watch`);
        give each series that has rules left for `track`'s whole way with them (and its `expr` and `peers` rules,
        judged per run and per group), before looking at the next. One loop over the series and their pairs, with
        what the whole tick shares read once: the per-series call it replaces cost a tenth of the tick.

        When one sample is new, `track` would, for a pair whose alert is steady, note the sample as the last seen,
        count it in the streak, for an `absent` rule time the absence from it, and change nothing else: done here
        at once. Steady is:
        - quiet: the alert inactive, its condition not holding on the sample, a streak (if any) staying short of
          `consecutive`; for an `absent` rule, only while no absence began before the sample, its run has not
          ended, and the absence it times is due after `now`;
        - steadily firing: firing, the condition holding before and on the sample, its run not ended
          (no time-based change is due, `next_event` is None; the pair stays among the active ones). An `absent`
          rule's condition never holds on a sample: its pair goes `track`'s way.
        A steady track, the state handed over (`in_place`), is noted on in place (`EvalState.alerts`' memo tells a
        firing one's alert made before the note by the position it was made at). The condition, should it raise, is
        judged again by `track` (a condition is a function of the series, its memo only a cache)."""
        ruleset, handed, parking = self.ruleset, self._handed, self.parking
        firing_state, inactive, note, timed = AlertState.FIRING, AlertState.INACTIVE, self.written.add, self._timed
        ends = self.buffer.any_run_finished()  # else no run's end resolves a firing pair
        for series in changed:
            kept = series.watch
            watch = kept.get(ruleset) if kept is not None else None
            if watch is None:
                watch = ruleset.watch(series)
            if not watch.rules:
                if parking is not None:
                    parking.idle(series)
                continue
            times, base, start = series.times, series.base, series.start
            i = len(times) - 1  # the newest sample's array index
            if i < start:
                yield series, list(watch.rules)
                continue
            seen = base + i - start  # where a pair that has seen all but the newest sample stands (`Series.end` - 1)
            key, generation, tracks = series.key, series.generation, self.tracks
            rest = list(watch.others)
            t, step = times[i], series.steps[i]
            noted = (series.values[i], None if step == NO_STEP else step, t, seen + 1)
            parks = len(watch.pairs) if not watch.others else -1  # the pairs to park for the series to be passed by
            for rule, pair, check, absent, need, col in watch.pairs:
                old = tracks.get(pair)
                if old is not None and old.park is not None and old.park.owner is parking:
                    continue  # parked: judged column-wise (`Parking.tick`)
                if (
                    old is None
                    or old.generation != generation
                    or (old.position if old.position > base else base) != seen
                ):
                    rest.append(rule)
                    continue
                due, state = None, old.state
                firing = state is firing_state
                if firing:
                    # steady: its condition held (no `keep_firing_for` runs), the sample keeps the streak `track`
                    # needs to hold it (as `set_condition` asks), and its run has not ended (which resolves it)
                    ended = ends and self._finished_at(rule, key) is not None
                    if not old.cond or old.streak + 1 < need or ended:
                        rest.append(rule)
                        continue
                elif state is not inactive or old.cond:
                    rest.append(rule)
                    continue
                elif absent is not None:
                    due = self._absence_timed(rule, absent.seconds, old, key, t, now)
                    if due is None:
                        rest.append(rule)
                        continue
                try:
                    holds = check(series, i)
                except Exception:  # judged again by `track`, where a rule's error is told
                    rest.append(rule)
                    continue
                streak = old.streak + 1 if holds else 0
                if not holds if firing else streak >= need:
                    rest.append(rule)  # a firing alert's condition stops, or a quiet one's starts
                    continue
                tr = old if handed else old.copy()
                tr.value, tr.step, tr.time, tr.position = noted
                tr.last_time = tr.clock = t
                tr.streak = streak
                if tr is not old:
                    self._tracks_w()[pair] = tr
                note(pair)
                if due is not None or rule.name in timed:
                    self._retime(pair, due)
                if col >= 0 and parking is not None and tr is old:
                    self._park(parking, col, series, pair, tr, parks, due)
            if rest:
                yield series, rest

    def changed_series(self, now: float) -> Iterable[Series]:
        """The series the tick visits: those appended to since the last evaluation, but for the series whose pairs
        are all parked and stay so (`Parking.tick`, on the inbox's rows); the timers of the pairs it hands back
        (their absence's) set again."""
        parking, version = self.parking, self.prev.version
        visit = None
        if parking is not None and parking.version == version:
            rows = parking.inbox.since(version)
            if rows is not None:
                visit = parking.tick(rows, now, self.buffer.ended_since(version))
        if parking is not None:
            restore = parking.release() if visit is None else parking.restore
            for pair, due in restore:
                self._set_timer(pair, due)
            restore.clear()
        return self.buffer.changed_since(version) if visit is None else visit

    def _retime(self, pair: PairKey, due: float | None) -> None:
        """The pair's timer after it was stepped: at `due`, its next time-based change, or none."""
        if due is None:
            if pair in self.timers:
                del self._timers_w()[pair]
        elif self.timers.get(pair) != due:
            self._set_timer(pair, due)

    def _absence_timed(
        self, rule: Rule, seconds: float, old: Track, key: SeriesKey, t: float, now: float
    ) -> float | None:
        """When the absence a quiet pair's new sample at `t` times is due (`next_event` of the noted track: `seconds`
        after it), where noting the sample is all `track` does (`quiet_ticks`): the run has not ended, no absence
        is due before the sample (`next_event` of the old track), and the one it times is due after `now` (else its
        change is made by `track`, at once); None otherwise."""
        due = t + seconds
        if due <= now or self.buffer.finished_at(key) is not None:
            return None
        before = next_event(rule, old, None)
        return None if before is not None and before < t else due

    def join(self, rule: Rule, labels: Labels, metrics: set[str], now: float) -> PairKey | None:
        """Judge the steps of one run that became ready for an expr rule, then step its alert through time
        (`expr_join`); return its pair, if it has a track."""
        expr = rule.expr
        assert expr is not None
        jk = (rule.name, labels)
        old = self.joins.get(jk)
        joined = note_metrics(expr, old or new_join(expr), metrics)
        keys = resolved(expr, joined, labels)
        series = [self.buffer.get(k) for k in keys] if isinstance(keys, list) else []
        if not isinstance(keys, list) or None in series:
            if isinstance(keys, str):
                self.errors[rule.name] = keys
            if joined != old:
                self._joins_w()[jk] = joined
            return None
        members: list[Series] = series  # type: ignore[assignment]
        pair = (rule.name, keys[0])
        old_tr = self.tracks.get(pair)
        tr = old_tr.copy() if old_tr is not None else Track()
        self._rule, self._key = rule, keys[0]
        last = rewound(joined, members)
        if last < joined.last:
            tr.streak = 0
        finished = any(self.buffer.finished_at(k) is not None for k in keys)
        high = watermark(members, finished)
        first, others = members[0], members[1:]
        steps, times, values = first.steps, first.times, first.values
        i, n, judged = next_index(first, last), len(steps), False
        while i < n and steps[i] <= high:
            step = steps[i]
            row = [values[i]]
            for s in others:
                k = at_step(s, step)
                if k is None:
                    break
                row.append(s.values[k])
            else:
                self._judge(rule, expr, tr, row, step, times[i])
                judged = True
            last = step
            i = next_index(first, step) if i + 1 < n and steps[i + 1] == step else i + 1
        if high != MAX_STEP:
            last = max(last, high)
        done = Join(last, joined.seen, tuple((s.generation, s.end) for s in members))
        if done != old:
            self._joins_w()[jk] = done
        if old_tr is None and not judged:
            return None
        self._tracks_w()[pair] = tr
        self.written.add(pair)
        self._settle(rule, pair, tr, self._finished_at(rule, pair[1]), *_horizon(members, last, finished, now))
        return pair

    def _expr_horizon(self, expr: Expr, pair: PairKey, now: float) -> tuple[float, bool]:
        """`_horizon` for the alert of an expr rule on the run of `pair`."""
        joined = self.joins.get((pair[0], pair[1].labels))
        keys = resolved(expr, joined, pair[1].labels) if joined is not None else None
        if not isinstance(keys, list):
            return now, True
        series = [self.buffer.get(k) for k in keys]
        if None in series:
            return now, True
        assert joined is not None
        finished = any(self.buffer.finished_at(k) is not None for k in keys)
        return _horizon(series, joined.last, finished, now)  # type: ignore[arg-type]

    def _judge(self, rule: Rule, expr: Expr, tr: Track, row: list[float], step: int, t: float) -> None:
        """One step of an expr rule, as `track` steps one sample."""
        if tr.state is not AlertState.INACTIVE:
            advance(rule, tr, t, None, self.emit, inclusive=False)
        tr.value, tr.step, tr.time, tr.last_time, tr.clock = expr.value(row), step, t, t, t
        tr.streak = tr.streak + 1 if expr.test(row) else 0
        if tr.cond or tr.streak >= rule.consecutive:
            set_condition(rule, tr, tr.streak >= rule.consecutive, t, self.emit)

    def peer_group(self, rule: Rule, gk: GroupKey, new: Iterable[SeriesKey], now: float) -> list[PairKey]:
        """Judge one group of a peers rule at each instant in [judged, now) where it may change
        (`alertd.rules.peers`), then step its members' alerts through time up to `now`, excluded (a sample at
        `now` may still come); return the pairs with a track."""
        cond = rule.peers
        assert cond is not None
        old = self.groups.get(gk)
        keys = sorted({*(old.members if old is not None else ()), *new}, key=lambda k: k.labels)
        found = [(k, s) for k in keys if (s := self.buffer.get(k)) is not None]
        if not found:
            if old is not None:
                del self._groups_w()[gk]
            return []
        members = [s for _, s in found]
        judged = old.judged if old is not None else -math.inf
        working: dict[PairKey, Track] = {}
        ends = [self._finished_at(rule, k) for k, _ in found]
        inactive = AlertState.INACTIVE
        for e in instants(cond, members, judged, now):
            for (key, _), verdict, fin in zip(found, judge(cond, members, e), ends, strict=True):
                pair = (rule.name, key)
                holds = verdict is not None and verdict.cond and (fin is None or e < fin)
                tr = working.get(pair)
                if tr is None:
                    prior = self.tracks.get(pair)
                    if prior is None and not holds:
                        continue
                    tr = working[pair] = prior.copy() if prior is not None else Track()
                self._rule, self._key = rule, key
                if tr.state is not inactive:
                    advance(rule, tr, e, fin, self.emit, inclusive=False)
                if verdict is not None:
                    tr.value, tr.step, tr.last_time = verdict.value, verdict.step, verdict.last_time
                tr.time, tr.clock = e, e
                if tr.cond or holds:
                    set_condition(rule, tr, holds, e, self.emit)
        done = Group(tuple(k for k, _ in found), max(judged, now), next_instant(cond, members, now))
        if done != old:
            self._groups_w()[gk] = done
        pairs = []
        for pair, tr in working.items():
            self._tracks_w()[pair] = tr
            self.written.add(pair)
            self._rule, self._key = rule, pair[1]
            self._settle(rule, pair, tr, self._finished_at(rule, pair[1]), now, inclusive=False)
            pairs.append(pair)
        return pairs

    def _groups_w(self) -> dict[GroupKey, Group]:
        """The peers groups, to change (copied once, as the tracks)."""
        if not self._own_groups:
            self.groups = dict(self.groups)
            self._own_groups = True
        return self.groups  # type: ignore[return-value]

    def rebuild_joins(self) -> None:
        """The joins found again from the buffer (`find_joins`)."""
        self._joins_w().update(find_joins(self.ruleset, self.buffer, self.tracks))

    def finish(self, pair: PairKey, now: float) -> None:
        """Apply the time-based changes of a pair without new samples up to `now`."""
        rule = self.ruleset.by_name[pair[0]]
        inclusive = rule.peers is None  # a peers alert waits for its group's instant `now` (`peer_group`)
        if rule.expr is not None:
            now, inclusive = self._expr_horizon(rule.expr, pair, now)
        tr = self.tracks[pair]
        if tr is self.prev_tracks.get(pair):
            tr = self._tracks_w()[pair] = tr.copy()
            self.written.add(pair)
        self._rule, self._key = rule, pair[1]
        self._settle(rule, pair, tr, self._finished_at(rule, pair[1]), now, inclusive)

    def _finished_at(self, rule: Rule, key: SeriesKey) -> float | None:
        """When `key` stopped for a known reason, for the rule's time-based changes: an `absent` rule stops
        when its run ended or another process took the series over; any other alert resolves when its run
        ended (not on the run-life series; a writer taking over is no end: ranks write side by side)."""
        if rule.absent is not None:
            return self.buffer.finished_at(key)
        return self.buffer.run_finished_at(key) if ends_with_run(key) else None

    def _settle(
        self, rule: Rule, pair: PairKey, tr: Track, finished_at: float | None, now: float, inclusive: bool = True
    ) -> None:
        if rule.absent is None and tr.state is AlertState.INACTIVE:
            if pair[0] in self._timed:  # none of its rule, the usual: no hash of the pair
                self._retime(pair, None)
            return
        self._retime(pair, advance(rule, tr, now, finished_at, self.emit, inclusive=inclusive))

    def _tracks_w(self) -> dict[PairKey, Track]:
        """The tracks, to change: a copy of the previous state's, made once (an evaluation that changes no
        track hands the same mapping on)."""
        if not self._own_tracks:
            self.tracks = dict(self.tracks)
            self._own_tracks = True
        return self.tracks  # type: ignore[return-value]

    def _joins_w(self) -> dict[JoinKey, Join]:
        """The joins, to change (copied once, as the tracks)."""
        if not self._own_joins:
            self.joins = dict(self.joins)
            self._own_joins = True
        return self.joins  # type: ignore[return-value]

    def timers_due(self, pair: PairKey, now: float) -> None:
        """Look at `pair`'s time-based changes at this evaluation (its run ended since the last one)."""
        tr = self.tracks.get(pair)
        if tr is None:
            return
        due = next_event(self.ruleset.by_name[pair[0]], tr, self._finished_at(self.ruleset.by_name[pair[0]], pair[1]))
        if due is not None and due <= now and self.timers.get(pair) != due:
            self._set_timer(pair, due)

    def _set_timer(self, pair: PairKey, due: float) -> None:
        """Look at `pair` again at `due` (`_due_timers`); its rule is among those with a timer (`_timed`)."""
        self._timers_w()[pair] = due
        self._timed.add(pair[0])

    def _timers_w(self) -> dict[PairKey, float]:
        """The timers, to change (copied once, as the tracks)."""
        if not self._own_timers:
            self.timers = dict(self.timers)
            self._own_timers = True
        return self.timers  # type: ignore[return-value]


def evaluate(
    ruleset: RuleSet,
    buffer: SeriesBuffer,
    now: float,
    prev: EvalState | None = None,
    *,
    in_place: bool = False,
    park: bool | None = None,
) -> Evaluation:
    """Evaluate every rule on the samples that are new since `prev`, and on time up to `now`.

    `in_place`: `prev` is not used again by anyone (the service's engine): its track and timer mappings
    become the new state's, changed where they change, instead of being copied (10,000 series: no copy
    of 10,000 entries per evaluation); and its quiet pairs are parked, judged column-wise (`rules/parking.py`):
    `park` True, or None where the buffer holds `PARK_MIN_SERIES` series or more (below, numpy's fixed cost per call
    outweighs stepping a few pairs: `alertd exec`'s NaN to its stop took 10 ms parked, 4 ms stepped); False: every
    pair stepped (the same transitions and tracks)."""
    prev = prev or EvalState()
    if park is None:
        park = prev.parking is not None or len(buffer) >= PARK_MIN_SERIES
    parking = _parking(ruleset, buffer, prev) if in_place and park else None
    run = _Run(ruleset, buffer, prev, in_place, parking)
    if ruleset.exprs and prev.joins is None and prev.version > 0:
        run.rebuild_joins()
    if ruleset.peers and prev.peers is None and prev.version > 0:
        run.groups, run._own_groups = find_groups(ruleset, buffer), True
    touched = _new_samples(run, now)
    _ended_runs(run, touched, now)
    _due_timers(run, touched, now)
    active = set(prev.active_pairs())
    for pair in touched:
        tr = run.tracks.get(pair)
        if tr is not None and tr.state is not AlertState.INACTIVE:
            active.add(pair)
        else:
            active.discard(pair)
    if _drop_unknown_rules(run, ruleset):
        active = {p for p in active if p in run.tracks}
        run.written |= prev.tracks.keys() - run.tracks.keys()
    run.transitions.sort(key=attrgetter("time", "rule", "labels"))
    tracks, timers = run.tracks, run.timers
    if parking is not None:
        parking.flush()
        parking.version = buffer.version
        if type(tracks) is dict:  # (pairs are parked only on tracks handed over)
            tracks = ParkedTracks(tracks, parking)
        if parking.absences and type(timers) is dict:
            timers = ParkedTimers(timers, parking, run.tracks)
    state = EvalState(
        tracks,
        timers,
        buffer.version,
        frozenset(ruleset.by_name),
        frozenset(active),
        frozenset(run.written),
        run.joins,
        run.groups,
        parking,
    )
    return Evaluation(now, state, tuple(run.transitions), run.errors)


PARK_MIN_SERIES = 256
"""Series a buffer holds from which the service's evaluation parks its pairs (`evaluate`'s `park`)."""


def _parking(ruleset: RuleSet, buffer: SeriesBuffer, prev: EvalState) -> Parking:
    """The parking of a chain going on from `prev`: its own where it had one under `ruleset` on this buffer (the
    tick checks it saw the version before, `_Run.changed_series`), else a new one."""
    old = prev.parking
    if old is not None and old.ruleset is ruleset and old.inbox is buffer.inbox:
        return old
    parking = Parking(ruleset, buffer.open_inbox())  # (with no rule parked, the series no rule watches are passed by)
    parking.version = prev.version
    return parking


def _reads_time(rule: Rule) -> bool:
    """Whether one of the rule's annotations reads `time` (an RFC 3339 text is made for those only: 2 us an alert)."""
    return any(template.reads("time") for _, template in rule.annotations)


def _failed(run: _Run, emitted: int, rule: str, exc: Exception, where: str) -> None:
    """One step of one rule raised: that rule's error, its transitions of this step dropped (one bad rule never
    stops the others)."""
    del run.transitions[emitted:]
    run.errors[rule] = f"{type(exc).__name__}: {exc} ({where})"


def _new_samples(run: _Run, now: float) -> set[PairKey]:
    """Step every (rule, series) pair through the samples new since the last evaluation, and every expr rule
    through the steps of its runs that became ready; the pairs touched."""
    ruleset, exprs = run.ruleset, run.ruleset.exprs
    touched: set[PairKey] = set()
    runs: dict[JoinKey, set[str]] = {}
    groups: dict[GroupKey, set[SeriesKey]] = {}
    for series, rules in run.quiet_ticks(run.changed_series(now), now):
        for rule in rules:
            if exprs and rule.expr is not None:
                runs.setdefault((rule.name, series.key.labels), set()).add(series.key.metric)
                continue
            if rule.peers is not None:
                groups.setdefault((rule.name, *rule.peers.group_of(series.key)), set()).add(series.key)
                continue
            emitted = len(run.transitions)
            try:
                if not run.track(rule, series, now):
                    continue  # quiet before and after: not active, not timed (`_Run.track`)
            except Exception as exc:  # One bad rule must not stop the others.
                _failed(run, emitted, rule.name, exc, f"series {series.key}")
            touched.add((rule.name, series.key))
    for (name, labels), metrics in runs.items():
        emitted = len(run.transitions)
        try:
            pair = run.join(ruleset.by_name[name], labels, metrics, now)
        except Exception as exc:
            _failed(run, emitted, name, exc, f"run {dict(labels)}")
            continue
        if pair is not None:
            touched.add(pair)
    if ruleset.peers:
        _peer_groups(run, groups, touched, now)
    return touched


def _peer_groups(run: _Run, changed: dict[GroupKey, set[SeriesKey]], touched: set[PairKey], now: float) -> None:
    """Judge the peers groups with new samples, and those with an instant due before `now` (`touched` grows)."""
    due = [gk for gk, g in run.groups.items() if g.wake is not None and g.wake < now and gk not in changed]
    for gk in [*changed, *due]:
        rule = run.ruleset.by_name.get(gk[0])
        if rule is None or rule.peers is None:
            continue
        emitted = len(run.transitions)
        try:
            touched.update(run.peer_group(rule, gk, changed.get(gk, ()), now))
        except Exception as exc:
            _failed(run, emitted, rule.name, exc, f"group {gk[1]} {dict(zip(rule.peers.by, gk[2], strict=True))}")


def find_groups(ruleset: RuleSet, buffer: SeriesBuffer) -> dict[GroupKey, Group]:
    """Every (peers rule, group) of the buffer, found again after a reload or a restart (one pass over the
    series): each goes on from its newest sample (the buffered past is not judged again)."""
    found: dict[GroupKey, list[Series]] = {}
    for series in buffer:
        for rule in ruleset.for_series(series.key):
            if rule.peers is not None:
                found.setdefault((rule.name, *rule.peers.group_of(series.key)), []).append(series)
    groups = {}
    for gk, members in found.items():
        members.sort(key=lambda s: s.key.labels)
        newest = max((t for s in members if (t := s.last_time()) is not None), default=-math.inf)
        groups[gk] = Group(tuple(s.key for s in members), newest, newest)
    return groups


def _ended_runs(run: _Run, touched: set[PairKey], now: float) -> None:
    """The alerts whose run ended (or whose series another process took over) since the last evaluation, not
    stepped already: their end is a time-based change of theirs, due now."""
    ended_runs, taken_over = run.buffer.ended_since(run.prev.version)
    if not ended_runs and not taken_over:
        return
    for pair in run.prev.active_pairs() - touched:
        key = pair[1]
        if pair[0] in run.ruleset.by_name and (
            key in taken_over or (key.label("source"), key.label("run")) in ended_runs
        ):
            run.timers_due(pair, now)


def _due_timers(run: _Run, touched: set[PairKey], now: float) -> None:
    """Apply the time-based changes due by `now` of the pairs no new sample touched (`touched` grows)."""
    for pair in [p for p, t in run.timers.items() if t <= now and p not in touched]:
        touched.add(pair)
        if pair[0] not in run.ruleset.by_name:
            del run._timers_w()[pair]
            continue
        emitted = len(run.transitions)
        try:
            run.finish(pair, now)
        except Exception as exc:
            _failed(run, emitted, pair[0], exc, f"series {pair[1]}")


def _ended_words(tr: Track, key: SeriesKey, labels: Labels) -> tuple[tuple[str, str], ...]:
    """An alert that ends because its run ended says so (`RUN_ENDED`; a rule's own `resolved_summary` still
    goes first): its condition may still hold on the last sample, so "back to" that value would be wrong."""
    notes = dict(tr.annotations)
    step = f" at step {tr.step}" if tr.step is not None else ""
    run = dict(labels).get("run", "?")
    notes[RUN_ENDED] = f"run {run} ended; {key.metric} was {value_text(tr.value)}{step}"
    return tuple(notes.items())


def find_joins(ruleset: RuleSet, buffer: SeriesBuffer, tracks: Mapping[PairKey, Track]) -> dict[JoinKey, Join]:
    """Every (expr rule, run) of the buffer, found again after a reload or a restart (one pass over the
    series): each starts after the step its alert last judged, else after the newest step of its first
    series (the buffered past is not judged again)."""
    found: dict[JoinKey, set[str]] = {}
    for series in buffer:
        for rule in ruleset.for_series(series.key):
            if rule.expr is not None:
                found.setdefault((rule.name, series.key.labels), set()).add(series.key.metric)
    joins = {}
    for (name, labels), metrics in found.items():
        expr = ruleset.by_name[name].expr
        assert expr is not None
        joined = note_metrics(expr, new_join(expr), metrics)
        keys = resolved(expr, joined, labels)
        found_series = [buffer.get(k) for k in keys] if isinstance(keys, list) else [None]
        if not isinstance(keys, list) or None in found_series:
            joins[(name, labels)] = joined
            continue
        members: list[Series] = found_series  # type: ignore[assignment]
        tr = tracks.get((name, keys[0]))
        last = tr.step if tr is not None and tr.step is not None else watermark(members[:1], False)
        joins[(name, labels)] = Join(last, joined.seen, tuple((s.generation, s.end) for s in members))
    return joins


def _horizon(members: list[Series], last: int, finished: bool, now: float) -> tuple[float, bool]:
    """How far through time the alert of an expr rule may go, and whether that instant itself is included:
    up to its first series' first sample after step `last`, that instant excluded (waiting for the other
    series: the next step it judges can't be earlier, and is judged at that sample's time, where a sample
    goes before a time-based change at the same instant, as for every rule), else up to `now` included
    (as every rule: the samples still to come are taken to be no older than `now`)."""
    first = members[0]
    j = next_index(first, last)
    if finished or j >= len(first.times) or first.times[j] > now:
        return now, True
    return first.times[j], False


def _drop_unknown_rules(run: _Run, ruleset: RuleSet) -> bool:
    """Forget the tracks of rules that are gone (after a reload); say whether there were any."""
    if run.prev.rule_names - ruleset.by_name.keys():
        run.tracks = {p: t for p, t in run.tracks.items() if p[0] in ruleset.by_name}
        run.timers = {p: t for p, t in run.timers.items() if p[0] in ruleset.by_name}
        run.joins = {j: v for j, v in run.joins.items() if j[0] in ruleset.by_name}
        run.groups = {g: v for g, v in run.groups.items() if g[0] in ruleset.by_name}
        return True
    return False
