"""Fixtures shared by every test package."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest

from alertd.sources.base import Source

S = TypeVar("S", bound=Source)

# A shell's background job (`make test &`, nohup, some CI runners) starts with SIGINT ignored, and a child
# inherits an ignored signal across exec: the trainers the tests start would ignore the SIGINT alertd sends
# them. Give SIGINT its default handler here, so that every process a test starts begins with SIGINT at its
# default disposition, as from a terminal (alertd exec does the same for its child).
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture
def anyio_backend() -> str:
    """Async tests (`@pytest.mark.anyio`) run on asyncio, as the service does."""
    return "asyncio"


@pytest.fixture
def closing() -> Iterator[Callable[[S], S]]:
    """`src = closing(SomeSource(...))`: the source itself, closed (`aclose()`, its open files) when the test ends,
    passed or failed."""
    sources: list[Source] = []

    def keep(source: S) -> S:
        sources.append(source)
        return source

    yield keep
    for source in sources:
        asyncio.run(source.aclose())
