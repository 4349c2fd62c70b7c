"""The `wandb` source: polls a W&B project's runs over the GraphQL API (httpx; the SDK is not used).

Requests per poll, in steady state: ONE runs-list request (`AlertdRuns`, 50 runs a page, so one more
per further 50 runs listed) plus ONE request per run still running (`AlertdRunPoll`: `historyKeys`
for the last step, the history window `minStep = last seen step + 1` .. `+ page_size` (maxStep
exclusive, as the SDK's `HistoryPage`), and the last `system_samples` rows of the system-metrics
stream `events`). Only when a run has more new steps than one window holds are further windows read
with the SDK's own `HistoryPage` query (so the first poll reads the whole history, paged). A run
seen ended gets one last `AlertdRunPoll` for its tail rows and no request after that.

`runs`: `running` lists `{"state": "running"}` plus the runs this source saw running and has not yet
seen end (so it notices them finish); a list of ids lists `{"name": {"$in": ids}}`; `all` lists every
run of the project.

Samples: history keys as logged (see `wandb_values`), step `_step`, time `_timestamp` (else the
run's `createdAt` + `_runtime`); system metrics from `events` rows (keys `system.<key>`, mapped as in
`wandb_values`), de-duplicated on `_timestamp`. The `events` stream has no step filter, so a poll
asks for the last `system_samples` rows (the server may down-sample a long run's stream: a known
limit of the API). At each poll, for a running run: `run.heartbeat_age` = now - `heartbeatAt`. Once
per run end (finished, crashed, failed, killed, preempted): `run.finished` = 1 and `run.crashed` =
0 (finished) or 1. Labels: `source`, `run` = `entity/project/run_id`, `run_name` = display name.

Auth: `cfg.api_key`, else `WANDB_API_KEY`; server `cfg.base_url`, else `WANDB_BASE_URL`, else
https://api.wandb.ai. A refused key (401/403) is logged once, raised as a non-recoverable
`SourceError`, and polls then fail fast without calling the API for `auth_backoff` seconds.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx

from alertd import progress
from alertd.errors import SourceError
from alertd.model import Sample, SeriesKey, make_labels
from alertd.sources.config import WandbConfig
from alertd.sources.httpretry import AuthError, Sleep
from alertd.sources.wandb.http import GraphQLClient
from alertd.sources.wandb.values import TERMINAL_STATES, crashed_value, flatten_row, system_metric, to_float

log = logging.getLogger(__name__)
DEFAULT_BASE_URL = "https://api.wandb.ai"

RUNS_QUERY = """
query AlertdRuns($project: String!, $entity: String!, $cursor: String, $perPage: Int = 50,
                 $filters: JSONString) {
    project(name: $project, entityName: $entity) {
        runs(filters: $filters, after: $cursor, first: $perPage, order: "+created_at") {
            edges { node { name displayName state heartbeatAt createdAt } cursor }
            pageInfo { endCursor hasNextPage }
        }
    }
}
"""

RUN_POLL_QUERY = """
query AlertdRunPoll($entity: String!, $project: String!, $run: String!, $minStep: Int64!, $maxStep: Int64!,
                    $pageSize: Int!, $systemSamples: Int!) {
    project(name: $project, entityName: $entity) {
        run(name: $run) {
            historyKeys
            history(minStep: $minStep, maxStep: $maxStep, samples: $pageSize)
            events(samples: $systemSamples)
        }
    }
}
"""

HISTORY_PAGE_QUERY = """
query HistoryPage(
    $entity: String!,
    $project: String!,
    $run: String!,
    $minStep: Int64!,
    $maxStep: Int64!,
    $pageSize: Int!,
) {
    project(name: $project, entityName: $entity) {
        run(name: $run) {
            history(
                minStep: $minStep,
                maxStep: $maxStep,
                samples: $pageSize,
            )
        }
    }
}
"""


@dataclass(slots=True)
class _Run:
    """What this source knows about one run between polls."""

    run_id: str
    display_name: str = ""
    state: str = ""
    last_step: int = -1
    system_time: float | None = None
    ended: bool = False


def parse_time(text: Any) -> float | None:
    """W&B's `heartbeatAt`/`createdAt` (ISO 8601, no zone = UTC) as epoch seconds, or None."""
    if not isinstance(text, str) or not text:
        return None
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


