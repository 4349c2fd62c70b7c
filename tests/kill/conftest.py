"""Fixtures of the kill tests: real child processes, cleaned up after each test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kill_helpers import Spawner


@pytest.fixture
def spawner(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Spawner]:
    """Starts real child processes and kills whatever is left of them after the test."""
    s = Spawner(tmp_path_factory.mktemp("children"))
    yield s
    s.cleanup()
