"""From-scratch references for the windowed conditions: exact fractions, no running state."""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from fractions import Fraction

from alertd.buffer import BufferLimits, Series, SeriesBuffer
from alertd.model import Sample, SeriesKey
from alertd.rules.conditions import Span


def window(times: Sequence[float], start: int, i: int, span: Span, end: int) -> int | None:
    """The first index of the window of `span` that ends before `end` (None: not full)."""
    if span.samples is not None:
        return end - span.samples if end - span.samples >= start else None
    assert span.seconds is not None
    return bisect_right(times, times[i] - span.seconds, start, end)


def aggregate(kind: str, values: Sequence[float], q: float) -> float:
    """The aggregate of the finite `values` (not empty, or any for count), from scratch."""
    xs = [v for v in values if math.isfinite(v)]
    if kind == "count":
        return float(len(xs))
    exact = [Fraction(v) for v in xs]
    n = len(xs)
    if kind == "sum":
        total = sum(exact, Fraction(0))
        try:
            return float(total)
        except OverflowError:
            return math.copysign(math.inf, total)
    if kind == "avg":
        return float(sum(exact, Fraction(0)) / n)
    if kind == "stddev":
        mean = sum(exact, Fraction(0)) / n
        var = sum(((x - mean) ** 2 for x in exact), Fraction(0)) / n
        try:
            return math.sqrt(float(var))
        except OverflowError:
            return math.inf
    if kind == "min":
        return min(xs)
    if kind == "max":
        return max(xs)
    assert kind == "quantile"
    ordered = sorted(xs)
    rank = q * (n - 1)
    lower = max(0, math.floor(rank))
    upper = min(n - 1, lower + 1)
    weight = rank - math.floor(rank)
    return ordered[lower] * (1 - weight) + ordered[upper] * weight


def measure(
    kind: str,
    times: Sequence[float],
    values: Sequence[float],
    start: int,
    i: int,
    over: Span,
    baseline: Span | None = None,
    q: float = 0.5,
    min_samples: int = 1,
) -> float | None:
    """What `WindowAggregate.measure` must give at index `i` (the buffer holding `values[start:]`)."""
    least = max(min_samples, 0 if kind == "count" else 1)
    lo = window(times, start, i, over, i + 1)
    if lo is None:
        return None
    recent = values[lo : i + 1]
    if sum(map(math.isfinite, recent)) < least:
        return None
    now = aggregate(kind, recent, q)
    if baseline is None:
        return now
    bspan = Span(baseline.samples, None if baseline.seconds is None else baseline.seconds + (over.seconds or 0))
    blo = window(times, start, i, bspan, lo)
    if blo is None:
        return None
    before_values = values[blo:lo]
    if sum(map(math.isfinite, before_values)) < least:
        return None
    before = aggregate(kind, before_values, q)
    return now / before if before > 0 else None


def zscore(
    times: Sequence[float], values: Sequence[float], start: int, i: int, over: Span, min_samples: int = 2
) -> float | None:
    """What `ZScore.score` must give at index `i`."""
    v = values[i]
    if not math.isfinite(v):
        return None
    lo = window(times, start, i, over, i)
    if lo is None:
        return None
    xs = [Fraction(x) for x in values[lo:i] if math.isfinite(x)]
    if len(xs) < min_samples:
        return None
    mean = sum(xs, Fraction(0)) / len(xs)
    var = sum(((x - mean) ** 2 for x in xs), Fraction(0)) / len(xs)
    try:
        std = math.sqrt(float(var))
    except OverflowError:
        std = math.inf
    return (v - float(mean)) / std if std > 0 else None


def early_stopping(values: Sequence[float], patience: int, min_delta: float, mode: str) -> list[bool]:
    """For each value: would Lightning's EarlyStopping (check_finite=False, -Inf no improvement) have
    `wait_count >= patience` after it? Written from its source, one comparison per value."""
    best = math.inf if mode == "min" else -math.inf
    delta = -min_delta if mode == "min" else min_delta  # Lightning: min_delta *= 1 if gt else -1
    wait, out = 0, []
    for v in values:
        better = (v - delta < best) if mode == "min" else (v - delta > best)
        if math.isfinite(v) and better:
            best, wait = v, 0
        else:
            wait += 1
        out.append(wait >= patience)
    return out


def spike_baseline(
    times: Sequence[float],
    values: Sequence[float],
    start: int,
    i: int,
    samples: int | None,
    seconds: float | None,
    stat: str,
    min_samples: int,
) -> float | None:
    """A spike's baseline before index `i` as alertd computed it before its window was kept running (a list of
    the window's finite values, `statistics.median` or `math.fsum / len`, numpy's median from 64 values: the
    same number): the oracle of the running one. An intermediate overflow of `fsum` is taken as ±inf."""
    from bisect import bisect_left
    from statistics import median

    lo = max(start, i - (samples or 0)) if seconds is None else bisect_left(times, times[i] - seconds, start, i)
    window = [v for v in values[lo:i] if math.isfinite(v)]
    if len(window) < min_samples or not window:
        return None
    if stat == "median":
        return median(window)
    try:
        return math.fsum(window) / len(window)
    except OverflowError:
        return math.copysign(math.inf, sum(Fraction(v) for v in window))


def fill(values: list[float], gaps: list[int], limits: BufferLimits) -> Iterator[tuple[Series, int]]:
    """Append the values one by one to one series; after each: the series and the index of the new sample."""
    buf = SeriesBuffer(limits)
    key = SeriesKey("loss", (("run", "a"),))
    t = 0.0
    for n, v in enumerate(values):
        t += gaps[n % len(gaps)]
        buf.append([Sample(key, t, n, v)])
        s = buf.get(key)
        assert s is not None
        yield s, len(s.times) - 1
