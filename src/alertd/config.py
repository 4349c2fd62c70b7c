"""The rules file: pydantic models, validation with places, merging of several files, compilation.

`load_config(paths)` returns a `Config` whose rules are core `Rule` objects, or raises `ConfigError`
listing every problem of every file, each with its place (`rules[3].condition`) and line.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
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
from alertd.config_hints import did_you_mean, model_at, nearest, union_tags, unknown_key, unknown_word
from alertd.config_types import Duration, Strict
from alertd.config_windows import PlateauSpec, ZScoreSpec, is_window_condition, number_value, window_condition
from alertd.dispatch.matchers import Matcher, MatchOp, parse_matchers
from alertd.dispatch.route_config import InhibitRuleConfig, RouteConfig, TimeIntervalConfig, check_time_intervals
from alertd.durations import parse_duration
from alertd.errors import ConfigError, Problem
from alertd.model import make_labels
from alertd.notify.config import LogConfig, NotifierConfig
from alertd.rules.conditions import (
    AGGREGATES,
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
    max_notifications_per_flush: int = Field(default=10, ge=0)
    """Notifications one receiver is sent at once at most: more groups due together (a storm) go to it as one
    notification (`alertd.dispatch.plan`); 0: no bound."""


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
    max_notifications_per_flush: int = 10
    export: ExportConfig = field(default_factory=ExportConfig)
    rule_files: Mapping[str, str] = field(default_factory=dict)
    """The file each rule was read from, by rule name."""
    warnings: tuple[Problem, ...] = ()
    """What is valid but likely a mistake (a severity no route matches): `alertd check` prints them, the
    service logs them."""


DEFAULT_RECEIVER = "console"


def load_config(paths: Sequence[str], env: Mapping[str, str] | None = None) -> Config:
    """Load, validate, merge and compile the rules files; raise ConfigError listing every problem."""
    problems: list[Problem] = []
    parsed: list[tuple[Document, RulesFile]] = []
    for path in paths:
        try:
            doc = load_yaml(path, env, keep_going=True)
        except ConfigError as exc:
            problems.extend(exc.problems)
            continue
        problems.extend(doc.problems)  # an unset variable, a duplicate key: reported with the schema's problems
        model = _validate(doc, problems, frozenset(p.place for p in doc.problems))
        if model is not None and not doc.problems:
            parsed.append((doc, model))
    if problems:
        raise ConfigError(problems)
    return _merge(parsed, tuple(paths))


def _validate(doc: Document, problems: list[Problem], skip: frozenset[str] = frozenset()) -> RulesFile | None:
    """The file's model, or None with its problems added. None at or around a place in `skip`: a value that
    an unset variable emptied is reported once, as the variable (not again as the empty value, nor as the
    check of its entry that the empty value failed)."""
    data = doc.data if doc.data is not None else {}
    if not isinstance(data, dict):
        problems.append(Problem(doc.file, "", "the file must be a mapping with sources, notifiers, route and rules"))
        return None
    try:
        return RulesFile.model_validate(data)
    except ValidationError as exc:
        for err in exc.errors():
            loc = tuple(err["loc"])
            if err["type"] in ("union_tag_invalid", "union_tag_not_found"):
                loc = (*loc, "type")
            place, line = doc.line_of(loc)
            if _under(place, skip) or (_entry_check(err) and _inside(doc.line_of(loc, in_file=True)[0], skip)):
                continue
            problems.append(Problem(doc.file, place, _message(err), line))
        return None


def _entry_check(err: Any) -> bool:
    """Whether the error is an entry's own check (a model validator), not one of its keys'."""
    return bool(err["type"] == "value_error")


def _under(place: str, places: frozenset[str]) -> bool:
    """Whether `place` is one of `places` or inside one (`metric[0]` inside `metric`)."""
    return place in places or any(place.startswith((f"{p}.", f"{p}[")) for p in places)


def _inside(place: str, places: frozenset[str]) -> bool:
    """Whether one of `places` is inside `place`."""
    return any(p.startswith((f"{place}.", f"{place}[")) for p in places)


_TAGGED = {"sources": "source type", "notifiers": "notifier type"}


def _message(err: Any) -> str:
    loc = tuple(err["loc"])
    what = _TAGGED.get(str(loc[0]), "type") if loc else "type"
    if err["type"] == "extra_forbidden":
        return unknown_key(str(loc[-1]), model_at(RulesFile, loc))
    if err["type"] == "union_tag_invalid":
        known = re.findall(r"'([^']*)'", str(err["ctx"]["expected_tags"]))
        return unknown_word(what, err["ctx"]["tag"], known)
    if err["type"] == "list_type" and loc and loc[-1] in ("matchers", "source_matchers", "target_matchers"):
        return "expected a list of matchers such as ['severity=\"critical\"']; a mapping is written under match:"
    if err["type"] == "union_tag_not_found":
        known = union_tags(_annotation_at(loc)) if loc else []
        return f"`type:` is missing: give the {what}" + (f" (one of {', '.join(known)})" if known else "")
    msg = str(err["msg"])
    return msg[len("Value error, ") :] if msg.startswith("Value error, ") else msg


def _annotation_at(loc: tuple[str | int, ...]) -> Any:
    """The annotation of the list or mapping items at loc[0] (`sources`, `notifiers`)."""
    field = RulesFile.model_fields.get(str(loc[0]))
    return get_args(field.annotation)[-1] if field is not None and get_args(field.annotation) else None


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
    warnings = _check_severities(parsed, rules)
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
        max_notifications_per_flush=delivery.max_notifications_per_flush,
        export=export,
        rule_files={name: file for name, (file, _, _) in rules.items()},
        warnings=tuple(warnings),
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


SEVERITIES = ("critical", "warning", "info")
"""The severities alertd's own rules use; a rule may use any other word, if a route or another rule does too."""


