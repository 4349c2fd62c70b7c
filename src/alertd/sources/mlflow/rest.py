"""The `mlflow` source over a tracking server's REST API (`http://` or `https://` tracking URI).

Each poll:

1. Experiments: `experiments/search` (paged) when `experiments` is not set, one request per poll so
   new experiments are found; else each listed entry is resolved once, as an id (`experiments/get`,
   for an entry of digits) or a name (`experiments/get-by-name`). One not found is warned about once
   and looked up again at the next polls.
2. Runs: `runs/search` over those experiments, `max_results` = `page_size`, paged. `runs: all` lists
   every run (active ones: deleted runs are not read). `runs: running` makes two searches:
   `attributes.status = 'RUNNING'`, and `attributes.end_time >= <the last poll, less RECENT>` for the
   runs that ended since, of which it reads those it saw running and those that started after its
   first poll (less RECENT: a run that crashed between two polls is read too). A run it saw running
   that neither search returns (alertd was down longer than that, or clocks disagree) is asked for by
   id (`attributes.run_id IN (...)`, 100 a request); one not found then was deleted and is dropped.
3. History: each run in the answer carries the latest point of every metric key; only a key whose
   latest point is new gets its history read, incrementally (see `alertd.sources.mlflow.history`:
   the first read pages through `metrics/get-history`, later ones ask
   `metrics/get-history-bulk-interval` for the steps since the last one read).
4. Ends: once per run end (its `end_time`), `run.finished` = 1 and `run.crashed` = 1 for FAILED or
   KILLED, 0 for FINISHED, at the run's end time, after the run's last points.

So in steady state a poll costs one `experiments/search` (none with `experiments` set), one
`runs/search` page (two with `runs: running`), and one history request per (run, key) that logged
something since.

Credentials and retries: see `alertd.sources.mlflow.http`. A refused token (401/403) raises a
non-recoverable `SourceError` that names the host and where the token came from, never the token.
`cursor()` / `restore()` keep the first and the last poll's times and, per run, each key's read
position, whether it was seen running, and the end already reported.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Any

import httpx

from alertd.errors import SourceError
from alertd.model import Sample
from alertd.sources.config import MlflowConfig
from alertd.sources.httpretry import Sleep
from alertd.sources.mlflow.history import HistoryReader, PointCursor, parse_point
from alertd.sources.mlflow.http import NotFound, RestClient
from alertd.sources.mlflow.labels import RunLabels, SeriesKeys
from alertd.sources.mlflow.values import TERMINAL, ms_to_s, status_name

log = logging.getLogger(__name__)

_IN_CHUNK = 100
_RUN_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_EXPERIMENTS_PAGE = 1000
RECENT_MS = 60_000
"""Slack for clocks that disagree, in ms: see `runs: running` in the module docstring."""


@dataclass(slots=True)
class _Run:
    """What this source knows about one run between polls."""

    labels: RunLabels
    open: bool = False
    """Seen RUNNING and not seen ended since."""
    end: int | None = None
    """The end (end_time, ms; -1 when unknown) already reported."""
    keys: dict[str, PointCursor] = field(default_factory=dict)


@dataclass(slots=True)
class _Pending:
    """What a poll has read, applied only when the whole poll succeeded (a failed poll's samples are lost
    to the caller, so its read positions must not move)."""

    cursors: list[tuple[_Run, str, PointCursor]] = field(default_factory=list)
    ends: list[tuple[_Run, int]] = field(default_factory=list)

    def commit(self) -> None:
        """Apply it."""
        for run, key, cursor in self.cursors:
            run.keys[key] = cursor
        for run, end in self.ends:
            run.end, run.open = end, False


class RestSource:
    """Polls one MLflow tracking server; see the module docstring for what each poll costs."""

    def __init__(
        self,
        cfg: MlflowConfig,
        tracking_uri: str,
        *,
        client: httpx.AsyncClient | None = None,
        sleep: Sleep | None = None,
    ) -> None:
        self.name = cfg.name
        self.interval = cfg.interval
        self.cfg = cfg
        self.client = RestClient(
            tracking_uri,
            cfg.token.get_secret_value() if cfg.token else None,
            client=client,
            timeout=cfg.timeout,
            max_retries=cfg.max_retries,
            max_wait=cfg.max_retry_wait,
            sleep=sleep,
        )
        self.reader = HistoryReader(self.client, cfg.page_size)
        self.keys = SeriesKeys(cfg.name)
        self._runs: dict[str, _Run] = {}
        self._resolved: dict[str, tuple[str, str]] = {}
        self._unresolved_warned: set[str] = set()
        self._since: int | None = None
        """The first poll's time, epoch ms."""
        self._last_poll: int | None = None
        """The last successful poll's time, epoch ms."""

    def __repr__(self) -> str:
        return f"RestSource(name={self.name!r}, host={self.client.host!r})"

    @property
    def requests(self) -> int:
        """HTTP requests sent so far (retries included)."""
        return self.client.requests

    async def aclose(self) -> None:
        """Close the HTTP client if this source created it."""
        await self.client.aclose()

    async def poll(self, now: float) -> list[Sample]:
        """New points of the watched runs, and their ends, since the last poll."""
        if self._since is None:
            self._since = int(now * 1000)
        experiments = await self._experiments(now)
        out: list[Sample] = []
        pending = _Pending()
        if experiments:
            for node in await self._list_runs(list(experiments), now):
                await self._read_run(node, experiments, now, out, pending)
        pending.commit()
        self._last_poll = int(now * 1000)
        return out

    # experiments

    async def _experiments(self, now: float) -> dict[str, str]:
        """Experiment id -> name of the experiments watched."""
        if self.cfg.experiments is None:
            out: dict[str, str] = {}
            body: dict[str, Any] = {"max_results": min(self.cfg.page_size, _EXPERIMENTS_PAGE), "view_type": 1}
            for page in await self._paged("experiments/search", body, "experiments", now):
                self._note_experiment(page, out)
            return out
        for entry in self.cfg.experiments:
            if entry in self._resolved:
                continue
            exp = await self._lookup(entry, now)
            if exp is None:
                if entry not in self._unresolved_warned:
                    log.warning("mlflow source %s: no experiment %r at %s (yet)", self.name, entry, self.client.host)
                    self._unresolved_warned.add(entry)
                continue
            self._resolved[entry] = exp
        return dict(self._resolved.values())

    @staticmethod
    def _note_experiment(raw: Any, out: dict[str, str]) -> None:
        if isinstance(raw, dict) and raw.get("experiment_id") is not None:
            out[str(raw["experiment_id"])] = str(raw.get("name") or "")

    async def _lookup(self, entry: str, now: float) -> tuple[str, str] | None:
        attempts: list[tuple[str, dict[str, str]]] = []
        if entry.isdigit():
            attempts.append(("experiments/get", {"experiment_id": entry}))
        attempts.append(("experiments/get-by-name", {"experiment_name": entry}))
        for endpoint, params in attempts:
            try:
                data = await self.client.get(endpoint, params, now)
            except NotFound:
                continue
            found: dict[str, str] = {}
            self._note_experiment(data.get("experiment"), found)
            if found:
                return next(iter(found.items()))
        return None

    # runs

    async def _paged(self, endpoint: str, body: dict[str, Any], field_name: str, now: float) -> list[Any]:
        """Every item of a paged POST search (`experiments` or `runs` of each page), in order."""
        items: list[Any] = []
        body = dict(body)
        tokens: set[str] = set()
        while True:
            data = await self.client.post(endpoint, body, now)
            items.extend(data.get(field_name) or ())
            token = data.get("next_page_token")
            if not token:
                return items
            if token in tokens:
                raise SourceError(f"MLflow {endpoint} at {self.client.host}: a page token came back twice")
            tokens.add(token)
            body["page_token"] = token

    async def _search(self, experiment_ids: list[str], filter_string: str, now: float) -> list[dict[str, Any]]:
        body: dict[str, Any] = {
            "experiment_ids": experiment_ids,
            "max_results": self.cfg.page_size,
            "run_view_type": "ACTIVE_ONLY",
        }
        if filter_string:
            body["filter"] = filter_string
        return [n for n in await self._paged("runs/search", body, "runs", now) if isinstance(n, dict)]

    async def _list_runs(self, experiment_ids: list[str], now: float) -> list[dict[str, Any]]:
        if self.cfg.runs == "all":
            nodes = await self._search(experiment_ids, "", now)
            return list({_run_id(n): n for n in nodes if _run_id(n)}.values())
        found = {_run_id(n): n for n in await self._search(experiment_ids, "attributes.status = 'RUNNING'", now)}
        since = (self._since or 0) - RECENT_MS
        after = (self._last_poll if self._last_poll is not None else self._since or 0) - RECENT_MS
        for node in await self._search(experiment_ids, f"attributes.end_time >= {after}", now):
            rid, run = _run_id(node), self._runs.get(_run_id(node))
            if rid not in found and ((run is not None and run.open) or _start_ms(node) >= since):
                found[rid] = node
        found.pop("", None)
        gone = sorted(rid for rid, run in self._runs.items() if run.open and rid not in found and _RUN_ID.match(rid))
        for i in range(0, len(gone), _IN_CHUNK):
            chunk = gone[i : i + _IN_CHUNK]
            ids = ", ".join(f"'{rid}'" for rid in chunk)
            for node in await self._search(experiment_ids, f"attributes.run_id IN ({ids})", now):
                if _run_id(node):
                    found[_run_id(node)] = node
            for rid in chunk:
                if rid not in found:  # deleted, or moved out of the watched experiments
                    log.info("mlflow source %s: run %s is gone; no longer read", self.name, rid)
                    self._runs[rid].open = False
        return list(found.values())

    async def _read_run(
        self, node: dict[str, Any], experiments: dict[str, str], now: float, out: list[Sample], pending: _Pending
    ) -> None:
        info = node.get("info") or {}
        run_id = _run_id(node)
        status = status_name(info.get("status")) or ""
        labels = RunLabels(run_id, _run_name(node), experiments.get(str(info.get("experiment_id", "")), ""))
        run = self._runs.get(run_id)
        if run is None:
            run = self._runs[run_id] = _Run(labels)
        elif run.labels != labels:
            self.keys.forget(run_id)
            run.labels = labels
        if status == "RUNNING":
            run.open = True
        for raw in (node.get("data") or {}).get("metrics") or ():
            key = raw.get("key") if isinstance(raw, dict) else None
            if not isinstance(key, str) or not key:
                continue
            try:
                latest = parse_point(raw)
            except ValueError:
                continue
            cursor = run.keys.get(key)
            if cursor is not None and not cursor.is_new(latest):
                continue
            points, cursor = await self.reader.new_points(run_id, key, cursor, latest.step, now)
            if cursor is not None:
                pending.cursors.append((run, key, cursor))
            series = self.keys.key(run.labels, key)
            out.extend(Sample(series, ms_to_s(p.timestamp), p.step, p.value) for p in points)
        if status in TERMINAL:
            end_time = _ms(info.get("end_time"))
            end = -1 if end_time is None else end_time
            if run.end != end:
                out.extend(self.keys.run_end(run.labels, status, ms_to_s(end) if end >= 0 else now))
            pending.ends.append((run, end))

    # cursor

    def cursor(self) -> dict[str, Any]:
        """Per run: each key's position, whether it is open, the end reported; and its labels."""
        return {
            "since": self._since,
            "last_poll": self._last_poll,
            "runs": {
                rid: {
                    "name": run.labels.run_name,
                    "experiment": run.labels.experiment,
                    "open": run.open,
                    "end": run.end,
                    "keys": {key: c.to_json() for key, c in run.keys.items()},
                }
                for rid, run in self._runs.items()
            },
        }

    def restore(self, cursor: dict[str, Any]) -> None:
        """Continue from a `cursor()`: only newer points are read, reported ends are not repeated."""
        for name in ("since", "last_poll"):
            value = cursor.get(name)
            if isinstance(value, int) and not isinstance(value, bool):
                setattr(self, "_" + name, value)
        for rid, entry in (cursor.get("runs") or {}).items():
            if not isinstance(entry, dict):
                continue
            keys = {}
            for key, raw in (entry.get("keys") or {}).items():
                c = PointCursor.from_json(raw)
                if c is not None:
                    keys[str(key)] = c
            end = entry.get("end")
            labels = RunLabels(str(rid), str(entry.get("name") or ""), str(entry.get("experiment") or ""))
            self._runs[str(rid)] = _Run(
                labels, open=bool(entry.get("open")), end=end if isinstance(end, int) else None, keys=keys
            )


def _run_id(node: dict[str, Any]) -> str:
    info = node.get("info") or {}
    return str(info.get("run_id") or info.get("run_uuid") or "")


def _ms(value: Any) -> int | None:
    """An epoch-ms field of the JSON (a number, or a string as proto JSON may write an int64)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def _start_ms(node: dict[str, Any]) -> int:
    start = _ms((node.get("info") or {}).get("start_time"))
    return -1 if start is None else start


def _run_name(node: dict[str, Any]) -> str:
    name = (node.get("info") or {}).get("run_name")
    if name:
        return str(name)
    for tag in (node.get("data") or {}).get("tags") or ():
        if isinstance(tag, dict) and tag.get("key") == "mlflow.runName":
            return str(tag.get("value") or "")
    return ""
