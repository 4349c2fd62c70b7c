"""How the API is served: uvicorn's h11 protocol with a deadline on each request's head, a cap on open
connections, a bound on refused bodies, and the event loop's accept errors collapsed into one line a minute.

uvicorn (h11) has no deadline for a request's head: a client that sends its headers a byte at a time,
or never finishes them, holds a connection for ever. Here the head must be complete `HEAD_TIMEOUT`
seconds after the connection is made (or, on a kept-alive connection, after the next head's first
byte); else the client gets 408 and the connection is closed. At most `limit` connections are open at
once (by default half the file descriptors left over from `FD_RESERVE`, so the sources keep theirs):
one more evicts the connection that has waited longest for a head, or, when every connection is busy
with a request, is answered 503 and closed. A body the app refused without reading it (401, 413) is
read and dropped for at most `LINGER` seconds and `max_body` bytes, then the connection is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
import time
from collections.abc import Callable
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

HEAD_TIMEOUT = 10.0
"""Seconds a client has to send a request's line and headers."""
LINGER = 5.0
"""Seconds a refused request body is read and dropped before the connection is closed."""
FD_RESERVE = 128
"""File descriptors kept for everything but the API's connections (sources, state, dry-run workers)."""
MAX_CONNECTIONS = 1000
"""The most connections open at once, whatever the file descriptor limit."""
MIN_CONNECTIONS = 16
ACCEPT_LOG_EVERY = 60.0
"""Seconds between two log lines about connections the event loop could not accept."""

_TIMED_OUT = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\nconnection: close\r\n"
    b"content-length: 38\r\n\r\nthe request's head took too long: bye\n"
)
_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\nconnection: close\r\n"
    b"retry-after: 1\r\ncontent-length: 30\r\n\r\ntoo many connections: retry\n\r\n"
)


