"""evaluate(): rules x buffer x now x previous state -> next state, transitions and rule errors.

Pure: it reads the buffer, never changes it or the previous state (unless its one owner asks for that,
`in_place`, to save copying every track), and never reads a clock. Its
cost grows with the samples that arrived since the previous evaluation and with the alerts that
have a time-based change due, not with the history kept in the buffer.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from alertd.buffer import Series, SeriesBuffer
from alertd.model import Alert, AlertState, Labels, SeriesKey, Transition, TransitionKind, format_time
from alertd.rules.rule import Rule
from alertd.rules.state import Track, advance, next_event, set_condition

PairKey = tuple[str, SeriesKey]


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
    """The pairs whose track the evaluation that made this state changed (or dropped)."""

    def active_pairs(self) -> frozenset[PairKey]:
        """The pairs whose track is pending or firing."""
        if self.active is not None:
            return self.active
        return frozenset(p for p, tr in self.tracks.items() if tr.state is not AlertState.INACTIVE)

    def alerts(self, rules: Iterable[Rule]) -> list[Alert]:
        """The alerts that are pending or firing, in rule and label order (the cost follows their number)."""
        by_name = {r.name: r for r in rules}
        out = []
        for pair in self.active_pairs():
            name, key = pair
            tr = self.tracks.get(pair)
            rule = by_name.get(name)
            if rule is None or tr is None or tr.state is AlertState.INACTIVE:
                continue
            out.append(
                Alert(
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
            )
        out.sort(key=lambda a: (a.rule, a.labels))
        return out


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
        self._memo: dict[SeriesKey, tuple[Rule, ...]] = {}

    def for_series(self, key: SeriesKey) -> tuple[Rule, ...]:
        """The rules that watch `key`."""
        hit = self._memo.get(key)
        if hit is None:
            hit = self._memo[key] = tuple(r for r in self.rules if r.watches(key))
        return hit


def alert_labels(rule: Rule, key: SeriesKey) -> Labels:
    """An alert's labels: the series' labels, `metric`, then the rule's own labels."""
    merged = dict(key.labels)
    merged["metric"] = key.metric
    merged.update(rule.labels)
    return tuple(sorted(merged.items()))


class _Run:
    """The working state of one evaluation."""

    def __init__(self, ruleset: RuleSet, buffer: SeriesBuffer, prev: EvalState, in_place: bool = False) -> None:
        self.ruleset = ruleset
        self.buffer = buffer
        self.tracks: Mapping[PairKey, Track] = prev.tracks  # copied on the first change (_tracks_w)
        self.timers: Mapping[PairKey, float] = prev.timers  # copied on the first change (_timers_w)
        # True once the mapping is this evaluation's own to change (copied, or handed over: `in_place`)
        self._own_tracks = in_place and type(prev.tracks) is dict
        self._own_timers = in_place and type(prev.timers) is dict
        self.written: set[PairKey] = set()
        self.prev = prev
        self.transitions: list[Transition] = []
        self.errors: dict[str, str] = {}
        self._rule: Rule | None = None
        self._key: SeriesKey | None = None

    def emit(self, tr: Track, kind: TransitionKind, t: float) -> None:
        rule, key = self._rule, self._key
        assert rule is not None and key is not None
        labels = alert_labels(rule, key)
        tr.annotations = self._render(rule, key, tr, labels)
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
            "time": format_time(tr.time) if math.isfinite(tr.time) else "",
            "rule": rule.name,
            "severity": rule.severity,
        }
        label_map = dict(labels)
        out = []
        for name, template in rule.annotations:
            text, problem = template.render(values, label_map)
            if problem:
                self.errors[rule.name] = f"annotation {name!r}: {problem} (series {key})"
            out.append((name, text))
        return tuple(out)

    def track(self, rule: Rule, series: Series, now: float) -> None:
        """Step one pair through the series' new samples, then through time up to `now`."""
        pair = (rule.name, series.key)
        old = self.tracks.get(pair)
        tr = old.copy() if old is not None else Track()
        self._rule, self._key = rule, series.key
        first = series.first_new(tr.generation, tr.position)
        if tr.generation != series.generation:
            tr.streak = 0
        absent = rule.absent
        finished_at = self.buffer.finished_at(series.key) if absent else None
        cond, need, emit, inactive = rule.condition, rule.consecutive, self.emit, AlertState.INACTIVE
        times, values = series.times, series.values
        for i in range(series.index(first), len(times)):
            t = times[i]
            if absent is not None or tr.state is not inactive:
                advance(rule, tr, t, finished_at, emit, inclusive=False)
            tr.value, tr.step, tr.time, tr.last_time, tr.clock = values[i], series.step_at(i), t, t, t
            tr.streak = tr.streak + 1 if cond.check(series, i) else 0
            if tr.cond or tr.streak >= need:
                set_condition(rule, tr, tr.streak >= need, t, emit)
        tr.generation, tr.position = series.generation, series.end
        self._tracks_w()[pair] = tr
        self.written.add(pair)
        self._settle(rule, pair, tr, finished_at, now)

    def finish(self, pair: PairKey, now: float) -> None:
        """Apply the time-based changes of a pair without new samples up to `now`."""
        rule = self.ruleset.by_name[pair[0]]
        tr = self.tracks[pair]
        if tr is self.prev.tracks.get(pair):
            tr = self._tracks_w()[pair] = tr.copy()
            self.written.add(pair)
        self._rule, self._key = rule, pair[1]
        self._settle(rule, pair, tr, self.buffer.finished_at(pair[1]) if rule.absent else None, now)

    def _settle(self, rule: Rule, pair: PairKey, tr: Track, finished_at: float | None, now: float) -> None:
        if rule.absent is None and tr.state is AlertState.INACTIVE:
            if pair in self.timers:
                del self._timers_w()[pair]
            return
        advance(rule, tr, now, finished_at, self.emit, inclusive=True)
        due = next_event(rule, tr, finished_at)
        if due is None:
            if pair in self.timers:
                del self._timers_w()[pair]
        elif self.timers.get(pair) != due:
            self._timers_w()[pair] = due

    def _tracks_w(self) -> dict[PairKey, Track]:
        """The tracks, to change: a copy of the previous state's, made once (an evaluation that changes no
        track hands the same mapping on)."""
        if not self._own_tracks:
            self.tracks = dict(self.tracks)
            self._own_tracks = True
        return self.tracks  # type: ignore[return-value]

    def _timers_w(self) -> dict[PairKey, float]:
        """The timers, to change (copied once, as the tracks)."""
        if not self._own_timers:
            self.timers = dict(self.timers)
            self._own_timers = True
        return self.timers  # type: ignore[return-value]


