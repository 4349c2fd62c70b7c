"""Helpers of the textlog tests."""

from __future__ import annotations

from pathlib import Path

from alertd.model import Sample
from alertd.sources.config import TextLogConfig
from alertd.sources.textlog import TextLogSource


def source(path: str | Path, **kw: object) -> TextLogSource:
    """A textlog source named `log` on `path`."""
    return TextLogSource(TextLogConfig.model_validate({"type": "textlog", "name": "log", "path": str(path), **kw}))


def by_metric(samples: list[Sample], metric: str) -> list[tuple[int | None, float]]:
    """(step, value) of one metric's samples, in order."""
    return [(s.step, s.value) for s in samples if s.series.metric == metric]
