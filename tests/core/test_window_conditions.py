"""Window aggregates and zscore: time tables at the edges, and properties against from-scratch references."""

from __future__ import annotations

import gc
import itertools
import random
from bisect import bisect_left, bisect_right
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import window_helpers as ref
from core_helpers import INF, NAN, rule, samples, series, table
from hypothesis import given, settings
from hypothesis import strategies as st

from alertd.buffer import BufferLimits, Series, SeriesBuffer
from alertd.config import load_config
from alertd.dryrun import Replay
from alertd.errors import ConfigError
from alertd.model import Sample, SeriesKey
from alertd.rules import RuleSet, evaluate
from alertd.rules.conditions import Span, Spike, WindowAggregate, ZScore
from alertd.rules.plateau import Plateau
from alertd.rules.windows import Running, moved_start


def firing_times(r_text: str, values: list[float], limits: BufferLimits | None = None) -> list[tuple[float, str]]:
    """(time, state) of the rule's transitions over `values` at t = 0, 10, 20, ..."""
    return [(t, s) for t, _, s in table([rule(r_text)], samples(series(), values), limits=limits)]


# --- avg and the other aggregates, as time tables -------------------------------------------------------------


def test_avg_over_samples_is_judged_once_the_window_is_full() -> None:
    r = "{name: a, metric: loss, condition: {avg: {over: 3 samples}, op: '>', value: 2}}"
    # avg of (9) and (9, 9) is 9 but the window is not full yet; (9, 9, 9) at t=20 is.
    assert firing_times(r, [9, 9, 9, 1, 1, 1]) == [(20.0, "firing"), (50.0, "resolved")]  # (9, 1, 1) is 3.67


def test_avg_at_exactly_the_threshold() -> None:
    gt = "{name: a, metric: loss, condition: {avg: {over: 2 samples}, op: '>', value: 2}}"
    ge = "{name: a, metric: loss, condition: {avg: {over: 2 samples}, op: '>=', value: 2}}"
    assert firing_times(gt, [1, 3, 1]) == []  # (1+3)/2 == 2
    assert firing_times(ge, [1, 3, 1]) == [(10.0, "firing")]  # (3+1)/2 == 2 too


def test_nan_and_inf_inside_the_window_are_left_out() -> None:
    r = "{name: a, metric: loss, condition: {avg: {over: 3 samples}, op: '>', value: 2}}"
    # At t=20 the window is (3, NaN, Inf): the finite values' avg is 3; at t=30 (NaN, Inf, 1): 1.
    assert firing_times(r, [3, NAN, INF, 1]) == [(20.0, "firing"), (30.0, "resolved")]


def test_a_window_of_only_non_finite_values_is_not_judged() -> None:
    r = "{name: a, metric: loss, condition: {max: {over: 2 samples}, op: '<', value: 100}}"
    assert firing_times(r, [NAN, INF, -INF, 5]) == [(30.0, "firing")]


def test_min_samples_counts_finite_values() -> None:
    r = "{name: a, metric: loss, condition: {avg: {over: 4 samples, min_samples: 3}, op: '>', value: 2}}"
    # (5, 5, NaN, NaN) and (NaN, NaN, 5, 5) hold two finite values; (NaN, 5, 5, 5) at t=60 three.
    assert firing_times(r, [5, 5, NAN, NAN, 5, 5, 5]) == [(60.0, "firing")]


def test_a_time_window_is_left_open() -> None:
    r = "{name: a, metric: loss, condition: {sum: {over: 30s}, op: '>=', value: 3}}"
    # Samples every 10 s: (t-30, t] holds three of them: 1+1+1 = 3 at t=20; at t=30 the first has left.
    assert firing_times(r, [1, 1, 1, 0, 0]) == [(20.0, "firing"), (30.0, "resolved")]
    assert firing_times(r, [10, 0, 0, 0]) == [(0.0, "firing"), (30.0, "resolved")]


