"""The Alertmanager notifier: posts alerts to a real Prometheus Alertmanager (`POST /api/v2/alerts`).

It behaves as Prometheus does towards Alertmanager:

- A firing alert is posted with `endsAt` = now + 4 x `resend_interval`, and re-posted by `resend(now)` (the
  app calls it every `resend_interval`) while it fires. If this alertd dies, Alertmanager resolves its alerts
  by itself once `endsAt` passes instead of keeping them firing forever.
- A resolved alert is posted once with `endsAt` = the resolution time, then forgotten.
- An alert's identity in Alertmanager is its label set, so several alertd nodes posting the same alert make
  one alert there, and Alertmanager's own HA cluster de-duplicates the notifications.

Pending alerts are not posted (Prometheus posts only firing ones). Label and annotation names that
Alertmanager would refuse (`gpu.uuid`) have their other characters replaced by `_`.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from alertd.clock import Clock, SystemClock
from alertd.errors import NotifyError
from alertd.model import Notification, Transition, TransitionKind, format_time
from alertd.notify.config import AlertmanagerConfig
from alertd.notify.render import alert_line, value_text

log = logging.getLogger(__name__)

RESEND_FACTOR = 4
"""A firing alert's endsAt = now + RESEND_FACTOR x resend_interval, as Prometheus does."""

RESOLVED_MEMORY = 15 * 60.0
"""How long a resolution is remembered, so that a late firing retry can't revive it (Prometheus: 15m)."""

BATCH = 500
"""Alerts per POST on resend."""

_BAD_NAME_CHAR = re.compile(r"[^A-Za-z0-9_]")


def label_name(name: str) -> str:
    """A name Alertmanager accepts (`[A-Za-z_][A-Za-z0-9_]*`): other characters become `_`."""
    clean = _BAD_NAME_CHAR.sub("_", name)
    return clean if clean and not clean[0].isdigit() else "_" + clean


def redacted_url(url: httpx.URL) -> str:
    """The scheme, host and port only: no credentials, no path or query that might hold a token."""
    port = f":{url.port}" if url.port else ""
    return f"{url.scheme}://{url.host}{port}"


@dataclass(slots=True)
class _Firing:
    """What is needed to re-post one firing alert."""

    body: dict[str, Any]
    time: float
    start: float


class AlertmanagerNotifier:
    """Posts each notification's alerts to Alertmanager and keeps re-sending the firing ones."""

    def __init__(
        self,
        name: str,
        cfg: AlertmanagerConfig,
        *,
        client: httpx.AsyncClient | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.name = name
        self.cfg = cfg
        base = httpx.URL(cfg.url)
        if base.scheme not in ("http", "https") or not base.host:
            raise ValueError(f"alertmanager notifier {name!r}: url must be http(s)://host[:port][/prefix]")
        self.endpoint = base.copy_with(path=base.path.rstrip("/") + "/api/v2/alerts")
        self.where = f"alertmanager notifier {name!r} ({redacted_url(base)})"
        self._own_client = client is None
        self._client = client or httpx.AsyncClient(timeout=cfg.timeout)
        self._clock = clock or SystemClock()
        self._firing: dict[str, _Firing] = {}
        self._resolved: dict[str, float] = {}
        self._lock = asyncio.Lock()  # one post at a time: a resend must not overtake a resolution

    @property
    def firing(self) -> frozenset[str]:
        """Fingerprints of the firing alerts that `resend` re-posts."""
        return frozenset(self._firing)

    async def send(self, notification: Notification) -> None:
        """Post the firing and resolved alerts; raise `NotifyError` when Alertmanager does not take them."""
        async with self._lock:
            now = self._clock.now()
            batch = [body for t in notification.alerts if (body := self._track(t, now)) is not None]
            if batch:
                await self._post(batch)

    async def resend(self, now: float) -> int:
        """Re-post every alert still firing with a fresh `endsAt`; return how many were posted."""
        async with self._lock:
            self._resolved = {fp: t for fp, t in self._resolved.items() if t > now - RESOLVED_MEMORY}
            bodies = [dict(f.body, endsAt=self._ends_at(now)) for f in self._firing.values()]
            for i in range(0, len(bodies), BATCH):
                await self._post(bodies[i : i + BATCH])
        return len(bodies)

    async def aclose(self) -> None:
        """Close the HTTP client if this notifier made it."""
        if self._own_client:
            await self._client.aclose()

    def _ends_at(self, now: float) -> str:
        return format_time(now + RESEND_FACTOR * self.cfg.resend_interval)

    def _track(self, t: Transition, now: float) -> dict[str, Any] | None:
        """Update the firing set for one transition and return what to post for it, if anything."""
        fp = t.fingerprint
        start = t.since
        if t.state is TransitionKind.FIRING:
            known = self._firing.get(fp)
            if (known is not None and known.time > t.time) or self._resolved.get(fp, -1.0) >= t.time:
                return None  # an older transition delivered late: the newer state stands
            body = self._body(t, start)
            self._firing[fp] = _Firing(body, t.time, start)
            return dict(body, endsAt=self._ends_at(max(now, t.time)))
        if t.state is TransitionKind.RESOLVED:
            known = self._firing.pop(fp, None)
            self._resolved[fp] = max(t.time, self._resolved.get(fp, t.time))
            if known is not None:
                start = known.start
            return dict(self._body(t, min(start, t.time)), endsAt=format_time(t.time))
        return None  # pending, or pending that went back to inactive: Alertmanager never heard of it

    def _body(self, t: Transition, start: float) -> dict[str, Any]:
        """A postableAlert without endsAt."""
        labels = {label_name(k): v for k, v in t.labels}
        labels["alertname"] = t.rule
        if t.severity:
            labels["severity"] = t.severity
        annotations = {label_name(k): v for k, v in t.annotations}
        annotations.setdefault("summary", alert_line(t))
        annotations.setdefault("value", value_text(t.value))
        if t.step is not None:
            annotations.setdefault("step", str(t.step))
        body: dict[str, Any] = {"labels": labels, "annotations": annotations, "startsAt": format_time(start)}
        if self.cfg.generator_url:
            body["generatorURL"] = self.cfg.generator_url
        return body

    async def _post(self, alerts: Sequence[dict[str, Any]]) -> None:
        try:
            resp = await self._client.post(self.endpoint, json=list(alerts), timeout=self.cfg.timeout)
        except httpx.TimeoutException as exc:
            raise NotifyError(f"{self.where}: timed out ({type(exc).__name__})", recoverable=True) from None
        except httpx.TransportError as exc:
            raise NotifyError(f"{self.where}: cannot connect ({exc})", recoverable=True) from None
        if resp.is_success:
            log.debug("%s: posted %d alert(s)", self.where, len(alerts))
            return
        text = resp.text.strip().strip('"')[:500]
        message = f"{self.where} answered {resp.status_code}: {text}"
        if resp.status_code == 429 or resp.status_code >= 500:
            raise NotifyError(message, recoverable=True, retry_after=_retry_after(resp))
        raise NotifyError(message, recoverable=False)


def _retry_after(resp: httpx.Response) -> float | None:
    value = resp.headers.get("retry-after", "")
    try:
        return max(0.0, float(value))
    except ValueError:
        return None
