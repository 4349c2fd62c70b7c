"""Fixtures for notifier tests."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from notify_helpers import RecordingServer


@pytest.fixture
def server() -> Iterator[RecordingServer]:
    srv = RecordingServer()
    yield srv
    srv.close()


@pytest.fixture
def closed_port() -> int:
    """A port on 127.0.0.1 where nothing listens."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
