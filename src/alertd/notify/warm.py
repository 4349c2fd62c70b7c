"""The imports of a first HTTP request, made before an alert waits for them.

httpx (through httpcore) reaches its async backend through anyio, which imports its asyncio backend, its locks and
its sockets lazily, at the first request: ~20 ms, added to the first notification's latency (a NaN -> webhook took
21-25 ms for the first alert after a start, 4-5 ms for the next ones). `warm_http` makes those imports at start-up.
"""

from __future__ import annotations

import anyio


async def warm_http() -> None:
    """Import what the first request through httpx would (call it on the running event loop)."""
    await anyio.sleep(0)  # the asyncio backend
    anyio.Lock(), anyio.Event(), anyio.Semaphore(1)  # the synchronisation primitives httpcore's pool makes
