"""The test file's model: promtool's keys with their meaning, plus alertd's `steps` and `exp_state`."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, field_validator

from alertd.schema.types import Duration, Strict


def _text(value: Any) -> Any:
    """A YAML scalar as the text Go's yaml gives a string field (`0` -> "0", `true` -> "true")."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return value


def _none_is_empty(value: Any) -> Any:
    """`key:` with nothing after it (YAML null) is an empty list or mapping, as in promtool."""
    return [] if value is None else value


Text = Annotated[str, BeforeValidator(_text)]
TextMap = Annotated[dict[str, Text], BeforeValidator(lambda v: {} if v is None else v)]


def parse_start(value: Any) -> float:
    """promtool's `start_timestamp`: Unix seconds or an RFC 3339 time."""
    if isinstance(value, bool):
        raise ValueError(f"expected Unix seconds or an RFC 3339 time, got {value!r}")
    if isinstance(value, int | float):
        return float(value)
    text = str(value).strip()
    try:
        return float(text)
    except ValueError:
        pass
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"expected Unix seconds or an RFC 3339 time, got {value!r}") from None
    return (dt if dt.tzinfo else dt.replace(tzinfo=UTC)).timestamp()


class InputSeries(Strict):
    """One input series: `series`, `values`; alertd's own `steps` and `interval`."""

    series: str
    values: Text
    steps: Text | None = None
    interval: Duration | None = Field(default=None, gt=0)


class ExpAlert(Strict):
    """An alert expected at an evaluation time: firing, or pending where `exp_state` says so."""

    exp_labels: TextMap = Field(default_factory=dict)
    exp_annotations: dict[str, Text] | None = None
    exp_state: str = Field(default="firing", pattern="^(pending|firing)$")


class AlertTest(Strict):
    """promtool's `<alert_test_case>`: the alerts of one alertname expected at one time."""

    eval_time: Duration
    alertname: str = Field(min_length=1)
    exp_alerts: list[ExpAlert] = Field(default_factory=list)

    _empty = field_validator("exp_alerts", mode="before")(_none_is_empty)


class TestGroup(Strict):
    """promtool's `<test_group>`: input series and what to expect of them."""

    name: str = ""
    interval: Duration | None = None
    """Time between input samples; default (and 0): the file's evaluation_interval, as in promtool."""
    input_series: list[InputSeries] = Field(default_factory=list)
    alert_rule_test: list[AlertTest] = Field(default_factory=list)
    promql_expr_test: list[Any] = Field(default_factory=list)
    """Refused entry by entry: alertd's rules are not PromQL."""
    external_labels: TextMap = Field(default_factory=dict)
    external_url: str = ""
    start_timestamp: Annotated[float, BeforeValidator(parse_start)] = 0.0

    _empty = field_validator("input_series", "alert_rule_test", "promql_expr_test", mode="before")(_none_is_empty)


class TestFile(Strict):
    """promtool's test file."""

    rule_files: list[str] = Field(min_length=1)
    evaluation_interval: Duration = 60.0
    """The evaluation grid (default, and 0: 1m, as in promtool)."""
    group_eval_order: list[str] = Field(default_factory=list)
    fuzzy_compare: bool = False
    tests: list[TestGroup] = Field(min_length=1)

    _empty = field_validator("group_eval_order", mode="before")(_none_is_empty)

    @field_validator("group_eval_order")
    @classmethod
    def _unique(cls, names: list[str]) -> list[str]:
        seen: set[str] = set()
        for name in names:
            if name in seen:
                raise ValueError(f"group name repeated in evaluation order: {name}")
            seen.add(name)
        return names


KNOWN_KEYS = frozenset(
    name for model in (TestFile, TestGroup, AlertTest, ExpAlert, InputSeries) for name in model.model_fields
)
"""Every key a test file may have (for `did you mean` hints)."""
