"""A fake W&B GraphQL server on 127.0.0.1 (http.server in a thread) for the wandb tests and bench.

It holds runs with history rows and system-metric (events) rows and answers the operations that the
real `wandb.Api` 0.31 sends (Viewer, Runs, Run, RunFullHistory, RunSampledHistory, RunHistoryKeys,
RunParquetHistory, HistoryPage, RunState) and those alertd sends (AlertdRuns, AlertdRunPoll). The
operation is taken from the query text, as wandb-core sends `operationName: ""`. Every request is
recorded; `fail_next` queues error answers (status, headers) served before normal ones.
"""

from __future__ import annotations

import base64
import json
import math
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

API_KEY = "alertdtestkey-" + "x7" * 20
"""A key of the shape W&B accepts (prefix, then 40+ word characters); it must never be logged."""

_OP = re.compile(r"\b(?:query|mutation)\s+(\w+)")


@dataclass
class FakeRun:
    """One run: rows as logged (`_step`, `_timestamp`, `_runtime` included) and system rows."""

    run_id: str
    display_name: str = ""
    state: str = "running"
    created_at: str = "2026-01-01T00:00:00"
    heartbeat_at: str = "2026-01-01T00:00:00"
    history: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    stopped: bool = False
    """Set by the `StopRun` mutation (what `Run.stop()` sends)."""

    def last_step(self) -> int:
        return max((int(r["_step"]) for r in self.history), default=-1)

    def history_keys(self) -> dict[str, Any]:
        keys: dict[str, Any] = {}
        for row in self.history:
            for k, v in row.items():
                keys[k] = {"typeCounts": [{"type": type(v).__name__, "count": 1}], "previousValue": v}
        return {"keys": keys, "lastStep": self.last_step()}

    def node(self, project_id: str) -> dict[str, Any]:
        summary = dict(self.history[-1]) if self.history else {}
        return {
            "id": base64.b64encode(f"Run:v1:{self.run_id}".encode()).decode(),
            "projectId": project_id,
            "name": self.run_id,
            "displayName": self.display_name,
            "state": self.state,
            "tags": [],
            "sweepName": None,
            "group": None,
            "jobType": None,
            "commit": None,
            "readOnly": False,
            "createdAt": self.created_at,
            "heartbeatAt": self.heartbeat_at,
            "description": None,
            "notes": None,
            "config": "{}",
            "systemMetrics": "{}",
            "summaryMetrics": json.dumps(summary),
            "historyLineCount": len(self.history),
            "user": {"name": "me", "username": "me"},
            "historyKeys": self.history_keys(),
        }


def _match(run: FakeRun, flt: Any) -> bool:
    """The MongoDB-style filter subset used here: state, name {$in}, $or, $and."""
    if not flt:
        return True
    for key, cond in flt.items():
        if key == "$or":
            ok = any(_match(run, f) for f in cond)
        elif key == "$and":
            ok = all(_match(run, f) for f in cond)
        else:
            value = {"state": run.state, "name": run.run_id, "display_name": run.display_name}[key]
            ok = value in cond["$in"] if isinstance(cond, dict) and "$in" in cond else value == cond
        if not ok:
            return False
    return True


