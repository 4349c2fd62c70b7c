"""A long run of `avg`, `sum` and `count` window comparisons decided column-wise from float sums and their error
bounds; only the samples whose exact number lies too near the compared one are left to the exact sums.

`WindowAggregate` judges a window's mean as the correctly rounded quotient of the exact sum of its finite values
by their count (and a ratio to a baseline as the rounded quotient of those two rounded means). The float prefix
sums here are not exact, but their error is bounded (recursive summation: at most about `k * 2**-53` times the sum
of the magnitudes of the first `k` values), so each window's exact sum lies in a known interval. Where the whole
interval of the exact number, widened by the roundings the exact path makes, lies on one side of the compared
number, every comparison operator gives the answer the exact path gives, and the sample is decided here. Where
it does not (a mean equal or within a few units in the last place of the threshold, a baseline near zero, sums
beyond 1e300), the sample is left undecided for the exact integers (`windows.prefix_sums`).
"""

from __future__ import annotations

from typing import Any

from alertd._np import np

_U = 2.0**-53
"""The unit roundoff of a double."""
_TINY = 2.0**-1000
"""Below this a mean or a ratio may be subnormal (less relative precision): never decided that near zero."""
_HUGE = 1e300
"""Sums of magnitudes beyond this may overflow: nothing decided."""


def window_verdicts(
    kind: str, op: str, number: float, least: int, values: Any, now: tuple[Any, Any], base: tuple[Any, Any] | None
) -> tuple[Any, Any]:
    """(hit, sure): per judged sample, whether its comparison holds, and whether that was decided here.

    `values` is the float64 run the windows index; `now` the start and end (exclusive) indices of each sample's
    window, `base` those of its baseline window (None without a baseline); `least` the finite values a window
    needs. `kind` is `avg`, `sum` or `count`, `op` one of `OPS`, `number` the value or the ratio compared."""
    m = len(values)
    finite = np.isfinite(values)
    acc = np.zeros((3, m + 1))  # prefix sums of: the finite values' count, the values, their magnitudes
    acc[0, 1:] = finite
    np.copyto(acc[1, 1:], values, where=finite)
    np.abs(acc[1, 1:], out=acc[2, 1:])
    np.cumsum(acc[:, 1:], axis=1, out=acc[:, 1:])  # the counts are exact (below 2**53)
    counts, sums, mags = acc
    n_now = counts[now[1]] - counts[now[0]]
    ok = n_now >= least
    n_base = None
    if base is not None:
        n_base = counts[base[1]] - counts[base[0]]
        ok &= n_base >= least
    if kind == "count":  # the counts are exact, and so are their float quotients (one rounding, as Python's)
        measured = n_now
        if n_base is not None:
            ok &= n_base > 0
            measured = n_now / np.where(n_base > 0, n_base, 1.0)
        return ok & _compare(op, measured, number), np.ones(len(ok), dtype=bool)
    if not mags[-1] <= _HUGE:  # NaN included: nothing decided
        return np.zeros(len(ok), dtype=bool), np.zeros(len(ok), dtype=bool)
    slack = (3 * m + 8) * _U

    def interval(a: Any, b: Any, n: Any) -> tuple[Any, Any]:
        """Bounds of the exact aggregate of the windows [a, b) (mean or sum), the exact path's rounding included."""
        s = sums[b] - sums[a]
        err = slack * mags[b] + 4 * _U * np.abs(s)
        if kind == "avg":
            d = np.maximum(n, 1.0)
            s, err = s / d, err / d
        err += np.abs(s) * (8 * _U) + _TINY  # the division's rounding and the exact path's
        return s - err, s + err

    lo, hi = interval(now[0], now[1], n_now)
    if base is not None:
        assert n_base is not None
        b_lo, b_hi = interval(base[0], base[1], n_base)
        # the baseline's rounded aggregate is > 0 for sure, and the recent one's is not near zero (a subnormal
        # one is rounded with less relative precision than the ratio's bounds allow for)
        positive = (b_lo > _TINY) & ((lo > _TINY) | (hi < -_TINY))
        not_positive = b_hi <= 0.0  # the baseline's rounded aggregate is <= 0 for sure: nothing judged
        safe_lo = np.where(positive, b_lo, 1.0)
        safe_hi = np.where(positive, b_hi, 1.0)
        # a quotient beyond the doubles is an infinity of the right sign (a bound still); inf - inf is NaN, which
        # decides nothing: such a sample is left to the exact path
        with np.errstate(over="ignore", invalid="ignore"):
            r_lo = np.where(lo >= 0, lo / safe_hi, lo / safe_lo)
            r_hi = np.where(hi >= 0, hi / safe_lo, hi / safe_hi)
            widen = 8 * _U
            lo = r_lo - np.abs(r_lo) * widen - _TINY
            hi = r_hi + np.abs(r_hi) * widen + _TINY
        above, below = positive & (lo > number), positive & (hi < number)
        sure = ~ok | not_positive | above | below
    else:
        above, below = lo > number, hi < number
        sure = ~ok | above | below
    hit = ok & ((above & _holds_above(op)) | (below & _holds_below(op)))
    return hit, sure


def _holds_above(op: str) -> bool:
    """Whether `op` holds for a number strictly above the compared one."""
    return op in (">", ">=", "!=")


def _holds_below(op: str) -> bool:
    """Whether `op` holds for a number strictly below the compared one."""
    return op in ("<", "<=", "!=")


def _compare(op: str, measured: Any, number: float) -> Any:
    """`measured op number`, column-wise (numpy's comparisons of doubles are Python's)."""
    if op == ">":
        return measured > number
    if op == ">=":
        return measured >= number
    if op == "<":
        return measured < number
    if op == "<=":
        return measured <= number
    if op == "==":
        return measured == number
    return measured != number
