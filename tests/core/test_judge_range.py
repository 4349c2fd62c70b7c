"""Judging a run of new samples at once (`judge_range`: column-wise thresholds and `nonfinite`, running windows
advanced under one look at their memo, `avg`/`sum`/`count` from exact prefix sums) says of every sample what
judging it alone (`check`) says: for every condition kind, over values with NaN and infinities, short runs and runs
long enough for numpy and the prefix sums."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st
from window_helpers import fill

from alertd.buffer import BufferLimits
from alertd.rules.conditions import (
    VECTOR_MIN,
    Nonfinite,
    Plateau,
    Span,
    Spike,
    Threshold,
    Trend,
    WindowAggregate,
    ZScore,
    judge_range,
)

NAN, INF = math.nan, math.inf
value_st = st.one_of(
    st.floats(-1e3, 1e3, allow_nan=False), st.sampled_from([NAN, INF, -INF, 0.0, -0.0, 1.0, 2.0, 100.0, 1e300])
)
values_st = st.one_of(  # short runs, and runs long enough to be judged column-wise
    st.lists(value_st, min_size=1, max_size=VECTOR_MIN),
    st.lists(value_st, min_size=VECTOR_MIN, max_size=3 * VECTOR_MIN),
)


def conditions() -> list[object]:
    return [
        *(Threshold(op, 1.0) for op in (">", ">=", "<", "<=", "==", "!=")),
        Nonfinite(),
        Trend("increasing"),
        Trend("decreasing", 0.5),
        Spike(2.0, "up", 5, None, "median", 2),
        Spike(0.5, "down", None, 30.0, "mean", 1),
        Spike(0.5, "down", None, 20.0, "median", 3),
        Spike(2.0, "up", None, 10.0, "median", 1),
        Spike(1.5, "up", 70, None, "median", 2),  # wider than the column-wise medians
        WindowAggregate("avg", Span(samples=4), ">", value=1.0),
        WindowAggregate("avg", Span(samples=3), ">", ratio=1.5, baseline=Span(samples=10)),  # prefix sums past 32
        WindowAggregate("avg", Span(seconds=15.0), "<=", ratio=0.9, baseline=Span(seconds=30.0), min_samples=2),
        WindowAggregate("sum", Span(seconds=10.0), ">=", value=3.0),
        WindowAggregate("count", Span(samples=5), "<", value=4.0, min_samples=0),
        WindowAggregate("quantile", Span(seconds=20.0), ">", ratio=1.2, baseline=Span(seconds=40.0), q=0.9),
        WindowAggregate("stddev", Span(samples=6), "<", value=0.5, min_samples=2),
        ZScore(Span(samples=8), 2.0),
        Plateau(3),
    ]


@settings(max_examples=120, deadline=None)
@given(
    values=values_st,
    gaps=st.lists(st.integers(0, 6), min_size=1, max_size=4),
    keep=st.one_of(st.integers(5, 40), st.just(1000)),
    cut=st.one_of(st.just(0), st.integers(0, 3 * VECTOR_MIN)),
)
def test_a_range_judged_at_once_is_each_sample_judged_alone(values, gaps, keep, cut) -> None:  # type: ignore[no-untyped-def]
    series = list(fill(values, gaps, BufferLimits(max_samples=keep, max_age=1e9)))[-1][0]
    n = len(series.times)
    lo = series.start + cut % max(1, n - series.start)
    for at_once, alone in zip(conditions(), conditions(), strict=True):  # separate memos: no shared cache
        got = judge_range(at_once, series, lo, n)  # type: ignore[arg-type]
        want = [k for k in range(n - lo) if alone.check(series, lo + k)]  # type: ignore[attr-defined]
        assert got == want, (at_once, lo, n)
