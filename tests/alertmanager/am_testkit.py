"""A real Prometheus Alertmanager as a child process, and a recording HTTP server on 127.0.0.1."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from alertd.testing.receiver import free_port

AM_BINARY = os.environ.get("ALERTMANAGER_BIN", "/usr/bin/prometheus-alertmanager")
GROUP_WAIT = 0.2
GROUP_INTERVAL = 1.0


@dataclass
class Recorder:
    """A real HTTP server that records every POST body and answers `status` with `reply` (and `headers`)."""

    status: int = 200
    reply: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    delay_first: float = 0.0
    requests: list[tuple[str, Any]] = field(default_factory=list)
    headers_seen: list[dict[str, str]] = field(default_factory=list)
    port: int = 0
    cond: threading.Condition = field(default_factory=threading.Condition)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_for(self, count: int, timeout: float) -> list[tuple[str, Any]]:
        """Block until `count` requests arrived (or the timeout passed); return them all."""
        with self.cond:
            self.cond.wait_for(lambda: len(self.requests) >= count, timeout)
            return list(self.requests)


def _handler(rec: Recorder) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            with rec.cond:
                first, rec.delay_first = rec.delay_first, 0.0
            time.sleep(first)  # a slow first answer; what arrives meanwhile is recorded before it
            with rec.cond:
                rec.requests.append((self.path, json.loads(raw or b"null")))
                rec.headers_seen.append({k.lower(): v for k, v in self.headers.items()})
                rec.cond.notify_all()
            data = rec.reply.encode()
            self.send_response(rec.status)
            for k, v in rec.headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@contextlib.contextmanager
def recording_server() -> Iterator[Recorder]:
    """A recording HTTP server on 127.0.0.1, stopped on leaving."""
    rec = Recorder()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(rec))
    rec.port = server.server_address[1]
    t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    try:
        yield rec
    finally:
        server.shutdown()
        server.server_close()
        t.join()


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    """A recording HTTP server on 127.0.0.1: Alertmanager's webhook receiver, or a stub answering errors."""
    with recording_server() as rec:
        yield rec


@dataclass
class Alertmanager:
    """A running Alertmanager and the webhook receiver it notifies."""

    url: str
    webhook: Recorder
    verify: ssl.SSLContext | bool = True
    auth: tuple[str, str] | None = None

    def get(self, path: str) -> httpx.Response:
        """GET `path` (below the prefix) with the credentials and CA the test started it with."""
        resp = httpx.get(f"{self.url}{path}", timeout=5, verify=self.verify, auth=self.auth)
        resp.raise_for_status()
        return resp

    def alerts(self) -> list[dict[str, Any]]:
        """GET /api/v2/alerts: the alerts Alertmanager holds as not resolved."""
        result: list[dict[str, Any]] = self.get("/api/v2/alerts").json()
        return result


CONFIG = """\
route:
  receiver: rec
  group_by: [alertname]
  group_wait: {group_wait_ms}ms
  group_interval: {group_interval_ms}ms
  repeat_interval: 1h
receivers:
  - name: rec
    webhook_configs:
      - url: {webhook}/hook
        send_resolved: true
"""


@pytest.fixture
def alertmanager(tmp_path: Path, recorder: Recorder) -> Iterator[Alertmanager]:
    """Starts Debian's prometheus-alertmanager on a free port (no clustering) and stops it after the test."""
    ms = {"group_wait_ms": round(GROUP_WAIT * 1000), "group_interval_ms": round(GROUP_INTERVAL * 1000)}
    with running_alertmanager(tmp_path, recorder, CONFIG.format(webhook=recorder.url, **ms)) as am:
        yield am


def am_binary() -> str:
    """Debian's prometheus-alertmanager (or ALERTMANAGER_BIN); the test fails with the install line if missing."""
    binary = shutil.which(AM_BINARY) or shutil.which("alertmanager")
    if binary is None:
        pytest.fail(
            f"Alertmanager binary {AM_BINARY} not found: install it with "
            "`apt-get install prometheus-alertmanager` (or set ALERTMANAGER_BIN)",
            pytrace=False,
        )
    return binary


@contextlib.contextmanager
def running_alertmanager(
    tmp_path: Path,
    recorder: Recorder,
    config: str,
    *args: str,
    scheme: str = "http",
    prefix: str = "",
    verify: ssl.SSLContext | bool = True,
    auth: tuple[str, str] | None = None,
) -> Iterator[Alertmanager]:
    """Debian's prometheus-alertmanager with this configuration (and extra command-line `args`), alone (no
    cluster). `scheme`, `prefix`, `verify` and `auth`: how it is served (`--web.config.file`,
    `--web.external-url` in `args`), for the readiness check and `Alertmanager.get`."""
    cfg = tmp_path / "alertmanager.yml"
    cfg.write_text(config)
    port = free_port()
    argv = [f"--config.file={cfg}", f"--storage.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=", "--log.level=warn", *args]  # fmt: skip
    am = Alertmanager(f"{scheme}://127.0.0.1:{port}{prefix}", recorder, verify, auth)
    with alertmanager_process(argv, tmp_path / "alertmanager.log", am):
        yield am


@contextlib.contextmanager
def alertmanager_process(argv: list[str], log_path: Path, am: Alertmanager) -> Iterator[subprocess.Popen[bytes]]:
    """prometheus-alertmanager with exactly these arguments, ready (`/-/ready` answers 200 at `am.url`) on
    entering, stopped on leaving."""
    with log_path.open("wb") as log:
        proc = subprocess.Popen([am_binary(), *argv], stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait_ready(am, proc, log_path)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_ready(am: Alertmanager, proc: subprocess.Popen[bytes], log_path: Path) -> None:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"alertmanager exited with {proc.returncode}:\n{log_path.read_text()}", pytrace=False)
        try:
            if httpx.get(f"{am.url}/-/ready", timeout=1, verify=am.verify, auth=am.auth).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    pytest.fail(f"alertmanager not ready after 15 s:\n{log_path.read_text()}", pytrace=False)
