"""The Alertmanager notifier: posts alerts to a real Prometheus Alertmanager (`POST /api/v2/alerts`).

It behaves as Prometheus does towards Alertmanager:

- A firing alert is posted with `endsAt` = now + 4 x `resend_interval`, and re-posted by `resend(now)` (the
  app calls it every `resend_interval`) while it fires. If this alertd dies, Alertmanager resolves its alerts
  by itself once `endsAt` passes instead of keeping them firing forever.
- A resolved alert is posted once with `endsAt` = the resolution time, then forgotten.
- An alert's identity in Alertmanager is its label set, so several alertd nodes posting the same alert make
  one alert there, and Alertmanager's own HA cluster de-duplicates the notifications.
- Every post (resends too) goes to every peer of `urls` at once, and counts as delivered when at least
  one peer took it (Prometheus' `sendAll`); each peer's failure is logged. Only when no peer took it is
  it an error: retryable when a retry can help at one of them.

Secrets (basic auth, bearer token, credentials in a URL) are never logged: errors name a peer by its
scheme, host and port only, and what a peer answers is cleaned of them before it is shown.

Pending alerts are not posted (Prometheus posts only firing ones). Label and annotation names that
Alertmanager would refuse (`gpu.uuid`) have their other characters replaced by `_`.
"""

from __future__ import annotations

import asyncio
import logging
import re
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from alertd.clock import Clock, SystemClock
from alertd.errors import NotifyError
from alertd.model import Notification, Transition, TransitionKind, format_time, shown_annotations
from alertd.notify.config import AlertmanagerConfig
from alertd.notify.render import alert_line, value_text
from alertd.promnames import label_name

log = logging.getLogger(__name__)

RESEND_FACTOR = 4
"""A firing alert's endsAt = now + RESEND_FACTOR x resend_interval, as Prometheus does."""

RESOLVED_MEMORY = 15 * 60.0
"""How long a resolution is remembered, so that a late firing retry can't revive it (Prometheus: 15m)."""

BATCH = 500
"""Alerts per POST on resend."""

MAX_ANSWER = 4096
"""The most bytes of a peer's answer that are read (for its error message)."""

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


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


@dataclass(frozen=True, slots=True)
class _Peer:
    """One Alertmanager: where alerts are posted, and how errors name it."""

    endpoint: httpx.URL
    where: str


