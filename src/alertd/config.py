"""The rules file: pydantic models, validation with places, merging of several files, compilation.

`load_config(paths)` returns a `Config` whose rules are core `Rule` objects, or raises `ConfigError`
listing every problem of every file, each with its place (`rules[3].condition`) and line.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from alertd.buffer import BufferLimits
from alertd.config_types import Duration, Strict
from alertd.config_windows import PlateauSpec, ZScoreSpec, is_window_condition, number_value, window_condition
from alertd.dispatch.route_config import InhibitRuleConfig, RouteConfig, TimeIntervalConfig, check_time_intervals
from alertd.durations import parse_duration
from alertd.errors import ConfigError, Problem
from alertd.model import make_labels
from alertd.notify.config import LogConfig, NotifierConfig
from alertd.rules.conditions import (
    OPS,
    Absent,
    Condition,
    Nonfinite,
    Span,
    Spike,
    Threshold,
    Trend,
    WindowAggregate,
    ZScore,
)
from alertd.rules.expr import Expr, parse_expr
from alertd.rules.rule import LabelMatcher, Rule
from alertd.rules.templates import TemplateError, parse_template
from alertd.sources.config import SourceConfig
from alertd.yamlfile import Document, load_yaml

NAME = r"^[A-Za-z_][A-Za-z0-9_.:-]*$"
_THRESHOLD = re.compile(r"^\s*(>=|<=|==|!=|>|<)\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?[Ii]nf)\s*$")


def _listify(value: Any) -> Any:
    return [value] if isinstance(value, str) else value


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


def parse_condition(value: Any) -> Condition:
    """Turn the `condition:` value into a core condition, or raise ValueError saying what is accepted."""
    if isinstance(value, str):
        word = value.strip()
        if word == "nonfinite":
            return Nonfinite()
        if word in ("increasing", "decreasing"):
            return Trend(word)  # type: ignore[arg-type]
        m = _THRESHOLD.match(word)
        if m:
            return Threshold(m.group(1), float(m.group(2)))
        raise ValueError(
            f"unknown condition {value!r}: use a comparison such as '> 100' or '<= 0.5', nonfinite, increasing, "
            "decreasing, {spike: {...}} or {absent: 10m}"
        )
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
            "a condition mapping has one key (spike, absent, increasing, decreasing, zscore, plateau, expr), "
            "an aggregate (avg, min, max, sum, count, stddev, quantile) with op and value, or op and value, "
            f"got {sorted(keys)}"
        )
    ((kind, spec),) = value.items()
    if kind == "spike":
        return SpikeSpec.model_validate(spec).build()
    if kind == "absent":
        seconds = parse_duration(spec)
        if seconds <= 0:
            raise ValueError("absent needs a duration above zero, such as 10m")
        return Absent(seconds)
    if kind in ("increasing", "decreasing"):
        return Trend(kind, TrendSpec.model_validate(spec or {}).min_delta)  # type: ignore[arg-type]
    if kind == "nonfinite":
        return Nonfinite()
    if kind == "expr":
        return parse_expr(spec)  # an ExprError is a ValueError saying where
    if kind == "zscore":
        return ZScoreSpec.model_validate(spec if spec is not None else {}).build()
    if kind == "plateau":
        return PlateauSpec.model_validate(spec if spec is not None else {}).build()
    raise ValueError(
        f"unknown condition {kind!r}: use spike, absent, increasing, decreasing, nonfinite, zscore, plateau, "
        "an aggregate (avg, min, max, sum, count, stddev, quantile), expr or op/value"
    )


def _check_template(text: str) -> str:
    """An annotation template, checked and compiled (cached) at load; the error names its line and column."""
    try:
        parse_template(text)
    except TemplateError as exc:
        raise ValueError(f"template {exc}") from None
    return text


class RuleConfig(Strict):
    """One entry of `rules:`."""

    model_config = Strict.model_config | {"arbitrary_types_allowed": True}

    name: str = Field(pattern=NAME)
    metric: Annotated[list[Annotated[str, Field(min_length=1)]] | None, BeforeValidator(_listify)] = Field(
        default=None, min_length=1
    )
    """Required, except with an `expr` condition (whose names are its metrics: then it must be left out)."""
    labels_match: dict[str, str] = Field(default_factory=dict)
    condition: Any
    consecutive: int = Field(default=1, ge=1)
    for_: Duration = Field(default=0.0, alias="for")
    keep_firing_for: Duration = 0.0
    severity: str = Field(default="warning", pattern=r"^[a-z]+$")
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, Annotated[str, AfterValidator(_check_template)]] = Field(default_factory=dict)
    notify: list[str] = Field(default_factory=list)

    @field_validator("condition")
    @classmethod
    def _condition(cls, value: Any) -> Condition:
        try:
            return parse_condition(value)
        except ValidationError as exc:
            raise ValueError("; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())) from exc

    @field_validator("labels_match")
    @classmethod
    def _matchers(cls, value: dict[str, str]) -> dict[str, str]:
        for name, spec in value.items():
            try:
                LabelMatcher.parse(name, spec)
            except ValueError as exc:
                raise ValueError(f"label {name!r}: {exc}") from None
        return value

    @model_validator(mode="after")
    def _metric_or_expr(self) -> RuleConfig:
        if isinstance(self.condition, Expr) and self.metric is not None:
            raise ValueError("an expr condition names its metrics itself: leave `metric` out")
        if not isinstance(self.condition, Expr) and self.metric is None:
            raise ValueError("`metric` is required (a name, a glob such as train/*, or a list of them)")
        return self

    @model_validator(mode="after")
    def _absent_has_no_consecutive(self) -> RuleConfig:
        if isinstance(self.condition, Absent) and self.consecutive != 1:
            raise ValueError("`consecutive` counts samples; an absent condition has none to count")
        return self

    def build(self) -> Rule:
        """The core rule."""
        return Rule(
            name=self.name,
            metrics=tuple(self.metric) if self.metric is not None else _expr_names(self.condition),
            condition=self.condition,
            matchers=tuple(LabelMatcher.parse(k, v) for k, v in sorted(self.labels_match.items())),
            consecutive=self.consecutive,
            hold=self.for_,
            keep_firing_for=self.keep_firing_for,
            severity=self.severity,
            labels=make_labels(self.labels),
            annotations=tuple((k, parse_template(v)) for k, v in self.annotations.items()),
            notify=tuple(self.notify),
        )


def _expr_names(condition: Condition) -> tuple[str, ...]:
    return condition.names if isinstance(condition, Expr) else ()


class BufferConfig(Strict):
    """`buffer:`: how much history each series keeps, how many series there may be, how far ahead of
    the clock a sample's time may be before the arrival time stands in for it."""

    max_samples: int = Field(default=1024, ge=2, le=10_000_000)
    max_age: Duration = 6 * 3600.0
    max_series: int = Field(default=100_000, ge=1)
    max_series_per_source: int = Field(default=20_000, ge=1)
    max_future_skew: Duration = Field(default=300.0, ge=0)


