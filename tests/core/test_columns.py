"""`Columns`: a replay's samples taken apart once; each piece's key objects in order of first appearance."""

from __future__ import annotations

import math
from typing import Any
from unittest import mock

from core_helpers import noted_list
from hypothesis import given, settings
from hypothesis import strategies as st

from alertd.columns import ColumnList, Columns
from alertd.model import Sample, SeriesKey

# equal keys held by different objects stay apart: a key object is what the columns group by
_KEYS = [SeriesKey("loss"), SeriesKey("loss"), SeriesKey("lr"), SeriesKey("acc", (("run", "a"),))]


@settings(max_examples=300, deadline=None)
@given(
    rows=st.lists(
        st.tuples(st.integers(0, 3), st.floats(allow_nan=True), st.one_of(st.none(), st.integers(-5, 50))),
        max_size=40,
    ),
    cut=st.tuples(st.integers(0, 45), st.integers(0, 45)),
)
def test_a_piece_is_its_samples_taken_apart(rows: list[tuple[int, float, int | None]], cut: tuple[int, int]) -> None:
    samples = [Sample(_KEYS[k], 1.7e9 + i, step, value) for i, (k, value, step) in enumerate(rows)]
    whole = Columns.of(samples)
    assert whole is not None
    a, b = sorted(c % (len(samples) + 1) for c in cut)
    piece, part = whole.piece(a, b), samples[a:b]
    assert len(piece) == len(part)
    assert piece.times.tolist() == [s.time for s in part]
    assert [v if not math.isnan(v) else "nan" for v in piece.values.tolist()] == [
        s.value if not math.isnan(s.value) else "nan" for s in part
    ]
    steps = [s.step for s in samples]
    assert (piece.steps is None) == (None in steps)
    if piece.steps is not None:
        assert piece.steps.tolist() == [s.step for s in part]
    first_seen, place = piece.groups()
    assert first_seen == dict(zip(map(id, (s.series for s in part)), (s.series for s in part), strict=True))
    assert all(first_seen[id(s.series)] is s.series for s in part)
    order = list(first_seen)
    expected = [order.index(id(s.series)) for s in part]
    assert (place.tolist() if place is not None else [0] * len(part)) == expected
    assert place is not None or len({id(s.series) for s in part}) <= 1


def test_a_time_or_value_that_is_not_a_number_gives_no_columns() -> None:
    assert Columns.of([Sample(_KEYS[0], 1.0, 1, "x")]) is None  # type: ignore[arg-type]
    assert Columns.of([Sample(_KEYS[0], None, 1, 1.0)]) is None  # type: ignore[arg-type]
    assert Columns.of([Sample(_KEYS[0], 1.0, 2**70, 1.0)]).steps is None  # type: ignore[union-attr]


def _bits(c: Columns | None) -> tuple[bytes, ...] | None:
    if c is None:
        return None
    return (c.ids.tobytes(), c.times.tobytes(), b"" if c.steps is None else c.steps.tobytes(), c.values.tobytes())


@settings(max_examples=200, deadline=None)
@given(
    chunks=st.lists(
        st.tuples(st.booleans(), st.lists(st.tuples(st.integers(0, 3), st.floats(allow_nan=True)), max_size=8)),
        max_size=6,
    ),
    change=st.sampled_from(["none", "sort", "replace", "delete", "append"]),
)
def test_a_column_list_gives_its_samples_columns_noted_or_not(chunks: list[tuple[bool, Any]], change: str) -> None:
    """Chunks appended with `+=`, some with their columns noted (a source's bulk decoding), some not: the columns are
    those of the samples, bit for bit; after a change no note foresaw too (the noted rows are checked)."""
    out, n, plain = ColumnList(), 0, 0
    for noted, rows in chunks:
        samples = [Sample(_KEYS[k], 1.7e9 + n + i, n + i, v) for i, (k, v) in enumerate(rows)]
        n += len(samples)
        out += noted_list(samples) if noted and samples else samples
        plain += 0 if noted else len(samples)
    if change == "none" and plain < n:  # the noted rows are not taken apart again
        taken: list[int] = []
        real = Columns.of
        with mock.patch.object(Columns, "of", lambda rows, times=None: taken.append(len(rows)) or real(rows, times)):
            out.columns()
        assert sum(taken) == plain
    if change == "sort" and len(out) > 1:
        out.sort(key=lambda s: -s.time)
    elif change == "replace" and len(out):
        out[len(out) - 1] = Sample(_KEYS[2], 5.0, 5, 5.0)
    elif change == "delete" and len(out):
        del out[0]
    elif change == "append":
        out.append(Sample(_KEYS[1], 9.0, None, 1.0))  # a step that is not an int: no steps column
    assert _bits(out.columns()) == _bits(Columns.of(list(out)))


def test_a_column_list_is_shown_short() -> None:
    """asyncio shows a task's result with `reprlib`, which writes a list subclass out whole: a read of a million
    samples took 18 s to show."""
    big = ColumnList([Sample(_KEYS[0], 1.0, i, 1.0) for i in range(10_000)])
    assert repr(big) == "<ColumnList of 10000 samples, 0 noted runs>"
