"""Helpers for notifier tests: a real recording HTTP server on 127.0.0.1 and notification builders."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from alertd.clock import FakeClock
from alertd.errors import NotifyError
from alertd.model import Notification, Transition, TransitionKind, make_labels
from alertd.notify.config import WebhookConfig
from alertd.notify.webhook import WebhookNotifier

T0 = 1_780_000_000.0  # 2026-05-28T20:26:40Z


@dataclass
class Recorded:
    """One request the server received."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    at: float = field(default_factory=time.monotonic)
    """When the request arrived (time.monotonic())."""

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def route(self) -> str:
        return self.path.split("?", 1)[0]

    @property
    def query(self) -> str:
        return self.path.split("?", 1)[1] if "?" in self.path else ""


@dataclass
class Answer:
    """What the server answers to one request."""

    status: int = 200
    body: str | bytes = ""
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


class RecordingServer:
    """A real HTTP server on 127.0.0.1 that records every request and answers from a script."""

    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self.script: list[Answer] = []
        self.default = Answer(200, "ok")
        self._stop = threading.Event()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                owner.requests.append(
                    Recorded("POST", self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                )
                answer = owner.script.pop(0) if owner.script else owner.default
                if answer.delay:
                    owner._stop.wait(answer.delay)
                data = answer.body.encode() if isinstance(answer.body, str) else answer.body
                try:
                    self.send_response(answer.status)
                    for k, v in answer.headers.items():
                        self.send_header(k, v)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.02,), daemon=True)
        self._thread.start()

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def answer(self, status: int = 200, body: str | bytes | dict[str, Any] = "", **kw: Any) -> None:
        """Queue the answer to the next request (a dict body is sent as JSON)."""
        if isinstance(body, dict):
            kw.setdefault("headers", {})["Content-Type"] = "application/json"
            body = json.dumps(body)
        self.script.append(Answer(status, body, **kw))

    @property
    def last(self) -> Recorded:
        assert self.requests, "the server received no request"
        return self.requests[-1]

    def close(self) -> None:
        self._stop.set()
        self._httpd.shutdown()
        self._httpd.server_close()


def transition(
    rule: str = "loss_not_finite",
    state: TransitionKind = TransitionKind.FIRING,
    *,
    value: float = float("nan"),
    step: int | None = 250,
    run: str = "exp1",
    metric: str = "train/loss",
    severity: str = "critical",
    time: float = T0 + 30,
    active_at: float | None = T0,
    summary: str | None = "train/loss is NaN at step 250 in exp1",
    extra: dict[str, str] | None = None,
) -> Transition:
    labels = {"metric": metric, "run": run, "source": "tb", **(extra or {})}
    annotations = (("summary", summary),) if summary else ()
    return Transition(
        rule=rule,
        state=state,
        time=time,
        step=step,
        value=value,
        labels=make_labels(labels),
        severity=severity,
        annotations=annotations,
        active_at=active_at,
    )


def notification(*alerts: Transition, receiver: str = "chat", status: str | None = None) -> Notification:
    alerts = alerts or (transition(),)
    if status is None:
        firing = any(a.state in (TransitionKind.FIRING, TransitionKind.PENDING) for a in alerts)
        status = "firing" if firing else "resolved"
    return Notification(
        receiver=receiver,
        group_key='{}:{rule="loss_not_finite", run="exp1"}',
        group_labels=make_labels({"rule": alerts[0].rule, "run": "exp1"}),
        status=status,
        alerts=tuple(alerts),
        key=f"{alerts[0].fingerprint}:{T0:.0f}:{status}",
        created=T0 + 31,
    )


SENT_AT = T0 + 40
"""The clock's time when a test notifier sends (signatures are made at this instant)."""


def webhook(url: str, fmt: str = "generic", **kw: Any) -> WebhookNotifier:
    """A webhook notifier for `url` whose clock stands at SENT_AT."""
    cfg = WebhookConfig.model_validate({"type": "webhook", "format": fmt, "url": url, **kw})
    return WebhookNotifier("chat", cfg, clock=FakeClock(SENT_AT))


async def send(notifier: WebhookNotifier, n: Notification) -> None:
    """Send `n` once and close the notifier."""
    try:
        await notifier.send(n)
    finally:
        await notifier.aclose()


async def send_error(notifier: WebhookNotifier, n: Notification) -> NotifyError:
    """Send `n`, expecting a NotifyError, and return it."""
    try:
        await send(notifier, n)
    except NotifyError as e:
        return e
    raise AssertionError("send() succeeded where a NotifyError was expected")
