"""Running the service: `alertd run` (the process, its signals, the HTTP API beside it) and the API's token."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Sequence

from alertd.dispatch.outbox import StateDirError
from alertd.errors import ConfigError
from alertd.logs import setup_logging
from alertd.schema.secretfiles import read_secret_file
from alertd.service.engine import log
from alertd.service.service import Service
from alertd.threads import DaemonExecutor


def run_service(
    paths: Sequence[str], *, listen: str | None = None, state_dir: str | None = None, log_format: str = "auto"
) -> int:
    """`alertd run`: run until SIGINT or SIGTERM; 0 on a clean stop, 1 on a bad rules file."""
    setup_logging(log_format)
    if state_dir:
        os.environ["ALERTD_STATE_DIR"] = state_dir
    if (why := token_problem(listen)) is not None:
        log.error("%s", why)
        return 1
    try:
        service = Service(paths, freeze_heap=True)
    except ConfigError as exc:
        for problem in exc.problems:
            log.error("%s", problem)
        return 1
    except StateDirError as exc:
        log.error("%s", exc)
        return 1
    return asyncio.run(serve(service, listen))


async def serve(service: Service, listen: str | None, handle_signals: bool = True) -> int:
    loop = asyncio.get_running_loop()
    loop.set_default_executor(DaemonExecutor())
    if handle_signals:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, service.stop)
        loop.add_signal_handler(signal.SIGHUP, service.reload_later)
    api = None
    if listen:
        from alertd.api import serve_api
        from alertd.api.hosts import ENV as HOSTS_ENV
        from alertd.api.hosts import split_hosts

        roots = [r for r in os.environ.get("ALERTD_DRY_RUN_ROOTS", "").split(os.pathsep) if r]
        try:
            token = api_token()
        except ApiTokenError as exc:  # checked at start; the file went since
            log.error("%s: the HTTP API is not served; alertd stops", exc)
            return 1
        hosts = split_hosts(os.environ.get(HOSTS_ENV, ""))
        api = asyncio.create_task(serve_api(service, listen, token=token, dry_run_roots=roots, api_hosts=hosts))
        api.add_done_callback(lambda task: _api_ended(task, service))
    try:
        await service.run()
    finally:
        if api is not None:
            api.cancel()
            with contextlib.suppress(asyncio.CancelledError, OSError):
                await api
    return service.exit_code


class ApiTokenError(ValueError):
    """The API's token is asked for but can't be had: alertd does not start (one line naming the file)."""


def api_token() -> str | None:
    """The API's bearer token: ALERTD_API_TOKEN, else the content of the file ALERTD_API_TOKEN_FILE names; None
    when neither is set. A file that can't be read or holds only blanks, or an ALERTD_API_TOKEN set to nothing
    but blanks, is an ApiTokenError naming it (never an API without authentication)."""
    token = os.environ.get("ALERTD_API_TOKEN")
    path = os.environ.get("ALERTD_API_TOKEN_FILE")
    if token is not None and token.strip():
        return token.strip()
    if path:
        try:
            text = read_secret_file(path, "ALERTD_API_TOKEN_FILE").strip()
        except ValueError as exc:
            raise ApiTokenError(f"the API token: {exc}") from None
        if not text:
            raise ApiTokenError(f"the API token: ALERTD_API_TOKEN_FILE: {path} holds only blanks")
        return text
    if token is not None:
        raise ApiTokenError("the API token: ALERTD_API_TOKEN is set but empty")
    return None


def token_problem(listen: str | None) -> str | None:
    """Why the API can't be served (its token can't be had), or None; nothing is asked without `listen`."""
    if not listen:
        return None
    try:
        api_token()
    except ApiTokenError as exc:
        return f"{exc}: alertd does not start"
    return None


def _api_ended(task: asyncio.Task[None], service: Service) -> None:
    if task.cancelled() or task.exception() is None:
        return
    log.error("the HTTP API stopped: %s", task.exception())
    service.stop()
