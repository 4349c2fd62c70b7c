"""A client of Prometheus' instant-query API (`{url}/api/v1/query`): auth, TLS, bounded reads and retries.

A query is `POST`ed as a form (`query`, `time`, `timeout`), as Prometheus' Go client and Grafana send it;
a server (or a proxy in front of it) answering 405 or 501 is asked with `GET` from then on. Auth: basic
(`basic_auth`) or `Authorization: Bearer` (`bearer_token`); TLS from `tls` (a CA, a client certificate,
`server_name` as the name verified and sent as SNI, `insecure_skip_verify`).

Bounds: the whole request, answer read included, must finish within `timeout` (a server that trickles
its answer is cut off there; Prometheus is told 90 % of it as the query's own `timeout`, so its "query
timed out" arrives first); an answer over `max_answer` bytes (after gzip, which is decompressed a
bounded piece at a time) is not read further.

Failures are either the query's (`QueryFailed`: Prometheus' error answer, a timeout, an answer too
large) or the server's (`SourceError`: refused credentials, TLS, no such endpoint, no connection). 429,
every 5xx but 501 and a refused or dropped connection are retried, at most `max_retries` times, after
their `Retry-After` or 2 s·2ⁿ with jitter, capped at `max_retry_wait` (a longer Retry-After ends the
query at once). A TLS failure and a timeout are not retried within the poll: the next poll is the retry.

The password and the token appear in no message and no repr: messages name the host only, and any text
quoted from the server is redacted.
"""

from __future__ import annotations

import asyncio
import re
import ssl
import zlib
from collections.abc import Generator
from typing import Any

import httpx

from alertd import __version__ as _version
from alertd import progress
from alertd.errors import SourceError
from alertd.sources.config import PrometheusConfig
from alertd.sources.httpretry import AuthError, Sleep, backoff, parse_retry_after
from alertd.sources.prometheus.answer import error_of

API_PATH = "/api/v1/query"
MAX_ERROR_ANSWER = 64 * 1024
"""The most bytes read of an answer that is not a 200."""


class QueryFailed(SourceError):
    """This query failed (the server answered, or timed out); the other queries may still work."""


class QueryOverLimit(QueryFailed):
    """This query's answer went over one of its limits (`max_answer` bytes, `max_series` series): left unread."""


class _Retry(Exception):
    """One try failed in a way a retry may fix."""

    def __init__(self, why: str, wait: float | None, *, answered: bool) -> None:
        super().__init__(why)
        self.why, self.wait, self.answered = why, wait, answered


class BearerAuth(httpx.Auth):
    """`Authorization: Bearer <token>`, as Prometheus' clients send `bearer_token`."""

    def __init__(self, token: str) -> None:
        self._token = token

    def __repr__(self) -> str:
        return "BearerAuth(***)"

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        """Add the header and send."""
        request.headers["Authorization"] = f"Bearer {self._token}"
        yield request