def _rows(raw: Any) -> list[dict[str, Any]]:
    """History/events rows: a list of JSON strings (or, leniently, of objects)."""
    out = []
    for item in raw or ():
        row = json.loads(item) if isinstance(item, str) else item
        if isinstance(row, dict):
            out.append(row)
    return out


class WandbSource:
    """Polls the runs of one W&B project; see the module docstring for what each poll costs."""

    def __init__(
        self, cfg: WandbConfig, *, client: httpx.AsyncClient | None = None, sleep: Sleep | None = None
    ) -> None:
        self.name = cfg.name
        self.interval = cfg.interval
        self.cfg = cfg
        self.entity, self.project = cfg.project.split("/", 1)
        key = cfg.api_key.get_secret_value() if cfg.api_key else os.environ.get("WANDB_API_KEY", "")
        base_url = cfg.base_url or os.environ.get("WANDB_BASE_URL") or DEFAULT_BASE_URL
        self._has_key = bool(key)
        self.client = GraphQLClient(
            base_url,
            key,
            client=client,
            timeout=cfg.timeout,
            max_retries=cfg.max_retries,
            max_wait=cfg.max_retry_wait,
            sleep=sleep,
        )
        self._runs: dict[str, _Run] = {}
        self._keys: dict[tuple[str, str, str, tuple[tuple[str, str], ...]], SeriesKey] = {}
        self._auth_error: SourceError | None = None
        self._auth_until = 0.0

    def __repr__(self) -> str:
        return f"WandbSource(name={self.name!r}, project={self.cfg.project!r}, host={self.client.host!r})"

    @property
    def requests(self) -> int:
        """HTTP requests sent so far (retries included)."""
        return self.client.requests

    async def aclose(self) -> None:
        """Close the HTTP client if this source created it."""
        await self.client.aclose()

    async def poll(self, now: float) -> Sequence[Sample]:
        """New samples of every watched run since the last poll."""
        if not self._has_key:
            raise SourceError(f"wandb source {self.name}: no API key (set WANDB_API_KEY)", recoverable=False)
        if self._auth_error is not None and now < self._auth_until:
            raise self._auth_error
        try:
            return await self._poll(now)
        except AuthError as exc:
            if self._auth_error is None:
                log.error(
                    "wandb source %s: %s; not calling the API again for %.0fs",
                    self.name,
                    exc,
                    self.cfg.auth_backoff,
                )
            self._auth_error, self._auth_until = exc, now + self.cfg.auth_backoff
            raise

    async def _poll(self, now: float) -> list[Sample]:
        out: list[Sample] = []
        for node in await self._list_runs(now):
            run_id = str(node.get("name") or "")
            if not run_id:
                continue
            run = self._runs.setdefault(run_id, _Run(run_id))
            if run.ended:
                continue
            run.display_name = str(node.get("displayName") or "")
            run.state = str(node.get("state") or "")
            created = parse_time(node.get("createdAt"))
            await self._read_run(run, created, now, out)
            if run.state in TERMINAL_STATES:
                run.ended = True
                out.append(Sample(self._key(run, "run.finished"), now, None, 1.0))
                out.append(Sample(self._key(run, "run.crashed"), now, None, crashed_value(run.state)))
            elif run.state == "running":
                beat = parse_time(node.get("heartbeatAt"))
                if beat is not None:
                    out.append(Sample(self._key(run, "run.heartbeat_age"), now, None, max(0.0, now - beat)))
        return out

    def _filters(self) -> dict[str, Any] | None:
        runs = self.cfg.runs
        if isinstance(runs, list):
            return {"name": {"$in": list(runs)}}
        if runs == "all":
            return None
        open_runs = sorted(r.run_id for r in self._runs.values() if not r.ended)
        if not open_runs:
            return {"state": "running"}
        return {"$or": [{"state": "running"}, {"name": {"$in": open_runs}}]}

    async def _list_runs(self, now: float) -> list[dict[str, Any]]:
        filters = self._filters()
        variables: dict[str, Any] = {
            "entity": self.entity,
            "project": self.project,
            "perPage": 50,
            "cursor": None,
            "filters": json.dumps(filters) if filters is not None else None,
        }
        nodes: list[dict[str, Any]] = []
        while True:
            data = await self.client.query("runs list", RUNS_QUERY, variables, now)
            project = data.get("project")
            if not project:
                raise SourceError(f"wandb source {self.name}: project {self.cfg.project} not found", recoverable=False)
            runs = project.get("runs") or {}
            nodes.extend(e["node"] for e in runs.get("edges") or () if e.get("node"))
            page = runs.get("pageInfo") or {}
            if not page.get("hasNextPage") or not page.get("endCursor"):
                return nodes
            variables["cursor"] = page["endCursor"]

    def _run_vars(self, run: _Run, min_step: int) -> dict[str, Any]:
        size = self.cfg.page_size
        return {
            "entity": self.entity,
            "project": self.project,
            "run": run.run_id,
            "minStep": min_step,
            "maxStep": min_step + size,
            "pageSize": size,
        }

    async def _read_run(self, run: _Run, created: float | None, now: float, out: list[Sample]) -> None:
        variables = self._run_vars(run, run.last_step + 1)
        variables["systemSamples"] = self.cfg.system_samples
        node = await self._run_node(RUN_POLL_QUERY, variables, run, now)
        keys = node.get("historyKeys")
        last_step = keys.get("lastStep", -1) if isinstance(keys, dict) else -1
        self._history(run, _rows(node.get("history")), created, out)
        self._system(run, _rows(node.get("events")), out)
        window_end = variables["maxStep"]
        while isinstance(last_step, int | float) and last_step >= window_end:
            variables = self._run_vars(run, max(run.last_step + 1, window_end))
            window_end = variables["maxStep"]
            node = await self._run_node(HISTORY_PAGE_QUERY, variables, run, now)
            self._history(run, _rows(node.get("history")), created, out)

    async def _run_node(self, query: str, variables: dict[str, Any], run: _Run, now: float) -> dict[str, Any]:
        data = await self.client.query(f"history of run {run.run_id}", query, variables, now)
        node = (data.get("project") or {}).get("run")
        if not isinstance(node, dict):
            raise SourceError(f"wandb source {self.name}: run {run.run_id} not found in {self.cfg.project}")
        return node

    def _key(self, run: _Run, metric: str, extra: tuple[tuple[str, str], ...] = ()) -> SeriesKey:
        cache_key = (run.run_id, run.display_name, metric, extra)
        key = self._keys.get(cache_key)
        if key is None:
            labels = {
                "source": self.name,
                "run": f"{self.cfg.project}/{run.run_id}",
                "run_name": run.display_name,
            }
            labels.update(extra)
            key = self._keys[cache_key] = SeriesKey(metric, make_labels(labels))
        return key

    def _history(self, run: _Run, rows: list[dict[str, Any]], created: float | None, out: list[Sample]) -> None:
        progress.received(0, rows=len(rows))
        for row in sorted(rows, key=lambda r: to_float(r.get("_step")) or 0.0):
            step_f = to_float(row.get("_step"))
            if step_f is None or step_f != step_f or int(step_f) <= run.last_step:
                continue
            step = int(step_f)
            t = to_float(row.get("_timestamp"))
            if t is None:
                t = (created or 0.0) + (to_float(row.get("_runtime")) or 0.0)
            run.last_step = step
            for metric, value in flatten_row(row):
                out.append(Sample(self._key(run, metric), t, step, value))

    def _system(self, run: _Run, rows: list[dict[str, Any]], out: list[Sample]) -> None:
        for row in sorted(rows, key=lambda r: to_float(r.get("_timestamp")) or 0.0):
            t = to_float(row.get("_timestamp"))
            if t is None or (run.system_time is not None and t <= run.system_time):
                continue
            run.system_time = t
            for key, raw in row.items():
                value = to_float(raw)
                if value is None or not key.startswith("system."):
                    continue
                metric, extra = system_metric(key[len("system.") :])
                out.append(Sample(self._key(run, metric, tuple(sorted(extra.items()))), t, None, value))

    def cursor(self) -> dict[str, Any]:
        """Last step and system-metric time per run, and which runs ended: for a restart."""
        return {
            "runs": {
                r.run_id: {
                    "step": r.last_step,
                    "system_time": r.system_time,
                    "ended": r.ended,
                    "display_name": r.display_name,
                }
                for r in self._runs.values()
            }
        }

    def restore(self, cursor: dict[str, Any]) -> None:
        """Continue from a `cursor()` taken earlier: only newer rows are asked for."""
        for run_id, entry in cursor.get("runs", {}).items():
            self._runs[run_id] = _Run(
                run_id,
                display_name=str(entry.get("display_name", "")),
                last_step=int(entry.get("step", -1)),
                system_time=entry.get("system_time"),
                ended=bool(entry.get("ended")),
            )
