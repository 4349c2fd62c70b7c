"""The HTTP API of the running service (design section 6): health, metrics, state, silences, reload, dry-run.

Handlers are `async` and run in the service's own event loop, so they read the buffer and the rules'
state between two evaluations, never during one. A dry run works in a worker thread and is given
`dry_run_timeout` seconds; past that the client gets 504 and the thread is told to stop (it notices
between samples and between transitions, so it finishes in the background shortly after).
With a token, every endpoint but `/healthz`, `/readyz` and `/metrics` wants `Authorization: Bearer`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import socket
from collections.abc import Awaitable, Callable, Iterator, MutableMapping, Sequence
from fnmatch import fnmatchcase
from typing import Any

import uvicorn
from fastapi import APIRouter, Depends, FastAPI, Query, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from alertd import api_models as m
from alertd.api_dryrun import DryRunError, DryRunJob, resolve_under
from alertd.api_metrics import ServiceCollector, alert_counts, source_up
from alertd.api_models import silence_from, silence_json
from alertd.buffer import Series
from alertd.config import redacted
from alertd.dispatch.matchers import alert_label_map
from alertd.model import SeriesKey, format_time, format_value

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]], Awaitable[None]]
ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": m.ErrorBody} for code in (400, 401, 403, 404, 409, 413, 503, 504)
}


class ApiError(Exception):
    """An error answered as `{"status": "error", "errors": [...]}` with this HTTP status."""

    def __init__(self, status: int, *errors: str, headers: dict[str, str] | None = None) -> None:
        super().__init__("; ".join(errors))
        self.status, self.errors, self.headers = status, list(errors), headers


def _error(status: int, errors: list[str], headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"status": "error", "errors": errors}, status_code=status, headers=headers)


def _time(t: float | None) -> str | None:
    return None if t is None else format_time(t)


def series_id(key: SeriesKey) -> str:
    """A stable id of a series: 16 hex digits of the SHA-256 of its metric and labels."""
    text = "\x00".join([key.metric, *(f"{k}={v}" for k, v in key.labels)])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class BodyLimit:
    """ASGI middleware: a request body larger than `limit` bytes gets 413, whether its Content-Length
    says so or its chunks add up past it. The body is read in full before the app sees it."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Callable[[], Awaitable[Message]], send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        length = headers.get(b"content-length", b"")
        if length.isdigit() and int(length) > self.limit:
            await _too_large(self.limit, scope, receive, send)
            return
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            size += len(message.get("body", b""))
            if size > self.limit:
                await _too_large(self.limit, scope, receive, send)
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body, done = b"".join(chunks), False

        async def replay() -> Message:
            nonlocal done
            if done:
                return await receive()
            done = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


async def _too_large(limit: int, scope: Scope, receive: Any, send: Any) -> None:
    response = _error(413, [f"the request body is larger than {limit} bytes"])
    await response(scope, receive, send)


def create_app(
    service: Any,
    *,
    token: str | None = None,
    max_body: int = 1_000_000,
    dry_run_timeout: float = 10.0,
    dry_run_roots: Sequence[str] = (),
) -> FastAPI:
    """The API of `service` (an `alertd.app.Service`) as an ASGI app."""
    app = FastAPI(title="alertd", version="0.1.0", description=__doc__)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ServiceCollector(service))

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return _error(exc.status, exc.errors, exc.headers)

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
    _state_routes(api, service)
    _silence_routes(api, service)
    _admin_routes(api, service, dry_run_timeout, list(dry_run_roots))
    app.include_router(api)
    app.add_middleware(BodyLimit, limit=max_body)
    return app


def _bearer(token: str) -> Callable[[Request], Awaitable[None]]:
    expected = token.encode()

    async def check(request: Request) -> None:
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), expected):
            raise ApiError(401, "a valid bearer token is required", headers={"WWW-Authenticate": "Bearer"})

    return check


