"""The conditions of a rule, each judged on one sample of a series (absence is judged on time).

A condition sees the series' arrays and the index of the sample being judged; everything before
that index is its history. Non-finite values never compare true (use `Nonfinite` for them) and are
left out of spike baselines. The windowed conditions (aggregates over a window, z-score, plateau) live
in `rules/windows.py` and `rules/plateau.py`; a spike's baseline uses the same running window.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from alertd._np import np
from alertd.buffer import Series
from alertd.rules.compare import OPS
from alertd.rules.memo import Memo
from alertd.rules.peers import Peers
from alertd.rules.plateau import Plateau
from alertd.rules.slide import SLIDE_MAX_WIDTH, range_max, sliding_medians
from alertd.rules.windows import (
    AGGREGATES,
    Running,
    Span,
    WindowAggregate,
    ZScore,
    extremes_since,
    moved_start,
    seconds_lookback,
)

__all__ = [
    "AGGREGATES",
    "OPS",
    "Absent",
    "Condition",
    "LooksBack",
    "Nonfinite",
    "Peers",
    "Plateau",
    "Span",
    "Spike",
    "Threshold",
    "Trend",
    "WindowAggregate",
    "ZScore",
]


class Condition(Protocol):
    """Judges the sample at array index `i` of `series`."""

    def check(self, series: Series, i: int) -> bool: ...

    def describe(self) -> str: ...


class LooksBack(Protocol):
    """A condition that says how far back its judgement of a sample reads (`lookback`): at most that many of the
    series' samples before the judged one. `times` are the series' times (ascending, a float64 numpy array), for
    windows of a duration; `reach`, the samples up to and including a judged one that the service's buffer holds
    (`BufferLimits.reach`), for windows that read no further back than that (a spike's baseline of a duration).
    A replay feeds a series in pieces small enough that the buffer still holds them all (`alertd.replay_chunks`);
    a condition without `lookback` (`plateau`, which rebuilds its state from the whole buffer after a restart;
    `expr`, `peers`) is fed in the smallest pieces."""

    def lookback(self, times: Any, reach: int) -> int: ...


VECTOR_MIN = 32
"""New samples from which a threshold or `nonfinite` is judged column-wise (numpy: the same answers)."""
HALF_MAX = 2.0**1022
"""A quarter of the greatest double: two values below it add up to a finite double, whatever the rounding."""


def judge_range(cond: Condition, series: Series, lo: int, hi: int) -> list[int]:
    """The offsets k (from `lo`) of the samples at array indices [lo, hi) on which `cond` holds, ascending: what
    `cond.check(series, lo + k)` says of each, judged at once where the condition can (`check_range`: a
    column-wise comparison, a running window advanced under one look at its memo)."""
    many = getattr(cond, "check_range", None)
    if many is not None:
        return many(series, lo, hi)  # type: ignore[no-any-return]
    return _each(cond, series, lo, hi)


def _each(cond: Condition, series: Series, lo: int, hi: int) -> list[int]:
    """`judge_range` one sample at a time."""
    check = cond.check
    return [k for k in range(hi - lo) if check(series, lo + k)]


def _column(series: Series, lo: int, hi: int, judge: Any) -> list[int]:
    """`judge` of the values at [lo, hi) as a numpy view (a bool array), its true offsets; no view outlives it (the
    buffer's array may grow again only once none is left)."""
    view = np.frombuffer(series.values, dtype=np.float64, count=hi)[lo:hi]
    try:
        return np.flatnonzero(judge(view)).tolist()
    finally:
        del view


@dataclass(frozen=True, slots=True)
class Threshold:
    """The value compares true against a constant (`> 100`)."""

    op: str
    value: float

    def check(self, series: Series, i: int) -> bool:
        """True when the sample's value compares true; never for NaN."""
        v = series.values[i]
        return v == v and OPS[self.op](v, self.value)

    def check_range(self, series: Series, lo: int, hi: int) -> list[int]:
        """`judge_range`: column-wise from `VECTOR_MIN` samples (NaN compares false there too)."""
        if hi - lo < VECTOR_MIN:
            return _each(self, series, lo, hi)
        op, value = OPS[self.op], self.value
        return _column(series, lo, hi, lambda v: (v == v) & op(v, value))

    def describe(self) -> str:
        """`> 100`."""
        return f"{self.op} {self.value:g}"

    def lookback(self, times: Any, reach: int) -> int:
        """Only the judged sample (`LooksBack`)."""
        return 0


@dataclass(frozen=True, slots=True)
class Nonfinite:
    """The value is NaN, +Inf or -Inf."""

    def check(self, series: Series, i: int) -> bool:
        """True for NaN and the infinities."""
        return not math.isfinite(series.values[i])

    def check_range(self, series: Series, lo: int, hi: int) -> list[int]:
        """`judge_range`: column-wise from `VECTOR_MIN` samples."""
        if hi - lo < VECTOR_MIN:
            return _each(self, series, lo, hi)
        return _column(series, lo, hi, lambda v: ~np.isfinite(v))

    def describe(self) -> str:
        """`nonfinite`."""
        return "nonfinite"

    def lookback(self, times: Any, reach: int) -> int:
        """Only the judged sample (`LooksBack`)."""
        return 0


@dataclass(frozen=True, slots=True)
class Trend:
    """The value is above (`increasing`) or below (`decreasing`) the previous one by more than `min_delta`."""

    direction: Literal["increasing", "decreasing"]
    min_delta: float = 0.0

    def check(self, series: Series, i: int) -> bool:
        """Compare with the previous sample; the first sample and non-finite pairs are not a trend."""
        if i <= series.start:
            return False
        now, before = series.values[i], series.values[i - 1]
        if not (math.isfinite(now) and math.isfinite(before)):
            return False
        if self.direction == "increasing":
            return now - before > self.min_delta
        return before - now > self.min_delta

    def describe(self) -> str:
        """`increasing`."""
        return self.direction + (f" (min_delta {self.min_delta:g})" if self.min_delta else "")

    def lookback(self, times: Any, reach: int) -> int:
        """The sample before (`LooksBack`)."""
        return 1


@dataclass(frozen=True, slots=True)
class Spike:
    """latest / baseline >= ratio (up) or <= ratio (down); the baseline is the median or mean of the
    finite values before the latest, over the last `samples` samples or the last `seconds` seconds.

    The baseline's window is kept running per series (`rules/windows.py`'s `Running`, in a `Memo`): the sorted
    finite values for a median, their exact sum for a mean, advanced by the samples that enter and leave it,
    so a sample costs a binary search and a move in a sorted array, not a sort of the window. The numbers are
    those of `statistics.median` and of `math.fsum(window) / len(window)` over the window's finite values."""

    ratio: float
    direction: Literal["up", "down"] = "up"
    samples: int | None = 50
    seconds: float | None = None
    stat: Literal["median", "mean"] = "median"
    min_samples: int = 5
    memo: Memo = field(default_factory=Memo, compare=False, hash=False, repr=False)

    def baseline(self, series: Series, i: int) -> float | None:
        """The baseline before index `i`, or None when there are fewer than `min_samples` finite values."""
        return self._baseline(self._window(series), series, i)

    def check(self, series: Series, i: int) -> bool:
        """True when the latest finite value is `ratio` times the (positive) baseline or beyond."""
        latest = series.values[i]
        if latest - latest != 0.0:  # NaN, ±Inf
            return False
        memo = series.memo
        window = memo.get(self.memo.token) if memo is not None else None  # `_window`, inline: asked at every sample
        if window is None:
            window = self._window(series)
        if window.ordered is not None and self._settled_still(window, series, i, latest):
            return False
        return self._judge(latest, self._baseline(window, series, i))

    def _settled_still(self, window: Running, series: Series, i: int, latest: float) -> bool:
        """Whether the extremes of the median's window as it last moved and of the values judged since
        (`extremes_since`) settle sample `i` as no spike (`_no_spike`'s test, one sample), so the window need not
        move for it: most samples of a training are nowhere near twice (or half) the least (or greatest) value of
        their baseline."""
        bounds = extremes_since(window, series, i + series.base - series.start, self.seconds is not None)
        if bounds is None:
            return False
        low, high = bounds
        if self.direction == "down":
            return latest > 0 and 0 < high < HALF_MAX and latest / high > self.ratio
        return latest >= 0 and 0 < low < math.inf and latest / low < self.ratio

    def check_range(self, series: Series, lo: int, hi: int) -> list[int]:
        """`judge_range`: the window advanced sample by sample under one look at the memo; a long run under a
        narrow median of samples, column-wise (`rules/slide.py`) where its windows are full and finite."""
        width = self.samples
        if (
            self.stat == "median"
            and self.seconds is None
            and width is not None
            and max(self.min_samples, 1) <= width <= SLIDE_MAX_WIDTH
            and hi - lo >= VECTOR_MIN
        ):
            return self._slide(series, lo, hi, width)
        if self.stat == "median" and self.seconds is not None and hi - lo >= VECTOR_MIN:
            return self._each(series, self._undecided(series, lo, hi, self.seconds), lo)
        return self._each(series, range(lo, hi), lo)

    def _undecided(self, series: Series, lo: int, hi: int, seconds: float) -> Iterable[int]:
        """The indices in [lo, hi) that the extremes of their windows leave undecided; the others are no spike.

        A median lies between its window's least and greatest finite values (the middle two added and halved
        too, short of an overflow, which `HALF_MAX` keeps out), and a quotient of positive doubles does not grow
        as its divisor grows (rounding keeps the order). So down, `latest / greatest > ratio` means
        `latest / median > ratio`; up, `latest / least < ratio` means `latest / median < ratio`: no spike,
        whatever the median. A steady series' 5 minutes are judged without moving its median at all (the
        greatest and least of every window at once, `range_max`); times going back leave all undecided."""
        times, values = series.times, series.values
        first = bisect_left(times, times[lo] - seconds, series.earliest(lo), lo)
        t = np.frombuffer(times[first:hi], np.float64)  # copies: the buffer may grow
        if not bool((t[1:] >= t[:-1]).all()):
            return range(lo, hi)
        v = np.frombuffer(values[first:hi], np.float64)
        at = lo - first
        his = np.arange(at, len(t))
        los = np.searchsorted(t, t[at:] - seconds, side="left")  # bisect_left's window starts, within reach:
        los = np.minimum(np.maximum(los, his - (series.reach - 1)), his)
        latest, some = v[at:], his > los
        sure = np.zeros(len(latest), dtype=bool)
        sure[some] = self._no_spike(v, latest[some], los[some], his[some])
        return (np.flatnonzero(~sure) + lo).tolist()

    def _settled(self, seg: Any, latest: Any, width: int) -> Any:
        """`_slide`'s rows that the extremes of their windows (`seg[r : r + width]`) settle: no spike (`_no_spike`)."""
        los = np.arange(len(latest))
        return self._no_spike(seg, latest, los, los + width)

    def _no_spike(self, values: Any, latest: Any, los: Any, his: Any) -> Any:
        """Where `latest[k]` is no spike over the median of the finite values of `values[los[k] : his[k]]` (each
        window not empty), whatever that median: see `_undecided`."""
        finite = np.isfinite(values)
        with np.errstate(all="ignore"):
            if self.direction == "down":
                top = range_max(np.where(finite, values, -np.inf), los, his)
                return (latest > 0) & (top > 0) & (top < HALF_MAX) & (latest / top > self.ratio)
            low = -range_max(np.where(finite, -values, -np.inf), los, his)
            return (latest >= 0) & (low > 0) & (latest / low < self.ratio)

    def _each(self, series: Series, indices: Iterable[int], lo: int) -> list[int]:
        """The offsets from `lo` of `indices` (ascending) where `check` holds, under one look at the memo: `_baseline`
        and `_judge` of each finite sample, in one loop (a spike over a fast series' 5 minutes judges every sample
        so: a call less per sample counts)."""
        values, times, start, out = series.values, series.times, series.start, []
        reach = series.reach - 1  # `series.earliest(i)` is max(start, i - reach): inline, a call less per sample
        seconds, samples, least = self.seconds, self.samples or 0, max(self.min_samples, 1)
        ratio, up = self.ratio, self.direction == "up"
        window = self._window(series)
        move, ordered = window.move, window.ordered
        for i in indices:
            latest = values[i]
            if latest - latest != 0.0:
                continue
            if seconds is not None:
                move(series, bisect_left(times, times[i] - seconds, max(start, i - reach), i), i)
            else:
                move(series, max(start, i - samples), i)
            n = window.count
            if n < least:
                continue
            if ordered is None:
                base = window.sum() / n
            else:
                m = n // 2
                base = ordered[m] if n % 2 else (ordered[m - 1] + ordered[m]) / 2
            if base > 0 and (latest / base >= ratio if up else latest / base <= ratio):
                out.append(i - lo)
        return out

    def _slide(self, series: Series, lo: int, hi: int, width: int) -> list[int]:
        """`check_range` with the medians of the full windows of finite values column-wise; the samples before the
        first full window, and those whose window holds a non-finite value, one at a time (same answers)."""
        full = min(hi, max(lo, series.start + width))  # the first sample whose window is full
        out = self._each(series, range(lo, full), lo) if full > lo else []
        if full >= hi:
            return out
        seg = np.frombuffer(series.values[full - width : hi], dtype=np.float64)  # a copy's view: the buffer may grow
        finite = np.isfinite(seg)
        bad = np.concatenate(([0], np.cumsum(~finite)))
        latest = seg[width:]
        clean = (bad[width : width + len(latest)] == bad[: len(latest)]) & finite[width:]  # window and latest finite
        need = clean & ~self._settled(seg, latest, width)
        base = np.full(len(latest), np.nan)
        rows = np.flatnonzero(need)
        if len(rows) == len(latest):
            base = sliding_medians(seg[:-1], width)
        elif len(rows):
            base[rows] = sliding_medians(seg[:-1], width, rows=rows)
        with np.errstate(all="ignore"):  # overflow to inf, as Python's float division gives it
            ratio = latest / base
            hit = need & (base > 0) & (ratio >= self.ratio if self.direction == "up" else ratio <= self.ratio)
        redo = np.flatnonzero(~clean & finite[width:])  # a finite latest over a window with a non-finite value
        offset = full - lo
        found = (np.flatnonzero(hit) + offset).tolist()
        if len(redo):
            found = sorted(found + self._each(series, (int(k) + full for k in redo), lo))
        return out + found

    def _judge(self, latest: float, base: float | None) -> bool:
        if base is None or base <= 0:
            return False
        r = latest / base
        return r >= self.ratio if self.direction == "up" else r <= self.ratio

    def _window(self, series: Series) -> Running:
        """The series' running window."""
        median = self.stat == "median"
        return self.memo.entry(series, Running, not median, False, median)  # type: ignore[no-any-return]

    def _baseline(self, window: Running, series: Series, i: int) -> float | None:
        if self.seconds is not None:
            lo = moved_start(series, series.times[i] - self.seconds, series.earliest(i), i, window, right=False)
        else:
            lo = max(series.start, i - (self.samples or 0))
        window.move(series, lo, i)
        n = window.count
        if n < self.min_samples or n == 0:
            return None
        if window.ordered is None:
            return window.sum() / n  # the exact sum rounded once (as math.fsum), then divided
        ordered = window.ordered
        m = n // 2
        return ordered[m] if n % 2 else (ordered[m - 1] + ordered[m]) / 2

    def describe(self) -> str:
        """`spike up x2 over the median of 50 samples`."""
        window = f"{self.samples} samples" if self.seconds is None else f"{self.seconds:g}s"
        return f"spike {self.direction} x{self.ratio:g} over the {self.stat} of {window}"

    def lookback(self, times: Any, reach: int) -> int:
        """The baseline's window (`LooksBack`); by time, no more than `reach - 1` samples (`Series.earliest`)."""
        if self.seconds is not None:
            return min(seconds_lookback(self.seconds, times), reach - 1)
        return self.samples or 0


@dataclass(frozen=True, slots=True)
class Absent:
    """No new sample for `seconds`. Judged on time, not on samples; a finished run is never absent."""

    seconds: float

    def check(self, series: Series, i: int) -> bool:
        """A new sample always ends an absence."""
        return False

    def describe(self) -> str:
        """`absent for 600s`."""
        return f"absent for {self.seconds:g}s"

    def lookback(self, times: Any, reach: int) -> int:
        """No sample before the newest: an absence is judged on time, from the newest sample's (`LooksBack`)."""
        return 0
