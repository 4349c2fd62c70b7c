"""Building blocks for the pydantic models of the rules file (the boundary; the core never imports this)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer

from alertd.durations import format_duration, parse_duration


def _duration(value: Any) -> float:
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        return parse_duration(value)
    raise ValueError(f"expected a duration such as 30s, 5m or 1h, got {value!r}")


Duration = Annotated[float, BeforeValidator(_duration), PlainSerializer(format_duration, return_type=str)]
"""A duration in seconds, written `30s`, `5m`, `1h30m` or as a number of seconds."""


class Strict(BaseModel):
    """Base of every rules-file model: unknown keys are errors, values are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class SourceConfigBase(Strict):
    """Keys every source has. `name` becomes the `source` label of its samples."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    interval: Duration = 1.0
    max_series: int | None = Field(default=None, ge=1)
    """The most series this source may make (default: `buffer.max_series_per_source`)."""


def redacted(model: BaseModel) -> dict[str, Any]:
    """A model as JSON-ready data with every secret shown as `***`."""
    return model.model_dump(mode="json", by_alias=True)
