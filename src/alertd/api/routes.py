"""The HTTP API of the running service (design section 6): health, metrics, state, silences, reload, dry-run.

Handlers are `async` and run in the service's own event loop, so they read the buffer and the rules'
state between two evaluations, never during one. Each dry run works in a process of its own
(`alertd.api.worker`), at most four at once, killed at `dry_run_timeout` (the client gets 504).
With a token, every endpoint but `/healthz`, `/readyz` and `/metrics` wants `Authorization: Bearer`,
checked before the body is read. How connections are kept in bounds is `alertd.api.server`'s part.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import inspect
import logging
import socket
from collections.abc import Awaitable, Callable, Iterator, MutableMapping, Sequence
from fnmatch import fnmatchcase
from typing import Any, Literal

import uvicorn
from fastapi import APIRouter, Depends, FastAPI, Query, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from alertd import __version__
from alertd.api import models as m
from alertd.api.hosts import SAFE_METHODS, AllowedHosts, json_content_type, loopback, machine_names
from alertd.api.metrics import ServiceCollector, alert_counts, source_state
from alertd.api.models import parse_instant, silence_from, silence_json, time_or_none
from alertd.api.pages import pages_router
from alertd.api.plots import plot_routes, run_title
from alertd.api.prom import alerts_data, rules_data
from alertd.api.roots import roots_routes
from alertd.api.server import AcceptErrors, Connections, connection_limit, protocol_factory
from alertd.api.v2 import V2Error, v2_router
from alertd.api.view import AdminView, ServiceView, SilencesView
from alertd.api.worker import MAX_RUNNING, DryRunFailed, DryRuns
from alertd.buffer import Series
from alertd.dispatch.matchers import alert_label_map
from alertd.model import SeriesKey, format_value
from alertd.schema.types import redacted

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]], Awaitable[None]]
ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": m.ErrorBody} for code in (400, 401, 403, 404, 408, 409, 413, 415, 421, 429, 500, 503, 504)
}
BODY_TIMEOUT = 30.0
"""Seconds a client has to send a request's body."""
SHUTDOWN_GRACE = 3.0
"""Seconds the server waits, once stopping, for the answers under way before it drops their connections."""
PROBES = frozenset({"/healthz", "/readyz"})
"""Answered whatever the `Host` header: they tell nothing (load balancers and probes send odd names)."""


class ApiError(Exception):
    """An error answered as `{"status": "error", "errors": [...]}` with this HTTP status."""

    def __init__(self, status: int, *errors: str, headers: dict[str, str] | None = None) -> None:
        super().__init__("; ".join(errors))
        self.status, self.errors, self.headers = status, list(errors), headers


def _error(status: int, errors: list[str], headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"status": "error", "errors": errors}, status_code=status, headers=headers)


def _time(t: float | None) -> str | None:
    return time_or_none(t)


def _instants(lo: str | None, hi: str | None) -> tuple[float, float]:
    """The `from` and `to` query parameters as an interval; ApiError 400 naming the parameter at fault."""
    try:
        start = parse_instant("from", lo) if lo is not None else float("-inf")
        end = parse_instant("to", hi) if hi is not None else float("inf")
    except ValueError as exc:
        raise ApiError(400, str(exc)) from None
    if start > end:
        raise ApiError(400, f"from ({lo}) is after to ({hi})")
    return start, end


def _json_safe(value: Any) -> Any:
    """`value` with every float that JSON can't hold (NaN, infinities) as the string `format_value` gives."""
    if isinstance(value, float):
        return format_value(value)
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


