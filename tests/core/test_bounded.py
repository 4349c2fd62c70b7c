"""A long run of `avg`/`sum`/`count` windows decided from float sums and their error bounds (`rules/bounded.py`)
says of every sample what the exact sums say: everyday values are decided there, and a mean or a ratio equal to the
threshold, or one the float sums get wrong by an ulp, is left to the exact integers and judged as they judge it."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from window_helpers import fill

from alertd.buffer import BufferLimits
from alertd.rules.bounded import window_verdicts
from alertd.rules.conditions import Span, WindowAggregate, judge_range

OPS = (">", ">=", "<", "<=", "==", "!=")
# Values whose float sums round: 0.1 and 1/3 are not sums of a few powers of two; 5e-324 and 1e-310 are subnormal.
value_st = st.one_of(
    st.floats(-1e3, 1e3, allow_nan=False),
    st.sampled_from([0.1, 0.2, 0.3, 1 / 3, 1.5, 1.0, 0.0, -0.0, 2.0, 1e-310, 5e-324, -0.1, 1e300, 1e16, 1.0 + 2**-52]),
    st.sampled_from([math.nan, math.inf, -math.inf]),
)


def judged(condition: WindowAggregate, values: list[float]) -> tuple[list[int], list[int]]:
    """(the offsets judge_range gives for the whole run, the offsets where each sample judged alone holds)."""
    series = list(fill(values, [1], BufferLimits(max_samples=10_000, max_age=1e9)))[-1][0]
    n = len(series.times)
    alone = WindowAggregate(**{f: getattr(condition, f) for f in ("kind", "over", "op", "value", "ratio", "baseline")})
    return judge_range(condition, series, 0, n), [k for k in range(n) if alone.check(series, k)]


@settings(max_examples=200, deadline=None)
@given(
    values=st.lists(value_st, min_size=40, max_size=160),
    kind=st.sampled_from(["avg", "sum", "count"]),
    op=st.sampled_from(OPS),
    width=st.integers(1, 12),
    base=st.one_of(st.none(), st.integers(1, 20)),
    pick=st.integers(0, 10**6),
)
def test_the_bounded_verdicts_are_the_exact_ones(values, kind, op, width, base, pick) -> None:  # type: ignore[no-untyped-def]
    # the number compared: now and then exactly a window's own aggregate (or ratio), the hardest case
    finite = [v for v in values if math.isfinite(v)] or [1.0]
    number = [1.5, 0.1, 1.0, 0.0, finite[pick % len(finite)], 2.0][pick % 6]
    condition = WindowAggregate(
        kind,
        Span(samples=width),
        op,
        value=None if base else number,
        ratio=number if base else None,
        baseline=Span(samples=base) if base else None,
    )
    got, want = judged(condition, values)
    assert got == want


def test_everyday_values_are_decided_by_the_float_sums() -> None:
    rnd = np.random.default_rng(7)
    run = 2.0 + rnd.random(300)  # a loss
    ends = np.arange(220, 301)
    hit, sure = window_verdicts("avg", ">", 1.5, 1, run, (ends - 20, ends), (ends - 220, ends - 20))
    assert sure.all()
    assert not hit.any()
    hit, sure = window_verdicts("avg", ">", 0.9, 1, run, (ends - 20, ends), (ends - 220, ends - 20))
    assert sure.all() and hit.all()


def test_a_ratio_equal_to_the_threshold_is_left_to_the_exact_sums() -> None:
    run = np.array([1.0] * 200 + [1.5] * 20)
    ends = np.array([220])
    _, sure = window_verdicts("avg", ">", 1.5, 1, run, (ends - 20, ends), (ends - 220, ends - 20))
    assert not sure.any()
    values = [1.0] * 200 + [1.5] * 40
    for op, holds in ((">", False), (">=", True), ("==", True), ("!=", False)):
        condition = WindowAggregate("avg", Span(samples=20), op, ratio=1.5, baseline=Span(samples=200))
        got, want = judged(condition, values)
        assert got == want
        assert (219 in got) is holds  # the first sample whose 20 are all 1.5


def test_a_mean_the_float_sums_miss_by_an_ulp_is_judged_exactly() -> None:
    # the float prefix sums of many 0.1s drift: the last ten's mean from them is not 0.1, the exact one is
    values = [0.1] * 1000
    run = np.array(values)
    sums = np.concatenate(([0.0], np.cumsum(run)))
    assert (sums[1000] - sums[990]) / 10 != 0.1  # what a float-only verdict would compare
    for op in ("<", ">", "==", "!="):
        condition = WindowAggregate("avg", Span(samples=10), op, value=0.1)
        got, want = judged(condition, values)
        assert got == want
        assert got == (list(range(9, 1000)) if op == "==" else [])


def test_a_long_run_with_cancellation_is_judged_as_the_exact_sums_judge_it() -> None:
    # large values that cancel: the float prefix sums carry errors far above each window's own sum
    rnd = np.random.default_rng(11)
    values = [float(x) for x in rnd.choice([1e12, -1e12, 0.1, 0.2, 1 / 3], size=3000)]
    for kind, op, number in (("avg", ">", 0.1), ("sum", "<=", 0.3), ("avg", "==", 0.2)):
        condition = WindowAggregate(kind, Span(samples=4), op, value=number)
        got, want = judged(condition, values)
        assert got == want
    condition = WindowAggregate("avg", Span(samples=5), ">", ratio=1.5, baseline=Span(samples=7))
    got, want = judged(condition, values)
    assert got == want and want  # some ratios above 1.5 (a window of 0.2s over one of 0.1s)


def test_a_ratio_beyond_the_doubles_is_left_to_the_exact_path_without_a_warning() -> None:
    # hypothesis found it: 1e300 over a baseline of 1e-204 overflows the float bounds' division (a RuntimeWarning,
    # an error under the test settings); such a sample is not decided by the bounds, and the exact path holds it
    values = [0.0] * 38 + [9.74141094e-205, 1e300]
    for op in (">", "<"):
        condition = WindowAggregate("avg", Span(samples=1), op, ratio=1.5, baseline=Span(samples=1))
        got, want = judged(condition, values)
        assert got == want == ([39] if op == ">" else [])
