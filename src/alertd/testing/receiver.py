"""A real HTTP receiver on 127.0.0.1 that records every POST and answers as scripted.

For tests and benchmarks of webhooks: `Receiver().url` is a URL to point a notifier at.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (yet)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Recorder:
    """What the receiver answers next, and what it got."""

    responses: list[tuple[int, dict[str, str]]] = field(default_factory=list)
    """Scripted answers, used first-in first-out; 200 once they run out (or see `fail_every`)."""
    fail_every: int = 0
    """When no script is left: every `fail_every`-th request is answered 503 (a flapping receiver)."""
    received: list[tuple[str, int]] = field(default_factory=list)
    """(idempotency key, status answered) of every request."""
    bodies: list[dict[str, object]] = field(default_factory=list)
    arrivals: list[float] = field(default_factory=list)
    """time.monotonic() at which each of `bodies` arrived."""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def delivered(self) -> Counter[str]:
        """Requests answered 2xx, by idempotency key."""
        with self.lock:
            return Counter(k for k, status in self.received if 200 <= status < 300)

    def keys_by_content(self) -> dict[str, set[str]]:
        """The idempotency keys each distinct notification (its status and alerts) was delivered under."""
        out: dict[str, set[str]] = {}
        with self.lock:
            for (key, _), body in zip([r for r in self.received if 200 <= r[1] < 300], self.bodies, strict=True):
                out.setdefault(content_of(body), set()).add(key)
        return out

    def requests(self) -> int:
        """How many requests arrived."""
        with self.lock:
            return len(self.received)


def content_of(body: dict[str, object]) -> str:
    """What a generic-format notification tells, without when it was sent: status and each alert's
    labels, status, start and end."""
    alerts = body.get("alerts", [])
    assert isinstance(alerts, list)
    parts = sorted(
        json.dumps([a.get("labels"), a.get("status"), a.get("startsAt"), a.get("endsAt")], sort_keys=True)
        for a in alerts
    )
    return json.dumps([body.get("status"), parts])


class Receiver:
    """A threaded HTTP server on 127.0.0.1 that records each POST and answers as scripted."""

    def __init__(self, port: int = 0, recorder: Recorder | None = None) -> None:
        self.recorder = recorder or Recorder()
        rec = self.recorder

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                key = self.headers.get("Idempotency-Key", "")
                with rec.lock:
                    flap = rec.fail_every and (len(rec.received) + 1) % rec.fail_every == 0
                    status, headers = rec.responses.pop(0) if rec.responses else (503 if flap else 200, {})
                    rec.received.append((key, status))
                    if 200 <= status < 300:
                        rec.bodies.append(json.loads(body))
                        rec.arrivals.append(time.monotonic())
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = int(self.server.server_address[1])
        self.url = f"http://127.0.0.1:{self.port}/hook"
        self._thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop listening: later requests get connection refused."""
        self.server.shutdown()
        self.server.server_close()
        self._thread.join()
