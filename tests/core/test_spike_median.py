"""A spike's median over a long window is taken on a numpy view of the series: the same number as
`statistics.median` of the finite values, NaN and infinities left out, and the series can grow after."""

from __future__ import annotations

import math
from array import array
from statistics import median

from hypothesis import given, settings
from hypothesis import strategies as st

from alertd.rules.conditions import _COLUMN_MIN, _median_of_finite

values = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False, width=64), st.sampled_from([math.nan, math.inf, -math.inf])
)


@settings(max_examples=300, deadline=None)
@given(data=st.lists(values, min_size=_COLUMN_MIN, max_size=400), cut=st.integers(0, 400), need=st.integers(1, 80))
def test_the_median_of_a_long_window_is_statistics_median_of_its_finite_values(data, cut, need) -> None:  # type: ignore[no-untyped-def]
    column = array("d", data)
    lo = cut % (len(data) - _COLUMN_MIN + 1)
    finite = [v for v in data[lo:] if math.isfinite(v)]
    expected = median(finite) if len(finite) >= need else None
    got = _median_of_finite(column, lo, len(data), need)
    assert got == expected or (got is not None and expected is not None and math.isnan(got) and math.isnan(expected))
    column.append(1.0)  # no view of its buffer is left behind
