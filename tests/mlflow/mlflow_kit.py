"""Test helpers of the mlflow source: a real `mlflow server`, a counting reverse proxy, and a few shortcuts.

`MlflowServer` starts the real tracking server (`mlflow server --backend-store-uri sqlite:///...`) on
127.0.0.1 as a subprocess in its own process group, and stops the group. The huey job runner MLflow 3
starts by default (seven more Python processes) is turned off: the tests need none of its jobs.

`Proxy` is a reverse proxy on 127.0.0.1 in front of that server, as nginx often stands in front of
MLflow: it forwards every request unchanged and records its method and path, so a test can count what
a poll asked for. With `token` set it plays the auth proxy (MLflow itself leaves auth to such a proxy,
or to an optional app this environment lacks Flask-WTF for) and answers 401 to any other bearer token;
`fail_next` answers that many requests with 503 and `Retry-After` first.
"""

from __future__ import annotations

import http.client
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from alertd.model import Sample

T0_MS = 1_780_000_000_000
"""Timestamps of the points written, in ms (2026-05-28T20:26:40Z)."""


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class MlflowServer:
    """A real MLflow tracking server over a fresh sqlite database."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / "server.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start it (it takes some seconds to answer: see `wait`)."""
        mlflow_cli = Path(sys.executable).with_name("mlflow")
        cmd = [str(mlflow_cli)] if mlflow_cli.exists() else [sys.executable, "-m", "mlflow"]
        cmd += ["server", "--host", "127.0.0.1", "--port", str(self.port), "--workers", "1"]
        cmd += ["--backend-store-uri", f"sqlite:///{self.workdir / 'mlflow.db'}"]
        cmd += ["--default-artifact-root", str(self.workdir / "artifacts")]
        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", "PYTHONWARNINGS": "ignore"}
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.workdir, start_new_session=True
            )

    def wait(self, timeout: float = 90.0) -> None:
        """Wait until GET /health answers 200."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"mlflow server exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if httpx.get(self.url + "/health", timeout=1.0).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"mlflow server did not answer within {timeout:.0f}s:\n{self.log()}")

    def log(self) -> str:
        """The server's output so far (its tail)."""
        return self.log_path.read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        """Stop the server and the uvicorn worker it started (its process group)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)


class Proxy:
    """A counting (and, with `token`, authenticating) reverse proxy on 127.0.0.1; see the module docstring."""

    def __init__(self, upstream: str, token: str | None = None) -> None:
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.token = token
        self.fail_next = 0
        self.retry_after = "0"
        self.seen: list[tuple[str, str]] = []
        self.lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.httpd.daemon_threads = True
        self.httpd.proxy = self  # type: ignore[attr-defined]
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> Proxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def count(self, endpoint: str, since: int = 0) -> int:
        """Requests to `endpoint` (`metrics/get-history`) from the `since`-th request on."""
        with self.lock:
            return sum(1 for _, path in self.seen[since:] if path.split("?")[0].endswith("/mlflow/" + endpoint))

    def mark(self) -> int:
        """The number of requests so far (for `count(since=...)`)."""
        with self.lock:
            return len(self.seen)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""

    def do_GET(self) -> None:
        self._forward()

    def do_POST(self) -> None:
        self._forward()

    def _reply(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _forward(self) -> None:
        proxy: Proxy = self.server.proxy  # type: ignore[attr-defined]
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        with proxy.lock:
            proxy.seen.append((self.command, self.path))
            fail = proxy.fail_next > 0
            proxy.fail_next -= 1 if fail else 0
        if fail:
            self._reply(503, b"busy", {"Retry-After": proxy.retry_after, "Content-Type": "text/plain"})
            return
        if proxy.token is not None and self.headers.get("Authorization") != f"Bearer {proxy.token}":
            self._reply(401, b"401 Authorization Required", {"Content-Type": "text/plain"})
            return
        skip = {"host", "connection", "authorization", "content-length", "accept-encoding"}
        headers = {k: v for k, v in self.headers.items() if k.lower() not in skip}
        conn = http.client.HTTPConnection(*proxy.upstream, timeout=60)
        try:
            conn.request(self.command, self.path, body, headers)
            resp = conn.getresponse()
            data = resp.read()
        finally:
            conn.close()
        self._reply(resp.status, data, {"Content-Type": resp.getheader("Content-Type") or "application/json"})


def log_points(client: Any, run_id: str, key: str, values: list[float], first_step: int = 0) -> None:
    """Log `values` with MLflow's client at steps first_step, first_step + 1, ...; step s at T0_MS + s seconds."""
    from mlflow.entities import Metric

    metrics = [Metric(key, v, T0_MS + 1000 * (first_step + i), first_step + i) for i, v in enumerate(values)]
    client.log_batch(run_id, metrics=metrics)


def points(samples: Iterable[Sample], metric: str, run_id: str | None = None) -> list[tuple[int | None, float]]:
    """(step, value) of one metric's samples (of one run), in order."""
    return [
        (s.step, s.value)
        for s in samples
        if s.series.metric == metric and (run_id is None or s.series.label("run") == run_id)
    ]


def same(a: list[tuple[int | None, float]], b: list[tuple[int | None, float]]) -> bool:
    """Equal lists of (step, value), NaN equal to NaN."""
    return len(a) == len(b) and all(
        x[0] == y[0] and (x[1] == y[1] or (math.isnan(x[1]) and math.isnan(y[1]))) for x, y in zip(a, b, strict=True)
    )


def ends(samples: Iterable[Sample]) -> dict[tuple[str, str], list[tuple[float, float]]]:
    """(run id, run.finished | run.crashed) -> [(time, value)] of the end samples."""
    out: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for s in samples:
        if s.series.metric in ("run.finished", "run.crashed"):
            out.setdefault((s.series.label("run") or "", s.series.metric), []).append((s.time, s.value))
    return out
