"""Windowed conditions: an aggregate over a window of a series compared with a value or with the same
aggregate over the window before it, and the z-score of a value against the window before it.

Windows: `N samples` (the judged sample and the N-1 before it: judged only once the buffer holds N
samples up to the judged one) or a duration `D` (the samples whose time is in (t-D, t], t the judged
sample's time: left-open, as Prometheus' range selectors). Aggregates see only the window's finite
values; `min_samples` of them are needed (default 1; 0 for `count`).

Exact: sums are kept as Python ints (the values times a power of two that makes each an integer; every
double is one), so a mean or a standard deviation is the correctly rounded value of the exact one, and a
running state advanced sample by sample gives the same answers, bit for bit, as one rebuilt from the window.
Cost per judged sample: the values that enter and leave the window (plus, for min/max/quantile, a
binary search and a move of at most the window's length of 8-byte floats in a sorted array).
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from alertd._np import np
from alertd.buffer import Series
from alertd.rules.bounded import window_verdicts
from alertd.rules.compare import OPS
from alertd.rules.memo import Memo

Aggregate = Literal["avg", "min", "max", "sum", "count", "stddev", "quantile"]
AGGREGATES: tuple[str, ...] = ("avg", "min", "max", "sum", "count", "stddev", "quantile")
_ORDERED = frozenset({"min", "max", "quantile"})
_PREFIXED = frozenset({"avg", "sum", "count"})
PREFIX_MIN = 32
"""New samples from which an `avg`, `sum` or `count` is judged from prefix sums."""
_SUMS = frozenset({"avg", "sum", "stddev"})


def _div(a: int, b: int) -> float:
    """a / b correctly rounded; ±inf beyond the doubles' range."""
    try:
        return a / b
    except OverflowError:
        return math.inf if (a > 0) == (b > 0) else -math.inf


@dataclass(frozen=True, slots=True)
class Span:
    """A window's length: `samples` samples or `seconds` seconds (exactly one is set)."""

    samples: int | None = None
    seconds: float | None = None

    def describe(self) -> str:
        """`20 samples`, `300s`."""
        return f"{self.samples} samples" if self.samples is not None else f"{self.seconds:g}s"

    def lookback(self, times: Any) -> int:
        """`lookback` of a window of this span ending at (and holding) a judged sample, or just before it."""
        if self.samples is not None:
            return self.samples
        assert self.seconds is not None
        return seconds_lookback(self.seconds, times)


def seconds_lookback(seconds: float, times: Any) -> int:
    """The most samples before one sample of a series whose time is within `seconds` of its own (`times`: the
    series' times, ascending, a float64 numpy array): what a window of that duration may hold before it."""
    if len(times) == 0:
        return 0
    starts = np.searchsorted(times, times - seconds, side="left")
    return int((np.arange(len(times)) - starts).max())


