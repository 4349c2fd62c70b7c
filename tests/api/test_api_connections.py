"""Connections that misbehave: slow request heads, more connections than file descriptors, bodies sent
to be refused. Against alertd as a real process where the finding was made on one."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
import socket
import threading
import time
from pathlib import Path

import pytest
from api_helpers import Served, make_env, serving

from alertd.api.server import HEAD_TIMEOUT, LINGER, AcceptErrors
from alertd.service import Service

RULES = """\
sources:
  - {{type: samples, name: runs, path: "{samples}", interval: 0.2}}
rules:
  - {{name: loss_nan, metric: train/loss, condition: nonfinite}}
"""


def served(tmp: Path, nofile: int | None = None) -> Served:
    samples = tmp / "samples.jsonl"
    samples.write_text("")
    return Served(tmp, RULES.format(samples=samples), nofile=nofile)


def connect(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.setblocking(False)
    return s


def closed_by_server(s: socket.socket) -> bytes | None:
    """What the server sent before it closed `s`, or None while it is open."""
    data = b""
    try:
        while chunk := s.recv(4096):
            data += chunk
    except (TimeoutError, BlockingIOError):
        return None
    except OSError:
        return data or b"<reset>"
    return data or b"<closed>"


def test_slow_request_heads_are_cut_off_and_healthz_keeps_answering(tmp_path: Path) -> None:
    # 400 open files: room for ~136 connections, so 200 slow clients also meet the connection cap.
    with served(tmp_path, nofile=400) as alertd:
        started = time.monotonic()
        silent = connect(alertd.port)  # connects, never sends a byte
        slow = [connect(alertd.port) for _ in range(200)]
        for s in slow:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        ended: dict[int, float] = {}
        answers: dict[int, bytes] = {}
        worst = 0.0
        while time.monotonic() - started < HEAD_TIMEOUT + 3 and len(ended) < len(slow) + 1:
            for i, s in enumerate([*slow, silent]):
                if i in ended:
                    continue
                with contextlib.suppress(OSError):
                    if s is not silent:
                        s.send(b"a")  # one byte of a header that never ends
                got = closed_by_server(s)
                if got is not None:
                    ended[i], answers[i] = time.monotonic() - started, got
            t = time.monotonic()
            r = alertd.get("/healthz", timeout=1.0)
            worst = max(worst, time.monotonic() - t)
            assert r.status_code == 200, r.text
            time.sleep(0.3)
        assert len(ended) == len(slow) + 1, f"{len(slow) + 1 - len(ended)} slow connections are still open"
        assert max(ended.values()) < HEAD_TIMEOUT + 3
        assert worst < 1.0
        # Those that reached the deadline (not evicted earlier for newer connections) were told why.
        timed_out = [i for i, t in ended.items() if t >= HEAD_TIMEOUT - 0.5]
        assert any(answers[i].startswith(b"HTTP/1.1 408") for i in timed_out), answers
        for s in [*slow, silent]:
            s.close()
        # A kept-alive connection that starts its next head and never finishes it is cut off as well.
        keep = connect(alertd.port)
        keep.setblocking(True)
        keep.settimeout(5)
        keep.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        data = b""
        while not data.endswith(b'{"status":"ok"}'):
            data += keep.recv(4096)
        assert data.startswith(b"HTTP/1.1 200")
        keep.sendall(b"GET /healthz HTTP/1.1\r\n")
        t = time.monotonic()
        keep.settimeout(HEAD_TIMEOUT + 3)
        assert keep.recv(4096).startswith(b"HTTP/1.1 408")
        assert HEAD_TIMEOUT - 0.5 < time.monotonic() - t < HEAD_TIMEOUT + 3
        keep.close()
        assert alertd.get("/healthz").status_code == 200
        assert alertd.stop() == 0


@pytest.mark.parametrize("nofile", [256, 40])  # 40: so few that accept() itself fails now and then
def test_more_connections_than_file_descriptors_keep_the_log_small(tmp_path: Path, nofile: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 2000 <= hard or hard == resource.RLIM_INFINITY:
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 2000), hard))
    flood_size = min(1500, resource.getrlimit(resource.RLIMIT_NOFILE)[0] - 200)
    assert flood_size > 600, "the test needs ~1000 open files"
    with served(tmp_path, nofile=nofile) as alertd:
        size_before = alertd.log_path.stat().st_size
        socks: list[socket.socket] = []
        stop = threading.Event()

        def flood() -> None:  # up to 1500 connections, ~6 times alertd's file limit, that send nothing
            for _ in range(flood_size):
                if stop.is_set():
                    return
                s = socket.socket()
                s.setblocking(False)
                with contextlib.suppress(BlockingIOError, OSError):
                    s.connect(("127.0.0.1", alertd.port))
                socks.append(s)

        thread = threading.Thread(target=flood)
        thread.start()
        try:
            time.sleep(6)
            assert alertd.proc.poll() is None
        finally:
            stop.set()
            thread.join()
        log = alertd.logs()[size_before:]
        assert len(log) < 5000, log[:3000]
        assert log.count("socket.accept()") == 0 and log.count("Traceback") == 0, log[:3000]
        assert log.count("could not accept a connection") <= 1, log[:3000]  # at most one line a minute
        for s in socks:
            s.close()
        alertd.wait(lambda: alertd.get("/healthz", timeout=1.0).status_code == 200, "/healthz to answer", 15)
        t = time.monotonic()
        assert alertd.get("/healthz", timeout=1.0).status_code == 200
        assert time.monotonic() - t < 1.0
        assert alertd.get("/readyz").status_code == 200
        assert alertd.stop() == 0


HEAD = (
    "POST /api/v1/dry-run HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n{}Content-Length: {}\r\n\r\n"
)


def response_of(s: socket.socket, timeout: float = 2.0) -> bytes:
    """The head and (Content-Length) body of one response on a blocking socket."""
    s.settimeout(timeout)
    data = b""
    while b"\r\n\r\n" not in data:
        data += s.recv(65536) or b"<eof>"
        assert not data.endswith(b"<eof>"), data
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(int(h.split(b":", 1)[1]) for h in head.split(b"\r\n") if h.lower().startswith(b"content-length:"))
    while len(body) < length:
        body += s.recv(65536)
    return head + b"\r\n\r\n" + body


def test_the_token_and_the_size_are_checked_before_the_body_is_read(tmp_path: Path) -> None:
    samples = tmp_path / "samples.jsonl"
    samples.write_text("")
    with Served(tmp_path, RULES.format(samples=samples), env={"ALERTD_API_TOKEN": "s3cr3t"}) as alertd:
        # No token: 401 at once, though not one byte of the 900 kB body came.
        s = socket.create_connection(("127.0.0.1", alertd.port))
        s.sendall(HEAD.format("", 900_000).encode())
        answer = response_of(s)
        assert answer.startswith(b"HTTP/1.1 401") and b"www-authenticate: Bearer" in answer
        # What the client sends after that is read and dropped for a few seconds at most.
        t = time.monotonic()
        s.settimeout(0.05)
        with contextlib.suppress(ConnectionError):
            while time.monotonic() - t < LINGER + 5:
                s.sendall(b" " * 1000)
                with contextlib.suppress(TimeoutError):
                    if s.recv(100) == b"":
                        break
        assert time.monotonic() - t < LINGER + 3
        s.close()

        # With the token, a Content-Length over the limit is 413 before the body is read.
        auth = "Authorization: Bearer s3cr3t\r\n"
        s = socket.create_connection(("127.0.0.1", alertd.port))
        s.sendall(HEAD.format(auth, 5_000_000).encode())
        answer = response_of(s)
        assert answer.startswith(b"HTTP/1.1 413") and b"larger than 1000000 bytes" in answer
        s.close()

        # A chunked body is cut off as soon as it passes the limit.
        s = socket.create_connection(("127.0.0.1", alertd.port))
        s.sendall(HEAD.replace("Content-Length: {}", "Transfer-Encoding: chunked").format(auth).encode())
        with contextlib.suppress(ConnectionError):
            for _ in range(20):
                s.sendall(b"10000\r\n" + b" " * 0x10000 + b"\r\n")  # 20 x 64 kB, never ended
        assert response_of(s, 5.0).startswith(b"HTTP/1.1 413")
        s.close()

        # The usual client still gets its 401, and its answer with the token.
        r = alertd.client.post("/api/v1/dry-run", json={"rules": "rules: []"})
        assert r.status_code == 401
        r = alertd.client.post(
            "/api/v1/dry-run", json={"rules": "rules: []"}, headers={"Authorization": "Bearer s3cr3t"}
        )
        assert r.status_code == 200, r.text
        assert alertd.stop() == 0


@pytest.mark.anyio
async def test_a_body_that_does_not_come_in_time_is_408(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    service = Service([str(env.rules)], state=env.state)
    async with serving(service, body_timeout=1.0) as client:
        assert client.base_url.port is not None
        s = socket.create_connection(("127.0.0.1", client.base_url.port))
        s.sendall(HEAD.format("", 100).encode() + b'{"rules": ')
        answer = await asyncio.to_thread(response_of, s, 5.0)
        assert answer.startswith(b"HTTP/1.1 408") and b"longer than 1s" in answer
        s.close()
        assert (await client.get("/healthz")).status_code == 200


def test_accept_errors_are_one_line_a_minute_with_a_count() -> None:
    now = [1000.0]
    errors = AcceptErrors(every=60.0, clock=lambda: now[0])
    logger = logging.getLogger("test-accept-errors")
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(self.format(record))

    logger.addHandler(Keep())
    logger.propagate = False
    logger.addFilter(errors)

    def fail() -> None:  # as asyncio's default exception handler logs it
        try:
            raise OSError(24, "Too many open files")
        except OSError as exc:
            logger.error("socket.accept() out of system resource\nsocket: <socket fd=13>", exc_info=exc)

    for _ in range(500):
        fail()
    logger.error("something else")
    now[0] += 59
    fail()
    assert lines == [
        "the API could not accept a connection 1 time(s) (Too many open files); "
        "the next report comes 60s later at the earliest",
        "something else",
    ]
    now[0] += 2
    fail()
    assert lines[-1].startswith("the API could not accept a connection 501 time(s) (Too many open files)")
    fail()
    errors.flush(logger)
    assert lines[-1].startswith("the API could not accept a connection 1 time(s)") and len(lines) == 4
    assert not any("Traceback" in line for line in lines)
