"""A real webhook receiver on 127.0.0.1 that records requests, and a small notifier that POSTs to it.

The notifier behaves as a real webhook notifier does: connection errors, timeouts and 5xx are
recoverable, 429 is recoverable with its Retry-After, any other 4xx is not.
"""

from __future__ import annotations

import httpx

from alertd.dispatch import codec
from alertd.errors import NotifyError
from alertd.model import Notification
from alertd.testing.receiver import Receiver, Recorder, free_port

__all__ = ["HttpTestNotifier", "Receiver", "Recorder", "free_port"]


class HttpTestNotifier:
    """POSTs the notification's JSON with an `Idempotency-Key` header, as a webhook notifier would."""

    def __init__(self, name: str, url: str, rate_limit: tuple[int, float] | None = None) -> None:
        self.name = name
        self.url = url
        self.rate_limit = rate_limit
        self._client = httpx.AsyncClient(timeout=5.0)

    async def send(self, notification: Notification) -> None:
        """Deliver one notification or raise NotifyError saying whether a retry can help."""
        try:
            resp = await self._client.post(
                self.url,
                content=codec.dumps(notification),
                headers={"Content-Type": "application/json", "Idempotency-Key": notification.key},
            )
        except httpx.TransportError as exc:
            raise NotifyError(f"{self.name}: {type(exc).__name__}", recoverable=True) from exc
        if resp.status_code == 429:
            after = resp.headers.get("Retry-After")
            raise NotifyError(f"{self.name}: 429", recoverable=True, retry_after=float(after) if after else None)
        if resp.status_code >= 500:
            raise NotifyError(f"{self.name}: HTTP {resp.status_code}", recoverable=True)
        if resp.status_code >= 400:
            raise NotifyError(f"{self.name}: HTTP {resp.status_code}", recoverable=False)

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self._client.aclose()