def _plain(value: Any) -> Any:
    """A value fit for plain JSON: non-finite floats as the strings NaN, Infinity, -Infinity."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return value


class FakeWandb:
    """The server state and the HTTP server; use as a context manager."""

    def __init__(self, api_key: str, entity: str = "me", project: str = "proj") -> None:
        self.api_key = api_key
        self.entity, self.project = entity, project
        self.runs: dict[str, FakeRun] = {}
        self.requests: list[dict[str, Any]] = []
        self.failures: list[tuple[int, dict[str, str]]] = []
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeWandb:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def add_run(self, run: FakeRun) -> FakeRun:
        with self.lock:
            self.runs[run.run_id] = run
        return run

    def fail_next(self, status: int, headers: dict[str, str] | None = None, times: int = 1) -> None:
        with self.lock:
            self.failures.extend([(status, headers or {})] * times)

    def ops(self) -> list[str]:
        """The operation names received, in order."""
        with self.lock:
            return [r["op"] for r in self.requests]

    def answer(self, op: str, v: dict[str, Any]) -> dict[str, Any]:
        """The `data` of one operation."""
        if op in ("Viewer", "GetDefaultEntity") or op.startswith("Viewer"):
            return {
                "viewer": {
                    "id": "VXNlcjox",
                    "entity": self.entity,
                    "username": "me",
                    "email": "me@x",
                    "flags": "{}",
                    "teams": {"edges": []},
                }
            }
        if op == "StopRun":
            for r in self.runs.values():
                if r.node("1")["id"] == v.get("id"):
                    r.stopped = True
                    return {"stopRun": {"success": True}}
            return {"stopRun": None}
        if v.get("entity") not in (None, self.entity) or v.get("project") not in (None, self.project):
            return {"project": None}
        if op in ("Runs", "AlertdRuns"):
            return {"project": self._runs_page(v)}
        run = self.runs.get(v.get("name") or v.get("run") or v.get("runName") or "")
        if run is None:
            return {"project": {"run": None}}
        return {"project": {"run": self._run_fields(op, run, v)}}

    def _runs_page(self, v: dict[str, Any]) -> dict[str, Any]:
        flt = json.loads(v["filters"]) if v.get("filters") else None
        matching = [r for r in self.runs.values() if _match(r, flt)]
        start = int(v.get("cursor") or 0)
        per_page = int(v.get("perPage") or 50)
        page = matching[start : start + per_page]
        edges = [{"node": r.node("1"), "cursor": str(start + i + 1)} for i, r in enumerate(page)]
        more = start + per_page < len(matching)
        return {
            "internalId": "1",
            "runCount": len(matching),
            "readOnly": False,
            "runs": {"edges": edges, "pageInfo": {"endCursor": str(start + len(page)), "hasNextPage": more}},
        }

    def _run_fields(self, op: str, run: FakeRun, v: dict[str, Any]) -> dict[str, Any]:
        rows = sorted(run.history, key=lambda r: r["_step"])
        if op == "RunFullHistory":
            src = run.history if "history(" in v["_query"] else run.events
            return {"history" if "history(" in v["_query"] else "events": [json.dumps(r) for r in src]}
        if op == "RunSampledHistory":
            out = []
            for spec in (json.loads(s) for s in v["specs"]):
                lo, hi = spec.get("minStep", 0), spec.get("maxStep", 1 << 62)
                out.append([{k: _plain(r[k]) for k in spec["keys"] if k in r} for r in rows if lo <= r["_step"] <= hi])
            return {"sampledHistory": out}
        if op == "RunHistoryKeys":
            return {"historyKeys": run.history_keys()}
        if op == "RunParquetHistory":
            return {
                "parquetHistory": {
                    "parquetUrls": [],
                    "liveData": [{"_step": float(r["_step"])} for r in rows],
                }
            }
        if op == "RunState":
            return {"state": run.state}
        if op in ("HistoryPage", "AlertdRunPoll"):
            window = [json.dumps(r) for r in rows if v["minStep"] <= r["_step"] < v["maxStep"]]
            fields: dict[str, Any] = {"history": window[: v["pageSize"]]}
            if op == "AlertdRunPoll":
                fields["historyKeys"] = run.history_keys()
                n = v["systemSamples"]
                fields["events"] = [json.dumps(r) for r in run.events[-n:]] if n else []
            return fields
        return {**run.node("1")}


def _handler(fake: FakeWandb) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, val in (headers or {}).items():
                self.send_header(k, val)
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            query = body.get("query", "")
            m = _OP.search(query)
            op = body.get("operationName") or (m.group(1) if m else "")
            variables = dict(body.get("variables") or {})
            with fake.lock:
                fake.requests.append(
                    {
                        "op": op,
                        "variables": variables,
                        "auth": self.headers.get("Authorization"),
                        "user_agent": self.headers.get("User-Agent"),
                    }
                )
                failure = fake.failures.pop(0) if fake.failures else None
            if failure is not None:
                self._send(failure[0], {"errors": [{"message": "fake failure"}]}, failure[1])
                return
            expected = "Basic " + base64.b64encode(f"api:{fake.api_key}".encode()).decode()
            if self.headers.get("Authorization") != expected:
                self._send(401, {"errors": [{"message": "user is not logged in"}]})
                return
            variables["_query"] = query
            with fake.lock:
                data = fake.answer(op, variables)
            self._send(200, {"data": data})

    return Handler
