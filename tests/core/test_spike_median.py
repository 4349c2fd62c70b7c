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


calm = st.floats(0.5, 4.0)  # a training's everyday values: most samples nowhere near a spike
odd = st.sampled_from([NAN, INF, -INF, 0.0, -1.0, 9.0, 1e300])
arriving_st = st.lists(st.one_of(calm, calm, calm, odd), max_size=90)


@settings(max_examples=300, deadline=None)
@given(
    values=arriving_st,
    gaps=st.lists(st.integers(-4, 12), min_size=1, max_size=5),
    samples=st.one_of(st.none(), st.integers(1, 60)),
    seconds=st.sampled_from([5.0, 30.0, 300.0]),
    direction=st.sampled_from(["up", "down"]),
    ratio=st.sampled_from([2.0, 1.3, 0.5, 0.8]),
    need=st.integers(1, 6),
    keep=st.integers(3, 100),
)
def test_a_spike_judged_as_samples_arrive_is_the_verdict_over_the_from_scratch_median(
    values, gaps, samples, seconds, direction, ratio, need, keep
) -> None:  # type: ignore[no-untyped-def]
    """`check` as the service asks it (each sample as it arrives, the buffer trimming old ones, times sometimes going
    back), where the window need not move for a sample the values judged since settle, and then in any order."""
    secs = None if samples is not None else seconds
    spike = Spike(ratio, direction, samples, secs, "median", need)  # type: ignore[arg-type]

    def want(s, i):  # type: ignore[no-untyped-def]
        base = spike_baseline(s.times, s.values, s.start, i, samples, secs, "median", need)
        latest = s.values[i]
        if not math.isfinite(latest) or base is None or base <= 0:
            return False
        return latest / base >= ratio if direction == "up" else latest / base <= ratio

    for s, i in fill(values, gaps, BufferLimits(max_samples=keep, max_age=1e9)):  # gaps below 0: times go back
        assert spike.check(s, i) == want(s, i), (i, s.values[i])
    if values:
        order = list(range(s.start, len(s.times)))
        random.Random(len(values)).shuffle(order)
        for i in order:
            assert spike.check(s, i) == want(s, i), (i, s.values[i])


def test_calm_samples_are_judged_without_moving_the_median_and_a_spike_still_fires() -> None:
    """A steady series: each sample settled by the extremes of the window and the samples since (the window stays
    where it was), up to `SETTLE_MAX` samples behind; a spike is judged on the median, moved to it."""
    from alertd.rules.windows import SETTLE_MAX

    spike = Spike(2.0, "up", 20, None, "median", 5)
    buf = SeriesBuffer(BufferLimits(max_samples=500, max_age=1e9))
    key = SeriesKey("loss", ())
    his = []
    for n in range(200):
        buf.append([Sample(key, float(n), n, 1.0 + (n % 7) * 0.01)])
        s = buf.get(key)
        assert s is not None
        assert not spike.check(s, len(s.times) - 1)
        his.append(spike._window(s).hi)
    assert len(set(his)) <= 200 // SETTLE_MAX + 3  # moved at the start and once every SETTLE_MAX samples or so
    buf.append([Sample(key, 200.0, 200, 2.5)])
    assert spike.check(s, len(s.times) - 1)  # 2.5 over a median of about 1.03
    assert spike._window(s).hi == s.end - 1


def test_a_window_by_seconds_whose_times_went_back_moves_to_judge() -> None:
    """Times that go back can start a window by seconds before where the last one started: the small values there
    make a spike of what the window's extremes would call calm."""
    spike = Spike(2.0, "up", None, 10.0, "median", 1)
    buf = SeriesBuffer(BufferLimits(max_samples=100, max_age=1e9))
    key = SeriesKey("loss", ())
    arriving = [(float(t), 0.1) for t in range(7)] + [(float(t), 1.0) for t in range(20, 26)] + [(8.0, 1.0)]
    verdicts = []
    for n, (t, v) in enumerate(arriving):
        buf.append([Sample(key, t, n, v)])
        s = buf.get(key)
        assert s is not None
        i = len(s.times) - 1
        verdicts.append(spike.check(s, i))
        base = spike_baseline(s.times, s.values, s.start, i, None, 10.0, "median", 1)
        assert verdicts[-1] == (base is not None and v / base >= 2.0)
    assert verdicts[-1]  # 1.0 over the median of seven 0.1s and six 1.0s


def test_samples_judged_far_apart_after_the_buffer_let_the_ones_between_go() -> None:
    """`check` asked again only after the buffer dropped (and compacted away) samples since it was last asked: the
    window moves, and the small values that came meanwhile make the spike."""
    spike = Spike(2.0, "up", 20, None, "median", 1)
    buf = SeriesBuffer(BufferLimits(max_samples=40, max_age=1e9))
    key = SeriesKey("loss", ())
    for n in range(253):
        buf.append([Sample(key, float(n), n, 3.0 if n == 240 else 1.0)])
        s = buf.get(key)
        assert s is not None
        assert spike.check(s, len(s.times) - 1) == (n == 240)
    for n in range(253, 301):  # the arrays compacted on the way
        buf.append([Sample(key, float(n), n, 0.3 if n < 296 else 1.0)])
    i = len(s.times) - 1
    base = spike_baseline(s.times, s.values, s.start, i, 20, None, "median", 1)
    assert base == 0.3 and spike.check(s, i)