class Running:
    """The finite values at the absolute positions [lo, hi) of one series: their count, their exact sum
    (`sums`) and sum of squares (`squares`), and (`ordered`: for min, max, quantile) the values, sorted.

    The sums are integers in units of 2**-scale, `scale` the largest power of two any value added needed
    (a double is an integer times a power of two); a value needing more rescales them, exactly. So they are
    small integers for everyday values, and always the exact sums.

    It keeps its own copy of the window's values (`kept[head:]`, 8 bytes each): a value leaves the window
    from that copy, so the window moves on even after the buffer evicted the values leaving it (a window as
    long as the buffer's history, as a spike's over 5 minutes of a fast series, is never rebuilt for it)."""

    __slots__ = (
        *("before", "count", "head", "hi", "kept", "lo", "ordered", "scale", "squares", "sums", "total"),
        *("high", "low", "pend", "pfrom", "wfrom", "whigh", "wlow", "wnext", "wto"),
    )

    def __init__(self, sums: bool, squares: bool, ordered: bool) -> None:
        self.lo = self.hi = -1
        self.count = self.total = self.squares = self.scale = 0
        self.sums = sums or squares
        self.ordered: array[float] | None = array("d") if ordered else None
        self.kept: array[float] = array("d")
        self.head = 0
        if not squares:
            self.squares = -1  # not kept
        self.before: Running | None = None
        """A baseline's window, just before this one (`WindowAggregate` with a baseline: made when first needed)."""
        self.pfrom = self.pend = -2
        self.low, self.high = math.inf, -math.inf
        """The least and greatest finite values at the positions [pfrom, pend) (`extremes_since`: the samples judged
        since the window last moved, `pfrom` its `hi` then: another `hi`, and they say nothing)."""
        self.wfrom = self.wto = self.wnext = -1
        self.wlow, self.whigh = math.inf, -math.inf
        """The least and greatest finite values of the window itself as it stood at the positions [wfrom, wto) (its `lo`
        and `hi` then: others, and they say nothing), kept for `extremes_since` (no look at a sorted copy's ends for
        each judged sample); and for a window kept without a sorted copy (`avg`: found from its copy of the values),
        the position before which they are not sought again after they failed to settle a verdict
        (`WindowAggregate._settled_still`)."""

    def move(self, series: Series, lo: int, hi: int) -> None:
        """Make this the window of array indices [lo, hi) of `series` (advanced when that is cheaper than
        a rebuild; rebuilt otherwise: the same result)."""
        off = series.base - series.start
        plo, phi = lo + off, hi + off
        if plo == self.lo + 1 and phi == self.hi + 1 and self.lo < self.hi:  # slid by one: the usual
            kept, head = self.kept, self.head
            out, new = kept[head], series.values[hi - 1]
            self.head = head = head + 1
            kept.append(new)
            if out != new:  # the same value leaving and entering changes nothing (NaN != NaN: both, no-ops)
                self._swap(out, new)
            if head >= 256 and 2 * head >= len(kept):  # `_compact`, inline
                del kept[:head]
                self.head = 0
        else:
            self._jump(series, lo, hi, plo, phi)
        self.lo, self.hi = plo, phi

    def _swap(self, out: float, new: float) -> None:
        """`_change` of `out` leaving and `new` entering (the window slid by one), inline: one call per sample."""
        if self.sums:
            if self.ordered is not None or out - out != 0.0 or new - new != 0.0:
                self._change(out, -1)
                self._change(new, 1)
                return
            n_out, d_out = out.as_integer_ratio()  # two finite values: the count stays, the sums move
            n_new, d_new = new.as_integer_ratio()
            k = d_new.bit_length() - 1
            if k > self.scale:
                self._rescale(k)
            scale = self.scale
            x_out, x_new = n_out << (scale + 1 - d_out.bit_length()), n_new << (scale - k)
            self.total += x_new - x_out
            if self.squares >= 0:
                self.squares += x_new * x_new - x_out * x_out
            return
        ordered = self.ordered  # `_order` of the two
        if out - out == 0.0 and new - new == 0.0 and ordered is not None:  # two finite values: the count stays
            j = bisect_left(ordered, out)
            del ordered[j]
            if new > out:  # it goes at or after where `out` was
                insort(ordered, new, j)
            else:
                insort(ordered, new, 0, j)
            return
        if out - out == 0.0:
            self.count -= 1
            if ordered is not None:
                del ordered[bisect_left(ordered, out)]
        if new - new == 0.0:
            self.count += 1
            if ordered is not None:
                insort(ordered, new)

    def _jump(self, series: Series, lo: int, hi: int, plo: int, phi: int) -> None:
        """`move` other than by one: advanced by what leaves and enters, or rebuilt where that is cheaper."""
        off = plo - lo
        values, kept = series.values, self.kept
        if (
            self.lo < 0
            or plo < self.lo
            or phi < self.hi
            or plo > self.hi
            or (plo - self.lo) + (phi - self.hi) > phi - plo
        ):
            self.count = self.total = self.scale = 0
            if self.squares >= 0:
                self.squares = 0
            if self.ordered is not None:
                del self.ordered[:]
            del kept[:]
            self.head = 0
            for i in range(lo, hi):
                v = values[i]
                kept.append(v)
                self._change(v, 1)
        elif self.sums:
            # a value leaving and one entering at once, as a slide by one does (`_swap`: none where they are equal,
            # as a steady series' are); then the rest of either
            head, leaving, first = self.head, plo - self.lo, self.hi - off
            paired = min(leaving, hi - first)
            for j in range(paired):
                out, new = kept[head + j], values[first + j]
                kept.append(new)
                if out != new:
                    self._swap(out, new)
            for j in range(head + paired, head + leaving):
                self._change(kept[j], -1)
            for i in range(first + paired, hi):
                v = values[i]
                kept.append(v)
                self._change(v, 1)
            self.head = head + leaving
            self._compact()
        else:
            head = self.head
            self.head += plo - self.lo
            entering = values[self.hi - off : hi]
            kept.extend(entering)
            self._order(kept[head : self.head], entering)
            self._compact()

    def _order(self, leaving: Iterable[float], entering: Iterable[float]) -> None:
        """`_change` of each value leaving (-1) and entering (+1), for a window without sums (one loop, no call
        per value: a median over a fast series' 5 minutes moves at every sample)."""
        ordered, count = self.ordered, self.count
        for v in leaving:
            if v - v == 0.0:
                count -= 1
                if ordered is not None:
                    del ordered[bisect_left(ordered, v)]
        for v in entering:
            if v - v == 0.0:
                count += 1
                if ordered is not None:
                    insort(ordered, v)
        self.count = count

    def _compact(self) -> None:
        """Drop the copies of the values that left the window, once they are half the copy or more."""
        if self.head >= 256 and 2 * self.head >= len(self.kept):
            del self.kept[: self.head]
            self.head = 0

    def _change(self, v: float, sign: int) -> None:
        if v - v != 0.0:  # NaN, ±Inf: left out
            return
        self.count += sign
        if self.sums:
            n, d = v.as_integer_ratio()
            k = d.bit_length() - 1  # v = n * 2**-k
            if k > self.scale:
                self._rescale(k)
            x = n << (self.scale - k)
            self.total += x if sign > 0 else -x
            if self.squares >= 0:
                self.squares += x * x if sign > 0 else -(x * x)
        if self.ordered is not None:
            if sign > 0:
                insort(self.ordered, v)
            else:
                del self.ordered[bisect_left(self.ordered, v)]

    def _rescale(self, k: int) -> None:
        """Make the sums' unit 2**-k (k above the scale: each sum times a power of two, exactly)."""
        up = k - self.scale
        self.total <<= up
        if self.squares > 0:
            self.squares <<= 2 * up
        self.scale = k

    def mean(self) -> float:
        """The mean (count > 0)."""
        return self.total / (self.count << self.scale)

    def sum(self) -> float:
        """The sum (±inf beyond the doubles)."""
        return _div(self.total, 1 << self.scale)

    def stddev(self) -> float:
        """The population standard deviation (count > 0; squares kept)."""
        n, s = self.count, self.total
        return math.sqrt(_div(n * self.squares - s * s, (n * n) << (2 * self.scale)))


