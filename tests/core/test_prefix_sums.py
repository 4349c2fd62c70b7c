"""The prefix sums of an `avg`/`sum`/`count` window judged from them (`rules/windows.py`): column-wise (numpy int64)
where everything fits in 62 bits, the exact Python integers otherwise; the same integers and scale either way."""

from __future__ import annotations

import math
from array import array

from hypothesis import given, settings
from hypothesis import strategies as st

from alertd.rules.windows import _prefix_sums_column, prefix_sums, prefix_sums_exact

everyday = st.one_of(  # a run's values of one magnitude: what the column-wise path takes
    st.lists(st.floats(1.0, 4.0, exclude_max=True), max_size=600),
    st.lists(st.floats(1e-5, 2e-5), max_size=600),
    st.lists(st.integers(-(2**40), 2**40).map(float), max_size=600),
)
anything = st.lists(
    st.one_of(
        st.floats(allow_nan=True, allow_infinity=True),
        st.sampled_from([0.0, -0.0, 5e-324, 2.0**53, 2.0**60, 1e300, -1e-300, math.nan, math.inf, -math.inf]),
        st.floats(1.0, 4.0),
    ),
    max_size=200,
)


@settings(max_examples=300, deadline=None)
@given(values=st.one_of(everyday, anything), cut=st.integers(0, 50))
def test_the_prefix_sums_are_the_exact_ones(values: list[float], cut: int) -> None:
    a = array("d", values)
    lo = min(cut, len(a))
    assert prefix_sums(a, lo, len(a)) == prefix_sums_exact(a, lo, len(a))


@settings(max_examples=100, deadline=None)
@given(values=everyday, holes=st.lists(st.sampled_from([math.nan, math.inf, -math.inf]), max_size=5))
def test_everyday_values_take_the_column_wise_path_and_give_the_same(values: list[float], holes: list[float]) -> None:
    a = array("d", values + holes)
    column = _prefix_sums_column(a, 0, len(a))
    assert column is not None
    assert column == prefix_sums_exact(a, 0, len(a))
