"""The HTTP API of the running service (design section 6).

routes   the FastAPI app and its routes (`create_app`), the listening socket and `serve_api`
models   the pydantic request and response models (the OpenAPI schema), RFC 3339 times
dryrun   `POST /api/v1/dry-run`'s job, done in a worker process
worker   the dry-run worker processes: `DryRuns` starts `python -m alertd.api.worker`, bounds and kills them
metrics  `GET /metrics`: the Prometheus collector over the running service (`ALERTS`, `export:`)
prom     `GET /api/v1/alerts` and `/api/v1/rules` in Prometheus' envelopes
server   how connections are served and kept in bounds (uvicorn's h11 protocol, head deadline, cap)
v2       Alertmanager's API v2, the part `amtool` uses
pages    the web pages (overview, run, silences, dry-run) and their two static assets (`static/`)
plots    `GET /api/v1/runs/plot.svg`: a live run drawn from the buffer (alertd.plot)
roots    `GET /api/v1/dry-run/sources`: what a dry run may read under the allowed roots

The names of `routes` below are loaded on first use: a dry-run worker imports `alertd.api.dryrun`
without FastAPI or uvicorn.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from alertd.api.routes import (
        BODY_TIMEOUT,
        ERRORS,
        SHUTDOWN_GRACE,
        WHEN,
        ApiError,
        ASGIApp,
        Gate,
        Message,
        Scope,
        bind,
        create_app,
        parse_listen,
        series_id,
        serve_api,
    )

__all__ = [
    "BODY_TIMEOUT",
    "ERRORS",
    "SHUTDOWN_GRACE",
    "WHEN",
    "ASGIApp",
    "ApiError",
    "Gate",
    "Message",
    "Scope",
    "bind",
    "create_app",
    "parse_listen",
    "series_id",
    "serve_api",
]


def __getattr__(name: str) -> Any:
    """`from alertd.api import serve_api` (or any name of `__all__`): the name from `alertd.api.routes`."""
    if name in __all__:
        from alertd.api import routes

        value = getattr(routes, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