def test_min_max_count_stddev_quantile() -> None:
    def fires(cond: str, values: list[float]) -> list[tuple[float, str]]:
        return firing_times(f"{{name: a, metric: loss, condition: {cond}}}", values)

    assert fires("{min: {over: 3 samples}, op: '>', value: 1}", [2, 2, 2, 1, 2, 2, 2]) == [
        (20.0, "firing"),
        (30.0, "resolved"),
        (60.0, "firing"),
    ]
    assert fires("{max: {over: 2 samples}, op: '>=', value: 5}", [1, 5, 1, 1]) == [(10.0, "firing"), (30.0, "resolved")]
    # count of finite values over 3 samples: 3, 2 (one NaN), 1 (two)
    assert fires("{count: {over: 3 samples}, op: '<', value: 2}", [1, 1, 1, NAN, NAN, 1, 1]) == [
        (40.0, "firing"),
        (60.0, "resolved"),
    ]
    # population stddev of (1, 3) is 1 (the sample stddev would be 1.414...)
    assert fires("{stddev: {over: 2 samples}, op: '>=', value: 1}", [2, 2, 1, 3, 3]) == [
        (30.0, "firing"),
        (40.0, "resolved"),
    ]
    assert fires("{stddev: {over: 2 samples}, op: '>', value: 1}", [2, 2, 1, 3, 3]) == []
    # quantile 0.9 of (0, 10) is 9 (linear), of (0, 0, 10) is 8
    q = "{quantile: {over: 3 samples, q: 0.9}, op: '>=', value: 8}"
    assert fires(q, [0, 0, 10]) == [(20.0, "firing")]
    assert fires(q.replace("8}", "8.5}"), [0, 0, 10]) == []


def test_avg_against_the_window_before_it() -> None:
    r = "{name: d, metric: loss, condition: {avg: {over: 2 samples, baseline: 4 samples}, op: '>', ratio: 1.5}}"
    # At t=60 the last two (3, 3) avg 3 against (2, 2, 2, 2) -> 1.5: not above; at t=70 (3, 4) -> 1.75.
    assert firing_times(r, [1, 2, 2, 2, 2, 3, 3, 4]) == [(70.0, "firing")]
    # Not judged before both windows are full (six samples).
    assert firing_times(r, [1, 1, 1, 1, 9]) == []


def test_a_baseline_at_or_below_zero_is_not_judged() -> None:
    r = "{name: d, metric: loss, condition: {avg: {over: 1 samples, baseline: 2 samples}, op: '>', ratio: 1.5}}"
    assert firing_times(r, [0, 0, 5, -1, -1, 5]) == []


def test_a_time_baseline_is_the_duration_before_the_window() -> None:
    r = "{name: d, metric: loss, condition: {avg: {over: 20s, baseline: 30s}, op: '>=', ratio: 2}}"
    # At t=50: recent (30, 50] = 4, 4; baseline (0, 30] = 2, 2, 2 (t=0's 100 is outside).
    assert firing_times(r, [100, 2, 2, 2, 4, 4]) == [(50.0, "firing")]


def test_a_restart_that_rewinds_recomputes_the_window() -> None:
    r = rule("{name: a, metric: loss, condition: {avg: {over: 3 samples}, op: '>', value: 5}}")
    key = series()
    data = [Sample(key, t * 10.0, step, v) for t, (step, v) in enumerate([(0, 1), (1, 1), (2, 9), (3, 9), (4, 9)])]
    # (1, 9, 9) fires at t=30. The run resumes from step 1 at t=50: steps 1.. are replaced, the window (1, 1)
    # is not full; it is (1, 9, 9) again at the new step 3 (t=70).
    data += [Sample(key, 50.0 + t * 10.0, step, v) for t, (step, v) in enumerate([(1, 1), (2, 9), (3, 9)])]
    assert table([r], data) == [(30.0, "a", "firing"), (50.0, "a", "resolved"), (70.0, "a", "firing")]


def test_trimmed_samples_leave_the_window() -> None:
    # A 100 s window over a buffer that keeps 3 samples: the window holds what the buffer holds.
    r = "{name: a, metric: loss, condition: {count: {over: 100s}, op: '>=', value: 4}}"
    assert firing_times(r, [1, 1, 1, 1, 1, 1], BufferLimits(max_samples=3)) == []
    assert firing_times(r, [1, 1, 1, 1, 1, 1], BufferLimits(max_samples=4)) == [(30.0, "firing")]


# --- zscore ------------------------------------------------------------------------------------------------------


