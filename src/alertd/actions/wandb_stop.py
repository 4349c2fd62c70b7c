"""The wandb_stop notifier: stops the alert's W&B run, as the "Stop run" button does.

For each alert that turns FIRING (once per firing: the key is the alert's fingerprint and `active_at`, as
for `kill`; repeats, re-sends and resolutions do nothing), the run is taken from the alert's `run` label,
`entity/project/run_id` as the `wandb` source labels it. Two GraphQL requests go to
`{base_url}/graphql` with HTTP basic auth `api:<key>` (as the `wandb` source and wandb-core send them):
the run's storage id (`project(name, entityName) { run(name) { id } }`), then exactly the mutation that
`wandb.Api().run(path).stop()` has wandb-core send (`StopRun`, variables `{"id": <storage id>}`). The
backend sets the run's stop flag; the training process picks it up at its next heartbeat and ends the
run gracefully. Each `WandbStopReport` (stopped or refused) goes to the `report` callback: the service
announces it to the alert's other receivers, as it does the kill notifier's reports.

Policy:
- An alert without an attributable run (no `run` label, or not `entity/project/run_id`), or a run the
  server does not know, is refused: logged at error level, reported (`WandbStopReport.refused`), never
  guessed and never retried.
- Delivery errors raise `NotifyError`: 401/403 and other 4xx, a GraphQL error or `success: false` are
  permanent; 429, 5xx and connection errors are recoverable (the delivery stage retries; the firing is
  remembered only once the run was stopped or refused, so a retry acts again).
- The API key is never logged, reported or put in an error message. At most `MAX_ANSWER` bytes of an
  answer are read.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

import httpx

from alertd import __version__ as _version
from alertd.actions.base import Firings, Reports
from alertd.actions.config import WandbStopConfig
from alertd.errors import NotifyError
from alertd.model import Notification

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.wandb.ai"
MAX_ANSWER = 1 << 20
"""Bytes of an answer read at most; a longer answer is an error."""
_RUN_PATH = re.compile(r"([^/\s]{1,128})/([^/\s]{1,128})/([^/\s]{1,128})")

STOP_RUN_MUTATION = "\nmutation StopRun ($id: ID!) {\n\tstopRun(input: {id:$id}) {\n\t\tsuccess\n\t}\n}\n"
"""The mutation wandb-core sends for `Run.stop()` (wandb 0.31, `StopRunRequest`), byte for byte."""
RUN_ID_QUERY = (
    "query AlertdRunStorageId($entity: String!, $project: String!, $name: String!) {\n"
    "  project(name: $project, entityName: $entity) {\n    run(name: $name) {\n      id\n      state\n    }\n  }\n}"
)


@dataclass(frozen=True, slots=True)
class WandbStopReport:
    """What the notifier did (or refused to do) for one alert: `run` is the label's path."""

    notifier: str
    fingerprint: str
    rule: str
    run: str
    stopped: bool = False
    state: str = ""
    """The run's state before the stop, as the server reported it."""
    refused: str | None = None
    stamp: str = ""
    """The firing acted on (its start, epoch seconds): tells this report from those of the alert's other
    firings when it is announced."""

    @property
    def action(self) -> str:
        """What kind of action this reports (the announcement's `action` label)."""
        return "wandb_stop"

    @property
    def signals(self) -> tuple[()]:
        """No signal is sent (the shape of an action report, as the kill notifier's)."""
        return ()

    def summary(self) -> str:
        """One line for people."""
        head = f"wandb_stop {self.notifier} for {self.rule}: "
        if self.refused is not None:
            return f"{head}REFUSED run {self.run or '(none)'}: {self.refused}"
        return f"{head}asked W&B to stop run {self.run} (state was {self.state or 'unknown'})"


class _Refused(Exception):
    pass


