"""A real Service with the API served by uvicorn on 127.0.0.1, a receiver that records requests, and alertd
as a real process serving its API."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from alertd.api import serve_api
from alertd.api.view import ServiceView
from alertd.service import Service

HOOK_TOKEN = "tok-SECRET-7f3a9c"
"""A secret in the webhook URL of the rules file: no response may contain it."""

RULES = """\
sources:
  - {{type: samples, name: runs, path: "{samples}", interval: 0.2}}
notifiers:
  console: {{type: log}}
  hook: {{type: webhook, url: "http://127.0.0.1:{hook_port}/hook?token={token}"}}
route:
  receivers: [console]
  group_wait: 0s
rules:
  - name: loss_nan
    metric: train/loss
    condition: nonfinite
    severity: critical
    annotations: {{summary: "loss is {{{{ value }}}}"}}
  - name: loss_high
    metric: "train/*"
    condition: "> 100"
    labels: {{team: ml}}
{extra}"""


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def write_rules(path: Path, samples: Path, hook_port: int = 9, extra: str = "") -> Path:
    """The test rules file: a samples source, a log and a webhook notifier (with a secret URL), two rules."""
    path.write_text(RULES.format(samples=samples, hook_port=hook_port, token=HOOK_TOKEN, extra=extra))
    return path


def sample_line(metric: str, value: float | str, step: int, t: float | None = None, **labels: str) -> str:
    """One line of a samples file."""
    obj = {"metric": metric, "labels": labels, "time": time.time() if t is None else t, "step": step, "value": value}
    return json.dumps(obj) + "\n"


@dataclass
class Env:
    """Paths of one test's service."""

    rules: Path
    samples: Path
    state: Path


def make_env(tmp: Path, hook_port: int = 9) -> Env:
    """Rules file, samples file (empty) and state directory under `tmp`."""
    samples = tmp / "samples.jsonl"
    samples.write_text("")
    return Env(write_rules(tmp / "rules.yaml", samples, hook_port), samples, tmp / "state")


async def wait_for(cond: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    """Poll `cond` until it holds; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


@contextlib.asynccontextmanager
async def serving_api(view: ServiceView, **kw: Any) -> AsyncIterator[httpx.AsyncClient]:
    """Serve the API over `view` (a Service, or a fake of `ServiceView`) on a free port; yield a client for it."""
    port = free_port()
    api = asyncio.create_task(serve_api(view, f"127.0.0.1:{port}", **kw))
    client = httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30)
    try:
        for _ in range(500):
            with contextlib.suppress(httpx.TransportError):
                await client.get("/healthz")
                break
            assert not api.done(), api
            await asyncio.sleep(0.02)
        yield client
    finally:
        await client.aclose()
        api.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await api


@contextlib.asynccontextmanager
async def serving(service: Service, *, start: bool = True, **kw: Any) -> AsyncIterator[httpx.AsyncClient]:
    """Run `service` (unless start=False) and its API on a free port; yield a client for it."""
    run = asyncio.create_task(service.run()) if start else None
    if run is not None:
        await wait_for(lambda: service.ready or run.done(), what="service ready")
    try:
        async with serving_api(service, **kw) as client:
            yield client
    finally:
        if run is not None:
            service.stop()
            await run
        else:
            service.outbox.close()
        service.silences.close()


@dataclass
class Receiver:
    """An HTTP server on 127.0.0.1 that records every request it gets."""

    requests: list[tuple[str, bytes]] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None

    @property
    def port(self) -> int:
        """Its port."""
        assert self.server is not None
        return self.server.server_address[1]

    def __enter__(self) -> Receiver:
        seen = self.requests

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                seen.append((self.path, body))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.shutdown()
        self.server.server_close()


class Served:
    """`python -m alertd --rules FILE --listen 127.0.0.1:PORT` as a real process, its log in a file; with
    `nofile`, its limit on open files (RLIMIT_NOFILE) is lowered before it starts."""

    def __init__(self, tmp: Path, rules: str, *, env: dict[str, str] | None = None, nofile: int | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        limits = httpx.Limits(max_connections=50, max_keepalive_connections=0)
        self.client = httpx.Client(base_url=self.url, limits=limits)
        """One client for every request of the test (none pays for a new client and its TLS context), a new
        connection for each (as a health checker opens one: alertd may close idle ones when it has many)."""
        rules_path = tmp / "served-rules.yaml"
        rules_path.write_text(rules)
        self.log_path = tmp / f"alertd-{time.monotonic_ns()}.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()

        def lower_nofile() -> None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

        argv = [sys.executable, "-m", "alertd", "--rules", str(rules_path), "--state-dir", str(tmp / "state")]
        self.proc = subprocess.Popen(
            [*argv, "--log-format", "json", "--listen", f"127.0.0.1:{self.port}"],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            preexec_fn=lower_nofile if nofile is not None else None,
        )
        self.wait(lambda: self.get("/readyz").status_code == 200, "alertd to be ready", 60)

    def get(self, path: str, timeout: float = 5.0) -> httpx.Response:
        """GET `path`; a connection that fails gives a response with status 0."""
        try:
            return self.client.get(path, timeout=timeout)
        except httpx.HTTPError as exc:
            return httpx.Response(0, text=f"{type(exc).__name__}: {exc}")

    def logs(self) -> str:
        """Everything alertd printed so far."""
        return self.log_path.read_text(errors="replace")

    def wait(self, cond: Callable[[], Any], what: str, timeout: float = 20.0) -> Any:
        """Poll `cond` until it is truthy; fail with the logs if it never is, or if alertd exits."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = cond()
            if value:
                return value
            if self.proc.poll() is not None:
                raise AssertionError(f"alertd exited ({self.proc.returncode}) waiting for {what}:\n{self.logs()}")
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {what}:\n{self.logs()[-5000:]}")

    def workers(self) -> list[int]:
        """The process ids of alertd's dry-run workers."""
        out = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                with contextlib.suppress(OSError):
                    stat = Path(f"/proc/{entry}/stat").read_text()
                    ppid = int(stat.rsplit(")", 1)[1].split()[1])
                    if ppid == self.proc.pid and b"alertd.api.worker" in Path(f"/proc/{entry}/cmdline").read_bytes():
                        out.append(int(entry))
        return out

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> int:
        """Send `sig` and wait for the exit status."""
        try:
            if self.proc.poll() is None:
                self.proc.send_signal(sig)
            return self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self._log.close()
            self.client.close()

    def __enter__(self) -> Served:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def alive(pid: int) -> bool:
    """Whether process `pid` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