def series_id(key: SeriesKey) -> str:
    """A stable id of a series: 16 hex digits of the SHA-256 of its metric and labels."""
    text = "\x00".join([key.metric, *(f"{k}={v}" for k, v in key.labels)])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class Gate:
    """ASGI middleware that judges a request by its head before its body is read: the `Host` header
    against `hosts` (421; `/healthz` and `/readyz` are answered to any), the bearer token (for `/api/...`),
    a state-changing request's content type (415 unless JSON, or the token was given: `alertd.api.hosts`),
    then the Content-Length against `limit` (413). Only then is the body read, at most `limit`
    bytes (413 past that, whether it came with a Content-Length or in chunks) within `body_timeout`
    seconds (408). The app sees the body replayed. After a refusal the server reads and drops what is left
    of the body for a few seconds at most (`server.LINGER`), then closes the connection."""

    def __init__(
        self,
        app: ASGIApp,
        limit: int,
        token: str | None = None,
        body_timeout: float = BODY_TIMEOUT,
        hosts: AllowedHosts | None = None,
    ) -> None:
        self.app, self.limit, self.body_timeout, self.hosts = app, limit, body_timeout, hosts
        self.token = token.encode() if token else None

    async def __call__(self, scope: Scope, receive: Callable[[], Awaitable[Message]], send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        path = str(scope.get("path", ""))
        if self.hosts is not None and path not in PROBES and not self.hosts.allows(headers.get(b"host")):
            await _refuse(421, "this alertd does not answer to that Host (ALERTD_API_HOSTS adds names)", scope, send)
            return
        authorized = False
        if self.token is not None and (path == "/api" or path.startswith("/api/")):
            scheme, _, given = headers.get(b"authorization", b"").partition(b" ")
            if scheme.lower() != b"bearer" or not hmac.compare_digest(given.strip(), self.token):
                await _refuse(401, "a valid bearer token is required", scope, send, {"WWW-Authenticate": "Bearer"})
                return
            authorized = True
        method = str(scope.get("method", "GET")).encode()
        if not authorized and method not in SAFE_METHODS and not json_content_type(headers.get(b"content-type")):
            bodiless = headers.get(b"content-type") is None and headers.get(b"content-length", b"0") == b"0"
            if not (method == b"DELETE" and bodiless and b"transfer-encoding" not in headers):
                await _refuse(415, f"a {method.decode()} request needs Content-Type: application/json", scope, send)
                return
        length = headers.get(b"content-length", b"")
        if length.isdigit() and int(length) > self.limit:
            await _refuse(413, f"the request body is larger than {self.limit} bytes", scope, send)
            return
        chunks, size = [], 0
        try:
            async with asyncio.timeout(self.body_timeout):
                while True:
                    message = await receive()
                    if message["type"] != "http.request":
                        break
                    size += len(message.get("body", b""))
                    if size > self.limit:
                        await _refuse(413, f"the request body is larger than {self.limit} bytes", scope, send)
                        return
                    chunks.append(message.get("body", b""))
                    if not message.get("more_body", False):
                        break
        except TimeoutError:
            await _refuse(408, f"the request body took longer than {self.body_timeout:g}s", scope, send)
            return
        body, done = b"".join(chunks), False

        async def replay() -> Message:
            nonlocal done
            if done:
                return await receive()
            done = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


async def _refuse(status: int, error: str, scope: Scope, send: Any, headers: dict[str, str] | None = None) -> None:
    """Answer `status` without reading (more of) the body."""
    response = _error(status, [error], headers)

    async def nothing() -> Message:
        return {"type": "http.disconnect"}

    await response(scope, nothing, send)


def create_app(
    service: ServiceView,
    *,
    token: str | None = None,
    max_body: int = 1_000_000,
    body_timeout: float = BODY_TIMEOUT,
    dry_run_timeout: float = 10.0,
    dry_run_roots: Sequence[str] = (),
    max_dry_runs: int = MAX_RUNNING,
    hosts: AllowedHosts | None = None,
) -> FastAPI:
    """The API of `service` (an `alertd.service.Service`) as an ASGI app; `app.state.dry_runs` holds its
    dry-run workers (`close()` them when the service stops). `hosts`: the `Host` names it answers (None:
    any; `serve_api` gives those of its address)."""
    app = FastAPI(title="alertd", version=__version__, description=__doc__)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ServiceCollector(service))

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return _error(exc.status, exc.errors, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        """FastAPI's 422, but a NaN or an infinity in the input is written as a string, not a 500."""
        return JSONResponse({"detail": _json_safe(jsonable_encoder(exc.errors()))}, status_code=422)

    @app.get("/healthz", response_model=m.Status, response_model_exclude_none=True, tags=["health"])
    async def healthz() -> dict[str, Any]:
        """Alive (always 200 while the process answers)."""
        return {"status": "ok"}

    @app.get(
        "/readyz",
        response_model=m.Status,
        response_model_exclude_none=True,
        responses={503: {"model": m.Status}},
        tags=["health"],
    )
    async def readyz() -> Any:
        """200 once the rules are loaded and the sources started; 503 before and while stopping."""
        if service.ready:
            return {"status": "ok"}
        return JSONResponse({"status": "not ready", "reason": "the sources are not started"}, status_code=503)

    @app.get("/metrics", response_class=Response, tags=["health"])
    async def metrics() -> Response:
        """Prometheus text format: sources, buffer, evaluation, alerts, deliveries."""
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    deps = [Depends(_bearer(token))] if token else []
    api = APIRouter(prefix="/api/v1", dependencies=deps, responses=ERRORS)
    dry_runs = DryRuns(timeout=dry_run_timeout, roots=dry_run_roots, limit=max_dry_runs)
    app.state.dry_runs = dry_runs
    _state_routes(api, service)
    _source_routes(api, service)
    _series_routes(api, service)
    plot_routes(api, service)
    _silence_routes(api, service)
    _admin_routes(api, service, dry_runs)
    roots_routes(api, dry_run_roots)
    app.include_router(api)
    app.include_router(pages_router())
    app.include_router(v2_router(service, V2Error), dependencies=deps)

    @app.exception_handler(V2Error)
    async def _v2_error(request: Request, exc: V2Error) -> JSONResponse:
        return JSONResponse(str(exc), status_code=exc.status)

    app.add_middleware(Gate, limit=max_body, token=token, body_timeout=body_timeout, hosts=hosts)
    return app


def _bearer(token: str) -> Callable[[Request], Awaitable[None]]:
    expected = token.encode()

    async def check(request: Request) -> None:
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), expected):
            raise ApiError(401, "a valid bearer token is required", headers={"WWW-Authenticate": "Bearer"})

    return check