def test_zscore_against_the_window_before() -> None:
    r = "{name: z, metric: loss, condition: {zscore: {over: 4 samples, threshold: 2, direction: up}}}"
    # (1, 3, 1, 3): mean 2, population stddev 1; 4.5 is z=2.5 > 2; 4 is z=2, not above.
    assert firing_times(r, [1, 3, 1, 3, 4]) == []
    assert firing_times(r, [1, 3, 1, 3, 4.5]) == [(40.0, "firing")]
    assert firing_times(r, [1, 3, 1, 3, -0.5]) == []  # up only


def test_zscore_directions() -> None:
    down = "{name: z, metric: loss, condition: {zscore: {over: 4 samples, threshold: 2, direction: down}}}"
    both = "{name: z, metric: loss, condition: {zscore: {over: 4 samples, threshold: 2}}}"
    assert firing_times(down, [1, 3, 1, 3, -0.5]) == [(40.0, "firing")]
    assert firing_times(down, [1, 3, 1, 3, 4.5]) == []
    assert firing_times(both, [1, 3, 1, 3, 4.5]) == [(40.0, "firing")]
    assert firing_times(both, [1, 3, 1, 3, -0.5]) == [(40.0, "firing")]


def test_zscore_of_a_flat_window_is_not_judged() -> None:
    r = "{name: z, metric: loss, condition: {zscore: {over: 3 samples, threshold: 3}}}"
    assert firing_times(r, [2, 2, 2, 1000, INF, NAN]) == []  # stddev 0, then non-finite values


def test_zscore_needs_a_full_window_and_leaves_out_non_finite() -> None:
    r = "{name: z, metric: loss, condition: {zscore: {over: 4 samples, threshold: 2}}}"
    assert firing_times(r, [1, 3, 1, 100]) == []  # only three before
    assert firing_times(r, [1, 3, NAN, 3, 1, 100]) == [(50.0, "firing")]  # (3, NaN, 3, 1): three finite


# --- properties ----------------------------------------------------------------------------------------------------

finite = st.floats(-1e6, 1e6, allow_nan=False).map(lambda v: v if abs(v) > 1e-300 else 0.0)
values_st = st.lists(
    st.one_of(finite, st.sampled_from([NAN, INF, -INF, 0.0, -0.0, 1.0, 1e300, -1e300])), min_size=1, max_size=60
)
span_st = st.one_of(
    st.integers(1, 8).map(lambda n: Span(samples=n)),
    st.sampled_from([5.0, 10.0, 25.0, 60.0]).map(lambda s: Span(seconds=s)),
)
kinds = st.sampled_from(["avg", "min", "max", "sum", "count", "stddev", "quantile"])


@settings(max_examples=200, deadline=None)
@given(
    values=values_st,
    gaps=st.lists(st.integers(0, 12), min_size=1, max_size=5),
    kind=kinds,
    over=span_st,
    base=st.one_of(st.none(), span_st),
    q=st.floats(0, 1),
    min_samples=st.integers(0, 3),
    keep=st.integers(3, 40),
)
def test_the_running_window_equals_a_from_scratch_one(values, gaps, kind, over, base, q, min_samples, keep) -> None:  # type: ignore[no-untyped-def]
    """At every sample, judged as it arrives (with the buffer trimming old samples), and again in any order
    afterwards: the aggregate is the exact one, bit for bit."""
    if base is not None and (base.samples is None) != (over.samples is None):
        base = None
    ms = 1 if min_samples == 0 and kind != "count" else min_samples
    if over.samples is not None:
        ms = min(ms, over.samples)
    cond = WindowAggregate(kind, over, ">", value=None if base else 0.0, ratio=1.0 if base else None, baseline=base,
                           q=q, min_samples=ms)  # fmt: skip
    for s, i in ref.fill(values, gaps, BufferLimits(max_samples=keep, max_age=1e9)):
        want = ref.measure(kind, s.times, s.values, s.start, i, over, base, q, ms)
        got = cond.measure(s, i)
        assert (got is None, got) == (want is None, want) or (got != got and want != want), (i, got, want)
    s = list(ref.fill(values, gaps, BufferLimits(max_samples=keep, max_age=1e9)))[-1][0]
    order = list(range(s.start, len(s.times)))
    random.Random(len(values)).shuffle(order)
    for i in order:  # jumps back and forth: rebuilt where it can't advance, the same answers
        want = ref.measure(kind, s.times, s.values, s.start, i, over, base, q, ms)
        got = cond.measure(s, i)
        assert (got is None, got) == (want is None, want) or (got != got and want != want), (i, got, want)


