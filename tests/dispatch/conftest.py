"""Fixtures for the delivery tests: a recording HTTP receiver on 127.0.0.1 and a notifier posting to it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from .receiver import HttpTestNotifier, Receiver


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.stop()


@pytest.fixture
async def hook(receiver: Receiver) -> AsyncIterator[HttpTestNotifier]:
    n = HttpTestNotifier("hook", receiver.url)
    yield n
    await n.aclose()
