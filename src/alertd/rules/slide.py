"""Sliding medians, column-wise: the median of every window of `width` consecutive values of a run, computed with
numpy's partition over a strided view, a chunk of rows at a time (bounded memory).

The numbers are `statistics.median`'s: the middle value, or the two middle values added and halved, in doubles,
as `Spike`'s running window gives them. Cheaper than the running window for narrow windows only (a row costs a
partition of `width` values): 0.13 us a row at 10 values, 0.66 us at 50, 1.25 us at 100, against about 1.3 us for
the running window whatever its width; `SLIDE_MAX_WIDTH` is where it stops being used.
"""

from __future__ import annotations

from typing import Any

from alertd._np import np

SLIDE_MAX_WIDTH = 64
"""The widest window the column-wise medians are used for (see the module docstring)."""
CHUNK_VALUES = 1 << 19
"""Values partitioned at once (rows x width): 4 MiB of doubles, whatever the run's length."""


def sliding_medians(values: Any, width: int, chunk_values: int = CHUNK_VALUES, rows: Any | None = None) -> Any:
    """The medians of `values[k : k + width]` for k in [0, len(values) - width] (a float64 numpy array of them), or
    for k in `rows` only (an ascending int array: their medians, in that order).

    `values` is a float64 numpy array; the windows hold what they hold (NaN sorts last: judge only windows of
    finite values)."""
    count = len(values) - width + 1
    n = len(rows) if rows is not None else max(count, 0)
    out = np.empty(n, dtype=np.float64)
    if count <= 0 or n == 0:
        return out
    mid = width // 2
    step = max(1, chunk_values // width)
    view = _windows(values, width, count)
    with np.errstate(all="ignore"):  # 1e308 + 1e308 is inf, as in Python, without a warning
        for a in range(0, n, step):
            b = min(n, a + step)
            block = view[a:b] if rows is None else view[rows[a:b]]
            if width % 2:
                out[a:b] = np.partition(block, mid, axis=1)[:, mid]
            else:
                part = np.partition(block, (mid - 1, mid), axis=1)
                out[a:b] = (part[:, mid - 1] + part[:, mid]) / 2
    return out


def _windows(values: Any, width: int, rows: int) -> Any:
    """The read-only view of the `rows` windows of `width` values (numpy's `sliding_window_view`, built directly
    for a contiguous float64 run: that function's checks cost 10 times the view itself, once per call)."""
    if values.dtype != np.float64 or not values.flags.c_contiguous:
        return np.lib.stride_tricks.sliding_window_view(values, width)
    step = values.itemsize
    view = np.ndarray((rows, width), dtype=np.float64, buffer=values, strides=(step, step))
    view.flags.writeable = False
    return view


def range_max(values: Any, los: Any, his: Any) -> Any:
    """The greatest of `values[lo:hi]` for each pair of `los` and `his` (int arrays, each lo < hi), as a float64
    array: a sparse table (the maxima of every run of 1, 2, 4, ... values, up to the longest window: a numpy pass
    each), then the greater of two overlapping runs per window. NaN is not ordered: give a run without it."""
    n = len(values)
    lengths = his - los
    longest = int(lengths.max()) if len(lengths) else 1
    table = np.full((longest.bit_length(), n), -np.inf)
    table[0] = values
    width, level = 1, 0
    while 2 * width <= longest:  # table[j, k] = max(values[k : k + 2**j]), up to the longest window
        end = n - 2 * width + 1
        table[level + 1, :end] = np.maximum(table[level, :end], table[level, width : width + end])
        width, level = 2 * width, level + 1
    k = np.frexp(lengths)[1] - 1  # floor(log2(length)), exactly, for lengths >= 1
    return np.maximum(table[k, los], table[k, his - (1 << k)])