FORMAT = Query(
    "prometheus",
    description="`prometheus`: Prometheus' envelope and fields (the default); `alertd`: alertd's own list",
)


def _state_routes(api: APIRouter, service: ServiceView) -> None:
    @api.get("/alerts", response_model=m.PromAlerts | list[m.AlertOut])
    async def alerts(format: Literal["prometheus", "alertd"] = FORMAT) -> Any:
        """The pending and firing alerts: as Prometheus' `GET /api/v1/alerts` answers, or with `format=alertd`
        alertd's list (rule, severity, step, fingerprint, silences)."""
        if format == "prometheus":
            return alerts_data(service)
        now = service.clock.now()
        silences = service.silences.active(now)
        out = []
        for a in service.engine.state.alerts(service.engine.ruleset.rules):
            labels = alert_label_map(a.rule, a.labels, a.severity)
            by = [s.id for s in silences if s.matches(labels)]
            out.append(
                {
                    "rule": a.rule,
                    "state": a.state.value,
                    "labels": dict(a.labels),
                    "annotations": dict(a.annotations),
                    "severity": a.severity,
                    "value": format_value(a.value),
                    "step": a.step,
                    "time": _time(a.time),
                    "activeAt": _time(a.active_at),
                    "firedAt": _time(a.fired_at),
                    "fingerprint": a.fingerprint,
                    "silenced": bool(by),
                    "silencedBy": by,
                }
            )
        return out

    @api.get("/rules", response_model=m.PromRules | list[m.RuleOut], response_model_by_alias=True)
    async def rules(format: Literal["prometheus", "alertd"] = FORMAT) -> Any:
        """Every loaded rule, its last evaluation and its alerts: as Prometheus' `GET /api/v1/rules` answers
        (one group per rules file), or with `format=alertd` alertd's list (condition, metrics, counts)."""
        if format == "prometheus":
            return rules_data(service)
        engine = service.engine
        counts = alert_counts(service)
        out = []
        for r in engine.ruleset.rules:
            cfg = engine.config.rule_configs.get(r.name)
            out.append(
                {
                    "name": r.name,
                    "metrics": list(r.metrics),
                    "labelsMatch": dict(cfg.labels_match) if cfg else {},
                    "condition": r.condition.describe(),
                    "for": r.hold,
                    "keepFiringFor": r.keep_firing_for,
                    "consecutive": r.consecutive,
                    "severity": r.severity,
                    "labels": dict(r.labels),
                    "annotations": dict(cfg.annotations) if cfg else {},
                    "notify": list(r.notify),
                    "lastEvaluation": _time(engine.last_eval),
                    "lastError": engine.rule_errors.get(r.name),
                    "alerts": {s: counts.get((r.name, s), 0) for s in ("pending", "firing")},
                }
            )
        return out