class PromClient:
    """Runs instant queries against one Prometheus server. `requests` counts HTTP requests, retries included."""

    def __init__(self, cfg: PrometheusConfig, *, sleep: Sleep | None = None) -> None:
        url = httpx.URL(cfg.url)
        self.host = url.host + (f":{url.port}" if url.port else "")
        self.endpoint = str(url).rstrip("/") + API_PATH
        self._secrets: list[str] = []
        self._auth: httpx.Auth | None = None
        if cfg.basic_auth is not None:
            password = cfg.basic_auth.password.get_secret_value()
            self._auth = httpx.BasicAuth(cfg.basic_auth.username, password)
            self._secrets.append(password)
            self.auth_hint = f"check basic_auth (user {cfg.basic_auth.username})"
        elif cfg.bearer_token is not None:
            token = cfg.bearer_token.get_secret_value()
            self._auth = BearerAuth(token)
            self._secrets.append(token)
            self.auth_hint = "check bearer_token"
        else:
            self.auth_hint = "no credentials are set (basic_auth or bearer_token)"
        verify: ssl.SSLContext | bool = cfg.tls.ssl_context() if cfg.tls is not None else True
        self._extensions: dict[str, Any] = {}
        if cfg.tls is not None and cfg.tls.server_name:
            self._extensions["sni_hostname"] = cfg.tls.server_name  # the name verified, too
        self._client = httpx.AsyncClient(verify=verify, timeout=cfg.timeout, follow_redirects=False)
        self.timeout = cfg.timeout
        self.max_answer = cfg.max_answer
        self.max_retries = cfg.max_retries
        self.max_wait = cfg.max_retry_wait
        self.method = "POST"
        self._sleep = sleep or asyncio.sleep
        self.requests = 0

    def __repr__(self) -> str:
        return f"PromClient(host={self.host!r})"

    def redact(self, text: str) -> str:
        """`text` with every secret replaced by ***."""
        for secret in self._secrets:
            if secret:
                text = text.replace(secret, "***")
        return text

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self._client.aclose()

    async def query(self, expr: str, now: float) -> bytes:
        """The body of the 200 answer to the instant query `expr` at time `now`."""
        attempt = 0
        while True:
            try:
                return await self._try(expr, now)
            except _Retry as r:
                attempt += 1
                kind = QueryFailed if r.answered else SourceError
                why = r.why if r.answered else f"Prometheus at {self.host}: {r.why}"
                if attempt > self.max_retries:
                    raise kind(f"{why}, giving up after {attempt} tries") from None
                wait = backoff(attempt - 1, self.max_wait) if r.wait is None else r.wait
                if wait > self.max_wait:
                    raise kind(f"{why}, server asks to wait {wait:.0f}s") from None
                await self._sleep(wait)

    async def _try(self, expr: str, now: float) -> bytes:
        params = {"query": expr, "time": f"{now:.3f}", "timeout": f"{self.timeout * 0.9:.3f}"}
        try:
            async with asyncio.timeout(self.timeout):
                status, headers, body, cut = await self._send(params)
                if status in (405, 501) and self.method == "POST":
                    self.method = "GET"  # a server or proxy without POST: GET from now on
                    status, headers, body, cut = await self._send(params)
        except (TimeoutError, httpx.TimeoutException):
            raise QueryFailed(f"no answer within {self.timeout:g}s (timeout)") from None
        except (httpx.TransportError, OSError) as exc:  # ssl.SSLError too: a TLS alert after the handshake
            tls = _tls_error(exc)
            if tls is not None:
                raise SourceError(f"TLS with {self.host} failed: {self.redact(tls)[:300]}") from None
            detail = self.redact(str(exc))[:200]
            why = f"connection failed ({type(exc).__name__}{': ' + detail if detail else ''})"
            raise _Retry(why, None, answered=False) from None
        return self._judge(status, headers, body, cut, now)

    def _judge(self, status: int, headers: httpx.Headers, body: bytes, cut: bool, now: float) -> bytes:
        if status == 200:
            if cut:
                raise QueryOverLimit(f"the answer is over max_answer ({self.max_answer} bytes): narrow the query")
            progress.received(len(body))
            return body
        prom = error_of(body) if not cut else None
        said = f"HTTP {status}: {self.redact(str(prom))[:400]}" if prom else f"HTTP {status}"
        if status in (401, 403):
            raise AuthError(f"Prometheus at {self.host} refused the credentials (HTTP {status}): {self.auth_hint}")
        if status == 429 or (status >= 500 and status != 501):
            wait = parse_retry_after(headers.get("Retry-After"), now)
            raise _Retry(said, wait, answered=prom is not None)
        if prom is not None:  # 400 bad_data (the query's syntax: no retry helps), 422 execution, ...
            raise QueryFailed(said, recoverable=status != 400)
        if 300 <= status < 400:
            raise SourceError(
                f"Prometheus at {self.host} redirects (HTTP {status}) to {self.redact(_where(headers))[:200]}: "
                "use that address as the url",
                recoverable=False,
            )
        if status == 404:
            raise SourceError(
                f"no {API_PATH} at {self.host} (HTTP 404): check the url (and the path prefix Prometheus is "
                "served under)",
                recoverable=False,
            )
        snippet = self.redact(body[:200].decode(errors="replace").strip())
        raise SourceError(f"Prometheus at {self.host}: HTTP {status}: {snippet}", recoverable=False)

    async def _send(self, params: dict[str, str]) -> tuple[int, httpx.Headers, bytes, bool]:
        self.requests += 1
        post = self.method == "POST"
        async with self._client.stream(
            self.method,
            self.endpoint,
            data=params if post else None,
            params=None if post else params,
            auth=self._auth,
            headers={"User-Agent": f"alertd/{_version}", "Accept": "application/json", "Accept-Encoding": "gzip"},
            extensions=self._extensions,
        ) as resp:
            limit = self.max_answer if resp.status_code == 200 else MAX_ERROR_ANSWER
            body, cut = await _read(resp, limit)
            return resp.status_code, resp.headers, body, cut