def connection_limit(nofile: int | None = None) -> int:
    """How many connections the API keeps open at most, from the soft limit on open files (RLIMIT_NOFILE)."""
    if nofile is None:
        nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if nofile == resource.RLIM_INFINITY:
            nofile = 1 << 20
    return max(MIN_CONNECTIONS, min(MAX_CONNECTIONS, (nofile - FD_RESERVE) // 2))


class Connections:
    """The open connections of one server: how many, and which wait for a request's head (oldest first)."""

    def __init__(self, limit: int, *, head_timeout: float = HEAD_TIMEOUT, linger: float = LINGER) -> None:
        self.limit = limit
        self.head_timeout = head_timeout
        self.linger = linger
        self.linger_bytes = 1 << 20
        self.open: set[GuardedH11Protocol] = set()
        self.waiting: dict[GuardedH11Protocol, None] = {}
        self.evicted = 0
        self.refused = 0

    def admit(self, conn: GuardedH11Protocol) -> bool:
        """Count `conn` in; over the limit, first evict the connection idle the longest. False: refuse it."""
        if len(self.open) >= self.limit:
            victim = next(iter(self.waiting), None)
            if victim is None:
                self.refused += 1
                return False
            self.evicted += 1
            victim.close_idle(b"")
        self.open.add(conn)
        return True

    def forget(self, conn: GuardedH11Protocol) -> None:
        """`conn` is closed."""
        self.open.discard(conn)
        self.waiting.pop(conn, None)

    def close_all(self) -> None:
        """Abort every connection (the server is stopping and its grace period is over)."""
        for conn in list(self.open):
            conn.transport.abort()
            self.forget(conn)


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline for each request's head and a place under `Connections`' cap."""

    def __init__(
        self,
        config: Any,
        server_state: Any,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
        *,
        guard: Connections,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.guard = guard
        self.head_timer: asyncio.TimerHandle | None = None
        self.linger_timer: asyncio.TimerHandle | None = None
        self.dropped = 0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if not self.guard.admit(self):
            self.connections.discard(self)
            transport.write(_BUSY)
            transport.close()
            return
        self._arm_head()
        self._track()

    def data_received(self, data: bytes) -> None:
        if self.conn.their_state is h11.IDLE and self.head_timer is None:
            self._arm_head()  # The first byte of the next request on a kept-alive connection.
        draining = self.conn.our_state in (h11.DONE, h11.MUST_CLOSE) and self.conn.their_state is h11.SEND_BODY
        if draining:
            self.dropped += len(data)
            if self.dropped > self.guard.linger_bytes:
                self.close_idle(b"")
                return
        super().data_received(data)
        self._track()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._track()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timers()
        self.guard.forget(self)
        super().connection_lost(exc)

    def close_idle(self, farewell: bytes) -> None:
        """Close this connection, after `farewell` (raw bytes of a response) if any."""
        self._cancel_timers()
        self.guard.forget(self)
        if self.transport.is_closing():
            return
        if farewell:
            self.transport.write(farewell)
        with contextlib.suppress(h11.LocalProtocolError):
            self.conn.send(h11.ConnectionClosed())
        self.transport.close()

    def _track(self) -> None:
        """Note whether this connection waits for a head (evictable), reads a refused body, or is busy."""
        if self.transport.is_closing():
            return
        theirs, ours = self.conn.their_state, self.conn.our_state
        if theirs is h11.IDLE:
            self.guard.waiting.setdefault(self, None)
        else:
            self.guard.waiting.pop(self, None)
            if self.head_timer is not None:
                self.head_timer.cancel()
                self.head_timer = None
        refused_body = ours in (h11.DONE, h11.MUST_CLOSE) and theirs is h11.SEND_BODY
        if refused_body and self.linger_timer is None:
            self.linger_timer = self.loop.call_later(self.guard.linger, self.close_idle, b"")
        elif not refused_body and self.linger_timer is not None:
            self.linger_timer.cancel()
            self.linger_timer = None
            self.dropped = 0

    def _arm_head(self) -> None:
        if self.head_timer is not None:
            self.head_timer.cancel()
        self.head_timer = self.loop.call_later(self.guard.head_timeout, self._head_too_slow)

    def _head_too_slow(self) -> None:
        self.head_timer = None
        if self.conn.their_state is h11.IDLE:
            self.close_idle(_TIMED_OUT)

    def _cancel_timers(self) -> None:
        for timer in (self.head_timer, self.linger_timer):
            if timer is not None:
                timer.cancel()
        self.head_timer = self.linger_timer = None


def protocol_factory(guard: Connections) -> Callable[..., GuardedH11Protocol]:
    """What `uvicorn.Config(http=...)` takes: builds a guarded protocol for each connection."""

    def build(
        config: Any, server_state: Any, app_state: dict[str, Any], _loop: asyncio.AbstractEventLoop | None = None
    ) -> GuardedH11Protocol:
        return GuardedH11Protocol(config, server_state, app_state, _loop, guard=guard)

    return build


class AcceptErrors(logging.Filter):
    """On the `asyncio` logger: the event loop's "socket.accept() out of system resource" errors (one, with
    a traceback, for each try while the process is out of file descriptors) become one line at most every
    `every` seconds, with how many there were."""

    PREFIX = "socket.accept() out of system resource"

    def __init__(self, every: float = ACCEPT_LOG_EVERY, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.every = every
        self.clock = clock
        self.last: float | None = None
        self.count = 0
        self.error = ""

    def filter(self, record: logging.LogRecord) -> bool:
        """Let every other record through; rewrite or drop the accept errors."""
        if not str(record.msg).startswith(self.PREFIX):
            return True
        self.count += 1
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            self.error = getattr(exc, "strerror", None) or str(exc)
        now = self.clock()
        if self.last is not None and now - self.last < self.every:
            return False
        self.last = now
        record.msg, record.args = self.message(), ()
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        self.count = 0
        return True

    def message(self) -> str:
        """The line that stands for the errors counted since the last one."""
        return (
            f"the API could not accept a connection {self.count} time(s) ({self.error or 'out of resources'});"
            f" the next report comes {self.every:g}s later at the earliest"
        )

    def flush(self, logger: logging.Logger) -> None:
        """Log the errors counted since the last line, if any."""
        if self.count:
            logger.error("%s", self.message())
            self.count = 0