def quantile(ordered: array[float], q: float) -> float:
    """Prometheus' quantile_over_time of sorted values (numpy's "linear" method): the values at ranks
    floor(q*(n-1)) and the next one, weighted by the fraction of the rank."""
    n = len(ordered)
    rank = q * (n - 1)
    lower = int(rank)  # floor: 0 <= q <= 1, so 0 <= rank <= n - 1
    weight = rank - lower
    upper = lower + 1 if lower + 1 < n else lower
    return ordered[lower] * (1 - weight) + ordered[upper] * weight


def aggregate(kind: str, r: Running, q: float = 0.5) -> float:
    """The aggregate `kind` of the running window `r` (count > 0, or any count for `count`)."""
    if kind == "avg":
        return r.mean()
    if kind == "sum":
        return r.sum()
    if kind == "count":
        return float(r.count)
    if kind == "stddev":
        return r.stddev()
    assert r.ordered is not None
    if kind == "min":
        return r.ordered[0]
    if kind == "max":
        return r.ordered[-1]
    return quantile(r.ordered, q)


def prefix_sums(values: array[float], lo: int, hi: int) -> tuple[list[int], list[int], int]:
    """Prefix sums of the finite values at [lo, hi) as exact integers in units of 2**-scale (the scale the finest
    needs), prefix counts of them, and that scale. Column-wise where every scaled value and every sum fits in 62
    bits (everyday values: a loss, a learning rate); else with Python's integers (`prefix_sums_exact`)."""
    fast = _prefix_sums_column(values, lo, hi)
    return fast if fast is not None else prefix_sums_exact(values, lo, hi)


