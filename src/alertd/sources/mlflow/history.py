"""Reading one metric's history from a tracking server incrementally: only new points, none twice.

What MLflow's REST API offers (read in mlflow 3.17's `server/handlers.py` and its stores):

- `runs/search` answers each run with `data.metrics`: the latest point of every key (the greatest
  (step, timestamp, value)). The caller asks for a key's history only when that latest point is new
  to it (`PointCursor.is_new`), so a key that logged nothing costs no request.
- `metrics/get-history` (`run_id`, `metric_key`, `max_results`, `page_token`) pages through the whole
  history ordered by (timestamp, step, value). Its page token is an offset whose format MLflow calls
  unstable ("should not be relied upon"), and no token comes back after the last page: there is no
  "from here on". It serves the first read of a key (every point, in logging order, so a run that
  resumed from a checkpoint shows its steps going back), one page of `page_size` at a time.
- `metrics/get-history-bulk-interval` (`run_ids`, `metric_key`, `start_step`, `end_step`,
  `max_results` <= 2500) returns the points of a step window, ordered by (step, timestamp, value), but
  SAMPLES them when the window holds more than `max_results` points (it would drop a NaN). A window is
  complete when fewer than `max_results` points come back (a SQL-backed server returns exactly
  `max_results` when it samples, one over a file store at least that many). Later reads ask for
  [last step read, latest step]; a window that came back sampled is split at its middle sampled
  point's step and each half asked again; a single step holding that many points (a metric logged
  without steps: MLflow stores step 0) is read with `get-history`, pages of `page_size`, keeping that
  step's new points. So a metric logged without steps costs, in each poll in which it grew, its
  points at step 0 again (one request while fewer than a window, its whole history, paged, after
  that): log steps to read only new points.

Requests for a key with new points, in steady state: ONE bulk-interval request (while fewer than
`min(page_size, 2500)` points arrived since the last poll). A server without that endpoint under
/api/2.0 (older ones serve it to their UI only, under /ajax-api) gets `get-history` reads instead,
noted once in the log.

Never twice: a key's cursor is the greatest (step, timestamp) read and the values read at exactly
that (step, timestamp); a point is new when its (step, timestamp) is greater, or equal with another
value. Known limit: a point logged later with a (step, timestamp) below what was read (steps re-logged
after a resume from a checkpoint, into the same run) is not read once the key has been read past it.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from alertd import progress
from alertd.errors import SourceError
from alertd.sources.mlflow.http import NoEndpoint, RestClient
from alertd.sources.mlflow.values import parse_value, value_key

log = logging.getLogger(__name__)

MAX_INTERVAL_RESULTS = 2500
"""The server's cap on `max_results` of get-history-bulk-interval (MAX_RESULTS_PER_RUN)."""
_MAX_VALUES = 64
"""Distinct values remembered at one (step, timestamp): MLflow keeps them all, nobody logs so many."""


class Point(NamedTuple):
    """One point of a metric: MLflow's step, timestamp (ms) and value."""

    step: int
    timestamp: int
    value: float


def parse_point(raw: Any) -> Point:
    """A point from the JSON of a `Metric` (`{"key", "value", "timestamp", "step"}`); ValueError if not one."""
    if not isinstance(raw, dict):
        raise ValueError("a metric is a JSON object")
    step, ts = raw.get("step", 0), raw.get("timestamp", 0)
    step = int(step) if isinstance(step, str) else step  # int64 may come as a string in proto JSON
    ts = int(ts) if isinstance(ts, str) else ts
    if not isinstance(step, int) or not isinstance(ts, int) or isinstance(step, bool) or isinstance(ts, bool):
        raise ValueError(f"step and timestamp must be integers, got {step!r}, {ts!r}")
    return Point(step, ts, parse_value(raw.get("value", 0.0)))


def identity(point: Point) -> tuple[int, int, str]:
    """A point as a hashable key in which NaN equals NaN."""
    return point.step, point.timestamp, value_key(point.value)


@dataclass(slots=True)
class PointCursor:
    """The greatest (step, timestamp) of a key read so far, and the values read at exactly that point."""

    step: int
    timestamp: int
    values: list[str] = field(default_factory=list)

    def is_new(self, point: Point) -> bool:
        """Whether `point` has not been read (see the module docstring)."""
        here, mine = (point.step, point.timestamp), (self.step, self.timestamp)
        return here > mine or (here == mine and value_key(point.value) not in self.values)

    def advance(self, point: Point) -> None:
        """Note `point` as read."""
        here, mine = (point.step, point.timestamp), (self.step, self.timestamp)
        if here > mine:
            self.step, self.timestamp, self.values = point.step, point.timestamp, [value_key(point.value)]
        elif here == mine and len(self.values) < _MAX_VALUES:
            key = value_key(point.value)
            if key not in self.values:
                self.values.append(key)

    def copy(self) -> PointCursor:
        """An independent copy."""
        return PointCursor(self.step, self.timestamp, list(self.values))

    def to_json(self) -> list[Any]:
        """`[step, timestamp, [values]]`."""
        return [self.step, self.timestamp, list(self.values)]

    @classmethod
    def from_json(cls, data: Any) -> PointCursor | None:
        """The inverse of `to_json`; None for anything else."""
        if isinstance(data, list) and len(data) == 3 and isinstance(data[0], int) and isinstance(data[1], int):
            return cls(data[0], data[1], [str(v) for v in data[2]] if isinstance(data[2], list) else [])
        return None