def _state_routes(api: APIRouter, service: Any) -> None:
    @api.get("/alerts", response_model=list[m.AlertOut])
    async def alerts() -> list[dict[str, Any]]:
        """The pending and firing alerts."""
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
                    "time": format_time(a.time),
                    "activeAt": format_time(a.active_at),
                    "firedAt": _time(a.fired_at),
                    "fingerprint": a.fingerprint,
                    "silenced": bool(by),
                    "silencedBy": by,
                }
            )
        return out

    @api.get("/rules", response_model=list[m.RuleOut], response_model_by_alias=True)
    async def rules() -> list[dict[str, Any]]:
        """Every loaded rule, its last evaluation and its alerts."""
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

    @api.get("/sources", response_model=list[m.SourceOut])
    async def sources() -> list[dict[str, Any]]:
        """Every configured source with its health (secrets shown as `**********`)."""
        out = []
        for cfg in service.config.sources:
            h = service.health.get(cfg.name)
            out.append(
                {
                    "name": cfg.name,
                    "type": cfg.type,
                    "interval": cfg.interval,
                    "up": h is not None and source_up(h),
                    "failures": h.failures if h else 0,
                    "lastPoll": _time(h.last_poll) if h else None,
                    "lastError": h.last_error if h else None,
                    "lag": h.lag if h else None,
                    "samples": h.samples if h else 0,
                    "errors": h.errors if h else 0,
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
                    "state": d["state"],
                    "reason": d["reason"],
                    "exitCode": d["exit_code"],
                    "writer": d["writer"],
                    "firstStep": d["first_step"],
                    "lastStep": d["last_step"],
                    "firstSample": _time(r.first_time) if r.first_time != float("inf") else None,
                    "lastSample": _time(r.last_time) if r.last_time != float("-inf") else None,
                    "endedAt": _time(r.ended_at) if r.ended_at is not None else None,
                }
            )
        return out

    @api.get("/series", response_model=m.SeriesList)
    async def series(
        metric: str | None = Query(None, description="glob over metric names", max_length=1000),
        limit: int = Query(100, ge=1, le=10_000),
    ) -> dict[str, Any]:
        """Buffered series whose metric matches the glob, by metric and labels."""
        found = [s for s in service.engine.buffer if metric is None or fnmatchcase(s.key.metric, metric)]
        found.sort(key=lambda s: (s.key.metric, s.key.labels))
        return {"total": len(found), "series": [_series_json(s) for s in found[:limit]]}

    @api.get("/series/{sid}", response_model=m.SeriesSamples)
    async def series_samples(sid: str, limit: int = Query(100, ge=1, le=100_000)) -> dict[str, Any]:
        """The newest `limit` samples of one series (its `id` from the listing), oldest first."""
        s = next((s for s in service.engine.buffer if series_id(s.key) == sid), None)
        if s is None:
            raise ApiError(404, f"no series with id {sid!r}")
        first = max(s.start, len(s.times) - limit)
        samples = [
            {"time": format_time(s.times[i]), "step": s.step_at(i), "value": format_value(s.values[i])}
            for i in range(first, len(s.times))
        ]
        return {"id": sid, "metric": s.key.metric, "labels": s.key.label_dict(), "samples": samples}


def _series_json(s: Series) -> dict[str, Any]:
    last = len(s.times) - 1
    has = len(s) > 0
    return {
        "id": series_id(s.key),
        "metric": s.key.metric,
        "labels": s.key.label_dict(),
        "samples": len(s),
        "lastValue": format_value(s.values[last]) if has else None,
        "lastTime": format_time(s.times[last]) if has else None,
        "lastStep": s.step_at(last) if has else None,
    }


def _silence_routes(api: APIRouter, service: Any) -> None:
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


def _admin_routes(api: APIRouter, service: Any, timeout: float, roots: list[str]) -> None:
    @api.post("/reload", response_model=m.ReloadOut, responses={400: {"model": m.ReloadOut}})
    async def reload() -> Any:
        """Load the rules files again; on an error the running rules stay and the problems are listed."""
        do_reload = getattr(service, "reload", None)
        if do_reload is None:
            raise ApiError(503, "this service has no reload")
        if not service.ready:
            raise ApiError(503, "the service can't reload now (not running)")
        errors = do_reload()
        if errors:
            return JSONResponse({"status": "error", "errors": list(errors)}, status_code=400)
        return {"status": "ok", "errors": []}

    @api.post("/dry-run", response_model=m.DryRunOut, response_model_exclude_none=True)
    async def dry_run(body: m.DryRunIn) -> dict[str, Any]:
        """Replay samples through the given rules; the transitions and the notifications the route
        would have produced. Nothing is sent; no notifier is built."""
        source = None
        try:
            if body.source is not None:
                source = (body.source.type, resolve_under(body.source.path, roots))
            job = DryRunJob(body.rules, body.samples, source, body.until)
            return await asyncio.wait_for(asyncio.to_thread(job.run), timeout)
        except DryRunError as exc:
            raise ApiError(exc.status, *exc.errors) from None
        except TimeoutError:
            job.cancel.set()  # The worker stops at its next check, in the background.
            raise ApiError(504, f"the dry run took longer than {timeout:g}s") from None


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


def bind(listen: str) -> socket.socket:
    """A listening TCP socket on `listen` (IPv4 or IPv6); raises OSError naming the address."""
    host, port = parse_listen(listen)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise OSError(exc.errno, f"can't listen on {listen}: {exc.strerror or exc}") from None
    sock.setblocking(False)
    return sock


async def serve_api(service: Any, listen: str, **kw: Any) -> None:
    """Serve `create_app(service, **kw)` on `listen` in the running event loop until cancelled.

    The address is bound before this returns control (an OSError says it can't be); `kw` are the
    options of `create_app`.
    """
    sock = bind(listen)
    config = uvicorn.Config(create_app(service, **kw), log_level="warning", lifespan="off")
    server = _Server(config)
    task = asyncio.ensure_future(server.serve(sockets=[sock]))
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        server.should_exit = True
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await task
        raise
    finally:
        sock.close()