def _prefix_sums_column(values: array[float], lo: int, hi: int) -> tuple[list[int], list[int], int] | None:
    """`prefix_sums` with numpy's int64 in two limbs (each scaled value as hi * 2**31 + lo, 0 <= lo < 2**31, each
    limb summed on its own), or None where a value is 2**62 or more, or the high limbs' sums could need more than
    62 bits."""
    v = np.frombuffer(values[lo:hi], dtype=np.float64)  # a copy's view: the buffer may grow meanwhile
    if not len(v):
        return [0], [0], 0
    finite = np.isfinite(v)
    frac, exp = np.frexp(np.where(finite, v, 0.0))  # v = frac * 2**exp; a non-finite one as 0: both limbs 0
    mant = (frac * 2.0**53).astype(np.int64)  # exact: a double has 53 significant bits; v = mant * 2**(exp - 53)
    zero = mant == 0
    low = np.where(zero, 1, mant & -mant)  # the lowest set bit: as_integer_ratio's reduced fraction
    strip = np.frexp(low.astype(np.float64))[1] - 1
    mant >>= strip
    k = np.where(zero, 0, 53 - exp - strip)  # v = mant * 2**-k
    whole = k < 0  # an integer with trailing zero bits: as_integer_ratio gives it whole (k = 0)
    if whole.any():
        if np.abs(v[whole]).max() >= 2.0**62:  # `whole` only where the value is finite and not 0
            return None  # Python's integers
        mant = np.where(whole, mant << np.where(whole, -k, 0), mant)
        k = np.where(whole, 0, k)
    scale = int(k.max())
    shift = scale - k  # each scaled value: mant * 2**shift
    top = np.frexp(np.abs(mant).astype(np.float64))[1] + shift - _LIMB  # bits of the high limb
    if int(top.max()) + len(v).bit_length() > 62:
        return None
    up = shift >= _LIMB
    high = np.where(up, mant << np.where(up, shift - _LIMB, 0), mant >> np.where(up, 0, _LIMB - shift))
    rest = np.where(up, 0, (mant << np.where(up, 0, shift)) & (2**_LIMB - 1))  # the low bits survive a wrap
    his, los = np.cumsum(high).tolist(), np.cumsum(rest).tolist()
    sums = [0, *((h << _LIMB) + r for h, r in zip(his, los, strict=True))]
    counts = np.concatenate(([0], np.cumsum(finite))).tolist()
    return sums, counts, scale


_LIMB = 31
"""Bits of a scaled value's low limb (`_prefix_sums_column`)."""


def prefix_sums_exact(values: array[float], lo: int, hi: int) -> tuple[list[int], list[int], int]:
    """`prefix_sums` with Python's integers, for any doubles."""
    parts: list[tuple[int, int]] = []  # per value: (numerator, power of two), (0, -1) if not finite
    scale = 0
    for v in values[lo:hi]:
        if v - v != 0.0:
            parts.append((0, -1))
            continue
        n, d = v.as_integer_ratio()
        k = d.bit_length() - 1
        parts.append((n, k))
        if k > scale:
            scale = k
    sums, counts = [0], [0]
    total = count = 0
    for n, k in parts:
        if k >= 0:
            total += n << (scale - k)
            count += 1
        sums.append(total)
        counts.append(count)
    return sums, counts, scale


def _prefixed(kind: str, sums: list[int], counts: list[int], a: int, b: int, scale: int, least: int) -> float | None:
    """The aggregate of the values [a, b) from the prefix sums (None with fewer than `least` finite values)."""
    n = counts[b] - counts[a]
    if n < least:
        return None
    if kind == "count":
        return float(n)
    total = sums[b] - sums[a]
    return total / (n << scale) if kind == "avg" else _div(total, 1 << scale)


