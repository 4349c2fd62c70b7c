"""The `condition:` of a rule: a word (`nonfinite`), a comparison (`> 100`) or a mapping (`{spike: {...}}`,
`{op, value}`, an aggregate over a window) -> a core condition (`alertd.rules.conditions`), or a ValueError saying
what is accepted."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, Literal

from pydantic import Field

from alertd.config.hints import did_you_mean
from alertd.config.types import Strict
from alertd.config.windows import PlateauSpec, ZScoreSpec, is_window_condition, number_value, window_condition
from alertd.durations import parse_duration
from alertd.rules.conditions import AGGREGATES, OPS, Absent, Condition, Nonfinite, Spike, Threshold, Trend
from alertd.rules.expr import parse_expr

_THRESHOLD = re.compile(r"^\s*(>=|<=|==|!=|>|<)\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?[Ii]nf)\s*$")


class SpikeSpec(Strict):
    """`{spike: {ratio: 2.0, direction: up, baseline: 50 samples, stat: median}}`."""

    ratio: float = Field(gt=0)
    direction: Literal["up", "down"] = "up"
    baseline: str | int = "50 samples"
    stat: Literal["median", "mean"] = "median"
    min_samples: int | None = Field(default=None, ge=1)

    def build(self) -> Spike:
        """The core condition."""
        samples, seconds = _baseline(self.baseline)
        if self.direction == "up" and self.ratio <= 1:
            raise ValueError("an upward spike needs a ratio above 1 (2.0 = doubles)")
        if self.direction == "down" and self.ratio >= 1:
            raise ValueError("a downward spike needs a ratio below 1 (0.5 = halves)")
        default_min = min(5, samples) if samples is not None else 5
        return Spike(self.ratio, self.direction, samples, seconds, self.stat, self.min_samples or default_min)


def _baseline(text: str | int) -> tuple[int | None, float | None]:
    if isinstance(text, int):
        return (text, None) if text >= 1 else _bad_baseline(text)
    m = re.fullmatch(r"\s*(\d+)\s*samples?\s*", text)
    if m:
        return (int(m.group(1)), None) if int(m.group(1)) >= 1 else _bad_baseline(text)
    try:
        return None, parse_duration(text)
    except ValueError:
        return _bad_baseline(text)


def _bad_baseline(text: object) -> tuple[int | None, float | None]:
    raise ValueError(f"baseline must be a number of samples (`50 samples`) or a duration (`5m`), got {text!r}")


class TrendSpec(Strict):
    """`{increasing: {min_delta: 0.01}}`."""

    min_delta: float = Field(default=0.0, ge=0)


def _absent(spec: Any) -> Condition:
    seconds = parse_duration(spec)
    if seconds <= 0:
        raise ValueError("absent needs a duration above zero, such as 10m")
    return Absent(seconds)


def _trend(kind: Literal["increasing", "decreasing"]) -> Callable[[Any], Condition]:
    return lambda spec: Trend(kind, TrendSpec.model_validate(spec or {}).min_delta)


CONDITION_WORDS: dict[str, Callable[[], Condition]] = {
    "nonfinite": Nonfinite,
    "increasing": lambda: Trend("increasing"),
    "decreasing": lambda: Trend("decreasing"),
}
"""The conditions written as one word (`condition: nonfinite`); a comparison (`> 100`) is the other string form."""

CONDITION_KINDS: dict[str, Callable[[Any], Condition]] = {
    "spike": lambda spec: SpikeSpec.model_validate(spec).build(),
    "absent": _absent,
    "increasing": _trend("increasing"),
    "decreasing": _trend("decreasing"),
    "nonfinite": lambda _: Nonfinite(),
    "expr": parse_expr,  # an ExprError is a ValueError saying where
    "zscore": lambda spec: ZScoreSpec.model_validate(spec if spec is not None else {}).build(),
    "plateau": lambda spec: PlateauSpec.model_validate(spec if spec is not None else {}).build(),
}
"""The conditions written as a one-key mapping (`{spike: {ratio: 2}}`), by key. The aggregates over a window
(`AGGREGATES`, with op and value) and `{op, value}` are the other mappings."""


def condition_kinds() -> list[str]:
    """Every kind of condition the rules file accepts, for messages: the words, the one-key mappings, the
    aggregates over a window, and the comparisons."""
    kinds = dict.fromkeys([*CONDITION_WORDS, *CONDITION_KINDS, *AGGREGATES])
    return [*kinds, "a comparison ('> 100', or {op: '>', value: 100})"]


def _unknown_condition(word: str) -> ValueError:
    known = [*CONDITION_WORDS, *CONDITION_KINDS, *AGGREGATES]
    hint = did_you_mean(word.strip(), known)
    kinds = ", ".join(condition_kinds())
    return ValueError(f"unknown condition {word[:100]!r}{hint} (known: {kinds})")


def parse_condition(value: Any) -> Condition:
    """Turn the `condition:` value into a core condition, or raise ValueError saying what is accepted."""
    if isinstance(value, str):
        word = value.strip()
        if word in CONDITION_WORDS:
            return CONDITION_WORDS[word]()
        m = _THRESHOLD.match(word)
        if m:
            return Threshold(m.group(1), float(m.group(2)))
        raise _unknown_condition(value)
    if isinstance(value, Mapping):
        return _condition_from_mapping(value)
    raise ValueError(f"a condition is a string or a mapping, got {type(value).__name__}")


def _threshold_value(value: Any) -> float:
    """A threshold: a number, or ±Inf; NaN never compares true, so it is refused."""
    return number_value(value, "value", "; use the nonfinite condition")


def _condition_from_mapping(value: Mapping[str, Any]) -> Condition:
    keys = set(value)
    if keys == {"op", "value"}:
        if value["op"] not in OPS:
            raise ValueError(f"op must be one of {', '.join(OPS)}, got {value['op']!r}")
        return Threshold(value["op"], _threshold_value(value["value"]))
    if is_window_condition(keys):
        return window_condition(value)
    if len(keys) != 1:
        raise ValueError(
            f"a condition mapping has one key ({', '.join(CONDITION_KINDS)}), "
            f"an aggregate ({', '.join(AGGREGATES)}) with op and value, or op and value, got {sorted(map(str, keys))}"
        )
    ((kind, spec),) = value.items()
    build = CONDITION_KINDS.get(kind)
    if build is None:
        raise _unknown_condition(str(kind))
    return build(spec)
