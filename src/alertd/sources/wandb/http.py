"""A GraphQL-over-HTTP client for the W&B API: basic auth, bounded retries, no secret in any output.

`POST {base_url}/graphql` with `{"query", "variables"}` and HTTP basic auth `api:<key>`, as wandb-core
sends it. Retries (within one call, at most `max_retries` times): 429, every 5xx but 501, other 4xx
that wandb-core retries, and connection errors. The wait is the response's `Retry-After` (seconds or
an HTTP date), else `RateLimit-Reset`, else 2 s·2ⁿ with up to 25 % jitter, capped at `max_wait`; a
server asking for longer than `max_wait` ends the call at once. After the last try:
`SourceError(recoverable=True)`. 401/403 raise `AuthError` (not recoverable) at once; 400, 404, 409,
410, 413, 422 and 501 raise a non-recoverable `SourceError`. GraphQL `errors` in a 200 answer raise a
recoverable `SourceError` without a retry. The API key never appears in a message or a repr.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from alertd import __version__ as _version
from alertd import progress
from alertd.errors import SourceError
from alertd.sources.httpretry import AuthError, Sleep, backoff, parse_retry_after, retrying

_NO_RETRY = frozenset({400, 404, 409, 410, 413, 422, 501})
_AUTH = frozenset({401, 403})


class GraphQLClient:
    """Sends GraphQL queries to one W&B server. `requests` counts HTTP requests sent, retries included."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        client: httpx.AsyncClient | None = None,
        timeout: float = 30.0,
        max_retries: int = 4,
        max_wait: float = 60.0,
        sleep: Sleep | None = None,
    ) -> None:
        self.url = base_url.rstrip("/") + "/graphql"
        self.host = httpx.URL(base_url).host
        self._key = api_key
        self._auth = httpx.BasicAuth("api", api_key)
        self._own_client = client is None
        self._client = client or httpx.AsyncClient(timeout=timeout)
        self._timeout = timeout
        self.max_retries = max_retries
        self.max_wait = max_wait
        self._sleep = sleep or asyncio.sleep
        self.requests = 0

    def __repr__(self) -> str:
        return f"GraphQLClient(url={self.url!r})"

    def _redact(self, text: str) -> str:
        return text.replace(self._key, "***") if self._key else text

    async def aclose(self) -> None:
        """Close the HTTP client if this object created it."""
        if self._own_client:
            await self._client.aclose()

    async def query(self, name: str, query: str, variables: dict[str, Any], now: float) -> dict[str, Any]:
        """Run one query and return its `data`; `name` is used only in messages."""
        return await retrying(
            lambda attempt: self._try(name, query, variables, now, attempt),
            f"W&B {name} at {self.host}",
            self.max_retries,
            self.max_wait,
            self._sleep,
        )

    def _backoff(self, attempt: int) -> float:
        return backoff(attempt, self.max_wait)

    async def _try(
        self, name: str, query: str, variables: dict[str, Any], now: float, attempt: int
    ) -> tuple[dict[str, Any] | None, float, str]:
        """One HTTP request: `(data, 0, "")` on success, else `(None, wait, reason)`."""
        self.requests += 1
        headers = {"User-Agent": f"alertd/{_version}", "Content-Type": "application/json"}
        try:
            resp = await self._client.post(
                self.url,
                json={"query": query, "variables": variables},
                auth=self._auth,
                headers=headers,
                timeout=self._timeout,
            )
        except httpx.TransportError as exc:
            return None, self._backoff(attempt), self._redact(f"connection failed ({type(exc).__name__})")
        status = resp.status_code
        if status in _AUTH:
            raise AuthError(
                f"W&B API at {self.host} refused the API key (HTTP {status}): check WANDB_API_KEY "
                "or the source's api_key"
            )
        if status in _NO_RETRY:
            raise SourceError(f"W&B {name} at {self.host}: HTTP {status}: {self._snippet(resp)}", recoverable=False)
        if status >= 400 or status < 200:
            wait = parse_retry_after(resp.headers.get("Retry-After"), now)
            if wait is None and (status == 429 or resp.headers.get("RateLimit-Remaining") == "0"):
                wait = parse_retry_after(resp.headers.get("RateLimit-Reset"), now)
            return None, (self._backoff(attempt) if wait is None else wait), f"HTTP {status}"
        progress.received(len(resp.content))
        return self._parse(name, resp), 0.0, ""

    def _parse(self, name: str, resp: httpx.Response) -> dict[str, Any]:
        try:
            body = resp.json()
        except ValueError as exc:
            raise SourceError(f"W&B {name} at {self.host}: the answer is not JSON") from exc
        errors = body.get("errors") if isinstance(body, dict) else None
        if errors:
            msgs = "; ".join(str(e.get("message", e)) if isinstance(e, dict) else str(e) for e in errors)
            raise SourceError(self._redact(f"W&B {name} at {self.host}: {msgs}"))
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, dict):
            raise SourceError(f"W&B {name} at {self.host}: the answer has no data")
        return data

    def _snippet(self, resp: httpx.Response) -> str:
        return self._redact(resp.text[:200].strip()) or resp.reason_phrase
