"""What a picture of a run holds: panels of series, and the spans where alerts were pending or firing. Pure."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Point:
    """One sample: epoch seconds, the training step (None where the source has none), the value (NaN/Inf kept)."""

    time: float
    step: int | None
    value: float


@dataclass(frozen=True, slots=True)
class Line:
    """One series of a panel."""

    label: str
    """How the legend names it: the metric, with what tells it from the panel's other lines."""
    points: tuple[Point, ...]


@dataclass(frozen=True, slots=True)
class Span:
    """Where one alert was pending or firing: [start, end]; `end` None while it still is at the data's end."""

    rule: str
    state: str
    """`pending` or `firing`."""
    start: float
    end: float | None
    step: int | None
    """The step of the sample that started it (None where unknown)."""
    severity: str = ""
    summary: str = ""
    end_step: int | None = None
    """The step of the transition that ended it (None while open, or where unknown)."""


@dataclass(frozen=True, slots=True)
class Recovery:
    """A recovery `recover` would have made (a dry run's plan): back to the checkpoint at `checkpoint_step`, the
    updates `skip` (inclusive; None: none) dropped. Drawn on panels over the step."""

    notifier: str
    rule: str
    attempt: int
    checkpoint_step: int
    skip: tuple[int, int] | None
    label: str
    """The plan in words."""


@dataclass(frozen=True, slots=True)
class Panel:
    """One chart: a metric's lines and the spans of the alerts on it."""

    title: str
    lines: tuple[Line, ...]
    spans: tuple[Span, ...] = ()
    axis: str = "time"
    """What its x axis is: `step` (every point has one), or `time` (asked for, or series without steps: GPUs)."""


@dataclass(frozen=True, slots=True)
class Figure:
    """Every panel of one run, over one time range (`start`..`end`, epoch seconds: the run's own samples, so an
    ended run's range ends at its last sample) or one step range (`first_step`..`last_step`)."""

    title: str
    run: str
    source: str
    start: float
    end: float
    panels: tuple[Panel, ...]
    transitions: tuple[dict[str, object], ...] = field(default=())
    """The run's transitions as dry-run's JSON lines give them (time, state, rule, step, value, labels)."""
    x: str = "time"
    """The x axis asked for: `step` or `time` (a panel without steps is drawn over time either way)."""
    first_step: int | None = None
    last_step: int | None = None
    recoveries: tuple[Recovery, ...] = ()
    """The plans a dry run's `recover` notifiers would have made for this run."""