class RunsConfig(Strict):
    """`runs:`: how alertd judges a run's state."""

    stall_after: Duration = Field(default=600.0, gt=0)
    """A run whose writer lives (or is unknown) and that logs nothing for this long is stalled."""


class DeliveryConfig(Strict):
    """`delivery:`: how notifications are delivered."""

    max_retry_after: Duration = Field(default=300.0, gt=0)
    """The longest a receiver's Retry-After (a 429 or 503) may hold a notification."""


class ExportConfig(Strict):
    """`export:`: the buffered series whose newest value `/metrics` shows, one gauge each (default: none)."""

    metrics: Annotated[list[Annotated[str, Field(min_length=1, max_length=1000)]], BeforeValidator(_listify)] = Field(
        default_factory=list, max_length=100
    )
    """Names or globs (`*loss`, `gpu.*`) of the metrics to export."""
    max_series: int = Field(default=10_000, ge=1, le=1_000_000)
    """The most series one scrape shows; the rest are counted in `alertd_export_dropped_series`."""

    @model_validator(mode="before")
    @classmethod
    def _mapping(cls, value: Any) -> Any:
        if not isinstance(value, Mapping | cls):
            raise ValueError('expected a mapping such as {metrics: ["*loss", "gpu.*"], max_series: 10000}')
        return value

    @field_validator("metrics", mode="before")
    @classmethod
    def _globs(cls, value: Any) -> Any:
        if not isinstance(value, str | list):
            raise ValueError(
                f'expected a metric name or glob, or a list of them such as ["*loss", "gpu.*"], got {repr(value)[:100]}'
            )
        return value


