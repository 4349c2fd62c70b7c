"""Fixtures shared by every test package."""

from __future__ import annotations

import pytest


@pytest.fixture
def anyio_backend() -> str:
    """Async tests (`@pytest.mark.anyio`) run on asyncio, as the service does."""
    return "asyncio"
