"""Helpers of the textlog tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from alertd.model import Sample
from alertd.sources.config import TextLogConfig
from alertd.sources.textlog import TextLogSource

S = TypeVar("S")
Closing = Callable[[S], S]
"""The `closing` fixture (tests/conftest.py), for a test's annotation: `closing: Closing[TextLogSource]`."""


def source(path: str | Path, **kw: object) -> TextLogSource:
    """A textlog source named `log` on `path`."""
    return TextLogSource(TextLogConfig.model_validate({"type": "textlog", "name": "log", "path": str(path), **kw}))


def by_metric(samples: list[Sample], metric: str) -> list[tuple[int | None, float]]:
    """(step, value) of one metric's samples, in order."""
    return [(s.step, s.value) for s in samples if s.series.metric == metric]
