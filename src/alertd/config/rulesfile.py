"""The models of one rules file: `RulesFile` and its parts (`rules:` entries, `buffer:`, `runs:`, `delivery:`,
`export:`, `exec:`); the sources', notifiers' and routes' own models live beside their code."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, Field, field_validator, model_validator

from alertd.config.conditions import parse_condition
from alertd.dispatch.route_config import InhibitRuleConfig, RouteConfig, TimeIntervalConfig
from alertd.model import make_labels
from alertd.receivers import NotifierConfig
from alertd.rules.conditions import Absent, Condition, Peers
from alertd.rules.expr import Expr
from alertd.rules.rule import LabelMatcher, Rule
from alertd.runs.restart import RESTARTABLE, RestartPolicy
from alertd.schema.types import Duration, Strict
from alertd.sources.config import SourceConfig
from alertd.templating.annotations import TemplateError, parse_template

NAME = r"^[A-Za-z_][A-Za-z0-9_.:-]*$"
"""A rule's, a notifier's name."""


def _listify(value: Any) -> Any:
    return [value] if isinstance(value, str) else value


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
        return parse_condition(value)  # a ConditionError names its places inside the condition

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
        if isinstance(self.condition, Peers) and self.consecutive != 1:
            raise ValueError("`consecutive` counts samples; a peers condition is judged per group: use `for`")
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
    timestamps: bool = False
    """Also show, per series, `<name>_timestamp_seconds`: when its newest sample was taken (a heartbeat
    Prometheus can judge across nodes: a rank silent, a job hung)."""

    @model_validator(mode="before")
    @classmethod
    def _mapping(cls, value: Any) -> Any:
        if not isinstance(value, Mapping | cls):
            raise ValueError(
                'expected a mapping such as {metrics: ["*loss", "gpu.*"], max_series: 10000, timestamps: false}'
            )
        return value

    @field_validator("metrics", mode="before")
    @classmethod
    def _globs(cls, value: Any) -> Any:
        if not isinstance(value, str | list):
            raise ValueError(
                f'expected a metric name or glob, or a list of them such as ["*loss", "gpu.*"], got {repr(value)[:100]}'
            )
        return value


def _restartable() -> list[Literal["crashed", "lost"]]:
    return list(RESTARTABLE)


class RestartConfig(Strict):
    """`exec: {restart: ...}`: start `alertd exec`'s child again when it crashed or was lost (`alertd.runs.restart`)."""

    on: Annotated[list[Literal["crashed", "lost"]], BeforeValidator(_listify)] = Field(
        default_factory=_restartable, min_length=1
    )
    max: int = Field(default=3, ge=0, le=1000)
    """Restarts at most (0: none)."""
    backoff: Duration = 30.0
    """Seconds between an attempt's end and the next start."""

    @model_validator(mode="before")
    @classmethod
    def _on_key(cls, value: Any) -> Any:
        """YAML 1.1 reads a bare `on:` key as true: it is `on`."""
        if isinstance(value, Mapping) and True in value and "on" not in value:
            return {("on" if k is True else k): v for k, v in value.items()}
        return value

    def build(self) -> RestartPolicy:
        """The core policy."""
        return RestartPolicy.of(self.on, self.max, self.backoff)


class ExecConfig(Strict):
    """`exec:`: what only `alertd exec` does with its child (`alertd run` ignores it)."""

    restart: RestartConfig | None = None
    """Default: never restarted."""
    checkpoints: str | None = Field(default=None, min_length=1)
    """The directory of the checkpoint ledger (`alertd-checkpoints.jsonl`, the trainer's output directory): a
    restart resumes from its newest good checkpoint."""


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
    exec: ExecConfig | None = None
