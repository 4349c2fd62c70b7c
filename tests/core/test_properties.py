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
        state = evaluate(ruleset, buffer, batch[-1].time, state, in_place=in_place).state
    return {p: tuple(repr(getattr(tr, f)) for f in Track.__slots__) for p, tr in state.tracks.items()}


@settings(max_examples=100, deadline=None)
@given(spec=stream, in_place=st.booleans())
def test_one_sample_per_evaluation_leaves_the_tracks_one_batch_does(spec, in_place) -> None:  # type: ignore[no-untyped-def]
    """The service's tick (one new sample, a quiet pair stepped at once: `_Run._quiet_tick`) leaves every field of
    every track as judging the same samples in one batch does: the last value, step and time seen, the position."""
    data = build(spec)
    assert tracks([[s] for s in data], in_place) == tracks([data], in_place=False)