class RulesFile(Strict):
    """One rules file."""

    sources: list[Annotated[SourceConfig, Field(discriminator="type")]] = Field(default_factory=list)
    notifiers: dict[Annotated[str, Field(pattern=NAME)], Annotated[NotifierConfig, Field(discriminator="type")]] = (
        Field(default_factory=dict)
    )
    route: RouteConfig | None = None
    inhibit_rules: list[InhibitRuleConfig] = Field(default_factory=list)
    time_intervals: list[TimeIntervalConfig] = Field(default_factory=list)
    rules: list[RuleConfig] = Field(default_factory=list)
    buffer: BufferConfig | None = None
    evaluation_interval: Duration | None = None
    runs: RunsConfig | None = None
    delivery: DeliveryConfig | None = None
    export: ExportConfig | None = None


@dataclass(frozen=True)
class Config:
    """Every rules file given, merged and compiled."""

    files: tuple[str, ...]
    rules: tuple[Rule, ...]
    sources: tuple[SourceConfig, ...]
    notifiers: Mapping[str, NotifierConfig]
    route: RouteConfig
    inhibit_rules: tuple[InhibitRuleConfig, ...] = ()
    buffer: BufferLimits = field(default_factory=BufferLimits)
    evaluation_interval: float = 1.0
    rule_configs: Mapping[str, RuleConfig] = field(default_factory=dict)
    stall_after: float = 600.0
    max_retry_after: float = 300.0
    export: ExportConfig = field(default_factory=ExportConfig)
    rule_files: Mapping[str, str] = field(default_factory=dict)
    """The file each rule was read from, by rule name."""


DEFAULT_RECEIVER = "console"


def load_config(paths: Sequence[str], env: Mapping[str, str] | None = None) -> Config:
    """Load, validate, merge and compile the rules files; raise ConfigError listing every problem."""
    problems: list[Problem] = []
    parsed: list[tuple[Document, RulesFile]] = []
    for path in paths:
        try:
            doc = load_yaml(path, env)
        except ConfigError as exc:
            problems.extend(exc.problems)
            continue
        model = _validate(doc, problems)
        if model is not None:
            parsed.append((doc, model))
    if problems:
        raise ConfigError(problems)
    return _merge(parsed, tuple(paths))


def _validate(doc: Document, problems: list[Problem]) -> RulesFile | None:
    data = doc.data if doc.data is not None else {}
    if not isinstance(data, dict):
        problems.append(Problem(doc.file, "", "the file must be a mapping with sources, notifiers, route and rules"))
        return None
    try:
        return RulesFile.model_validate(data)
    except ValidationError as exc:
        for err in exc.errors():
            place, line = doc.line_of(err["loc"])
            problems.append(Problem(doc.file, place, _message(err, doc), line))
        return None


def _message(err: Any, doc: Document) -> str:
    if err["type"] == "extra_forbidden":
        key = err["loc"][-1]
        hint = _suggest(str(key))
        return f"unknown key {key!r}" + (f" (did you mean {hint!r}?)" if hint else "")
    msg = str(err["msg"])
    return msg[len("Value error, ") :] if msg.startswith("Value error, ") else msg


