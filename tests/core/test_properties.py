"""Properties: the transitions don't depend on how the samples were batched."""

from __future__ import annotations

import itertools
import math

from core_helpers import rule
from hypothesis import given, settings
from hypothesis import strategies as st

from alertd.buffer import BufferLimits, SeriesBuffer
from alertd.dryrun import Replay
from alertd.model import Sample, SeriesKey
from alertd.rules import RuleSet
from alertd.rules.evaluate import EvalState, evaluate
from alertd.rules.state import Track

RULES = [
    rule("{name: nf, metric: loss, condition: nonfinite}"),
    rule("{name: hi, metric: loss, condition: '> 5', for: 25s, keep_firing_for: 15s}"),
    rule("{name: up, metric: loss, condition: increasing, consecutive: 2}"),
    rule("{name: sp, metric: loss, condition: {spike: {ratio: 2, baseline: 4 samples, min_samples: 2}}}"),
    rule("{name: gone, metric: loss, condition: {absent: 35s}}"),
    rule("{name: hi3, metric: loss, condition: '> 5', consecutive: 3}"),
]
values = st.one_of(st.floats(0, 10), st.sampled_from([math.nan, math.inf, -math.inf]))
stream = st.lists(st.tuples(st.sampled_from(["a", "b"]), st.integers(1, 30), values), min_size=1, max_size=60)


def build(spec: list[tuple[str, int, float]]) -> list[Sample]:
    t, steps, out = 0.0, {"a": 0, "b": 0}, []
    for run, gap, v in spec:
        t += gap
        steps[run] += 1
        out.append(Sample(SeriesKey("loss", (("run", run),)), t, steps[run], v))
    return out


def transitions(batches: list[list[Sample]], until: float) -> list[tuple[float, str, str, tuple]]:  # type: ignore[type-arg]
    replay = Replay(RuleSet(RULES), BufferLimits(max_samples=64, max_age=1e6))
    out = []
    for batch in batches:
        out += replay.feed(batch).transitions
    out += replay.advance(until).transitions
    return sorted((t.time, t.rule, t.state.value, t.labels) for t in out)


@settings(max_examples=150, deadline=None)
@given(spec=stream, cuts=st.lists(st.integers(0, 60), max_size=6), tail=st.integers(0, 100))
def test_one_batch_or_many_give_the_same_transitions(spec, cuts, tail) -> None:  # type: ignore[no-untyped-def]
    data = build(spec)
    until = data[-1].time + tail
    one_by_one = transitions([[s] for s in data], until)
    points = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    chunks = [data[a:b] for a, b in itertools.pairwise(points)]
    assert transitions([data], until) == one_by_one
    assert transitions(chunks, until) == one_by_one


@settings(max_examples=100, deadline=None)
@given(spec=stream, cuts=st.lists(st.integers(0, 60), max_size=6), tail=st.integers(0, 100))
def test_the_kept_set_of_active_alerts_is_the_tracks_that_are_active(spec, cuts, tail) -> None:  # type: ignore[no-untyped-def]
    data = build(spec)
    replay = Replay(RuleSet(RULES), BufferLimits(max_samples=64, max_age=1e6))
    points = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    for a, b in itertools.pairwise(points):
        replay.feed(data[a:b])
        state = replay.state
        assert state.active == {p for p, tr in state.tracks.items() if tr.state.value != "inactive"}
    replay.advance(data[-1].time + tail)
    state = replay.state
    assert state.active == {p for p, tr in state.tracks.items() if tr.state.value != "inactive"}


def tracks(batches: list[list[Sample]], in_place: bool) -> dict[tuple[str, SeriesKey], tuple[object, ...]]:
    """Every (rule, series) track after the batches, field by field (NaN as a string: comparable)."""
    ruleset, buffer = RuleSet(RULES), SeriesBuffer(BufferLimits(max_samples=64, max_age=1e6))
    state = EvalState()
    for batch in batches:
        buffer.append(batch)
        state = evaluate(ruleset, buffer, batch[-1].time, state, in_place=in_place, park=True).state
    return {p: tuple(repr(getattr(tr, f)) for f in Track.FIELDS) for p, tr in state.tracks.items()}


