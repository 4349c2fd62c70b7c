"""A real Service with the API served by uvicorn on 127.0.0.1, and a receiver that records requests."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from alertd.api import serve_api
from alertd.app import Service

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
async def serving(service: Service, *, start: bool = True, **kw: Any) -> AsyncIterator[httpx.AsyncClient]:
    """Run `service` (unless start=False) and its API on a free port; yield a client for it."""
    run = asyncio.create_task(service.run()) if start else None
    if run is not None:
        await wait_for(lambda: service.ready or run.done(), what="service ready")
    port = free_port()
    api = asyncio.create_task(serve_api(service, f"127.0.0.1:{port}", **kw))
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