def _source_routes(api: APIRouter, service: ServiceView) -> None:
    @api.get("/sources", response_model=list[m.SourceOut])
    async def sources() -> list[dict[str, Any]]:
        """Every configured source with its health (secrets shown as `**********`)."""
        out = []
        for cfg in service.config.sources:
            h = service.health.get(cfg.name)
            state, note = source_state(h, service.sources.get(cfg.name))
            out.append(
                {
                    "name": cfg.name,
                    "type": cfg.type,
                    "interval": cfg.interval,
                    "up": state == "up",
                    "state": state,
                    "note": note,
                    "failures": h.failures if h else 0,
                    "lastPoll": _time(h.last_poll) if h else None,
                    "lastError": h.last_error if h else None,
                    "lag": h.lag if h else None,
                    "samples": h.samples if h else 0,
                    "errors": h.errors if h else 0,
                    "reads": h.polls if h else 0,
                    "watch": service.watching.get(cfg.name),
                    "config": redacted(cfg),
                }
            )
        return out

    @api.get("/runs", response_model=list[m.RunOut])
    async def runs() -> list[dict[str, Any]]:
        """Every run alertd knows, most recently active first: state, end reason, writer, steps, times."""
        out = []
        for r in service.engine.runs.all():
            d = r.as_json()
            out.append(
                {
                    "source": d["source"],
                    "run": d["run"],
                    "title": run_title(service.config, r.source, r.run),
                    "state": d["state"],
                    "reason": d["reason"],
                    "exitCode": d["exit_code"],
                    "writer": d["writer"],
                    "firstStep": d["first_step"],
                    "lastStep": d["last_step"],
                    "firstSample": _time(r.first_time),
                    "lastSample": _time(r.last_time),
                    "endedAt": _time(r.ended_at),
                    "actions": [_action(a) for a in r.actions],
                }
            )
        return out


def _action(entry: dict[str, object]) -> dict[str, object]:
    """A run's action report (`alertd.runs.tracker.action_entry`) with its time in RFC 3339."""
    when = entry.get("time")
    return {**entry, "time": _time(float(when)) if isinstance(when, int | float) else None}