def _suggest(key: str) -> str | None:
    known: set[str] = set()
    models = (RulesFile, RuleConfig, RouteConfig, BufferConfig, RunsConfig, SpikeSpec, InhibitRuleConfig, ExportConfig)
    for model in (*models, *get_args(SourceConfig), *get_args(NotifierConfig)):
        known.update(f.alias or name for name, f in model.model_fields.items())
    hits = difflib.get_close_matches(key, sorted(known - {key}), n=1, cutoff=0.75)
    return hits[0] if hits else None


def _merge(parsed: list[tuple[Document, RulesFile]], files: tuple[str, ...]) -> Config:
    problems: list[Problem] = []
    rules: dict[str, tuple[str, int, RuleConfig]] = {}
    sources: dict[str, SourceConfig] = {}
    notifiers: dict[str, NotifierConfig] = {}
    route: tuple[str, RouteConfig] | None = None
    inhibit: list[InhibitRuleConfig] = []
    buffer, interval, runs = BufferConfig(), 1.0, RunsConfig()
    delivery, export = DeliveryConfig(), ExportConfig()
    for doc, model in parsed:
        for i, src in enumerate(model.sources):
            if src.name in sources:
                problems.append(_place(doc, ("sources", i, "name"), f"duplicate source name {src.name!r}"))
            sources[src.name] = src
        for name, cfg in model.notifiers.items():
            if name in notifiers:
                problems.append(_place(doc, ("notifiers", name), f"notifier {name!r} is defined twice"))
            notifiers[name] = cfg
        for i, rule in enumerate(model.rules):
            if rule.name in rules:
                first = rules[rule.name]
                problems.append(
                    _place(
                        doc,
                        ("rules", i, "name"),
                        f"duplicate rule name {rule.name!r} (first in {first[0]} rules[{first[1]}])",
                    )
                )
            rules[rule.name] = (doc.file, i, rule)
        if model.route is not None:
            if route is not None:
                problems.append(_place(doc, ("route",), f"route is already defined in {route[0]}; give it once"))
            route = (doc.file, model.route)
        inhibit.extend(model.inhibit_rules)
        buffer = model.buffer or buffer
        interval = model.evaluation_interval or interval
        runs = model.runs or runs
        delivery = model.delivery or delivery
        export = model.export or export
    if not notifiers:
        notifiers[DEFAULT_RECEIVER] = LogConfig(type="log")
    root = route[1] if route else RouteConfig(receivers=sorted(notifiers))
    problems += check_time_intervals(parsed, root, lambda file, loc, msg: _place(_doc(parsed, file), loc, msg))
    problems += _check_receivers(parsed, root, rules, notifiers)
    problems += _check_windows(parsed, rules, buffer)
    if problems:
        raise ConfigError(problems)
    return Config(
        files=files,
        rules=tuple(r.build() for _, _, r in rules.values()),
        sources=tuple(sources.values()),
        notifiers=notifiers,
        route=root,
        inhibit_rules=tuple(inhibit),
        buffer=BufferLimits(
            buffer.max_samples,
            buffer.max_age,
            buffer.max_series,
            buffer.max_series_per_source,
            {s.name: s.max_series for s in sources.values() if s.max_series is not None},
            buffer.max_future_skew,
        ),
        evaluation_interval=interval,
        rule_configs={name: r for name, (_, _, r) in rules.items()},
        stall_after=runs.stall_after,
        max_retry_after=delivery.max_retry_after,
        export=export,
        rule_files={name: file for name, (file, _, _) in rules.items()},
    )


def _place(doc: Document, loc: tuple[str | int, ...], message: str) -> Problem:
    place, line = doc.line_of(loc)
    return Problem(doc.file, place, message, line)


