"""`SeriesBuffer.append`'s column-wise path for large batches (the bulk ingest of event files) leaves the
buffer exactly as the sample-by-sample loop does, and returns the same restarts."""

from __future__ import annotations

import math
from typing import Any
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from alertd import buffer as buffer_module
from alertd.buffer import FINISHED_METRIC, NO_STEP, BufferLimits, SeriesBuffer
from alertd.columns import Columns
from alertd.model import Sample, SeriesKey

_KEYS = [
    SeriesKey("loss", (("source", "tb"), ("run", "a"))),
    SeriesKey("loss", (("source", "tb"), ("run", "a"), ("host", "h"), ("pid", "1"))),
    SeriesKey("loss", (("source", "tb"), ("run", "a"), ("host", "h"), ("pid", "2"))),
    SeriesKey("lr", (("source", "tb"), ("run", "b"), ("host", "h"), ("pid", "3"))),
    SeriesKey(FINISHED_METRIC, (("source", "tb"), ("run", "a"))),
    SeriesKey("acc", (("source", "other"),)),
    SeriesKey("alertd.internal", (("source", "tb"),)),
]
_time = st.one_of(
    st.floats(1.7e9, 1.7e9 + 1e5),
    st.sampled_from([math.nan, math.inf, -math.inf, 1e12, 1.7e9 + 1e6]),
)
_value = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.just(1.0))


@st.composite
def _batch(draw: Any) -> list[Sample]:
    """Samples of a few series, mostly in step order (sometimes a step back, an odd time, no step)."""
    keys = draw(st.lists(st.sampled_from(_KEYS), min_size=1, max_size=4, unique=True))
    n = draw(st.integers(1, 60))
    start = draw(st.integers(0, 50))
    odd = draw(st.booleans())
    out = []
    for i in range(n):
        key = keys[draw(st.integers(0, len(keys) - 1))] if odd else keys[i % len(keys)]
        time = draw(_time) if odd and draw(st.integers(0, 9)) == 0 else 1.7e9 + start + i
        step: int | None = start + i
        if odd and draw(st.integers(0, 9)) == 0:
            step = draw(st.sampled_from([None, 0, start + i - 5, NO_STEP]))
        out.append(Sample(key, time, step, draw(_value) if odd else float(i)))
    return out


def _state(buf: SeriesBuffer) -> Any:
    series = [
        (
            s.key,
            s.times.tobytes(),
            s.values.tobytes(),
            s.steps.tobytes(),
            s.start,
            s.base,
            s.generation,
            s.cuts,
            s.changed,
            s.disorder,
        )
        for s in buf
    ]
    return (
        series,
        buf._finished,
        buf._lineage,
        buf._superseded,
        buf.version,
        [(key, s.key) for key, s in buf._changed.items()],
        buf._per_source,
        buf._counted,
        buf.dropped,
        buf.retimed,
    )


@settings(max_examples=300, deadline=None)
@given(
    batches=st.lists(_batch(), min_size=1, max_size=4),
    now=st.sampled_from([None, 1.7e9 + 30, 1.7e9 + 1e6]),
    limits=st.sampled_from(
        [
            BufferLimits(),
            BufferLimits(max_samples=40, max_series=3, max_series_per_source=3),  # the total binds
            BufferLimits(max_samples=40, max_series=10, max_series_per_source=2),  # the per-source limit binds
            BufferLimits(max_series_per_source=3, source_max_series={"other": 0}),
        ]
    ),
)
def test_bulk_append_is_the_sample_by_sample_append(
    batches: list[list[Sample]], now: float | None, limits: BufferLimits
) -> None:
    bulk, one_by_one, given = SeriesBuffer(limits), SeriesBuffer(limits), SeriesBuffer(limits)
    for batch in batches:
        with (
            mock.patch.object(buffer_module, "_BULK_PER_SERIES", 0),
            mock.patch.object(buffer_module, "_BULK_SMALL", 1),
        ):
            got = bulk.append(list(batch), now)
            # the replay's way: the batch's columns made once, before (as a piece of a longer replay's)
            whole = Columns.of([Sample(_KEYS[0], 0.0, 0, 0.0), *batch])
            with_columns = given.append(list(batch), now, None if whole is None else whole.piece(1, len(batch) + 1))
        with mock.patch.object(buffer_module, "_BULK_SMALL", 1 << 62):
            want = one_by_one.append(list(batch), now)
        assert got == want
        assert with_columns == want
        assert _state(bulk) == _state(one_by_one)
        assert _state(given) == _state(one_by_one)


def test_a_large_clean_batch_takes_the_bulk_path() -> None:
    keys = [_KEYS[0], _KEYS[1], _KEYS[3], _KEYS[5]]
    samples = [Sample(keys[i % 4], 1.7e9 + i, i // 4, float(i)) for i in range(4000)]
    buf = SeriesBuffer(BufferLimits(max_samples=10_000))
    with mock.patch.object(buffer_module.Series, "append", side_effect=AssertionError("one by one")):
        assert buf.append(samples) == []
        assert [len(s) for s in buf] == [1000] * 4
        assert list(buf.get(keys[2]).values) == [float(i) for i in range(2, 4000, 4)]  # type: ignore[union-attr]
        # pid 2 takes over the series of pid 1 (not in this batch) at its first sample
        later = [Sample(_KEYS[2], 1.7e9 + 5000 + i, i, 0.0) for i in range(1000)]
        assert buf.append(later) == []
    assert buf.finished_at(_KEYS[1]) == 1.7e9 + 5000


def test_series_limits_in_a_bulk_batch() -> None:
    keys = [_KEYS[0], _KEYS[3], _KEYS[5], _KEYS[4], _KEYS[6]]
    batch = [Sample(keys[i % 5], 1.7e9 + i, i, 1.0) for i in range(50)]
    for limits in (
        BufferLimits(max_series=3, max_series_per_source=3),
        BufferLimits(max_series=10, max_series_per_source=2),
        BufferLimits(source_max_series={"other": 0}),
    ):
        bulk, one_by_one = SeriesBuffer(limits), SeriesBuffer(limits)
        # 50 samples: under `_BULK_SMALL` (64), so it too is lowered, or the column-wise path is never tried
        with (
            mock.patch.object(buffer_module, "_BULK_PER_SERIES", 0),
            mock.patch.object(buffer_module, "_BULK_SMALL", 1),
        ):
            bulk.append(list(batch))
        with mock.patch.object(buffer_module, "_BULK_SMALL", 1 << 62):
            one_by_one.append(list(batch))
        assert _state(bulk) == _state(one_by_one)
        assert sum(bulk.dropped.values()) > 0