calm = st.floats(0.5, 4.0)  # a training's everyday values
OPS_ = {">": lambda a, b: a > b, ">=": lambda a, b: a >= b, "<": lambda a, b: a < b, "<=": lambda a, b: a <= b}


@settings(max_examples=300, deadline=None)
@given(
    values=st.lists(st.one_of(calm, calm, calm, st.sampled_from([NAN, INF, -INF, 0.0, 9.0, -1e300])), max_size=90),
    gaps=st.lists(st.integers(-4, 12), min_size=1, max_size=5),
    kind=st.sampled_from(["min", "max", "quantile", "avg"]),
    over=span_st,
    op=st.sampled_from(list(OPS_)),
    value=st.one_of(calm, st.sampled_from([0.5, 4.0, 9.0, 1e9, -1.0])),
    q=st.floats(0, 1),
    keep=st.integers(3, 100),
)
def test_a_sorted_window_judged_as_samples_arrive_gives_the_from_scratch_verdict(
    values, gaps, kind, over, op, value, q, keep
) -> None:  # type: ignore[no-untyped-def]
    """`check` of a min, max, quantile or avg as the service asks it (each sample as it arrives, times sometimes going
    back), where the window need not move while the extremes settle the verdict, then in any order: the verdict of
    the from-scratch aggregate."""
    cond = WindowAggregate(kind, over, op, value=value, q=q)

    def want(s, i):  # type: ignore[no-untyped-def]
        got = ref.measure(kind, s.times, s.values, s.start, i, over, None, q, 1)
        return got is not None and OPS_[op](got, value)

    s = None
    for s, i in ref.fill(values, gaps, BufferLimits(max_samples=keep, max_age=1e9)):
        assert cond.check(s, i) == want(s, i), (i, s.values[i])
    if s is not None:
        order = list(range(s.start, len(s.times)))
        random.Random(len(values)).shuffle(order)
        for i in order:
            assert cond.check(s, i) == want(s, i), (i, s.values[i])


def test_an_avg_over_seconds_settled_by_its_extremes_counts_its_oldest_value() -> None:
    """An avg over 10 s, each sample judged as it arrives: 9 then 1s. Its window stays where it stood while the
    extremes settle a verdict; those extremes are of every value in it, the oldest too (9: the avg is above 3 until
    enough 1s join it), and a window near its threshold (the last samples) is moved and judged at each sample."""
    values = [9.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 2.9, 3.5, 4.0, 9.0, 9.0, 9.0]
    s = Series(SeriesKey("loss", ()))
    cond = WindowAggregate("avg", Span(seconds=10.0), ">", value=3.0)
    got, want = [], []
    for t, v in enumerate(values):
        s.append(float(t), t, v)
        got.append(cond.check(s, len(s.times) - 1))
        window = values[max(0, t - 9) : t + 1]  # the samples of the last 10 s: times in (t - 10, t]
        want.append(sum(window) / len(window) > 3.0)
    assert got == want
    assert want[:4] == [True, True, True, False] and want[-3:] == [False, True, True]


@settings(max_examples=150, deadline=None)
@given(
    values=values_st, gaps=st.lists(st.integers(0, 12), min_size=1, max_size=5), over=span_st, keep=st.integers(3, 40)
)
def test_the_running_zscore_equals_a_from_scratch_one(values, gaps, over, keep) -> None:  # type: ignore[no-untyped-def]
    cond = ZScore(over, 3.0)
    for s, i in ref.fill(values, gaps, BufferLimits(max_samples=keep, max_age=1e9)):
        got, want = cond.score(s, i), ref.zscore(s.times, s.values, s.start, i, over)
        assert got == want or (got != got and want != want), (i, got, want)


def test_quantile_matches_numpy_linear() -> None:
    np = pytest.importorskip("numpy")
    rng = random.Random(7)
    key = SeriesKey("x", ())
    s = Series(key)
    for n in range(300):
        s.append(float(n), n, rng.uniform(-5, 5))
    for q in (0.0, 0.1, 0.5, 0.9, 0.99, 1.0):
        cond = WindowAggregate("quantile", Span(samples=100), ">", value=0.0, q=q)
        for i in range(99, 300, 37):
            got = cond.measure(s, i)
            assert got == pytest.approx(float(np.quantile(np.array(s.values[i - 99 : i + 1]), q)), rel=1e-12, abs=1e-12)