async def _read(resp: httpx.Response, limit: int) -> tuple[bytes, bool]:
    """At most `limit` bytes of the answer, gzip decompressed a bounded piece at a time; and whether there was
    more."""
    declared = resp.headers.get("Content-Length", "")
    encoding = resp.headers.get("Content-Encoding", "").strip().lower()
    if encoding in ("", "identity") and declared.isdigit() and int(declared) > limit:
        return b"", True
    if encoding not in ("", "identity", "gzip"):
        raise QueryFailed(f"the answer's Content-Encoding {encoding[:40]!r} was not asked for")
    inflate = zlib.decompressobj(wbits=31) if encoding == "gzip" else None
    buf = bytearray()
    try:
        async for raw in resp.aiter_raw():
            if inflate is None:
                buf += raw
            else:
                buf += inflate.decompress(raw, limit + 1 - len(buf))
                if inflate.unconsumed_tail:
                    return bytes(buf[:limit]), True
            if len(buf) > limit:
                return bytes(buf[:limit]), True
        if inflate is not None:
            buf += inflate.flush()  # what one last back-reference left: at most 258 bytes
            if not inflate.eof:
                raise QueryFailed("the answer's gzip is cut short or corrupt")
    except zlib.error:
        raise QueryFailed("the answer's gzip is cut short or corrupt") from None
    if len(buf) > limit:
        return bytes(buf[:limit]), True
    return bytes(buf), False


def _where(headers: httpx.Headers) -> str:
    """A redirect's Location without its user, query and fragment."""
    try:
        url = httpx.URL(headers.get("Location", ""))
        return str(url.copy_with(query=None, fragment=None, username=None, password=None))
    except (httpx.InvalidURL, TypeError, ValueError):
        return "an address that is not a URL"


_SSL_NOISE = re.compile(r"^\[SSL: [A-Z0-9_]+\] | \(_ssl\.c:\d+\)$")


def _tls_error(exc: BaseException) -> str | None:
    """What a TLS failure says (`certificate verify failed: ...`), or None when `exc` is not one."""
    seen: BaseException | None = exc
    for _ in range(5):
        if seen is None:
            break
        if isinstance(seen, ssl.SSLCertVerificationError):
            return f"certificate verify failed: {seen.verify_message or seen.reason}"
        if isinstance(seen, ssl.SSLError):
            text = _SSL_NOISE.sub("", str(seen)).strip() or str(seen.reason)
            if "bad certificate" in text or "certificate required" in text:
                text += " (does the server want a client certificate? tls: cert_file, key_file)"
            return text
        seen = seen.__cause__ or seen.__context__
    text = str(exc)
    return text if "[SSL" in text or "CERTIFICATE_VERIFY" in text else None