class AlertmanagerNotifier:
    """Posts each notification's alerts to every Alertmanager peer and keeps re-sending the firing ones."""

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
        self.resend_every = cfg.resend_interval
        self.peers = [self._peer(url) for url in cfg.peers]
        if not self.peers:
            raise ValueError(f"alertmanager notifier {name!r}: give url or urls")
        self.where = self.peers[0].where if len(self.peers) == 1 else f"alertmanager notifier {name!r}"
        self._secrets = self._secret_values()
        self._auth: httpx.Auth | None = None
        self._headers: dict[str, str] = {}
        if cfg.basic_auth is not None:
            self._auth = httpx.BasicAuth(cfg.basic_auth.username, cfg.basic_auth.password.get_secret_value())
        if cfg.bearer_token is not None:
            self._headers["Authorization"] = f"Bearer {cfg.bearer_token.get_secret_value()}"
        self._own_client = client is None
        if client is None:
            verify: ssl.SSLContext | bool = cfg.tls.ssl_context() if cfg.tls is not None else True
            client = httpx.AsyncClient(timeout=cfg.timeout, verify=verify, follow_redirects=False)
        self._client = client
        self._clock = clock or SystemClock()
        self._firing: dict[str, _Firing] = {}
        self._resolved: dict[str, float] = {}
        self._lock = asyncio.Lock()  # one post at a time: a resend must not overtake a resolution

    def _peer(self, url: str) -> _Peer:
        base = httpx.URL(url)
        if base.scheme not in ("http", "https") or not base.host:
            raise ValueError(f"alertmanager notifier {self.name!r}: url must be http(s)://host[:port][/prefix]")
        path = base.path.rstrip("/") + self.cfg.path_prefix + "/api/v2/alerts"
        where = f"alertmanager notifier {self.name!r} ({redacted_url(base)})"
        return _Peer(base.copy_with(path=path, query=None, fragment=None), where)

    def _secret_values(self) -> list[str]:
        """Every secret this notifier holds, longest first, for cleaning what a peer answers."""
        out = []
        if self.cfg.basic_auth is not None:
            out.append(self.cfg.basic_auth.password.get_secret_value())
        if self.cfg.bearer_token is not None:
            out.append(self.cfg.bearer_token.get_secret_value())
        for url in self.cfg.peers:
            parsed = httpx.URL(url)
            out += [parsed.password, parsed.username, url]
        return sorted({s for s in out if s}, key=len, reverse=True)

    def _clean(self, text: str) -> str:
        """`text` with every secret replaced by `…` and control characters by spaces, at most 500 characters."""
        for secret in self._secrets:
            text = text.replace(secret, "…")
        return _CONTROL.sub(" ", text)[:500]

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
        annotations = {label_name(k): v for k, v in shown_annotations(t).items()}
        annotations.setdefault("summary", alert_line(t))
        annotations.setdefault("value", value_text(t.value))
        if t.step is not None:
            annotations.setdefault("step", str(t.step))
        body: dict[str, Any] = {"labels": labels, "annotations": annotations, "startsAt": format_time(start)}
        if self.cfg.generator_url:
            body["generatorURL"] = self.cfg.generator_url
        return body

    async def _post(self, alerts: Sequence[dict[str, Any]]) -> None:
        """Post to every peer at once; raise `NotifyError` only when none of them took the alerts."""
        body = list(alerts)
        errors = [e for e in await asyncio.gather(*(self._post_one(p, body) for p in self.peers)) if e is not None]
        if not errors:
            log.debug("%s: posted %d alert(s) to %d peer(s)", self.where, len(body), len(self.peers))
            return
        if len(errors) < len(self.peers):
            took = len(self.peers) - len(errors)
            for err in errors:
                log.warning("%s (%d of %d peers took the %d alert(s))", err, took, len(self.peers), len(body))
            return
        if len(errors) == 1:
            raise errors[0]
        hints = [e.retry_after for e in errors if e.recoverable and e.retry_after is not None]
        raise NotifyError(
            f"{self.where}: no peer took the alerts: " + "; ".join(str(e) for e in errors),
            recoverable=any(e.recoverable for e in errors),
            retry_after=max(hints) if hints else None,
        )

    async def _post_one(self, peer: _Peer, alerts: list[dict[str, Any]]) -> NotifyError | None:
        """Post to one peer: None when it took the alerts, else the error (never raised)."""
        auth = self._auth if self._auth is not None else httpx.USE_CLIENT_DEFAULT
        try:
            async with asyncio.timeout(self.cfg.timeout):  # in all: a peer that trickles its answer is cut off too
                request = self._client.stream(
                    "POST", peer.endpoint, json=alerts, timeout=self.cfg.timeout, auth=auth, headers=self._headers
                )
                async with request as resp:
                    answer = await _read_at_most(resp, MAX_ANSWER)
        except (TimeoutError, httpx.TimeoutException) as exc:
            return NotifyError(f"{peer.where}: timed out ({type(exc).__name__})", recoverable=True)
        except (httpx.TransportError, OSError) as exc:  # ssl.SSLError too: httpx lets some through unwrapped
            return self._transport_error(peer, exc)
        if resp.is_success:
            return None
        text = self._clean(answer.strip().strip('"'))
        message = f"{peer.where} answered {resp.status_code}: {text}"
        if resp.status_code in (401, 403):
            how = "basic_auth" if self.cfg.basic_auth else "bearer_token" if self.cfg.bearer_token else "no credentials"
            return NotifyError(f"{message} (check the credentials: {how})", recoverable=False)
        if resp.status_code == 429 or resp.status_code >= 500:
            return NotifyError(message, recoverable=True, retry_after=_retry_after(resp))
        return NotifyError(message, recoverable=False)

    def _transport_error(self, peer: _Peer, exc: Exception) -> NotifyError:
        """A connection that failed: a certificate the peer's CA does not vouch for is not retried."""
        chain: list[BaseException] = []
        cause: BaseException | None = exc
        while cause is not None and cause not in chain and len(chain) < 10:
            chain.append(cause)
            cause = cause.__cause__ or cause.__context__
        tls = next((c for c in chain if isinstance(c, ssl.SSLError)), None)
        if isinstance(tls, ssl.SSLCertVerificationError):
            why = self._clean(tls.verify_message or tls.reason or "certificate verify failed")
            return NotifyError(
                f"{peer.where}: TLS error: the server's certificate is not trusted ({why}); check tls.ca_file",
                recoverable=False,
            )
        if tls is not None:
            return NotifyError(f"{peer.where}: TLS error ({self._clean(tls.reason or str(tls))})", recoverable=True)
        said = next((c for c in chain if str(c)), chain[-1])
        why = self._clean(f"{type(said).__name__}: {said}" if str(said) else type(said).__name__)
        return NotifyError(f"{peer.where}: cannot connect ({why})", recoverable=True)


async def _read_at_most(resp: httpx.Response, limit: int) -> str:
    """The first `limit` bytes of the answer's body, as text (the rest is never read)."""
    data = bytearray()
    async for chunk in resp.aiter_bytes():
        data += chunk
        if len(data) >= limit:
            break
    return bytes(data[:limit]).decode(resp.encoding or "utf-8", errors="replace")


def _retry_after(resp: httpx.Response) -> float | None:
    value = resp.headers.get("retry-after", "")
    try:
        return max(0.0, float(value))
    except ValueError:
        return None