# --- batching: the same transitions however the samples come -----------------------------------------------------

WINDOW_RULES = [
    rule("{name: avg, metric: loss, condition: {avg: {over: 4 samples}, op: '>', value: 5}}"),
    rule("{name: tavg, metric: loss, condition: {avg: {over: 35s}, op: '>', value: 5}, for: 20s}"),
    rule("{name: q, metric: loss, condition: {quantile: {over: 5 samples, q: 0.9}, op: '>', value: 8}}"),
    rule("{name: div, metric: loss, condition: {avg: {over: 2 samples, baseline: 4 samples}, op: '>', ratio: 1.5}}"),
    rule("{name: z, metric: loss, condition: {zscore: {over: 5 samples, threshold: 1.5}}, consecutive: 2}"),
    rule("{name: p, metric: loss, condition: {plateau: {patience: 3, min_delta: 0.5}}}"),
    rule("{name: pmax, metric: loss, condition: {plateau: {patience: 2, mode: max}}}"),
]
stream = st.lists(
    st.tuples(
        st.sampled_from(["a", "b"]), st.integers(1, 30), st.one_of(st.floats(0, 10), st.sampled_from([NAN, INF]))
    ),
    min_size=1,
    max_size=60,
)


def _build(spec: list[tuple[str, int, float]]) -> list[Sample]:
    t, steps, out = 0.0, {"a": 0, "b": 0}, []
    for run, gap, v in spec:
        t += gap
        steps[run] += 1
        out.append(Sample(SeriesKey("loss", (("run", run),)), t, steps[run], v))
    return out


def _transitions(batches: list[list[Sample]], until: float) -> list[tuple[float, str, str, tuple]]:  # type: ignore[type-arg]
    """The same Rule objects for every replay, as test_properties: each replay's buffer is its own."""
    replay = Replay(RuleSet(WINDOW_RULES), BufferLimits(max_samples=64, max_age=1e6))
    out = []
    for batch in batches:
        out += replay.feed(batch).transitions
    out += replay.advance(until).transitions
    return sorted((t.time, t.rule, t.state.value, t.labels) for t in out)


@settings(max_examples=150, deadline=None)
@given(spec=stream, cuts=st.lists(st.integers(0, 60), max_size=6), tail=st.integers(0, 100))
def test_window_rules_give_the_same_transitions_however_batched(spec, cuts, tail) -> None:  # type: ignore[no-untyped-def]
    data = _build(spec)
    until = data[-1].time + tail
    one_by_one = _transitions([[s] for s in data], until)
    points = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    assert _transitions([data], until) == one_by_one
    assert _transitions([data[a:b] for a, b in itertools.pairwise(points)], until) == one_by_one


def test_the_same_rules_over_two_buffers_do_not_mix() -> None:
    """One Rule object judges two buffers' series of the same key (a dry-run beside the service): each gets
    its own answers."""
    r = rule("{name: a, metric: loss, condition: {avg: {over: 3 samples}, op: '>', value: 5}}")
    high, low = Replay(RuleSet([r])), Replay(RuleSet([r]))
    fired = []
    for n, (hv, lv) in enumerate(zip([9, 9, 9, 9], [1, 1, 1, 1], strict=True)):
        fired += high.feed(samples(series(), [hv], start=n * 10.0)).transitions
        fired += low.feed(samples(series(), [lv], start=n * 10.0)).transitions
    assert [(t.time, t.state.value) for t in fired] == [(20.0, "firing")]


