"""Fixtures of the kill tests: real child processes, cleaned up after each test."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "service"))  # service_helpers: alertd as a subprocess

from kill_helpers import Spawner


@pytest.fixture
def spawner(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Spawner]:
    """Starts real child processes and kills whatever is left of them after the test."""
    s = Spawner(tmp_path_factory.mktemp("children"))
    yield s
    s.cleanup()