def _doc(parsed: list[tuple[Document, RulesFile]], file: str) -> Document:
    return next(d for d, _ in parsed if d.file == file)


def _check_receivers(
    parsed: list[tuple[Document, RulesFile]],
    root: RouteConfig,
    rules: Mapping[str, tuple[str, int, RuleConfig]],
    notifiers: Mapping[str, NotifierConfig],
) -> list[Problem]:
    problems = []
    known = ", ".join(sorted(notifiers))
    for file, i, rule in rules.values():
        for j, name in enumerate(rule.notify):
            if name not in notifiers:
                problems.append(
                    _place(
                        _doc(parsed, file), ("rules", i, "notify", j), f"no notifier named {name!r} (defined: {known})"
                    )
                )
    route_file = next((d.file for d, m in parsed if m.route is not None), None)

    def walk(node: RouteConfig, loc: tuple[str | int, ...]) -> None:
        for j, name in enumerate(node.receiver_list() or []):
            if name not in notifiers:
                where = (
                    _place(
                        _doc(parsed, route_file),
                        (*loc, "receiver") if node.receiver is not None else (*loc, "receivers", j),
                        f"no notifier named {name!r} (defined: {known})",
                    )
                    if route_file
                    else Problem("", "route", f"no notifier named {name!r}")
                )
                problems.append(where)
        for k, child in enumerate(node.routes):
            walk(child, (*loc, "routes", k))

    walk(root, ("route",))
    return problems


def _check_windows(
    parsed: list[tuple[Document, RulesFile]], rules: Mapping[str, tuple[str, int, RuleConfig]], buffer: BufferConfig
) -> list[Problem]:
    problems = []
    for file, i, rule in rules.values():
        cond = rule.condition
        if isinstance(cond, Spike):
            if cond.samples is not None and cond.samples >= buffer.max_samples:
                msg = (
                    f"a baseline of {cond.samples} samples needs buffer.max_samples above it (now {buffer.max_samples})"
                )
                problems.append(_place(_doc(parsed, file), ("rules", i, "condition"), msg))
            if cond.seconds is not None and cond.seconds > buffer.max_age:
                msg = f"the baseline of {cond.seconds:g}s is longer than buffer.max_age ({buffer.max_age:g}s)"
                problems.append(_place(_doc(parsed, file), ("rules", i, "condition"), msg))
        need = _window_needs(cond)
        if need is not None and need[0] > buffer.max_samples:
            msg = f"{need[2]} needs buffer.max_samples of at least {need[0]} (now {buffer.max_samples})"
            problems.append(_place(_doc(parsed, file), ("rules", i, "condition"), msg))
        if need is not None and need[1] > buffer.max_age:
            msg = f"{need[2]} reaches back {need[1]:g}s, longer than buffer.max_age ({buffer.max_age:g}s)"
            problems.append(_place(_doc(parsed, file), ("rules", i, "condition"), msg))
        if rule.consecutive > buffer.max_samples:
            problems.append(_place(_doc(parsed, file), ("rules", i, "consecutive"), "more than buffer.max_samples"))
    return problems


def _window_needs(cond: Condition) -> tuple[int, float, str] | None:
    """What a windowed condition needs the buffer to hold: samples, seconds, and the window's words."""
    if isinstance(cond, WindowAggregate):
        spans = (cond.over, cond.baseline) if cond.baseline is not None else (cond.over,)
        words = "the window" if cond.baseline is None else "the window and its baseline"
    elif isinstance(cond, ZScore):
        spans, words = (cond.over, Span(samples=1) if cond.over.samples is not None else Span(seconds=0.0)), "zscore"
    else:
        return None
    return sum(s.samples or 0 for s in spans), sum(s.seconds or 0.0 for s in spans), words


def redacted(model: BaseModel) -> dict[str, Any]:
    """A model as JSON-ready data with every secret shown as `***`."""
    return model.model_dump(mode="json", by_alias=True)