def test_rule_sets_judging_one_buffer_in_turns_each_get_their_own_answers() -> None:
    """More rule sets than a series keeps its `Watch` for, each judging the same buffer tick by tick (as a bench
    does two), one of them twice over: each gives the transitions it gives alone on a buffer of its own."""
    texts = [
        "{name: a, metric: loss, condition: '> 5'}",
        "{name: a, metric: loss, condition: '> 2'}",
        "{name: b, metric: [loss, acc], condition: {avg: {over: 3 samples}, op: '<', value: 3}}",
        "{name: c, metric: loss, condition: {spike: {ratio: 2, baseline: 4 samples, min_samples: 2}}}",
        "{name: d, metric: acc, condition: {quantile: {over: 4 samples, q: 0.5}, op: '>', value: 4}}",
        "{name: e, metric: loss, condition: increasing, consecutive: 2}",
    ]
    rulesets = [RuleSet([rule(t)]) for t in texts] + [RuleSet([rule(texts[2]), rule(texts[3])])]
    keys = [series("loss"), series("acc"), series("loss", run="r2")]
    values = [1, 6, 2, 9, 1, 1, 7, 3, 8, 2, 2, 9, 0, 0, 0, 5, 9]

    def ticks(bufs, rs_list):  # type: ignore[no-untyped-def]
        states: list[Any] = [None] * len(rs_list)
        got: list[list[tuple[float, str, str, str]]] = [[] for _ in rs_list]
        for n, v in enumerate(values):
            for b in set(bufs):
                b.append([Sample(k, n * 10.0, n, float(v + j)) for j, k in enumerate(keys)])
            for j, (b, rs) in enumerate(zip(bufs, rs_list, strict=True)):
                ev = evaluate(rs, b, n * 10.0, states[j], in_place=True)
                states[j] = ev.state
                got[j] += [(t.time, t.rule, t.state.value, str(t.labels)) for t in ev.transitions]
        return got

    shared = SeriesBuffer(BufferLimits(max_samples=50, max_age=1e9))
    together = ticks([shared] * len(rulesets), rulesets)
    alone = [ticks([SeriesBuffer(BufferLimits(max_samples=50, max_age=1e9))], [rs])[0] for rs in rulesets]
    assert together == alone
    assert all(alone) and alone[0] != alone[1]


def test_the_memo_holds_an_entry_per_live_series_and_the_entries_go_with_them() -> None:
    """The running state lives on each series: as many entries as series judged, and a dropped series (an
    evicted one, a finished dry-run's) takes its entry with it."""
    cond = WindowAggregate("avg", Span(samples=2), ">", value=0.0)
    kept = []
    for n in range(200):
        s = Series(SeriesKey("x", (("run", str(n)),)))
        kept.append(s)
        s.append(0.0, 0, 1.0)
        s.append(1.0, 1, 3.0)
        assert cond.measure(s, 1) == 2.0
    assert len(cond.memo) == 200
    del kept[100:], s
    gc.collect()
    assert len(cond.memo) == 100


def test_a_condition_gone_takes_its_entries_off_the_series() -> None:
    """Rules reloaded: the old conditions' running windows don't stay on the series the service keeps."""
    s = Series(SeriesKey("x"))
    for t in range(30):
        s.append(float(t), t, float(t % 4))
    old = WindowAggregate("quantile", Span(samples=20), ">", value=0.0, q=0.9)
    new = WindowAggregate("quantile", Span(samples=20), ">", value=0.0, q=0.9)
    assert old.measure(s, 29) == new.measure(s, 29) == 3.0
    assert s.memo is not None and len(s.memo) == 2
    del old
    gc.collect()
    assert list(s.memo) == [new.memo.token]


def test_a_dropped_buffer_takes_its_memo_entries_with_it() -> None:
    r = rule("{name: a, metric: loss, condition: {quantile: {over: 3 samples, q: 0.5}, op: '>', value: 5}}")
    replay = Replay(RuleSet([r]))
    replay.feed(samples(series(), [1, 2, 3, 4]))
    assert len(r.condition.memo) == 1  # type: ignore[attr-defined]
    del replay
    gc.collect()
    assert len(r.condition.memo) == 0  # type: ignore[attr-defined]


def test_two_threads_evaluating_the_same_rules_get_the_serial_answers() -> None:
    """The service and a dry-run may evaluate the same Rule objects at once, each on its own buffer."""
    rng = random.Random(3)
    runs = [[rng.choice([1.0, 2.0, 3.0, 9.0, NAN]) for _ in range(400)] for _ in range(4)]

    def transitions(values: list[float]) -> list[tuple[float, str, str]]:
        replay = Replay(RuleSet(WINDOW_RULES), BufferLimits(max_samples=64, max_age=1e9))
        out = []
        for n in range(0, len(values), 7):
            chunk = samples(series(), values[n : n + 7], start=n * 10.0)
            out += [(t.time, t.rule, t.state.value) for t in replay.feed(chunk).transitions]
        return out

    serial = [transitions(v) for v in runs]
    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(transitions, runs)) == serial
    assert any(serial)


