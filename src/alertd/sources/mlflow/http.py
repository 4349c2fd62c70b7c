"""A client of MLflow's REST API (`{tracking_uri}/api/2.0/mlflow/...`): auth, bounded retries, no secret out.

Credentials, as the MLflow client takes them: the source's `token`, else `MLFLOW_TRACKING_TOKEN`
(`Authorization: Bearer`), else `MLFLOW_TRACKING_USERNAME` / `MLFLOW_TRACKING_PASSWORD` (HTTP basic),
else a `user:password@` in the URI (taken out of the URL and sent as basic auth). TLS:
`MLFLOW_TRACKING_INSECURE_TLS=true` turns verification off, `MLFLOW_TRACKING_SERVER_CERT_PATH` names
a CA bundle.

Retries, within one call and at most `max_retries` times, as `wandb_http` does them: 429, every 5xx
but 501, and connection errors; the wait is the answer's `Retry-After` (seconds or an HTTP date), else
2 s·2ⁿ with up to 25 % jitter, capped at `max_wait`; a server asking for longer than `max_wait` ends
the call at once (a recoverable `SourceError`). 401/403 raise `AuthError` (not recoverable) at once.
A 404 that MLflow itself answers (`RESOURCE_DOES_NOT_EXIST`) raises `NotFound`; a 404 without
MLflow's error body means there is no such endpoint (`NoEndpoint`: a wrong URI, or an older server).
Other 4xx raise a non-recoverable `SourceError` with MLflow's `error_code` and message, and so does a
redirect (it names where to: that is the tracking URI to use).

The token and password never appear in a message or a repr: messages name the host only, and any
text quoted from the server is redacted.
"""

from __future__ import annotations

import asyncio
import os
import ssl
from collections.abc import Generator, Mapping
from typing import Any

import httpx

from alertd import __version__ as _version
from alertd import progress
from alertd.errors import SourceError
from alertd.sources.httpretry import AuthError, Sleep, backoff, parse_retry_after, retrying

API_PREFIX = "/api/2.0/mlflow/"


class NotFound(SourceError):
    """MLflow answered that the experiment, run or metric asked for does not exist."""


class NoEndpoint(SourceError):
    """The server has no such endpoint (HTTP 404 without MLflow's error body)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, recoverable=False)


class BearerAuth(httpx.Auth):
    """`Authorization: Bearer <token>`, as MLflow's client sends MLFLOW_TRACKING_TOKEN."""

    def __init__(self, token: str) -> None:
        self._token = token

    def __repr__(self) -> str:
        return "BearerAuth(***)"

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        """Add the header and send."""
        request.headers["Authorization"] = f"Bearer {self._token}"
        yield request


def credentials(
    token: str | None, url: httpx.URL, env: Mapping[str, str] | None = None
) -> tuple[httpx.Auth | None, list[str], str]:
    """(auth, the secrets to redact, a description for messages) from the source's token, the environment
    and the URI's user info, in MLflow's order."""
    env = os.environ if env is None else env
    token = token or env.get("MLFLOW_TRACKING_TOKEN") or None
    if token:
        return BearerAuth(token), [token], "the token (MLFLOW_TRACKING_TOKEN or the source's token)"
    user, password = env.get("MLFLOW_TRACKING_USERNAME"), env.get("MLFLOW_TRACKING_PASSWORD")
    if user and password:
        return httpx.BasicAuth(user, password), [password], "MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD"
    if url.username or url.password:
        return httpx.BasicAuth(url.username, url.password), [url.password] if url.password else [], "the URI's user"
    return None, [], "no credentials (set MLFLOW_TRACKING_TOKEN)"


def tls_verify(env: Mapping[str, str] | None = None) -> bool | ssl.SSLContext:
    """httpx's `verify` from MLFLOW_TRACKING_INSECURE_TLS and MLFLOW_TRACKING_SERVER_CERT_PATH."""
    env = os.environ if env is None else env
    if env.get("MLFLOW_TRACKING_INSECURE_TLS", "").strip().lower() in ("1", "true", "yes"):
        return False
    cafile = env.get("MLFLOW_TRACKING_SERVER_CERT_PATH")
    return ssl.create_default_context(cafile=cafile) if cafile else True