def moved_start(series: Series, cutoff: float, lo: int, hi: int, window: Running, right: bool = True) -> int:
    """`bisect_right(series.times, cutoff, lo, hi)` (`bisect_left` when not `right`): where a window by time starts,
    found from where `window` (its running state) starts now. A window that moved on by a sample or a few starts a
    step or two later: those steps read times next to each other in memory, where a binary search's probes read
    across the whole window, a cache miss each in a tick over thousands of series. Only over times known ascending
    from `lo` on (`Series.disorder`), where the first index past the cutoff is the one a binary search finds."""
    times = series.times
    j = window.lo - series.base + series.start  # the window's start, as an array index (`Series.index`, inline)
    if (
        series.disorder > series.base + lo - series.start
        or j < lo
        or j > hi
        or (j > lo and not (times[j - 1] <= cutoff if right else times[j - 1] < cutoff))
    ):
        return bisect_right(times, cutoff, lo, hi) if right else bisect_left(times, cutoff, lo, hi)
    stop = j + 8 if j + 8 < hi else hi
    if right:
        while j < stop and times[j] <= cutoff:
            j += 1
    else:
        while j < stop and times[j] < cutoff:
            j += 1
    if j < stop or j == hi:
        return j
    return bisect_right(times, cutoff, j, hi) if right else bisect_left(times, cutoff, j, hi)


SETTLE_MAX = 64
"""Samples a window kept sorted may fall behind while the extremes of it and of the samples since settle each
judged sample (`extremes_since`)."""


def extremes_since(window: Running, series: Series, at: int, by_time: bool) -> tuple[float, float] | None:
    """The least and greatest finite values of `window` as it last moved (the ends of its sorted copy, `ordered`, or
    for an `avg`'s window, of its copy of the values: `Running.wlow`, `whigh`) and of the
    series' values at the absolute positions [window.hi, at), or None where they don't bound a window that ends
    at `at`. That window's values are all among those: its start does not go back from `window.lo` (a window by
    samples; one by seconds, `by_time`, while the times ascend from `window.lo` on: `Series.disorder`). The values
    since are kept as they come (`Running.low`, `high`, over [pfrom, pend)); at most `SETTLE_MAX` of them, and
    only while the buffer still holds them. So a judged sample that the extremes settle (most of a training's,
    nowhere near a threshold) leaves the window where it is, and no sorted array moves for it."""
    off = series.base - series.start
    hi, lo = window.hi, window.lo  # absolute positions
    if lo < 0 or hi > at or at - hi > SETTLE_MAX or (by_time and series.disorder > lo):
        return None
    if window.pfrom != hi:
        window.pfrom = window.pend = hi
        window.low, window.high = math.inf, -math.inf
    pend, low, high = window.pend, window.low, window.high
    if pend != at:
        if pend > at or pend - off < series.start:  # asked before, or its values gone from the buffer
            return None
        values = series.values
        for v in values[pend - off : at - off] if at - pend > 1 else (values[at - off - 1],):
            if v - v == 0.0:
                if v < low:
                    low = v
                if v > high:
                    high = v
        window.low, window.high, window.pend = low, high, at
    if window.wfrom != lo or window.wto != hi:  # the window's own extremes, found once where it stands
        ordered = window.ordered
        if ordered is not None:
            window.wlow, window.whigh = (ordered[0], ordered[-1]) if ordered else (math.inf, -math.inf)
        elif at < window.wnext:  # sought where it stood before and settled nothing (`WindowAggregate`)
            return None
        else:
            window.wlow, window.whigh = _finite_extremes(window.kept, window.head)
        window.wfrom, window.wto = lo, hi
    if window.wlow < low:
        low = window.wlow
    if window.whigh > high:
        high = window.whigh
    return low, high


def _finite_extremes(kept: array[float], head: int) -> tuple[float, float]:
    """The least and greatest finite values of `kept[head:]` (inf and -inf where there are none)."""
    low, high = math.inf, -math.inf
    for v in kept[head:]:
        if v - v == 0.0:
            if v < low:
                low = v
            if v > high:
                high = v
    return low, high


def window_start(series: Series, i: int, span: Span, end: int) -> int | None:
    """The array index where the window of `span` that ends before index `end` starts (the window ends
    at the judged sample `i`'s time for a duration); None when a window of samples is not full yet."""
    if span.samples is not None:
        lo = end - span.samples
        return lo if lo >= series.start else None
    assert span.seconds is not None
    return bisect_right(series.times, series.times[i] - span.seconds, series.start, end)


