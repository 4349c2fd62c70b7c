"""Judging a run of new samples at once (`judge_range`: column-wise thresholds and `nonfinite`, running windows
advanced under one look at their memo, `avg`/`sum`/`count` from exact prefix sums) says of every sample what
judging it alone (`check`) says: for every condition kind, over values with NaN and infinities, short runs and runs
long enough for numpy and the prefix sums."""

from __future__ import annotations

import math

from hypothesis import example, given, settings
from hypothesis import strategies as st
from window_helpers import fill

from alertd.buffer import BufferLimits, SeriesBuffer
from alertd.model import Sample, SeriesKey
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
    reach=st.sampled_from([0, 0, 4, 17]),
)
def test_a_range_judged_at_once_is_each_sample_judged_alone(values, gaps, keep, cut, reach) -> None:  # type: ignore[no-untyped-def]
    """... in the service's buffer, and in a replay's wider one (`reach` under `max_samples`)."""
    series = list(fill(values, gaps, BufferLimits(max_samples=keep, max_age=1e9, reach=reach)))[-1][0]
    n = len(series.times)
    lo = series.start + cut % max(1, n - series.start)
    for at_once, alone in zip(conditions(), conditions(), strict=True):  # separate memos: no shared cache
        got = judge_range(at_once, series, lo, n)  # type: ignore[arg-type]
        want = [k for k in range(n - lo) if alone.check(series, lo + k)]  # type: ignore[attr-defined]
        assert got == want, (at_once, lo, n)


BIG = 1.5e308  # two of them add up to infinity: a median of an even count of them is inf
steady_st = st.one_of(
    st.floats(90.0, 110.0),  # a steady series: its windows' extremes decide most samples
    st.sampled_from([NAN, INF, -INF, 0.0, -1.0, 40.0, 10.0, 300.0, BIG, 1e308, 5e-324]),
)


@settings(max_examples=150, deadline=None)
@given(
    values=st.lists(steady_st, min_size=VECTOR_MIN, max_size=4 * VECTOR_MIN),
    steps=st.lists(st.sampled_from([0, 1, 1, 2, 5, -3]), min_size=1, max_size=6),
    keep=st.sampled_from([20, 1000]),
    cut=st.integers(0, 3 * VECTOR_MIN),
    reach=st.sampled_from([0, 0, 6, 15]),
)
@example(values=[BIG] * 40, steps=[1], keep=1000, cut=0, reach=0)  # every other window's median is inf: a "drop"
def test_a_median_over_seconds_decided_by_its_windows_extremes_is_each_sample_judged_alone(
    values: list[float], steps: list[int], keep: int, cut: int, reach: int
) -> None:
    """Time-window medians judged at once: the samples the windows' least and greatest values settle, and the
    rest, say what each sample judged alone says (huge values whose middle two overflow, times going back; a
    `reach` under the buffer's size, a replay's)."""
    limits = BufferLimits(max_samples=keep, max_age=1e9, reach=reach)
    series = list(fill(values, steps, limits))[-1][0]  # steps < 0: time back
    n = len(series.times)
    lo = series.start + cut % max(1, n - series.start)
    for make in (
        lambda: Spike(0.5, "down", None, 20.0, "median", 1),
        lambda: Spike(0.5, "down", None, 7.0, "median", 3),
        lambda: Spike(2.0, "up", None, 20.0, "median", 2),
        lambda: Spike(1.2, "up", None, 4.0, "median", 1),
    ):
        got = judge_range(make(), series, lo, n)
        alone = make()
        assert got == [k for k in range(n - lo) if alone.check(series, lo + k)], (make(), lo, n)


def test_a_steady_series_is_judged_without_moving_its_median() -> None:
    """The windows' extremes settle every sample of a steady series (no median is moved for them)."""
    buf = SeriesBuffer(BufferLimits(max_samples=5000, max_age=1e9))
    key = SeriesKey("tokens_per_second", (("run", "a"),))
    buf.append([Sample(key, 1000.0 + k * 0.1, k, 41000.0 + k % 7) for k in range(4000)])
    series = buf.get(key)
    assert series is not None
    down = Spike(0.5, "down", None, 300.0, "median", 5)
    assert down._undecided(series, 3000, 4000, 300.0) == []
    assert judge_range(down, series, 3000, 4000) == []
    window = down.memo.get(series)
    assert window is None or (window.hi, window.count) == (-1, 0)  # its running median never moved
    # a drop to a third is left to the median, and found
    buf.append([Sample(key, 1400.1, 4000, 13000.0)])
    assert down._undecided(series, 4000, 4001, 300.0) == [4000]