class RestClient:
    """Calls one MLflow tracking server. `requests` counts HTTP requests sent, retries included."""

    def __init__(
        self,
        tracking_uri: str,
        token: str | None = None,
        *,
        client: httpx.AsyncClient | None = None,
        timeout: float = 30.0,
        max_retries: int = 4,
        max_wait: float = 60.0,
        sleep: Sleep | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        url = httpx.URL(tracking_uri)
        self._auth, self._secrets, self.auth_source = credentials(token, url, env)
        url = url.copy_with(username=None, password=None)
        self.host = url.host + (f":{url.port}" if url.port else "")
        self.base = str(url).rstrip("/") + API_PREFIX
        self._own_client = client is None
        self._client = client or httpx.AsyncClient(timeout=timeout, verify=tls_verify(env))
        self._timeout = timeout
        self.max_retries = max_retries
        self.max_wait = max_wait
        self._sleep = sleep or asyncio.sleep
        self.requests = 0

    def __repr__(self) -> str:
        return f"RestClient(host={self.host!r})"

    def redact(self, text: str) -> str:
        """`text` with every secret replaced by ***."""
        for secret in self._secrets:
            if secret:
                text = text.replace(secret, "***")
        return text

    async def aclose(self) -> None:
        """Close the HTTP client if this object created it."""
        if self._own_client:
            await self._client.aclose()

    async def get(self, endpoint: str, params: Mapping[str, Any], now: float) -> dict[str, Any]:
        """GET `endpoint` (`metrics/get-history`) with query `params`; the JSON object answered."""
        return await self._call("GET", endpoint, now, params=params)

    async def post(self, endpoint: str, body: Mapping[str, Any], now: float) -> dict[str, Any]:
        """POST `body` as JSON to `endpoint` (`runs/search`); the JSON object answered."""
        return await self._call("POST", endpoint, now, body=body)

    async def _call(
        self,
        method: str,
        endpoint: str,
        now: float,
        *,
        params: Mapping[str, Any] | None = None,
        body: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        return await retrying(
            lambda attempt: self._try(method, endpoint, now, attempt, params, body),
            f"MLflow {endpoint} at {self.host}",
            self.max_retries,
            self.max_wait,
            self._sleep,
        )

    def _backoff(self, attempt: int) -> float:
        return backoff(attempt, self.max_wait)

    async def _try(
        self,
        method: str,
        endpoint: str,
        now: float,
        attempt: int,
        params: Mapping[str, Any] | None,
        body: Mapping[str, Any] | None,
    ) -> tuple[dict[str, Any] | None, float, str]:
        """One HTTP request: `(data, 0, "")` on success, else `(None, wait, reason)` for a retry."""
        self.requests += 1
        headers = {"User-Agent": f"alertd/{_version}"}
        try:
            resp = await self._client.request(
                method,
                self.base + endpoint,
                params=params,
                json=body,
                auth=self._auth,
                headers=headers,
                timeout=self._timeout,
            )
        except httpx.TransportError as exc:
            return None, self._backoff(attempt), f"connection failed ({type(exc).__name__})"
        status = resp.status_code
        if status in (401, 403):
            raise AuthError(f"MLflow at {self.host} refused the credentials (HTTP {status}): check {self.auth_source}")
        if status == 429 or (status >= 500 and status != 501):
            wait = parse_retry_after(resp.headers.get("Retry-After"), now)
            return None, (self._backoff(attempt) if wait is None else wait), f"HTTP {status}"
        if status >= 400 or status < 200:
            raise self._error(endpoint, resp)
        progress.received(len(resp.content))
        try:
            data = resp.json()
        except ValueError:
            raise SourceError(f"MLflow {endpoint} at {self.host}: the answer is not JSON") from None
        if not isinstance(data, dict):
            raise SourceError(f"MLflow {endpoint} at {self.host}: the answer is not a JSON object")
        return data, 0.0, ""

    def _error(self, endpoint: str, resp: httpx.Response) -> SourceError:
        try:
            body = resp.json()
        except ValueError:
            body = None
        code = body.get("error_code") if isinstance(body, dict) else None
        if 300 <= resp.status_code < 400:
            where = httpx.URL(resp.headers.get("Location", "")).copy_with(query=None, username=None, password=None)
            return SourceError(
                f"MLflow at {self.host} redirects (HTTP {resp.status_code}) to {self.redact(str(where))[:200]}: "
                "use that address as the tracking URI",
                recoverable=False,
            )
        if resp.status_code == 404 and not code:
            return NoEndpoint(f"MLflow at {self.host} has no {endpoint} endpoint (HTTP 404): check the tracking URI")
        text = f"{code}: {body.get('message', '')}" if isinstance(body, dict) and code else resp.text
        message = f"MLflow {endpoint} at {self.host}: HTTP {resp.status_code}: {self.redact(text[:300].strip())}"
        if code == "RESOURCE_DOES_NOT_EXIST":
            return NotFound(message)
        return SourceError(message, recoverable=False)
