"""Fixtures of the wandb tests: a fake W&B server on 127.0.0.1 and sources pointed at it."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from fake_wandb import API_KEY, FakeWandb


@pytest.fixture
def fake() -> Iterator[FakeWandb]:
    """A running fake W&B server holding project `me/proj` and accepting `API_KEY`."""
    with FakeWandb(API_KEY) as server:
        yield server