def _series_routes(api: APIRouter, service: ServiceView) -> None:
    @api.get("/series", response_model=m.SeriesList)
    async def series(
        metric: str | None = Query(None, description="glob over metric names", max_length=1000),
        limit: int = Query(100, ge=1, le=10_000),
        from_: str | None = Query(None, alias="from", description=WHEN.format("newest sample", "at or after")),
        to: str | None = Query(None, description=WHEN.format("newest sample", "at or before")),
    ) -> dict[str, Any]:
        """Buffered series whose metric matches the glob (and whose newest sample lies between `from` and
        `to`), by metric and labels."""
        start, end = _instants(from_, to)
        found = [
            s
            for s in service.engine.buffer
            if (metric is None or fnmatchcase(s.key.metric, metric)) and _newest_within(s, start, end)
        ]
        found.sort(key=lambda s: (s.key.metric, s.key.labels))
        return {"total": len(found), "series": [_series_json(s) for s in found[:limit]]}

    @api.get("/series/{sid}", response_model=m.SeriesSamples)
    async def series_samples(
        sid: str,
        limit: int = Query(100, ge=1, le=100_000),
        from_: str | None = Query(None, alias="from", description=WHEN.format("sample", "at or after")),
        to: str | None = Query(None, description=WHEN.format("sample", "at or before")),
    ) -> dict[str, Any]:
        """The newest `limit` samples of one series (its `id` from the listing), oldest first; with `from`
        and `to`, only those between them."""
        start, end = _instants(from_, to)
        s = next((s for s in service.engine.buffer if series_id(s.key) == sid), None)
        if s is None:
            raise ApiError(404, f"no series with id {sid!r}")
        window = from_ is not None or to is not None  # (without one, samples at odd times count too)
        picked: list[int] = []
        for i in range(len(s.times) - 1, s.start - 1, -1):
            if len(picked) == limit:
                break
            if not window or start <= s.times[i] <= end:
                picked.append(i)
        samples = [
            {"time": _time(s.times[i]), "step": s.step_at(i), "value": format_value(s.values[i])}
            for i in reversed(picked)
        ]
        return {"id": sid, "metric": s.key.metric, "labels": s.key.label_dict(), "samples": samples}


WHEN = "only {0}s {1} this time (epoch seconds or RFC 3339)"


def _newest_within(s: Series, start: float, end: float) -> bool:
    if start == float("-inf") and end == float("inf"):
        return True
    last = s.last_time()
    return last is not None and start <= last <= end


def _series_json(s: Series) -> dict[str, Any]:
    last = len(s.times) - 1
    has = len(s) > 0
    return {
        "id": series_id(s.key),
        "metric": s.key.metric,
        "labels": s.key.label_dict(),
        "samples": len(s),
        "lastValue": format_value(s.values[last]) if has else None,
        "lastTime": _time(s.times[last]) if has else None,
        "lastStep": s.step_at(last) if has else None,
    }


def _silence_routes(api: APIRouter, service: SilencesView) -> None:
    @api.get("/silences", response_model=list[m.SilenceOut])
    async def silences() -> list[dict[str, Any]]:
        """Every silence, expired ones included."""
        now = service.clock.now()
        return [silence_json(s, now) for s in service.silences.list()]

    @api.post("/silences", response_model=m.SilenceId, status_code=200)
    async def add_silence(body: m.SilenceIn) -> dict[str, Any]:
        """Create a silence; answers its id."""
        try:
            silence = silence_from(body, service.clock.now())
        except ValueError as exc:
            raise ApiError(400, str(exc)) from None
        service.silences.add(silence)
        return {"id": silence.id}

    @api.delete("/silences/{silence_id}", response_model=m.SilenceOut)
    async def expire_silence(silence_id: str) -> dict[str, Any]:
        """End a silence now (a pending one never starts)."""
        now = service.clock.now()
        try:
            return silence_json(service.silences.expire(silence_id, now), now)
        except KeyError:
            raise ApiError(404, f"no silence with id {silence_id!r}") from None