def _severity_matchers(
    parsed: list[tuple[Document, RulesFile]],
) -> list[tuple[Document, tuple[str | int, ...], Matcher]]:
    """Every matcher on `severity` of the route tree and the inhibit rules, with its file and place."""
    out: list[tuple[Document, tuple[str | int, ...], Matcher]] = []

    def add(
        doc: Document,
        loc: tuple[str | int, ...],
        match: Mapping[str, str],
        match_re: Mapping[str, str],
        texts: Sequence[str],
        names: tuple[str, str, str],
    ) -> None:
        for key, value in match.items():
            out.append((doc, (*loc, names[0], key), Matcher(key, MatchOp.EQ, value)))
        for key, value in match_re.items():
            out.append((doc, (*loc, names[1], key), Matcher(key, MatchOp.RE, value)))
        for i, text in enumerate(texts):
            out.extend((doc, (*loc, names[2], i), m) for m in parse_matchers(text))

    def walk(doc: Document, node: RouteConfig, loc: tuple[str | int, ...]) -> None:
        add(doc, loc, node.match, node.match_re, node.matchers, ("match", "match_re", "matchers"))
        for k, child in enumerate(node.routes):
            walk(doc, child, (*loc, "routes", k))

    for doc, model in parsed:
        if model.route is not None:
            walk(doc, model.route, ("route",))
        for i, inhibit in enumerate(model.inhibit_rules):
            for side in ("source", "target"):
                names = (f"{side}_match", f"{side}_match_re", f"{side}_matchers")
                match, match_re, texts = (getattr(inhibit, n) for n in names)
                add(doc, ("inhibit_rules", i), match, match_re, texts, names)
    return [(doc, loc, m) for doc, loc, m in out if m.name == "severity"]


def _check_severities(
    parsed: list[tuple[Document, RulesFile]], rules: Mapping[str, tuple[str, int, RuleConfig]]
) -> list[Problem]:
    """Warnings: a rule's severity that is none of SEVERITIES and that no matcher and no other rule uses
    (`critcal`), and an equality matcher on a severity no rule has (when there are rules)."""
    matchers = _severity_matchers(parsed)
    matched = {m.value for _, _, m in matchers if m.op is MatchOp.EQ}
    counts: dict[str, int] = {}
    for _, _, rule in rules.values():
        counts[rule.severity] = counts.get(rule.severity, 0) + 1
    out: list[Problem] = []
    for file, i, rule in rules.values():
        sev = rule.severity
        if sev in SEVERITIES or counts[sev] > 1 or any(m.matches({"severity": sev}) for _, _, m in matchers):
            continue
        known = [*SEVERITIES, *sorted(set(counts) - {sev}), *sorted(matched)]
        hint = nearest(sev, known)
        msg = f"severity {sev!r} is used by no route and no other rule" + (
            f"; did you mean {hint!r}?" if hint else f" (the usual ones: {', '.join(SEVERITIES)})"
        )
        out.append(_place(_doc(parsed, file), ("rules", i, "severity"), msg))
    for doc, loc, m in matchers if rules else []:
        if m.op is not MatchOp.EQ or m.value in counts:
            continue
        hint = nearest(m.value, [*counts, *SEVERITIES])
        msg = f"no rule has severity {m.value!r}, so this matcher matches no alert (the rules have: " + (
            f"{', '.join(sorted(counts))})" + (f"; did you mean {hint!r}?" if hint else "")
        )
        out.append(_place(doc, loc, msg))
    return out


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
