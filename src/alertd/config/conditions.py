"""The `condition:` of a rule, one grammar: a registry of pydantic models, one per kind of condition
(`CONDITIONS`), each turning its options into a core condition (`alertd.rules.conditions`).

The forms a rules file writes, all read through the registry:
- a word: `nonfinite`, `increasing`, `decreasing` (a kind with no required option);
- a comparison: `> 100`, or `{op: '>', value: 100}` (the kind `threshold`);
- a one-key mapping: `{spike: {ratio: 2}}`, `{absent: 10m}` (a kind's options, or its one option);
- an aggregate over a window with op and value (or ratio): `{avg: {over: 20 samples}, op: '>', value: 3}`.

A mistake raises `ConditionError` (a ValueError): each problem with its place inside the condition
(`spike.ratio`), which `alertd.config.validate` adds to the rule's place, and for an unknown kind the nearest one.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, ClassVar, Literal, TypeVar

from pydantic import BaseModel, Field, ValidationError, field_validator

from alertd.config.hints import did_you_mean, model_at, unknown_key
from alertd.config.windows import AGGREGATE_EXAMPLE, WindowSpec, number_value, window_condition, window_span
from alertd.durations import parse_duration
from alertd.rules.conditions import (
    AGGREGATES,
    Absent,
    Condition,
    Nonfinite,
    Peers,
    Plateau,
    Spike,
    Threshold,
    Trend,
    ZScore,
)
from alertd.rules.expr import parse_expr
from alertd.schema.types import Strict

Loc = tuple[str | int, ...]


class ConditionError(ValueError):
    """The problems of one condition, each at its place inside it (`()`: the condition itself)."""

    def __init__(self, problems: Sequence[tuple[Loc, str]]) -> None:
        self.problems = list(problems)
        super().__init__("; ".join(f"{_dotted(loc)}: {msg}" if loc else msg for loc, msg in self.problems))


def _dotted(loc: Loc) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else ("." if i else "") + str(p) for i, p in enumerate(loc))


class ConditionSpec(Strict):
    """One kind of condition: its options, checked by pydantic, and `build()`, the core condition."""

    kind: ClassVar[str]
    example: ClassVar[str]
    """How a rules file writes it, for messages and docs."""
    word: ClassVar[bool] = False
    """Written alone as a word (`condition: nonfinite`): every option has a default."""
    scalar: ClassVar[str | None] = None
    """The option a scalar fills (`{absent: 10m}` is `{absent: {after: 10m}}`)."""

    def build(self) -> Condition:
        """The core condition (ValueError: options that don't go together)."""
        raise NotImplementedError


CONDITIONS: dict[str, type[ConditionSpec]] = {}
"""Every kind of condition by the key a rules file names it with."""


S = TypeVar("S", bound=type[ConditionSpec])


def _kind(spec: S) -> S:
    CONDITIONS[spec.kind] = spec
    return spec


@_kind
class ThresholdSpec(ConditionSpec):
    """`> 100`, or `{op: '>', value: 100}`: the value compared with a number (±Inf allowed, NaN refused)."""

    kind = "threshold"
    example = "'> 100' or {op: '>', value: 100}"
    op: Literal["<", "<=", ">", ">=", "==", "!="]
    value: float

    @field_validator("value", mode="before")
    @classmethod
    def _number(cls, value: Any) -> float:
        return number_value(value, "value", "; use the nonfinite condition")

    def build(self) -> Condition:
        return Threshold(self.op, self.value)


@_kind
class NonfiniteSpec(ConditionSpec):
    """`nonfinite`: NaN or ±Inf."""

    kind = "nonfinite"
    example = "nonfinite"
    word = True

    def build(self) -> Condition:
        return Nonfinite()


class TrendSpec(ConditionSpec):
    """`increasing` / `{increasing: {min_delta: 0.01}}`: each sample beyond the one before by more than
    `min_delta` (with `consecutive: 3`: three in a row)."""

    word = True
    min_delta: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    direction: ClassVar[Literal["increasing", "decreasing"]]

    def build(self) -> Condition:
        return Trend(self.direction, self.min_delta)


@_kind
class IncreasingSpec(TrendSpec):
    kind = direction = "increasing"
    example = "increasing or {increasing: {min_delta: 0.01}}"


@_kind
class DecreasingSpec(TrendSpec):
    kind = direction = "decreasing"
    example = "decreasing or {decreasing: {min_delta: 0.01}}"


@_kind
class SpikeSpec(ConditionSpec):
    """`{spike: {ratio: 2.0, direction: up, baseline: 50 samples, stat: median}}`."""

    kind = "spike"
    example = "{spike: {ratio: 2}}"
    ratio: float = Field(gt=0, allow_inf_nan=False)
    direction: Literal["up", "down"] = "up"
    baseline: str | int = "50 samples"
    stat: Literal["median", "mean"] = "median"
    min_samples: int | None = Field(default=None, ge=1)

    def build(self) -> Condition:
        samples, seconds = _baseline(self.baseline)
        if self.direction == "up" and self.ratio <= 1:
            raise ValueError("an upward spike needs a ratio above 1 (2.0 = doubles)")
        if self.direction == "down" and self.ratio >= 1:
            raise ValueError("a downward spike needs a ratio below 1 (0.5 = halves)")
        default_min = min(5, samples) if samples is not None else 5
        return Spike(self.ratio, self.direction, samples, seconds, self.stat, self.min_samples or default_min)


def _baseline(text: str | int) -> tuple[int | None, float | None]:
    span = window_span(text, "baseline")
    return span.samples, span.seconds


@_kind
class AbsentSpec(ConditionSpec):
    """`{absent: 10m}`: no sample of the metric for that long."""

    kind = "absent"
    example = "{absent: 10m}"
    scalar = "duration"
    duration: str | int | float

    def build(self) -> Condition:
        seconds = parse_duration(self.duration)
        if seconds <= 0:
            raise ValueError("absent needs a duration above zero, such as 10m")
        return Absent(seconds)


@_kind
class ExprSpec(ConditionSpec):
    """`{expr: "loss > 2 * loss_ema"}`: an expression over several metrics (`alertd.rules.expr`)."""

    kind = "expr"
    example = "{expr: 'val_loss > 1.2 * train_loss'}"
    scalar = "text"
    text: Any
    """A string; `parse_expr` says what else was given."""

    def build(self) -> Condition:
        return parse_expr(self.text)  # an ExprError is a ValueError saying where


@_kind
class ZScoreSpec(ConditionSpec):
    """`{zscore: {over: 100 samples, threshold: 3, direction: both, min_samples: 2}}` (W&B's defaults)."""

    kind = "zscore"
    example = "{zscore: {over: 100 samples, threshold: 3}}"
    over: str | int = 30
    threshold: float = Field(default=3.0, gt=0, allow_inf_nan=False)
    direction: Literal["up", "down", "both"] = "both"
    min_samples: int = Field(default=2, ge=2)

    def build(self) -> Condition:
        span = window_span(self.over, "over")
        if span.samples is not None and self.min_samples > span.samples:
            raise ValueError(f"min_samples ({self.min_samples}) is more than the window's {span.samples} samples")
        return ZScore(span, self.threshold, self.direction, self.min_samples)


@_kind
class PlateauSpec(ConditionSpec):
    """`{plateau: {patience: 5, min_delta: 0.001, mode: min}}` (Lightning's EarlyStopping)."""

    kind = "plateau"
    example = "{plateau: {patience: 5, min_delta: 0.001}}"
    patience: int = Field(default=3, ge=1)
    min_delta: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    mode: Literal["min", "max"] = "min"

    def build(self) -> Condition:
        return Plateau(self.patience, self.min_delta, self.mode)


@_kind
class PeersSpec(ConditionSpec):
    """`{peers: {by: [source, run], stat: median, over: 2m, ratio: '> 1.5'}}`: each series against its group's
    statistic; `{peers: {by: [source, run], silent: 2m, count: '>= 2'}}`: k of n series silent
    (`alertd.rules.peers`)."""

    kind = "peers"
    example = "{peers: {by: [source, run], stat: median, over: 2m, ratio: '> 1.5'}} or {peers: {by: [run], silent: 2m}}"
    by: list[Annotated[str, Field(min_length=1)]] = Field(min_length=1)
    stat: Literal["max", "min", "avg", "median"] | None = None
    over: str | int | float | None = None
    ratio: str | None = None
    silent: str | int | float | None = None
    count: str | int = ">= 1"

    def build(self) -> Condition:
        def fail(option: str, msg: str) -> ConditionError:
            return ConditionError([((self.kind, option), msg)])

        if len(set(self.by)) != len(self.by):
            raise fail("by", "a label is named twice")
        count_op, count = _count(self.count, fail)
        if (self.ratio is None) == (self.silent is None):
            raise ConditionError([((self.kind,), "give either ratio (with stat and over) or silent")])
        if self.silent is not None:
            for option in ("stat", "over"):
                if getattr(self, option) is not None:
                    raise fail(option, f"{option} goes with ratio, not with silent")
            seconds = _positive(self.silent, "silent", fail)
            return Peers(tuple(self.by), seconds, True, count_op=count_op, count=count)
        assert self.ratio is not None
        if self.over is None:
            raise fail("over", "ratio needs over: the window each series' values are averaged over, such as 2m")
        seconds = _positive(self.over, "over", fail)
        m = _COMPARISON.match(self.ratio)
        if m is None or not math.isfinite(float(m.group(2))):
            raise fail("ratio", f"expected a comparison with a number, such as '> 1.5', got {self.ratio[:50]!r}")
        op, ratio = m.group(1), float(m.group(2))
        return Peers(tuple(self.by), seconds, False, self.stat or "median", op, ratio, count_op, count)


def _positive(text: str | int | float, option: str, fail: Any) -> float:
    try:
        seconds = parse_duration(text)
    except ValueError as exc:
        raise fail(option, str(exc)) from None
    if not seconds > 0 or not math.isfinite(seconds):
        raise fail(option, f"{option} needs a duration above zero, such as 2m")
    return seconds


def _count(value: str | int, fail: Any) -> tuple[str, int]:
    """`count: '>= 2'` (or `2`: at least 2)."""
    if isinstance(value, int):
        value = f">= {value}"
    m = re.fullmatch(r"\s*(>=|<=|==|!=|>|<)\s*(\d+)\s*", value)
    if m is None:
        raise fail("count", f"expected a comparison with a whole number, such as '>= 2', got {value[:50]!r}")
    return m.group(1), int(m.group(2))


_COMPARISON = re.compile(r"^\s*(>=|<=|==|!=|>|<)\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?[Ii]nf)\s*$")
_ONE_KEY = [k for k in CONDITIONS if k != "threshold"]


def condition_kinds() -> list[str]:
    """Every kind of condition the rules file accepts, for messages: the registry's one-key kinds, the aggregates
    over a window, and the comparison."""
    return [*_ONE_KEY, *AGGREGATES, f"a comparison ({ThresholdSpec.example})"]


def parse_condition(value: Any) -> Condition:
    """Turn the `condition:` value into a core condition (ConditionError: what is wrong, where, and what is
    accepted)."""
    if isinstance(value, str):
        word = value.strip()
        spec = CONDITIONS.get(word)
        if spec is not None and spec.word:
            return _build(spec, {}, ())
        m = _COMPARISON.match(word)
        if m:
            return Threshold(m.group(1), float(m.group(2)))
        raise _unknown(value)
    if not isinstance(value, Mapping):
        raise ConditionError([((), f"a condition is a string or a mapping, got {type(value).__name__}")])
    keys = set(value)
    if keys == {"op", "value"}:
        return _build(ThresholdSpec, value, ())
    if keys & set(AGGREGATES):
        return _aggregate(value)
    if len(keys) != 1:
        raise ConditionError(
            [
                (
                    (),
                    f"a condition mapping has one key (a kind: {', '.join(_ONE_KEY)}), an aggregate "
                    f"({AGGREGATE_EXAMPLE}), or op and value; got {sorted(map(str, keys))}",
                )
            ]
        )
    ((kind, options),) = value.items()
    spec = CONDITIONS.get(str(kind)) if kind != "threshold" else None
    if spec is None:
        raise _unknown(str(kind))
    if options is None and spec.scalar is not None:
        raise ConditionError([((kind,), f"{kind} needs its {spec.scalar}, as {spec.example}")])
    if options is None:
        options = {}
    elif not isinstance(options, Mapping):
        if spec.scalar is None:
            raise ConditionError([((kind,), f"expected the options of {kind} as a mapping, as {spec.example}")])
        options = {spec.scalar: options}
    return _build(spec, options, (str(kind),))


def _build(spec: type[ConditionSpec], options: Mapping[str, Any], at: Loc) -> Condition:
    try:
        return spec.model_validate(options).build()
    except ValidationError as exc:
        raise ConditionError([((*at, *_inside(spec, e["loc"])), _said(spec, e)) for e in exc.errors()]) from None
    except ConditionError:
        raise
    except ValueError as exc:
        raise ConditionError([(at, str(exc))]) from None


def _inside(spec: type[ConditionSpec], loc: Sequence[str | int]) -> Loc:
    """A scalar option is the kind's own value: `absent`, not `absent.after`."""
    return () if spec.scalar is not None and tuple(loc) == (spec.scalar,) else tuple(loc)


def _said(model: type[BaseModel], err: Any) -> str:
    """A pydantic error of a condition's options as the rest of the rules file says it (an unknown option: the
    nearest and the known ones)."""
    if err["type"] == "extra_forbidden":
        return unknown_key(str(err["loc"][-1]), model_at(model, err["loc"]))
    return _plain(err["msg"])


def _plain(msg: str) -> str:
    return msg[len("Value error, ") :] if msg.startswith("Value error, ") else msg


def _aggregate(value: Mapping[str, Any]) -> Condition:
    try:
        return window_condition(value)
    except ValidationError as exc:
        kind = next(str(k) for k in value if k in AGGREGATES)
        raise ConditionError([((kind, *e["loc"]), _said(WindowSpec, e)) for e in exc.errors()]) from None
    except ValueError as exc:
        raise ConditionError([((), str(exc))]) from None


def _unknown(word: str) -> ConditionError:
    hint = did_you_mean(word.strip(), [*_ONE_KEY, *AGGREGATES])
    return ConditionError([((), f"unknown condition {word[:100]!r}{hint} (known: {', '.join(condition_kinds())})")])