@settings(max_examples=100, deadline=None)
@given(spec=stream, in_place=st.booleans())
def test_one_sample_per_evaluation_leaves_the_tracks_one_batch_does(spec, in_place) -> None:  # type: ignore[no-untyped-def]
    """The service's tick (one new sample, a quiet pair stepped at once: `_Run.quiet_ticks`) leaves every field of
    every track as judging the same samples in one batch does: the last value, step and time seen, the position."""
    data = build(spec)
    assert tracks([[s] for s in data], in_place) == tracks([data], in_place=False)


def ticked(data: list[Sample], lags: list[float], until: float, in_place: bool) -> tuple[object, ...]:
    """The service's way: one evaluation per new sample, each a little after it (`lags`: fractions of the gap to the
    next sample), then one at `until`; the transitions, every field of every track, the timers."""
    ruleset, buffer = RuleSet(RULES), SeriesBuffer(BufferLimits(max_samples=64, max_age=1e6))
    state, out = EvalState(), []
    for k, s in enumerate(data):
        buffer.append([s])
        gap = data[k + 1].time - s.time if k + 1 < len(data) else until - s.time
        ev = evaluate(ruleset, buffer, s.time + gap * lags[k % len(lags)], state, in_place=in_place)
        state, out = ev.state, out + list(ev.transitions)
    ev = evaluate(ruleset, buffer, until, state, in_place=in_place)
    out += ev.transitions
    fields = {p: tuple(repr(getattr(tr, f)) for f in Track.FIELDS) for p, tr in ev.state.tracks.items()}
    return sorted((t.time, t.rule, t.state.value, t.labels) for t in out), fields, dict(ev.state.timers)


@settings(max_examples=200, deadline=None)
@given(
    spec=st.lists(st.tuples(st.sampled_from(["a", "b"]), st.integers(1, 60), values), min_size=1, max_size=60),
    lags=st.lists(st.sampled_from([0.0, 0.0, 0.25, 0.5, 0.99]), min_size=1, max_size=8),
    tail=st.integers(0, 100),
    ended=st.one_of(st.none(), st.integers(0, 59)),
    in_place=st.booleans(),
)
def test_the_service_tick_gives_what_one_batch_gives(spec, lags, tail, ended, in_place) -> None:  # type: ignore[no-untyped-def]
    """One sample per evaluation, each evaluation a while after its sample (quiet pairs noted at once, in place when
    the state is handed over, streaks counted, absences timed: `_Run.quiet_ticks`) gives the transitions, the tracks
    and the timers that judging all the samples in one batch gives; gaps longer than the absence's, and run `a`
    ending somewhere (`ended`), included."""
    data = build(spec)
    if ended is not None:  # run a's end, marked half a second after the sample it follows
        k = ended % len(data)
        data.insert(k + 1, Sample(SeriesKey("run.finished", (("run", "a"),)), data[k].time + 0.5, None, 1.0))
    until = data[-1].time + tail
    ruleset, buffer = RuleSet(RULES), SeriesBuffer(BufferLimits(max_samples=64, max_age=1e6))
    buffer.append(data)
    one = evaluate(ruleset, buffer, data[-1].time)
    last = evaluate(ruleset, buffer, until, one.state)
    fields = {p: tuple(repr(getattr(tr, f)) for f in Track.FIELDS) for p, tr in last.state.tracks.items()}
    batch = sorted((t.time, t.rule, t.state.value, t.labels) for t in [*one.transitions, *last.transitions])
    got, got_fields, got_timers = ticked(data, lags, until, in_place)
    assert (got, got_fields) == (batch, fields)
    if ended is None:
        assert got_timers == dict(last.state.timers)
    else:  # a pair quiet when its run ended keeps its timer (a look then that changes nothing), as it always has
        assert got_timers.items() >= dict(last.state.timers).items()