def evaluate(
    ruleset: RuleSet, buffer: SeriesBuffer, now: float, prev: EvalState | None = None, *, in_place: bool = False
) -> Evaluation:
    """Evaluate every rule on the samples that are new since `prev`, and on time up to `now`.

    `in_place`: `prev` is not used again by anyone (the service's engine): its track and timer mappings
    become the new state's, changed where they change, instead of being copied (10,000 series: no copy
    of 10,000 entries per evaluation)."""
    prev = prev or EvalState()
    run = _Run(ruleset, buffer, prev, in_place)
    touched: set[PairKey] = set()
    for series in buffer.changed_since(prev.version):
        for rule in ruleset.for_series(series.key):
            emitted = len(run.transitions)
            try:
                run.track(rule, series, now)
            except Exception as exc:  # One bad rule must not stop the others.
                del run.transitions[emitted:]
                run.errors[rule.name] = f"{type(exc).__name__}: {exc} (series {series.key})"
            touched.add((rule.name, series.key))
    for pair in [p for p, t in run.timers.items() if t <= now and p not in touched]:
        touched.add(pair)
        if pair[0] not in ruleset.by_name:
            del run._timers_w()[pair]
            continue
        emitted = len(run.transitions)
        try:
            run.finish(pair, now)
        except Exception as exc:
            del run.transitions[emitted:]
            run.errors[pair[0]] = f"{type(exc).__name__}: {exc} (series {pair[1]})"
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
    run.transitions.sort(key=lambda t: (t.time, t.rule, t.labels))
    state = EvalState(
        run.tracks, run.timers, buffer.version, frozenset(ruleset.by_name), frozenset(active), frozenset(run.written)
    )
    return Evaluation(now, state, tuple(run.transitions), run.errors)


def _drop_unknown_rules(run: _Run, ruleset: RuleSet) -> bool:
    """Forget the tracks of rules that are gone (after a reload); say whether there were any."""
    if run.prev.rule_names - ruleset.by_name.keys():
        run.tracks = {p: t for p, t in run.tracks.items() if p[0] in ruleset.by_name}
        run.timers = {p: t for p, t in run.timers.items() if p[0] in ruleset.by_name}
        return True
    return False