class WandbStopNotifier:
    """Stops the W&B run behind each newly firing alert; `report` receives every `WandbStopReport`."""

    def __init__(
        self,
        name: str,
        cfg: WandbStopConfig,
        *,
        report: Callable[[WandbStopReport], Awaitable[None]] | None = None,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self.name = name
        self.cfg = cfg
        self._reports: Reports[WandbStopReport] = Reports(f"wandb_stop {name}", log, report)
        self.history = self._reports.history
        self._key = cfg.api_key.get_secret_value() if cfg.api_key else os.environ.get("WANDB_API_KEY", "")
        base = cfg.base_url or os.environ.get("WANDB_BASE_URL") or DEFAULT_BASE_URL
        self.url = base.rstrip("/") + "/graphql"
        self.host = httpx.URL(base).host
        self._own_client = client is None
        self._client = client or httpx.AsyncClient(timeout=cfg.timeout)
        self._acted = Firings()

    def __repr__(self) -> str:
        return f"WandbStopNotifier(name={self.name!r}, url={self.url!r})"

    async def aclose(self) -> None:
        if self._own_client:
            await self._client.aclose()

    async def send(self, notification: Notification) -> None:
        """Stop the run of each alert of `notification` that newly fires; refusals are reported, not raised."""
        for alert in self._acted.fresh(notification, log, f"wandb_stop {self.name}"):
            key = alert.firing_id
            run = dict(alert.labels).get("run", "")
            base = WandbStopReport(self.name, alert.fingerprint, alert.rule, run, stamp=f"{alert.since:.3f}")
            try:
                state = await self._stop(run)
            except _Refused as r:
                self._acted.add(key)
                await self._emit(replace(base, refused=str(r)))
                continue
            self._acted.add(key)
            await self._emit(replace(base, stopped=True, state=state))

    async def _stop(self, run: str) -> str:
        m = _RUN_PATH.fullmatch(run)
        if m is None:
            why = "no run label" if not run else f"run label {run[:80]!r} is not entity/project/run_id"
            raise _Refused(f"{why}: the alert has no attributable W&B run (is it from a wandb source?)")
        if not self._key:
            raise NotifyError(f"wandb_stop {self.name}: no API key (set WANDB_API_KEY or api_key)", recoverable=False)
        entity, project, name = m.groups()
        data = await self._graphql("run id", RUN_ID_QUERY, {"entity": entity, "project": project, "name": name})
        node = (data.get("project") or {}).get("run")
        if not isinstance(node, dict) or not isinstance(node.get("id"), str):
            raise _Refused(f"W&B at {self.host} knows no run {run!r}")
        data = await self._graphql("StopRun", STOP_RUN_MUTATION, {"id": node["id"]})
        if not (data.get("stopRun") or {}).get("success"):
            raise NotifyError(f"wandb_stop {self.name}: W&B did not stop run {run!r}", recoverable=False)
        return str(node.get("state") or "")

    async def _graphql(self, what: str, query: str, variables: dict[str, Any]) -> dict[str, Any]:
        where = f"wandb_stop {self.name}: {what} at {self.host}"
        headers = {"User-Agent": f"alertd/{_version}", "Content-Type": "application/json"}
        try:
            async with self._client.stream(
                "POST",
                self.url,
                json={"query": query, "variables": variables},
                auth=httpx.BasicAuth("api", self._key),
                headers=headers,
                timeout=self.cfg.timeout,
            ) as resp:
                status = resp.status_code
                body = await self._read(resp, where)
                retry_after = resp.headers.get("Retry-After")
        except httpx.TransportError as exc:
            raise NotifyError(f"{where}: connection failed ({type(exc).__name__})", recoverable=True) from None
        if status in (401, 403):
            raise NotifyError(
                f"{where}: HTTP {status}: the API key was refused (check WANDB_API_KEY or api_key)", recoverable=False
            )
        if status == 429 or status >= 500:
            wait = float(retry_after) if retry_after and retry_after.isdigit() else None
            raise NotifyError(f"{where}: HTTP {status}", recoverable=True, retry_after=wait)
        if not 200 <= status < 300:
            raise NotifyError(
                f"{where}: HTTP {status}: {self._redact(body[:200].decode(errors='replace'))}", recoverable=False
            )
        return self._parse(where, body)

    async def _read(self, resp: httpx.Response, where: str) -> bytes:
        chunks: list[bytes] = []
        size = 0
        async for chunk in resp.aiter_bytes():
            size += len(chunk)
            if size > MAX_ANSWER:
                raise NotifyError(f"{where}: the answer is over {MAX_ANSWER} bytes", recoverable=False)
            chunks.append(chunk)
        return b"".join(chunks)

    def _parse(self, where: str, body: bytes) -> dict[str, Any]:
        try:
            doc = json.loads(body)
        except ValueError:
            raise NotifyError(f"{where}: the answer is not JSON", recoverable=False) from None
        errors = doc.get("errors") if isinstance(doc, dict) else None
        if errors:
            msgs = "; ".join(str(e.get("message", e)) if isinstance(e, dict) else str(e) for e in errors[:5])
            raise NotifyError(self._redact(f"{where}: {msgs[:500]}"), recoverable=False)
        data = doc.get("data") if isinstance(doc, dict) else None
        if not isinstance(data, dict):
            raise NotifyError(f"{where}: the answer has no data", recoverable=False)
        return data

    def _redact(self, text: str) -> str:
        return text.replace(self._key, "***") if self._key else text

    async def _emit(self, report: WandbStopReport) -> None:
        await self._reports.emit(report)