def _admin_routes(api: APIRouter, service: AdminView, dry_runs: DryRuns) -> None:
    @api.post("/reload", response_model=m.ReloadOut, responses={400: {"model": m.ReloadOut}})
    async def reload() -> Any:
        """Load the rules files again; on an error the running rules stay and the problems are listed."""
        do_reload = getattr(service, "reload", None)
        if do_reload is None:
            raise ApiError(503, "this service has no reload")
        if not service.ready:
            raise ApiError(503, "the service can't reload now (not running)")
        errors = do_reload()
        if inspect.isawaitable(errors):
            errors = await errors
        if errors:
            return JSONResponse({"status": "error", "errors": list(errors)}, status_code=400)
        return {"status": "ok", "errors": []}

    @api.post("/dry-run", response_model=m.DryRunOut, response_model_exclude_none=True)
    async def dry_run(body: m.DryRunIn) -> Response:
        """Replay samples through the given rules; the transitions and the notifications the route
        would have produced. Nothing is sent; no notifier is built. Each dry run has a process of its
        own, killed at the time limit (504); while the most allowed at once run, 429 with Retry-After."""
        if body.source is not None and not dry_runs.roots:
            raise ApiError(403, "source dry-runs are disabled: the server allows no directory")
        job = body.model_dump(include={"rules", "samples", "source", "until", "plot"})
        try:
            answer = await dry_runs.run(job)
        except DryRunFailed as exc:
            raise ApiError(exc.status, *exc.errors, headers=exc.headers) from None
        return Response(answer, media_type="application/json")


def parse_listen(listen: str) -> tuple[str, int]:
    """`HOST:PORT`, `:PORT` (127.0.0.1), `PORT` or `[::1]:PORT` -> (host, port)."""
    text = listen.strip()
    if text.startswith("["):
        host, sep, port = text[1:].partition("]:")
        if not sep:
            raise ValueError(f"listen address {listen!r}: expected [IPv6]:PORT")
    elif ":" in text:
        host, _, port = text.rpartition(":")
    else:
        host, port = "", text
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"listen address {listen!r}: the port must be a number 0..65535")
    return host or "127.0.0.1", int(port)


class _Server(uvicorn.Server):
    """A uvicorn server that leaves the signals to the service."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def bind(listen: str, backlog: int = 128) -> socket.socket:
    """A listening TCP socket on `listen` (IPv4 or IPv6); raises OSError naming the address."""
    host, port = parse_listen(listen)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(backlog)
    except OSError as exc:
        sock.close()
        raise OSError(exc.errno, f"can't listen on {listen}: {exc.strerror or exc}") from None
    sock.setblocking(False)
    return sock


async def serve_api(
    service: ServiceView, listen: str, *, max_connections: int | None = None, api_hosts: Sequence[str] = (), **kw: Any
) -> None:
    """Serve `create_app(service, **kw)` on `listen` in the running event loop until cancelled.

    The address is bound before the server starts (an OSError says it can't be); `kw` are the
    options of `create_app`. At most `max_connections` are open at once (default: from the limit on
    open files, `server.connection_limit`). The `Host` names answered are those of `listen` and
    `api_hosts` (`alertd.api.hosts`). When cancelled, the dry-run workers are killed, the
    answers under way get `SHUTDOWN_GRACE` seconds, then every connection is dropped.
    """
    host = parse_listen(listen)[0]
    names = [] if loopback(host) else await asyncio.to_thread(machine_names)
    kw.setdefault("hosts", AllowedHosts(host, api_hosts, names))
    guard = Connections(max_connections or connection_limit())
    backlog = min(128, guard.limit)  # asyncio accepts up to `backlog` connections in one go
    sock = bind(listen, backlog)
    app = create_app(service, **kw)
    config = uvicorn.Config(
        app,
        log_level="warning",
        lifespan="off",
        http=protocol_factory(guard),  # type: ignore[arg-type]
        backlog=backlog,
        timeout_graceful_shutdown=int(SHUTDOWN_GRACE),
    )
    server = _Server(config)
    accept_errors = AcceptErrors()
    asyncio_log = logging.getLogger("asyncio")
    asyncio_log.addFilter(accept_errors)
    task = asyncio.ensure_future(server.serve(sockets=[sock]))
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        server.should_exit = True
        app.state.dry_runs.close()
        with contextlib.suppress(Exception, asyncio.CancelledError, TimeoutError):
            await asyncio.wait_for(asyncio.shield(task), SHUTDOWN_GRACE + 1)
        guard.close_all()
        if not task.done():
            task.cancel()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await task
        raise
    finally:
        app.state.dry_runs.close()
        sock.close()
        asyncio_log.removeFilter(accept_errors)
        accept_errors.flush(asyncio_log)
