"""Where a replay cuts its time-ordered samples into the pieces it feeds between two evaluations.

The service judges samples as its polls bring them, often one at a time; a replay feeds them in pieces (one
evaluation per piece, not per sample: its speed), and the pieces must not change what the rules see:

- **The buffer's horizon.** A series keeps `max_samples`; a piece holding `k` of its samples leaves the first of
  them `max_samples - k` samples before it, where one fed alone has `max_samples - 1`. As long as the rules that
  watch the series read at most `max_samples - k` samples back (their `lookback`: a spike's baseline, a window
  and its baseline, the sample before for a trend; a duration's: the most samples of this series within it),
  nothing they read is gone. So a series' share of a piece is at most `max_samples` less its rules' lookback.
  Where that leaves less than `floor` (a quarter of the buffer, at most `CHUNK`: a window about as long as the
  buffer, a rule that does not say its lookback, as `expr`, `peers`, `plateau`), the share is `floor`, and the earliest
  samples of a piece may see a window cut short, as in the service after a poll that brought many samples.
- **A step going back** (a restart from a checkpoint) drops the samples of its series from that step on. The
  service has judged them by then; a replay has too, as a piece ends before such a sample (unless that piece
  would hold fewer than `MIN_PIECE` samples: a series whose steps go back and forth all the time).
- **Time.** A piece spans at most a quarter of `max_age` (older samples leave the buffer by age).

At most `MAX_PIECE` samples in all go in one piece (one evaluation's work, whatever the number of series).

**A wider buffer** (`plan`, where the replay allows it): where every series' rules read less far back than
`max_samples`, no step goes back and every rule that may watch the runs' own series says how far back it reads, a
larger buffer changes nothing any rule reads; the replay then gets `MAX_PIECE` more samples a series of room
(`WIDE_BUDGET` in all), and pieces of up to `MAX_PIECE` samples of a series. A spike's baseline of a duration
reads back at most the samples the service's buffer holds (`BufferLimits.reach`, kept at the service's
`max_samples`): 5 minutes of a fast series, longer than the buffer, do not keep a replay's buffer small.

What pieces may still change, as the service's polls do (tests/core/test_properties.py holds the rest alike in any
pieces): a timer due at the very time of a sample (an absence of exactly its length); a run's end marker in the
piece of later samples of the run; the order of the transitions one evaluation makes at one instant.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from operator import attrgetter
from typing import Any

from alertd._np import np
from alertd.buffer import BufferLimits
from alertd.columns import Columns
from alertd.model import Sample, SeriesKey

CHUNK = 256
"""A series' share of a piece where its rules' lookback does not allow more (`floor`), at most."""
MAX_PIECE = 8192
"""Samples in one piece, at most."""
MIN_PIECE = 16
"""A piece is not ended at a step going back before it holds this many samples."""
WIDE_BUDGET = 1 << 22
"""Samples a widened replay buffer holds in all, at most (`plan`): about 100 MB."""
Lookback = Callable[[SeriesKey, Any], "int | None"]
"""How many samples before a judged one the rules on a series read, given its times (None: not known)."""
_SERIES = attrgetter("series")
_TIME = attrgetter("time")
_STEP = attrgetter("step")


def floor(limits: BufferLimits) -> int:
    """A series' share of a piece where its rules allow no more."""
    return max(1, min(CHUNK, limits.max_samples // 4))


def pieces(
    ordered: Sequence[Sample],
    lookback: Lookback,
    limits: BufferLimits,
    times: Any | None = None,
    columns: Columns | None = None,
) -> Iterator[tuple[int, int]]:
    """The pieces [a, b) of `ordered` (samples in time order), in order, covering it.

    `lookback(key, times)`: how many samples before a judged one the rules on `key` read (None: not known), given
    the series' times. `times`: the samples' times as a float64 numpy array, `columns` all of `ordered`'s
    (`alertd.columns`), where the caller has them."""
    return plan(ordered, lookback, limits, times, columns)[1]


def plan(
    ordered: Sequence[Sample],
    lookback: Lookback,
    limits: BufferLimits,
    times: Any | None = None,
    columns: Columns | None = None,
    widen: bool = False,
) -> tuple[BufferLimits, Iterator[tuple[int, int]]]:
    """(the limits to replay with, the pieces of `ordered` for them: see `pieces`).

    With `widen` (every rule of the replay says its lookback), the limits are `limits` with room for up to
    `MAX_PIECE` more samples a series (`WIDE_BUDGET` in all), where that changes nothing the rules read: every
    series' rules read at most `max_samples - 1` samples back (all a buffer of `max_samples` holds before a
    sample), and no step goes back (a restart would keep, in a larger buffer, samples the service's had
    evicted; every step an int64 or missing, so that this is known). The pieces then hold up to `MAX_PIECE`
    samples of any series: fewer evaluations."""
    n = len(ordered)
    if n == 0:
        return limits, iter(())
    if times is None:
        times = np.fromiter(map(_TIME, ordered), np.float64, n)
    needs, back = _needs(ordered, lookback, times, columns)
    most = limits.max_samples
    if widen and back is not None and not back and all(need is not None and need < most for _, need in needs):
        extra = min(MAX_PIECE, WIDE_BUDGET // len(needs) - most)
        if extra > 0:
            limits = replace(limits, max_samples=most + extra, reach=limits.reaches())
    return limits, _cut(_limits(needs, limits, n), back or [], times, limits.max_age / 4)


def _cut(limit: Any, back: list[int], times: Any, span: float) -> Iterator[tuple[int, int]]:
    """The pieces: each ends where a sample's `limit` says, at a step going back, or `span` seconds on."""
    n = len(limit)
    a, k = 0, 0
    while a < n:
        stop = min(n, a + MAX_PIECE)
        reach = np.minimum.accumulate(limit[a:stop])  # [a, b) may end at b <= reach[b - 1 - a] (each sample's limit)
        over = np.flatnonzero(np.arange(a + 1, stop + 1) > reach)
        b = a + int(over[0]) if len(over) else stop
        late = int(np.searchsorted(times, times[a] + span, side="right"))
        b = max(a + 1, min(b, late))
        k = bisect_left(back, a + MIN_PIECE, k)
        if k < len(back) and back[k] < b:
            b = back[k]
        yield a, b
        a = b


def _needs(
    ordered: Sequence[Sample], lookback: Lookback, times: Any, columns: Columns | None
) -> tuple[list[tuple[Any, int | None]], list[int] | None]:
    """(each series' sample indices with its rules' lookback; the indices of the steps going back, in order, or
    None where a step is neither an int64 nor missing: not known)."""
    steps = columns.steps if columns is not None and columns.steps is not None else _steps(ordered)
    needs: list[tuple[Any, int | None]] = []
    back: list[int] = []
    ids = columns.ids if columns is not None else None
    for key, rows in _series_rows(ordered, ids).items():
        needs.append((rows, lookback(key, times[rows])))
        if steps is not None:
            s = steps[rows]
            known = s != _NO_STEP
            s, r = s[known], rows[known]
            back.extend(r[1:][s[1:] < s[:-1]].tolist())
    back.sort()
    return needs, back if steps is not None else None


def _limits(needs: list[tuple[Any, int | None]], limits: BufferLimits, n: int) -> Any:
    """Per sample p, the index a piece holding p ends at, at most (each series' share of a piece)."""
    limit = np.full(n, n, dtype=np.int64)
    low = floor(limits)
    for rows, need in needs:
        room = limits.max_samples - need if need is not None else 0
        share = min(limits.max_samples, room) if room >= low else low
        if len(rows) > share:
            limit[rows[:-share]] = rows[share:]  # from its first sample in a piece, `share` of the series at most
    return limit


def _series_rows(ordered: Sequence[Sample], ids: Any | None = None) -> dict[SeriesKey, Any]:
    """Each series' sample indices (ascending, an int64 array); equal keys held by different objects are one
    series. `ids`: each sample's key object's id (uint64), where the caller has them."""
    if ids is None:
        ids = np.frombuffer(array("Q", map(id, map(_SERIES, ordered))), np.uint64)
    if bool((ids == ids[0]).all()):  # one key object: one series (a file of one tag)
        return {ordered[0].series: np.arange(len(ordered), dtype=np.int64)}
    _, first, index = np.unique(ids, return_index=True, return_inverse=True)
    canon: dict[SeriesKey, int] = {}
    same = np.array([canon.setdefault(ordered[int(f)].series, len(canon)) for f in first], dtype=np.int64)
    series = same[index.reshape(-1)]
    order = np.argsort(series, kind="stable")  # the samples of each series together, in time order
    keys = list(canon)
    return {keys[int(series[rows[0]])]: rows for rows in np.split(order, np.flatnonzero(np.diff(series[order])) + 1)}


_NO_STEP = np.iinfo(np.int64).min


def _steps(ordered: Sequence[Sample]) -> Any | None:
    """The samples' steps as int64 (a missing one: the smallest int64), or None where one is not an int."""
    try:
        return np.frombuffer(array("q", map(_STEP, ordered)), np.int64)
    except (TypeError, OverflowError):  # a missing step (None), or not an int64
        pass
    try:
        return np.fromiter((_NO_STEP if s.step is None else s.step for s in ordered), np.int64, len(ordered))
    except (TypeError, ValueError, OverflowError):
        return None