@dataclass(frozen=True, slots=True)
class WindowAggregate:
    """`{avg: {over: 20 samples}, op: ">", value: 3}`: the aggregate of the window's finite values compares
    true against `value`; with `baseline`, the aggregate divided by the same aggregate over the `baseline`
    window just before compares true against `ratio` (judged only when that baseline is > 0)."""

    kind: str
    over: Span
    op: str
    value: float | None = None
    ratio: float | None = None
    baseline: Span | None = None
    q: float = 0.5
    min_samples: int = 1
    memo: Memo = field(default_factory=Memo, compare=False, hash=False, repr=False)
    _how: tuple[Any, ...] = field(init=False, compare=False, hash=False, repr=False)
    """Worked out once: the comparison, the number compared, the finite values needed, what Running keeps,
    the baseline's span."""
    _settles: tuple[bool, float] | None = field(init=False, compare=False, hash=False, repr=False)
    """Where the extremes of the window can settle a verdict as false (`_settled_still`): whether the test is
    `>`/`>=` (else `<`/`<=`) and the number; for a min, max, quantile or avg (a mean lies within the extremes); None
    for the other aggregates, a baseline, `==`, `!=`."""

    def __post_init__(self) -> None:
        bspan = None
        if self.baseline is not None:
            bspan = Span(self.baseline.samples, _after(self.over, self.baseline))
        how = (
            OPS[self.op],
            self.value if self.baseline is None else self.ratio,
            max(self.min_samples, self.kind != "count"),
            (self.kind in _SUMS, self.kind == "stddev", self.kind in _ORDERED),
            bspan,
        )
        object.__setattr__(self, "_how", how)
        settles = None
        if (
            (self.kind in _ORDERED or self.kind == "avg")
            and bspan is None
            and self.op in (">", ">=", "<", "<=")
            and self.value is not None
        ):
            settles = (self.op in (">", ">="), float(self.value))
        object.__setattr__(self, "_settles", settles)

    def check(self, series: Series, i: int) -> bool:
        """True when the window (or the ratio to the baseline) compares true; never before the windows
        are full or hold `min_samples` finite values."""
        how, memo = self._how, series.memo
        window = memo.get(self.memo.token) if memo is not None else None  # `_window`, inline: asked at every sample
        if window is None:
            window = self._window(series)
        if self._settles is not None and self._settled_still(window, series, i, *self._settles):
            return False
        measured = self._measure(window, series, i)
        return measured is not None and how[0](measured, how[1])

    def _settled_still(self, window: Running, series: Series, i: int, above: bool, value: float) -> bool:
        """Whether a min, max, quantile or avg of the window ending at `i` (within the extremes of the window as it
        last moved and of the values since: `extremes_since`) can't compare true, so the window need not move for `i`
        (`_settles`: `above`, the test is `>` or `>=`; else `<` or `<=`). A quantile is a weighted mean of two
        values: off their range by a rounding at most, which the margin (a millionth of a millionth) covers; so is
        an avg (its exact sum divided, then rounded). An avg's window keeps no sorted copy: its own extremes are
        found from its copy of the values once where it stands (`Running.wfrom`), and, where they settled nothing,
        not again before it has moved on by its width (a window near its threshold moves at each sample anyway)."""
        at = i + series.base - series.start + 1
        bounds = extremes_since(window, series, at, self.over.seconds is not None)
        if bounds is None:
            return False
        low, high = bounds
        settled = high + abs(high) * 1e-12 < value if above else low - abs(low) * 1e-12 > value
        if not settled and window.ordered is None:  # an `avg`'s window: its extremes not sought again before it has
            window.wnext = at + window.hi - window.lo  # moved on by its width (`extremes_since`)
        return settled

    def measure(self, series: Series, i: int) -> float | None:
        """The aggregate of the window that ends at index `i` (with a baseline: its ratio to the baseline's
        aggregate), or None where nothing is judged."""
        return self._measure(self._window(series), series, i)

    def check_range(self, series: Series, lo: int, hi: int) -> list[int]:
        """The offsets from `lo` of the samples at [lo, hi) where `check` holds: the windows advanced sample by
        sample under one look at the memo; a long run of an `avg`, `sum` or `count` from exact prefix sums."""
        compare, number = self._how[0], self._how[1]
        if self.kind in _PREFIXED and hi - lo >= PREFIX_MIN:
            return self._check_prefixed(series, lo, hi)
        out = []
        window = self._window(series)
        for i in range(lo, hi):
            measured = self._measure(window, series, i)
            if measured is not None and compare(measured, number):
                out.append(i - lo)
        return out

    def _check_prefixed(self, series: Series, lo: int, hi: int) -> list[int]:
        """`check_range` of an `avg`, `sum` or `count`: decided column-wise from float sums where their error bounds
        settle it (`rules/bounded.py`); the rest from prefix sums of the finite values as exact integers (at the
        scale the finest of them needs): each window's sum and count are two differences, the same exact numbers a
        `Running` window holds, so the same answers."""
        compare, number, least = self._how[:3]
        judged, starts, bstarts = self._bounds_column(series, lo, hi)
        if not len(judged):
            return []
        first = int(starts.min() if bstarts is None else bstarts.min())
        run = np.frombuffer(series.values[first:hi], dtype=np.float64)  # a copy's view: the buffer may grow
        ends = judged + 1 - first
        hit, sure = window_verdicts(
            self.kind,
            self.op,
            number,
            least,
            run,
            (starts - first, ends),
            None if bstarts is None else (bstarts - first, starts - first),
        )
        out = (judged[hit & sure] - lo).tolist()
        undecided = np.flatnonzero(~sure)
        if not len(undecided):
            return out  # type: ignore[no-any-return]
        sums, counts, scale = prefix_sums(series.values, first, hi)
        kind = self.kind
        for k in undecided.tolist():
            i, wlo = int(judged[k]), int(starts[k]) - first
            now = _prefixed(kind, sums, counts, wlo, i + 1 - first, scale, least)
            if now is not None and bstarts is not None:
                before = _prefixed(kind, sums, counts, int(bstarts[k]) - first, wlo, scale, least)
                now = None if before is None else (now / before if before > 0 else None)
            if now is not None and compare(now, number):
                out.append(i - lo)
        return sorted(out)

    def _bounds_column(self, series: Series, lo: int, hi: int) -> tuple[Any, Any, Any]:
        """(the indices at [lo, hi) judged, their windows' starts, their baselines' starts or None), as int64 arrays:
        `_bounds` of each sample (column-wise for windows and baselines of samples)."""
        bspan = self._how[4]
        samples = self.over.samples
        if samples is not None and (bspan is None or bspan.samples is not None):
            judged = np.arange(lo, hi, dtype=np.int64)
            starts = judged + 1 - samples
            keep = starts >= series.start
            bstarts = None
            if bspan is not None:
                bstarts = starts - bspan.samples
                keep &= bstarts >= series.start
                bstarts = bstarts[keep]
            return judged[keep], starts[keep], bstarts
        found = [(i, *b) for i in range(lo, hi) if (b := self._bounds(series, i)) is not None]
        judged = np.array([f[0] for f in found], dtype=np.int64)
        starts = np.array([f[1] for f in found], dtype=np.int64)
        return judged, starts, None if bspan is None else np.array([f[2] for f in found], dtype=np.int64)

    def _window(self, series: Series) -> Running:
        """The series' running window (with a baseline, the baseline's hangs on it: `Running.before`)."""
        return self.memo.entry(series, Running, *self._how[3])  # type: ignore[no-any-return]

    def _bounds(self, series: Series, i: int) -> tuple[int, int | None] | None:
        """Where the window that ends at index `i` starts, and where its baseline does (None without one); None
        where nothing is judged (a window of samples, or its baseline, not full yet)."""
        samples = self.over.samples
        if samples is not None:
            lo = i + 1 - samples
            if lo < series.start:
                return None
        else:
            lo = bisect_right(series.times, series.times[i] - self.over.seconds, series.start, i + 1)  # type: ignore[operator]
        bspan = self._how[4]
        if bspan is None:
            return lo, None
        blo = window_start(series, i, bspan, lo)
        return None if blo is None else (lo, blo)

    def _measure(self, recent: Running, series: Series, i: int) -> float | None:
        _, _, least, keep, bspan = self._how
        over = self.over
        if bspan is None:  # `_bounds`, inline: the usual window
            blo = None
            if over.samples is not None:
                lo = i + 1 - over.samples
                if lo < series.start:
                    return None
            else:
                lo = moved_start(series, series.times[i] - over.seconds, series.start, i + 1, recent)  # type: ignore[operator]
        else:
            bounds = self._bounds(series, i)
            if bounds is None:
                return None
            lo, blo = bounds
        recent.move(series, lo, i + 1)
        if recent.count < least:
            return None
        kind = self.kind
        now: float
        if kind == "avg":  # `aggregate`, inline for the two most asked
            now = recent.total / (recent.count << recent.scale)
        elif kind == "quantile":
            now = quantile(recent.ordered, self.q)  # type: ignore[arg-type]  # kept for a quantile
        else:
            now = aggregate(kind, recent, self.q)
        if blo is None:
            return now
        base = recent.before
        if base is None:
            base = recent.before = Running(*keep)
        base.move(series, blo, lo)
        if base.count < least:
            return None
        before = aggregate(self.kind, base, self.q)
        return now / before if before > 0 else None

    def describe(self) -> str:
        """`avg over 20 samples > 3`, `avg over 20 samples > 1.5x the 200 samples before`."""
        name = f"quantile({self.q:g})" if self.kind == "quantile" else self.kind
        head = f"{name} over {self.over.describe()} {self.op}"
        if self.baseline is None:
            return f"{head} {self.value:g}"
        return f"{head} {self.ratio:g}x the {self.baseline.describe()} before"

    def lookback(self, times: Any, reach: int) -> int:
        """At most how many samples before a judged one its window and baseline read (`LooksBack`)."""
        bspan = self._how[4]
        return self.over.lookback(times) + (0 if bspan is None else bspan.lookback(times))


