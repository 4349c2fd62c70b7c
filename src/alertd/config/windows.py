"""The rules file's aggregates over a window: `{avg: {over: 20 samples}, op: ">", value: 3}` (and min, max, sum,
count, stddev, quantile; with `baseline` and `ratio`) -> the core's `WindowAggregate` (`rules/windows.py`), or a
ValueError saying what is accepted; and the windows' spans and numbers, which the other conditions use too."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from pydantic import Field

from alertd.durations import parse_duration
from alertd.rules.conditions import AGGREGATES, OPS, Span, WindowAggregate
from alertd.schema.types import Strict


def window_span(text: Any, what: str) -> Span:
    """`20 samples` (or a bare count) or a duration above zero (`5m`)."""
    if isinstance(text, int) and not isinstance(text, bool):
        if text >= 1:
            return Span(samples=text)
    elif isinstance(text, str):
        m = re.fullmatch(r"\s*(\d+)\s*samples?\s*", text)
        if m and int(m.group(1)) >= 1:
            return Span(samples=int(m.group(1)))
        if not m:
            try:
                seconds = parse_duration(text)
            except ValueError:
                seconds = 0.0
            if seconds > 0 and math.isfinite(seconds):
                return Span(seconds=seconds)
    raise ValueError(f"{what} must be a number of samples (`20 samples`) or a duration (`5m`), got {text!r}")


class WindowSpec(Strict):
    """The mapping under an aggregate: `{over: 20 samples, baseline: 200 samples, q: 0.9, min_samples: 1}`."""

    over: str | int
    baseline: str | int | None = None
    q: float | None = Field(default=None, ge=0, le=1)
    min_samples: int | None = Field(default=None, ge=0)


AGGREGATE_EXAMPLE = "{avg: {over: 20 samples}, op: '>', value: 3}"
"""How an aggregate over a window is written, for messages."""


def window_condition(value: Mapping[str, Any]) -> WindowAggregate:
    """`{avg: {over: ...}, op: ">", value: 3}` or `{avg: {over: ..., baseline: ...}, op: ">", ratio: 1.5}`."""
    keys = set(value)
    kinds = sorted(keys & set(AGGREGATES))
    if len(kinds) != 1:
        raise ValueError(f"one aggregate per condition, got {kinds}")
    (kind,) = kinds
    extra = keys - {kind, "op", "value", "ratio"}
    if extra:
        raise ValueError(f"an aggregate condition has {kind}, op and value (or ratio); unknown {sorted(extra)}")
    if "op" not in value:
        raise ValueError(
            f"{kind} needs op (one of {', '.join(OPS)}) and value, as {{{kind}: {{...}}, op: '>', value: 3}}"
        )
    if value["op"] not in OPS:
        raise ValueError(f"op must be one of {', '.join(OPS)}, got {value['op']!r}")
    spec = WindowSpec.model_validate(value[kind] if value[kind] is not None else {})
    over = window_span(spec.over, "over")
    baseline = window_span(spec.baseline, "baseline") if spec.baseline is not None else None
    if "value" in value and "ratio" in value:
        raise ValueError("give value (compare the aggregate) or ratio (compare with the baseline window), not both")
    if baseline is None and "value" not in value:
        raise ValueError(
            f"ratio compares with an earlier window: add baseline to {kind} (`baseline: 200 samples`), or give value"
        )
    if baseline is not None and "ratio" not in value:
        raise ValueError(f"with a baseline window, {kind} is compared by ratio (`ratio: 1.5`), not value")
    if baseline is not None and (baseline.samples is None) != (over.samples is None):
        raise ValueError("over and baseline are both numbers of samples or both durations")
    if kind == "quantile" and spec.q is None:
        raise ValueError("quantile needs q, between 0 and 1 (`q: 0.9`)")
    if kind != "quantile" and spec.q is not None:
        raise ValueError(f"q is for quantile, not {kind}")
    min_samples = spec.min_samples if spec.min_samples is not None else (0 if kind == "count" else 1)
    for span in (over, baseline):
        if span is not None and span.samples is not None and min_samples > span.samples:
            raise ValueError(f"min_samples ({min_samples}) is more than the window's {span.samples} samples")
    number = number_value(value["ratio"] if baseline is not None else value["value"], "ratio" if baseline else "value")
    q = 0.5 if spec.q is None else spec.q
    if baseline is not None:
        return WindowAggregate(kind, over, value["op"], ratio=number, baseline=baseline, q=q, min_samples=min_samples)
    return WindowAggregate(kind, over, value["op"], value=number, q=q, min_samples=min_samples)


def number_value(value: Any, what: str, hint: str = "") -> float:
    """A number of the rules file (±Inf allowed); NaN is refused, since nothing compares true with it."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"{what} must be a number, got {value!r}")
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"{what} must be a number, got {value!r}") from None
    if math.isnan(number):
        raise ValueError(f"{what} can't be NaN (nothing compares true with NaN{hint})")
    return number