# --- config errors -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("condition", "message"),
    [
        (
            "{avg: {over: 20 samples}, op: '>', ratio: 1.5}",
            "ratio compares with an earlier window: add baseline to avg",
        ),
        ("{avg: {over: 20 samples, baseline: 200 samples}, op: '>', value: 3}", "compared by ratio (`ratio: 1.5`)"),
        ("{avg: {over: 5m, baseline: 20 samples}, op: '>', ratio: 2}", "both numbers of samples or both durations"),
        ("{avg: {over: 0 samples}, op: '>', value: 1}", "over must be a number of samples"),
        ("{avg: {over: soon}, op: '>', value: 1}", "over must be a number of samples"),
        ("{avg: {over: 5}, value: 1}", "avg needs op"),
        ("{avg: {over: 5}, op: '=>', value: 1}", "op must be one of"),
        ("{avg: {over: 5}, op: '>', value: .nan}", "value can't be NaN"),
        ("{avg: {over: 5}, max: {over: 5}, op: '>', value: 1}", "one aggregate per condition"),
        ("{avg: {over: 5, q: 0.5}, op: '>', value: 1}", "q is for quantile"),
        ("{quantile: {over: 5}, op: '>', value: 1}", "quantile needs q"),
        ("{quantile: {over: 5, q: 1.5}, op: '>', value: 1}", "q: Input should be less than or equal to 1"),
        ("{avg: {over: 5, min_samples: 6}, op: '>', value: 1}", "min_samples (6) is more than the window's 5"),
        ("{avg: {over: 5, wndow: 3}, op: '>', value: 1}", "wndow"),
        ("{zscore: {over: 10, threshold: 0}}", "threshold: Input should be greater than 0"),
        ("{zscore: {over: 10, direction: sideways}}", "direction"),
        ("{plateau: {patience: 0}}", "patience: Input should be greater than or equal to 1"),
        ("{plateau: {patience: 3, min_delta: -1}}", "min_delta: Input should be greater than or equal to 0"),
        ("{plateau: {patience: 3, mode: lowest}}", "mode"),
        ("{avg: {over: 2000 samples}, op: '>', value: 1}", "needs buffer.max_samples of at least 2000 (now 1024)"),
        ("{avg: {over: 1h, baseline: 6h}, op: '>', ratio: 2}", "reaches back 25200s, longer than buffer.max_age"),
        ("{zscore: {over: 1024 samples}}", "needs buffer.max_samples of at least 1025"),
    ],
)
def test_bad_window_specs_name_their_place(tmp_path: Path, condition: str, message: str) -> None:
    path = tmp_path / "r.yaml"
    path.write_text(f"rules:\n  - {{name: ok, metric: loss, condition: nonfinite}}\n  - name: a\n    metric: loss\n"
                    f"    condition: {condition}\n")  # fmt: skip
    with pytest.raises(ConfigError) as info:
        load_config([str(path)], {})
    problems = [str(p) for p in info.value.problems]
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"{path}:5: rules[1].condition"), problems  # or a place inside it
    assert message in problems[0], problems


def test_describe_says_what_is_judged() -> None:
    assert rule(
        "{name: a, metric: l, condition: {avg: {over: 20 samples}, op: '>', value: 3}}"
    ).condition.describe() == ("avg over 20 samples > 3")
    cond = rule(
        "{name: a, metric: l, condition: {avg: {over: 20 samples, baseline: 200 samples}, op: '>', ratio: 1.5}}"
    )
    assert cond.condition.describe() == "avg over 20 samples > 1.5x the 200 samples before"