def _after(over: Span, baseline: Span) -> float | None:
    """A duration baseline reaches back from the recent window's start: its length plus the recent one's."""
    if baseline.seconds is None:
        return None
    return baseline.seconds + (over.seconds or 0.0)


@dataclass(frozen=True, slots=True)
class ZScore:
    """`{zscore: {over: 100 samples, threshold: 3, direction: both}}`: (value - mean) / stddev of the
    finite values of the window BEFORE the judged sample is above `threshold` (up), below `-threshold`
    (down) or either (both), strictly, as W&B's z-score automation filter. A zero stddev is not judged."""

    over: Span
    threshold: float
    direction: Literal["up", "down", "both"] = "both"
    min_samples: int = 2
    memo: Memo = field(default_factory=Memo, compare=False, hash=False, repr=False)

    def check(self, series: Series, i: int) -> bool:
        """True when the finite value's z-score crosses the threshold in `direction`."""
        memo = series.memo
        window = memo.get(self.memo.token) if memo is not None else None  # `_window`, inline: asked at every sample
        return self._crosses(self._score(window or self._window(series), series, i))

    def score(self, series: Series, i: int) -> float | None:
        """The z-score of the value at index `i`, or None where nothing is judged (a non-finite value, a
        window not full, fewer than `min_samples` finite values, a zero stddev)."""
        return self._score(self._window(series), series, i)

    def check_range(self, series: Series, lo: int, hi: int) -> list[int]:
        """The offsets from `lo` of the samples at [lo, hi) where `check` holds, under one look at the memo."""
        out = []
        window = self._window(series)
        for i in range(lo, hi):
            if self._crosses(self._score(window, series, i)):
                out.append(i - lo)
        return out

    def _crosses(self, z: float | None) -> bool:
        if z is None:
            return False
        if self.direction == "up":
            return z > self.threshold
        if self.direction == "down":
            return z < -self.threshold
        return abs(z) > self.threshold

    def _window(self, series: Series) -> Running:
        return self.memo.entry(series, Running, True, True, False)  # type: ignore[no-any-return]

    def _score(self, window: Running, series: Series, i: int) -> float | None:
        v = series.values[i]
        if v - v != 0.0:
            return None
        samples = self.over.samples
        if samples is not None:  # `window_start`, inline: the usual window
            lo = i - samples
            if lo < series.start:
                return None
        else:
            lo = window_start(series, i, self.over, i)  # type: ignore[assignment]
        window.move(series, lo, i)
        n = window.count
        if n < self.min_samples or n < 1:
            return None
        std = window.stddev()
        return (v - window.total / (n << window.scale)) / std if std > 0 else None  # `mean`, inline

    def describe(self) -> str:
        """`zscore over 100 samples beyond 3 (both)`."""
        return f"zscore over {self.over.describe()} beyond {self.threshold:g} ({self.direction})"

    def lookback(self, times: Any, reach: int) -> int:
        """At most how many samples before a judged one its window reads (`LooksBack`)."""
        return self.over.lookback(times)
