"""Helpers for the csv source tests: sources over real files and an exactly-once ledger of what they read."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from types import SimpleNamespace

import pytest

from alertd.model import Sample
from alertd.sources.config import CsvConfig
from alertd.sources.csvfile import CsvSource

NOW = 1_700_000_000.0

Triple = tuple[str, int | None, str]
"""(metric, step, value as repr): NaN compares equal to NaN this way."""


def make_source(path: Path | str, name: str = "pl", step_column: str = "step") -> CsvSource:
    """A csv source over `path` (a file or a glob)."""
    return CsvSource(CsvConfig(type="csv", name=name, path=str(path), step_column=step_column))


def triple(metric: str, step: int | None, value: float) -> Triple:
    """One expected reading."""
    return (metric, step, "nan" if math.isnan(value) else repr(float(value)))


def triples(samples: Iterable[Sample]) -> Counter[Triple]:
    """What `samples` hold, counted (a duplicate shows as a count of 2)."""
    return Counter(triple(s.series.metric, s.step, s.value) for s in samples)


def expected(rows: Iterable[tuple[int, dict[str, float]]]) -> Counter[Triple]:
    """The readings of rows logged with `log_metrics(metrics, step=step)`."""
    return Counter(triple(k, step, v) for step, metrics in rows for k, v in metrics.items())


def overwrite(path: Path, data: bytes) -> None:
    """Replace the file's content in place (same inode), as `open(path, "w")` and a write do."""
    with open(path, "r+b") as f:
        f.truncate(0)
        f.write(data)


@pytest.fixture
def kit(closing: Callable[[CsvSource], CsvSource]) -> SimpleNamespace:
    """The helpers above, for the tests of this folder; the sources `kit.make_source` made are closed at the end."""

    def closed_source(path: Path | str, name: str = "pl", step_column: str = "step") -> CsvSource:
        return closing(make_source(path, name, step_column))

    return SimpleNamespace(
        NOW=NOW, make_source=closed_source, triple=triple, triples=triples, expected=expected, overwrite=overwrite
    )
