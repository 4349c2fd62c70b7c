"""The webhook notifier: one POST per notification, in the chosen chat service's format.

It never retries (the delivery pipeline does): a failure is a `NotifyError` whose `recoverable` says
whether a retry can help (timeouts, connection errors, 5xx, 429 and the services' rate-limit codes) and
whose `retry_after` carries the service's hint. The URL, the signing secret, the header values and the
`token`/`user` credentials are secrets: errors and logs show the URL as `scheme://host/…` and nothing else
of them.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import replace
from typing import Any

import httpx

from alertd.clock import Clock, SystemClock
from alertd.errors import NotifyError
from alertd.model import Notification
from alertd.notify.config import WebhookConfig
from alertd.notify.formats import Options, Reply, get_format
from alertd.notify.formats.redact import Scrubber, install_httpx_log_redaction, redact_url, url_secrets
from alertd.notify.render import TitleText

log = logging.getLogger(__name__)

MAX_ANSWER_BYTES = 64 * 1024
"""Only this much of a service's answer is read: enough for any error body."""

_PERMANENT_TRANSPORT_ERRORS = (httpx.UnsupportedProtocol, httpx.LocalProtocolError)


class WebhookNotifier:
    """POSTs each notification to `cfg.url` in `cfg.format`, with the `Idempotency-Key` header.

    `client` lets several notifiers share one `httpx.AsyncClient` (then `aclose` leaves it open);
    `clock` times signatures and `Retry-After` dates.
    """

    def __init__(
        self,
        name: str,
        cfg: WebhookConfig,
        *,
        client: httpx.AsyncClient | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.name = name
        self._cfg = cfg
        self._format = get_format(cfg.format)
        self._url = cfg.url.get_secret_value()
        key = cfg.secret or cfg.routing_key or cfg.api_key  # a signing secret, PagerDuty's or Opsgenie's key
        self._secret = key.get_secret_value() if key is not None else None
        self._headers = {k: v.get_secret_value() for k, v in cfg.headers.items()}
        self._credentials = {
            k: v.get_secret_value() for k, v in (("token", cfg.token), ("user", cfg.user)) if v is not None
        }
        self._where = redact_url(self._url)
        self._scrub = Scrubber(
            [
                *url_secrets(self._url),
                *self._headers.values(),
                *([self._secret] if self._secret else []),
                *self._credentials.values(),
            ]
        )
        self._options = Options(
            max_alerts=cfg.max_alerts,
            chat_id=cfg.chat_id,
            external_url=cfg.external_url,
            msgtype=cfg.msgtype,
            retry=round(cfg.retry),
            expire=round(cfg.expire),
        )
        self._title_text = TitleText(name, cfg.title, cfg.text)
        self._own_client = client is None
        self._client = client if client is not None else httpx.AsyncClient(follow_redirects=False)
        self._clock: Clock = clock if clock is not None else SystemClock()
        install_httpx_log_redaction()

    @property
    def rate_limit(self) -> tuple[int, float] | None:
        """The service's own sending limit as (messages, per seconds), or None where it has none we know."""
        return self._format.rate_limit

    @property
    def target(self) -> str:
        """The redacted URL (`scheme://host/…`), safe to show."""
        return self._where

    def payload(self, notification: Notification) -> dict[str, Any]:
        """The JSON body this notifier would send (before signing): for dry-runs and tests."""
        opts = self._options
        if not self._title_text.empty:  # the notifier's own title/text; a failed one falls back to alertd's
            title, text = self._title_text.render(notification, self._cfg.external_url)
            opts = replace(opts, title=title, text=text)
        return self._format.build(notification, opts)

    async def send(self, notification: Notification) -> None:
        """Deliver `notification` once, or raise NotifyError saying whether a retry can help."""
        signed = self._format.prepare(self._url, self.payload(notification), self._secret, self._clock.now())
        if self._format.authorize is not None:
            try:
                signed = self._format.authorize(signed, self._credentials)
            except NotifyError as e:
                raise self._error(str(e), recoverable=e.recoverable) from None
        body = json.dumps(signed.payload, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "alertd",
            **self._headers,
            **signed.extra_headers,
            "Idempotency-Key": notification.key,
        }
        status, answer_headers, text = await self._post(signed.url, body.encode(), headers)
        reply = Reply(status, answer_headers, text, self._clock.now())
        try:
            self._format.check(reply)
        except NotifyError as e:
            raise self._error(str(e), recoverable=e.recoverable, retry_after=e.retry_after) from None
        log.debug("webhook %s: delivered %s to %s", self.name, notification.key, self._where)

    async def _post(self, url: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, str], str]:
        timeout = self._cfg.timeout
        try:
            async with asyncio.timeout(timeout):
                request = self._client.build_request("POST", url, content=body, headers=headers, timeout=timeout)
                response = await self._client.send(request, stream=True)
                try:
                    data = await _read_capped(response)
                finally:
                    await response.aclose()
        except (TimeoutError, httpx.TimeoutException):
            raise self._error(f"no answer within {timeout:g}s", recoverable=True) from None
        except _PERMANENT_TRANSPORT_ERRORS as e:
            raise self._error(f"{type(e).__name__}: {e}", recoverable=False) from None
        except httpx.HTTPError as e:
            raise self._error(f"{type(e).__name__}: {e}", recoverable=True) from None
        except httpx.InvalidURL:
            raise self._error("the URL is not valid", recoverable=False) from None
        text = data.decode(response.encoding or "utf-8", errors="replace")
        return response.status_code, {k.lower(): v for k, v in response.headers.items()}, text

    def _error(self, message: str, *, recoverable: bool, retry_after: float | None = None) -> NotifyError:
        text = self._scrub(f"webhook {self.name} ({self._cfg.format}, {self._where}): {message}")
        return NotifyError(text, recoverable=recoverable, retry_after=retry_after)

    async def aclose(self) -> None:
        """Close the HTTP client if this notifier made it."""
        if self._own_client:
            await self._client.aclose()


async def _read_capped(response: httpx.Response) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        chunks.append(chunk)
        size += len(chunk)
        if size >= MAX_ANSWER_BYTES:
            break
    return b"".join(chunks)[:MAX_ANSWER_BYTES]
