"""A spike's baseline is kept running per series (the sorted finite values for a median, their exact sum for a
mean): at every sample, judged as it arrives (the buffer trimming old samples) and again in any order, it is
the number the from-scratch computation alertd used before gives (`window_helpers.spike_baseline`), NaN and
infinities left out, over samples or seconds."""

from __future__ import annotations

import math
import random

from hypothesis import given, settings
from hypothesis import strategies as st
from window_helpers import fill, spike_baseline

from alertd.buffer import BufferLimits, SeriesBuffer
from alertd.model import Sample, SeriesKey
from alertd.rules.conditions import Spike

NAN, INF = math.nan, math.inf
finite = st.floats(-1e6, 1e6, allow_nan=False).map(lambda v: v if abs(v) > 1e-300 else 0.0)
values_st = st.lists(
    st.one_of(finite, st.sampled_from([NAN, INF, -INF, 0.0, -0.0, 1.0, 2.0, 1e300, -1e300])), min_size=1, max_size=90
)


def _same(got: float | None, want: float | None) -> bool:
    return got == want or (got is not None and want is not None and got != got and want != want)


@settings(max_examples=250, deadline=None)
@given(
    values=values_st,
    gaps=st.lists(st.integers(0, 12), min_size=1, max_size=5),
    samples=st.one_of(st.none(), st.integers(1, 80)),
    seconds=st.sampled_from([5.0, 10.0, 60.0, 300.0]),
    stat=st.sampled_from(["median", "mean"]),
    need=st.integers(1, 6),
    keep=st.integers(3, 100),
    wider=st.sampled_from([0, 0, 7, 60]),
)
def test_the_running_baseline_equals_the_from_scratch_one(
    values, gaps, samples, seconds, stat, need, keep, wider
) -> None:  # type: ignore[no-untyped-def]
    """... in a buffer of `keep` samples, and in one `wider` (a replay's) whose `reach` is `keep`: a baseline of
    seconds reads back no further than `keep` samples up to the judged one, whatever the buffer holds."""
    secs = None if samples is not None else seconds
    spike = Spike(2.0, "up", samples, secs, stat, need)  # type: ignore[arg-type]

    def want(s, i):  # type: ignore[no-untyped-def]
        first = s.start if secs is None else max(s.start, i - keep + 1)
        return spike_baseline(s.times, s.values, first, i, samples, secs, stat, need)

    for s, i in fill(values, gaps, BufferLimits(max_samples=keep + wider, max_age=1e9, reach=keep)):
        assert _same(spike.baseline(s, i), want(s, i)), (i, spike.baseline(s, i), want(s, i))
    order = list(range(s.start, len(s.times)))
    random.Random(len(values)).shuffle(order)
    for i in order:  # back and forth: rebuilt where it can't advance, the same answers
        assert _same(spike.baseline(s, i), want(s, i)), (i, spike.baseline(s, i), want(s, i))


def test_out_of_order_steps_and_a_restart_give_the_from_scratch_baseline() -> None:
    """Steps that go back (a resumed run) are samples like any other; a series that restarts (a new generation)
    is rebuilt from its own samples."""
    spike = Spike(2.0, "up", 4, None, "median", 1)
    buf = SeriesBuffer(BufferLimits(max_samples=50, max_age=1e9))
    key = SeriesKey("loss", ())
    steps = [10, 11, 12, 5, 6, 7, 8, 30]
    for n, (step, v) in enumerate(zip(steps, [1.0, 3.0, NAN, 2.0, 8.0, 4.0, 5.0, 6.0], strict=True)):
        buf.append([Sample(key, float(n), step, v)])
        s = buf.get(key)
        assert s is not None
        i = len(s.times) - 1
        assert _same(spike.baseline(s, i), spike_baseline(s.times, s.values, s.start, i, 4, None, "median", 1))
