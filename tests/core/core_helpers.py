"""Small builders for core tests: rules from YAML text, samples from lists, replay to transitions."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

import yaml

from alertd.buffer import BufferLimits
from alertd.columns import ColumnList, Columns
from alertd.config import RuleConfig
from alertd.dryrun import Replay
from alertd.model import Sample, SeriesKey, make_labels
from alertd.rules import Rule, RuleSet

NAN, INF = math.nan, math.inf

S = TypeVar("S")
Closing = Callable[[S], S]
"""The `closing` fixture (tests/conftest.py), for a test's annotation: `closing: Closing[CsvSource]`."""


def rule(text: str) -> Rule:
    """A rule from the YAML of one `rules:` entry."""
    return RuleConfig.model_validate(yaml.safe_load(text)).build()


def series(metric: str = "loss", **labels: str) -> SeriesKey:
    return SeriesKey(metric, make_labels(labels or {"run": "r1"}))


def samples(key: SeriesKey, values: Sequence[float], *, every: float = 10.0, start: float = 0.0) -> list[Sample]:
    """Values at start, start+every, ...; steps 0, 1, 2, ..."""
    return [Sample(key, start + i * every, i, v) for i, v in enumerate(values)]


def table(
    rules: Iterable[Rule], data: Sequence[Sample], until: float | None = None, limits: BufferLimits | None = None
) -> list[tuple[float, str, str]]:
    """(time, rule, state) of every transition, feeding the samples one by one."""
    replay = Replay(RuleSet(list(rules)), limits or BufferLimits())
    out = []
    for s in sorted(data, key=lambda x: x.time):
        out += replay.feed([s]).transitions
    if until is not None:
        out += replay.advance(until).transitions
    return [(t.time, t.rule, t.state.value) for t in out]


def noted_list(samples: list[Sample]) -> ColumnList:
    """`samples` in a `ColumnList` told their columns (where they have them), as a source's bulk decoding tells it."""
    out = ColumnList(samples)
    whole = Columns.of(samples)
    if whole is not None and whole.steps is not None:
        out.note(0, whole.ids, whole.times, whole.steps, whole.values)
    return out