def test_a_tick_after_the_run_ended_times_no_absence() -> None:
    """A sample of a run that has ended times no absence: the tick leaves the pair no timer, as one batch does."""
    loss = SeriesKey("loss", (("run", "a"),))
    data = [Sample(loss, 1.0, 1, 1.0), Sample(SeriesKey("run.finished", (("run", "a"),)), 2.0, None, 1.0)]
    data += [Sample(loss, 10.0, 2, 1.0), Sample(loss, 11.0, 3, 1.0)]
    _, _, timers = ticked(data, [0.0], 12.0, in_place=True)
    assert ("gone", loss) not in timers


@settings(max_examples=60, deadline=None)
@given(spec=stream)
def test_an_evaluation_not_in_place_leaves_the_previous_state_as_it_was(spec) -> None:  # type: ignore[no-untyped-def]
    """Without `in_place`, a tick changes no track of the state it was given (it notes on copies)."""
    data = build(spec)
    ruleset, buffer = RuleSet(RULES), SeriesBuffer(BufferLimits(max_samples=64, max_age=1e6))
    state = EvalState()
    for s in data:
        buffer.append([s])
        before = {p: tuple(repr(getattr(tr, f)) for f in Track.FIELDS) for p, tr in state.tracks.items()}
        new = evaluate(ruleset, buffer, s.time, state).state
        assert {p: tuple(repr(getattr(tr, f)) for f in Track.FIELDS) for p, tr in state.tracks.items()} == before
        state = new


def test_a_firing_alert_whose_run_ended_resolves_at_the_end_on_its_next_sample() -> None:
    """A NaN alert firing, its run ends, and another NaN comes: the tick resolves it at the end (and it fires again
    on the new sample), as one batch does; it is not kept firing as a steady one."""
    loss = SeriesKey("loss", (("run", "a"),))
    data = [Sample(loss, 1.0, 1, math.nan), Sample(loss, 2.0, 2, math.nan)]
    data += [Sample(SeriesKey("run.finished", (("run", "a"),)), 3.0, None, 1.0), Sample(loss, 4.0, 3, math.nan)]
    ticks, _, _ = ticked(data, [0.0], 5.0, in_place=True)
    assert [(t, rule, state) for t, rule, state, _ in ticks if rule == "nf"] == [
        (1.0, "nf", "firing"),
        (3.0, "nf", "resolved"),
        (4.0, "nf", "firing"),
    ]
    assert ticks == transitions([data], 5.0)


def test_a_firing_alert_whose_run_ends_beside_its_next_sample_resolves_at_the_end() -> None:
    """The run's end and the firing alert's next sample in one evaluation (the series' one new sample): the alert
    resolves at the end and fires again on the sample, as one batch gives; it is not kept firing as a steady one."""
    loss = SeriesKey("loss", (("run", "a"),))
    first = [Sample(loss, 1.0, 1, math.nan), Sample(loss, 2.0, 2, math.nan)]
    then = [Sample(SeriesKey("run.finished", (("run", "a"),)), 3.0, None, 1.0), Sample(loss, 4.0, 3, math.nan)]
    ruleset, buffer = RuleSet(RULES), SeriesBuffer(BufferLimits(max_samples=64, max_age=1e6))
    state, got = EvalState(), []
    for batch in ([first[0]], [first[1]], then):
        buffer.append(batch)
        ev = evaluate(ruleset, buffer, batch[-1].time, state, in_place=True)
        state, got = ev.state, got + list(ev.transitions)
    nf = [(t.time, t.state.value) for t in got if t.rule == "nf"]
    assert nf == [(1.0, "firing"), (3.0, "resolved"), (4.0, "firing")]