class HistoryReader:
    """Reads new points of (run, key) pairs from one server. `sampled_windows` counts windows split."""

    def __init__(self, client: RestClient, page_size: int) -> None:
        self.client = client
        self.page_size = page_size
        self.window = min(page_size, MAX_INTERVAL_RESULTS)
        self.bulk_interval = True
        self.sampled_windows = 0

    async def new_points(
        self, run_id: str, key: str, cursor: PointCursor | None, latest_step: int, now: float
    ) -> tuple[list[Point], PointCursor | None]:
        """The points of `key` in `run_id` not read yet, in order, and the cursor after them (`cursor` itself
        is left as it was: the caller keeps the new one only once the points are delivered)."""
        if cursor is None:
            return await self._first_read(run_id, key, now)
        cursor = cursor.copy()
        out: list[Point] = []
        if self.bulk_interval:
            try:
                await self._windows(run_id, key, cursor, max(latest_step, cursor.step), now, out)
                return out, cursor
            except NoEndpoint:
                self.bulk_interval = False
                log.warning(
                    "MLflow at %s has no metrics/get-history-bulk-interval endpoint: reading whole histories "
                    "instead (upgrade the server to read only new points)",
                    self.client.host,
                )
        async for page in self._pages(run_id, key, now):
            for point in sorted(page):
                if cursor.is_new(point):
                    out.append(point)
                    cursor.advance(point)
        return out, cursor

    async def _first_read(self, run_id: str, key: str, now: float) -> tuple[list[Point], PointCursor | None]:
        out: list[Point] = []
        cursor: PointCursor | None = None
        previous: set[tuple[int, int, str]] = set()
        async for page in self._pages(run_id, key, now):
            # An offset page token shifts when a point lands before it: drop what the last page had.
            here = {identity(p) for p in page}
            for point in page:
                if identity(point) in previous:
                    continue
                out.append(point)
                if cursor is None:
                    cursor = PointCursor(point.step, point.timestamp, [value_key(point.value)])
                else:
                    cursor.advance(point)
            previous = here
        return out, cursor

    async def _windows(
        self, run_id: str, key: str, cursor: PointCursor, last: int, now: float, out: list[Point]
    ) -> None:
        stack = [(cursor.step, last)]
        while stack:
            lo, hi = stack.pop()
            points = await self._interval(run_id, key, lo, hi, now)
            if len(points) < self.window:
                for point in sorted(points):
                    if cursor.is_new(point):
                        out.append(point)
                        cursor.advance(point)
                continue
            self.sampled_windows += 1
            if lo < hi:
                mid = max(lo + 1, sorted(points)[len(points) // 2].step)
                stack += [(mid, hi), (lo, mid - 1)]
                continue
            async for page in self._pages(run_id, key, now):  # one step holds more than a window
                for point in sorted(page):
                    if point.step == lo and cursor.is_new(point):
                        out.append(point)
                        cursor.advance(point)

    async def _interval(self, run_id: str, key: str, lo: int, hi: int, now: float) -> list[Point]:
        params = {
            "run_ids": [run_id],
            "metric_key": key,
            "start_step": lo,
            "end_step": hi,
            "max_results": self.window,
        }
        data = await self.client.get("metrics/get-history-bulk-interval", params, now)
        return self._points(data, "metrics/get-history-bulk-interval")

    async def _pages(self, run_id: str, key: str, now: float) -> AsyncIterator[list[Point]]:
        params: dict[str, Any] = {"run_id": run_id, "metric_key": key, "max_results": self.page_size}
        seen: set[str] = set()
        while True:
            data = await self.client.get("metrics/get-history", params, now)
            yield self._points(data, "metrics/get-history")
            token = data.get("next_page_token")
            if not token:
                return
            if token in seen:
                raise SourceError(f"MLflow metrics/get-history at {self.client.host}: a page token came back twice")
            seen.add(token)
            params["page_token"] = token

    def _points(self, data: dict[str, Any], endpoint: str) -> list[Point]:
        points = []
        for raw in data.get("metrics") or ():
            try:
                points.append(parse_point(raw))
            except (ValueError, TypeError) as exc:
                log.warning("MLflow %s at %s: a point skipped: %s", endpoint, self.client.host, exc)
        progress.received(0, rows=len(points))
        return points
