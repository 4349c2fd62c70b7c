"""Column-wise medians of a spike's baseline (`rules/slide.py`): the same numbers as `statistics.median` over each
window, and a long run judged column-wise says of every sample what judging it alone says (NaN and infinities in
the windows or as the latest value, windows not full yet, evictions, up and down, odd and even widths)."""

from __future__ import annotations

import math
import statistics

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from window_helpers import fill

from alertd.buffer import BufferLimits
from alertd.rules.conditions import VECTOR_MIN, Spike, judge_range
from alertd.rules.slide import SLIDE_MAX_WIDTH, range_max, sliding_medians

finite_st = st.one_of(st.floats(-1e3, 1e3, allow_nan=False), st.sampled_from([0.0, -0.0, 1.0, 2.0, 1e300, -1e300]))


@settings(max_examples=150, deadline=None)
@given(
    values=st.lists(finite_st, min_size=1, max_size=200),
    width=st.integers(1, SLIDE_MAX_WIDTH),
    chunk=st.sampled_from([1, 7, 64, 1 << 19]),
)
def test_the_sliding_medians_are_statistics_median_of_each_window(values: list[float], width: int, chunk: int) -> None:
    got = sliding_medians(np.array(values, dtype=np.float64), width, chunk_values=chunk).tolist()
    want = [statistics.median(values[k : k + width]) for k in range(len(values) - width + 1)]
    assert got == want  # bit for bit (1e300 + 1e300 overflows alike: inf / 2)


@settings(max_examples=60, deadline=None)
@given(values=st.lists(finite_st, min_size=1, max_size=120), width=st.integers(1, 16), skip=st.integers(0, 5))
def test_the_windows_of_a_slice_or_a_strided_run_are_its_own(values: list[float], width: int, skip: int) -> None:
    whole = np.array([7.0] * skip + values + [-7.0] * skip, dtype=np.float64)
    inner = whole[skip : skip + len(values)]  # a view that starts inside its buffer
    want = [statistics.median(values[k : k + width]) for k in range(len(values) - width + 1)]
    assert sliding_medians(inner, width).tolist() == want
    doubled = np.repeat(np.array(values, dtype=np.float64), 2)[::2]  # not contiguous: numpy's own view
    assert sliding_medians(doubled, width).tolist() == want


value_st = st.one_of(finite_st, st.sampled_from([math.nan, math.inf, -math.inf]), finite_st, finite_st)


@settings(max_examples=200, deadline=None)
@given(
    values=st.lists(value_st, min_size=VECTOR_MIN, max_size=4 * VECTOR_MIN),
    width=st.integers(1, SLIDE_MAX_WIDTH),
    least=st.integers(1, 8),
    up=st.booleans(),
    keep=st.one_of(st.integers(40, 120), st.just(1000)),
    cut=st.integers(0, 2 * VECTOR_MIN),
)
def test_a_long_run_judged_column_wise_is_each_sample_judged_alone(  # type: ignore[no-untyped-def]
    values, width, least, up, keep, cut
) -> None:
    series = list(fill(values, [1], BufferLimits(max_samples=keep, max_age=1e9)))[-1][0]
    n = len(series.times)
    lo = min(series.start + cut, n - 1)
    ratio = 2.0 if up else 0.5
    at_once = Spike(ratio, "up" if up else "down", width, None, "median", least)
    alone = Spike(ratio, "up" if up else "down", width, None, "median", least)  # its own memo
    got = judge_range(at_once, series, lo, n)
    assert got == [k for k in range(n - lo) if alone.check(series, lo + k)]
    # and the running window goes on from there: the next sample judged alike
    assert at_once.check(series, n - 1) == alone.check(series, n - 1)


@settings(max_examples=150, deadline=None)
@given(
    values=st.lists(finite_st, min_size=1, max_size=120),
    width=st.integers(1, 16),
    picks=st.sets(st.integers(0, 130)),
    chunk=st.sampled_from([1, 7, 1 << 19]),
)
def test_the_medians_of_some_windows_are_those_windows_medians(
    values: list[float], width: int, picks: set[int], chunk: int
) -> None:
    rows = sorted(k for k in picks if k <= len(values) - width)
    got = sliding_medians(np.array(values, dtype=np.float64), width, chunk, rows=np.array(rows, dtype=np.intp))
    assert got.tolist() == [statistics.median(values[k : k + width]) for k in rows]


@settings(max_examples=150, deadline=None)
@given(
    values=st.lists(st.one_of(finite_st, st.just(-math.inf)), min_size=1, max_size=150),
    windows=st.lists(st.tuples(st.integers(0, 150), st.integers(1, 150)), min_size=1, max_size=30),
)
def test_the_greatest_of_each_window_is_its_max(values: list[float], windows: list[tuple[int, int]]) -> None:
    n = len(values)
    pairs = [(a % n, min(n, a % n + length)) for a, length in windows]
    los, his = (np.array(side, dtype=np.intp) for side in zip(*pairs, strict=True))
    assert range_max(np.array(values, dtype=np.float64), los, his).tolist() == [max(values[a:b]) for a, b in pairs]