@pytest.mark.parametrize(
    "make",
    [
        lambda: WindowAggregate("avg", Span(samples=3), ">", value=2.5),
        lambda: WindowAggregate("avg", Span(samples=2), ">", ratio=0.9, baseline=Span(samples=2)),
        lambda: WindowAggregate("quantile", Span(seconds=25.0), ">", value=2.5, q=0.5),
        lambda: ZScore(Span(samples=3), 0.5),
        lambda: Spike(1.5, samples=3, min_samples=1),
        lambda: Plateau(patience=2),
    ],
    ids=["avg", "avg-ratio", "quantile-5s", "zscore", "spike", "plateau"],
)
def test_a_restart_that_rewrites_the_newest_sample_gets_a_fresh_window(make: Any) -> None:
    """Steps 0, 1, 2, 3, 5 then a sample at step 4: the restart cuts the one sample of step 5, so the series ends
    where it ended, and the window's running state, made with step 5's value, must not be taken for the new one's
    (the series' memo goes with the cut): the answers are those of a condition that never saw step 5, and not the
    ones it gave before."""
    before = [(0, 5.0), (1, 1.0), (2, 4.0), (3, 2.0), (5, 0.5)]
    after = [*before[:-1], (4, 3.0)]
    cut, fresh = Series(SeriesKey("x")), Series(SeriesKey("x"))
    for step, v in before:
        cut.append(step * 10.0, step, v)
    cond = make()
    last = len(cut.times) - 1
    seen = [_judged(cond, cut, last)]
    assert cut.append(41.0, 4, 3.0) is not None  # a restart, that cut step 5
    assert len(cut.times) - 1 == last
    for step, v in after[:-1]:
        fresh.append(step * 10.0, step, v)
    fresh.append(41.0, 4, 3.0)
    assert _judged(cond, cut, last) == _judged(make(), fresh, last) != seen[0]


def _judged(cond: Any, s: Series, i: int) -> tuple[bool, float | None]:
    """What `cond` says of index `i`, and the number it judges (its measure, z-score, baseline; a plateau's check)."""
    number = getattr(cond, "measure", getattr(cond, "score", getattr(cond, "baseline", None)))
    return cond.check(s, i), None if number is None else number(s, i)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(0, 6), min_size=1, max_size=40),
    st.lists(st.integers(0, 40), min_size=0, max_size=3),
    st.data(),
)
def test_a_window_by_time_starts_where_a_binary_search_finds_it(
    gaps: list[int], backs: list[int], data: st.DataObject
) -> None:
    """`moved_start` (from where the window's running state starts) gives `bisect_right`/`bisect_left` over the same
    times, whatever that state's start; the series' times may go back (its `disorder` then sends it to the search)."""
    s = Series(SeriesKey("x"))
    t = 0.0
    for k, gap in enumerate(gaps):
        t += gap
        s.append(t - 50.0 if k in backs else t, k, 1.0)
        t = t - 50.0 if k in backs else t
    n = len(s.times)
    lo = data.draw(st.integers(0, n - 1))
    hi = data.draw(st.integers(lo, n))
    cutoff = data.draw(st.integers(-60, int(max(s.times)) + 2)) + data.draw(st.sampled_from([0.0, 0.5]))
    window = Running(True, False, False)
    window.lo = data.draw(st.integers(-1, n + 1))
    assert moved_start(s, cutoff, lo, hi, window) == bisect_right(s.times, cutoff, lo, hi)
    assert moved_start(s, cutoff, lo, hi, window, right=False) == bisect_left(s.times, cutoff, lo, hi)


def test_the_buffer_notes_where_times_go_back_sample_by_sample_and_in_bulk() -> None:
    key = SeriesKey("x")
    buf = SeriesBuffer(BufferLimits(max_samples=1000, max_age=1e9))
    buf.append([Sample(key, float(t), t, 1.0) for t in range(100)])  # in bulk (_BULK_SMALL and more)
    s = buf.get(key)
    assert s is not None and s.disorder == -1
    buf.append([Sample(key, 100.0 + t - (5 if t == 70 else 0), 100 + t, 1.0) for t in range(100)])
    assert s.disorder == 170  # the sample that went back, its time below the one before
    buf.append([Sample(key, 150.0, 200, 1.0)])  # one sample, back from 199
    assert s.disorder == 200
    buf.append([Sample(key, 150.0, 201, 1.0)])  # at the same time: not back
    assert s.disorder == 200
    buf.append([Sample(key, 149.0 + t, 202 + t, 1.0) for t in range(100)])  # in bulk, back at its first
    assert s.disorder == 202
