"""The pydantic models of the HTTP API: request bodies and the responses the OpenAPI schema describes.

Times are RFC 3339 strings (UTC, `Z`); values are numbers or the strings `NaN`, `+Inf`, `-Inf`.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from alertd.dispatch.matchers import Matcher, MatchOp, Silence
from alertd.dispatch.silences import new_silence_id
from alertd.durations import parse_duration
from alertd.model import format_time

MAX_TIME = 253_402_000_000.0
"""Latest accepted instant (late in the year 9999): later ones can't be written as RFC 3339."""

Value = float | str
"""A sample value: a number, or `NaN`, `+Inf`, `-Inf`."""


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Status(BaseModel):
    """`{"status": "ok"}` and friends."""

    status: str
    reason: str | None = None


class ErrorBody(BaseModel):
    """Every error the API itself reports: 400, 401, 403, 404, 408, 409, 413, 429, 500, 503, 504."""

    status: Literal["error"] = "error"
    errors: list[str]


class AlertOut(BaseModel):
    """A pending or firing alert."""

    rule: str
    state: str
    labels: dict[str, str]
    annotations: dict[str, str]
    severity: str
    value: Value
    step: int | None
    time: str | None
    activeAt: str | None
    firedAt: str | None
    fingerprint: str
    silenced: bool
    silencedBy: list[str]


def _omitted(value: Any) -> bool:
    return value is None


class PromAlertOut(BaseModel):
    """A pending or firing alert as Prometheus' `GET /api/v1/alerts` shows it: labels with `alertname` (and
    `severity`), `value` as Go writes a float (`1e+00`, `NaN`), `activeAt` RFC 3339."""

    labels: dict[str, str]
    annotations: dict[str, str]
    state: str
    activeAt: str | None = Field(default=None, exclude_if=_omitted)
    value: str


class PromAlertsData(BaseModel):
    """The alerts."""

    alerts: list[PromAlertOut]


class PromAlerts(BaseModel):
    """Prometheus' envelope of `GET /api/v1/alerts`."""

    status: Literal["success"] = "success"
    data: PromAlertsData


class PromRuleOut(BaseModel):
    """A rule as Prometheus' `GET /api/v1/rules` shows an alerting rule. `query` is alertd's description of
    the rule (its metrics, label matchers and condition), not PromQL; `duration` is its `for`, in seconds."""

    state: str
    name: str
    query: str
    duration: float
    keepFiringFor: float
    labels: dict[str, str]
    annotations: dict[str, str]
    alerts: list[PromAlertOut]
    health: Literal["ok", "err", "unknown"]
    lastError: str | None = Field(default=None, exclude_if=_omitted)
    evaluationTime: float
    lastEvaluation: str
    type: Literal["alerting"] = "alerting"


class PromGroupOut(BaseModel):
    """The rules of one rules file (`name` its stem)."""

    name: str
    file: str
    rules: list[PromRuleOut]
    interval: float
    limit: int
    evaluationTime: float
    lastEvaluation: str


class PromRulesData(BaseModel):
    """The rule groups."""

    groups: list[PromGroupOut]


class PromRules(BaseModel):
    """Prometheus' envelope of `GET /api/v1/rules`."""

    status: Literal["success"] = "success"
    data: PromRulesData


class AlertCounts(BaseModel):
    """How many alerts of a rule are pending and firing."""

    pending: int
    firing: int


class RuleOut(BaseModel):
    """One loaded rule."""

    name: str
    metrics: list[str]
    labelsMatch: dict[str, str]
    condition: str
    for_: float = Field(alias="for")
    keepFiringFor: float
    consecutive: int
    severity: str
    labels: dict[str, str]
    annotations: dict[str, str]
    notify: list[str]
    lastEvaluation: str | None
    lastError: str | None
    alerts: AlertCounts


class SourceOut(BaseModel):
    """One configured source and its health. `config` is the rules-file entry with secrets as `**********`."""

    name: str
    type: str
    interval: float
    up: bool
    """The last poll worked and the source is not disabled."""
    state: Literal["up", "down", "disabled", "unknown"]
    """`disabled`: the source reads nothing by design (nvml without a driver; `note` says why); `unknown`: no
    poll yet."""
    note: str | None
    """Why a disabled source is, or what a source has to say (a text log none of whose lines matched)."""
    failures: int
    lastPoll: str | None
    lastError: str | None
    lag: float | None
    samples: int
    errors: int
    reads: int
    """Reads started: polls, and wake-ups by file-system notifications."""
    watch: str | None
    """How a file source learns of changes: `notify`, or `poll (why)`; null for the other sources."""
    config: dict[str, Any]


class WriterOut(BaseModel):
    """The process writing a run: `verified` when alertd proved it is the run's writer, `verifiedBy` how:
    `holds` (seen holding the run's file open for writing, and owning it) or `owner` (its uid owns the
    file, and it started before the file was created: torch's writer, which holds nothing between flushes)."""

    host: str
    pid: int
    verified: bool
    verifiedBy: Literal["holds", "owner"] | None = None
    alive: bool
    holding: bool


class RunOut(BaseModel):
    """One run: `state` running, stalled or ended; `reason` finished, crashed, killed, lost or unknown once ended."""

    source: str
    run: str
    title: str
    """How the pages show the run: its label, or for a TensorBoard logdir's root run (`.`) the logdir's name."""
    state: str
    reason: str | None
    exitCode: int | None
    writer: WriterOut | None
    firstStep: int | None
    lastStep: int | None
    firstSample: str | None
    lastSample: str | None
    endedAt: str | None
    actions: list[dict[str, Any]] = Field(default_factory=list)
    """What the actions did about the run, oldest first, the newest 20: `action`, `notifier`, `rule`, `refused`
    (why not, or null), `summary`, `time` (RFC 3339), and the report's own fields where it has them (lr_scale,
    skip_step, save: `acked`, `step`, `old_lr`, `new_lr`, `checkpoint`; recover: `phase`, `attempt`, `plan`,
    `checkpoint`, `step`, `old_lr`, `new_lr`; stacks: `target`, `host`, `pid`, `took` and `processes`, per process
    `pid`, `rank`, `method`, `error`, `frames`, `truncated` and the whole `dump`)."""


class SeriesOut(BaseModel):
    """One buffered series; `id` names it in `GET /api/v1/series/{id}`."""

    id: str
    metric: str
    labels: dict[str, str]
    samples: int
    lastValue: Value | None
    lastTime: str | None
    lastStep: int | None


class SeriesList(BaseModel):
    """The series matching a query, and how many matched before `limit` cut the list."""

    total: int
    series: list[SeriesOut]


class SampleOut(BaseModel):
    """One buffered sample (`time` null where the source gave one RFC 3339 can't write)."""

    time: str | None
    step: int | None
    value: Value


class SeriesSamples(BaseModel):
    """The newest samples of one series, oldest first."""

    id: str
    metric: str
    labels: dict[str, str]
    samples: list[SampleOut]


class MatcherIn(_In):
    """An Alertmanager v2 matcher: `isRegex` for `=~`/`!~`, `isEqual: false` for `!=`/`!~`."""

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_.]*$", max_length=200)
    value: str = Field(max_length=10_000)
    isRegex: bool = False
    isEqual: bool = True


class MatcherOut(BaseModel):
    """A matcher of a silence."""

    name: str
    value: str
    isRegex: bool
    isEqual: bool


class SilenceIn(_In):
    """A new silence: `endsAt`, or `duration` (`2h`, or seconds) counted from `startsAt` (default: now)."""

    matchers: list[MatcherIn] = Field(min_length=1, max_length=100)
    startsAt: datetime | None = None
    endsAt: datetime | None = None
    duration: str | float | None = None
    createdBy: str = Field(default="", max_length=1000)
    comment: str = Field(default="", max_length=10_000)


class SilenceState(BaseModel):
    """`pending`, `active` or `expired`."""

    state: str


class SilenceOut(BaseModel):
    """A silence."""

    id: str
    matchers: list[MatcherOut]
    startsAt: str
    endsAt: str
    createdBy: str
    comment: str
    status: SilenceState


class SilenceId(BaseModel):
    """The id of a silence just made."""

    id: str


class ReloadOut(BaseModel):
    """`ok`, or `error` with the problems (the running rules stay)."""

    status: str
    errors: list[str] = Field(default_factory=list)


class DryRunSourceIn(_In):
    """Recorded data on the server, under one of the allowed roots: a logdir or a run directory, one
    samples, text-log or CSV file (no glob), or an MLflow file store (`mlruns/`; no tracking server)."""

    type: Literal["tensorboard", "wandb_dir", "samples", "textlog", "csv", "mlflow"]
    path: str = Field(min_length=1, max_length=4096)


class DryRunIn(_In):
    """A dry run: rules (YAML text or a JSON object of a rules file) over inline samples and/or a source.

    `${VAR}` in these rules is never expanded from the server's environment (`${VAR:-default}` takes
    the default); `until` (RFC 3339 or epoch seconds) evaluates time-based conditions up to that instant.
    """

    rules: str | dict[str, Any]
    samples: list[dict[str, Any]] = Field(default_factory=list)
    source: DryRunSourceIn | None = None
    until: float | str | None = None
    plot: bool = False
    """Also draw each run (the first 10) as an SVG with its alert spans: the answer's `plots`."""


class TransitionOut(BaseModel):
    """A transition, as one line of `alertd dry-run --format json`."""

    rule: str
    state: str
    time: str
    step: int | None
    value: Value
    labels: dict[str, str]
    severity: str
    annotations: dict[str, str] | None = None


class NotificationOut(BaseModel):
    """A notification the route would have sent (it was not sent)."""

    receiver: str
    status: str
    groupKey: str
    groupLabels: dict[str, str]
    time: str
    alerts: list[TransitionOut]


class PlotOut(BaseModel):
    """One run drawn: its key series as line charts, alert spans shaded, NaN/Inf marked (an SVG document)."""

    source: str
    run: str
    svg: str


class DryRunOut(BaseModel):
    """What the rules would have done."""

    samples: int
    transitions: list[TransitionOut]
    notifications: list[NotificationOut]
    recoveries: list[dict[str, Any]] = Field(default_factory=list)
    """What each `recover` notifier would have done about each firing it gets, as the `{"recover": ...}` lines of
    `alertd dry-run --format json` say: notifier, rule, step, run, source, time, `plan` (the plan file's body:
    attempt, checkpoint, checkpoint_step, skip, lr_factor, incident; null: none), `refused` (why none; null with
    a plan), `give_up` (the run would have been stopped for good). Plain objects: their nulls are kept."""
    plots: list[PlotOut] | None = None


def silence_json(s: Silence, now: float) -> dict[str, Any]:
    """A silence as the API shows it (Alertmanager v2 field names)."""
    return {
        "id": s.id,
        "matchers": [
            {
                "name": x.name,
                "value": x.value,
                "isRegex": x.op in (MatchOp.RE, MatchOp.NRE),
                "isEqual": x.op in (MatchOp.EQ, MatchOp.RE),
            }
            for x in s.matchers
        ],
        "startsAt": format_time(s.starts_at),
        "endsAt": format_time(s.ends_at),
        "createdBy": s.created_by,
        "comment": s.comment,
        "status": {"state": s.state(now)},
    }


def parse_instant(name: str, text: str) -> float:
    """A query parameter's instant: epoch seconds or RFC 3339 (UTC without an offset), between 1970 and 9999.
    Raise ValueError naming the parameter otherwise."""
    try:
        t = float(text)
    except ValueError:
        try:
            dt = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            raise ValueError(f"{name}: expected epoch seconds or an RFC 3339 time, got {text[:100]!r}") from None
        t = (dt if dt.tzinfo else dt.replace(tzinfo=UTC)).timestamp()
    if not (math.isfinite(t) and 0 <= t <= MAX_TIME):
        raise ValueError(f"{name}: must be a time between 1970 and 9999, got {text[:100]!r}")
    return t


def time_or_none(t: float | None) -> str | None:
    """`t` as RFC 3339, or None where there is none or it can't be written so (NaN, infinite, past 9999)."""
    if t is None or not (math.isfinite(t) and -MAX_TIME <= t <= MAX_TIME):
        return None
    try:
        return format_time(t)
    except (ValueError, OverflowError, OSError):
        return None


def _epoch(dt: datetime, name: str) -> float:
    t = (dt if dt.tzinfo else dt.replace(tzinfo=UTC)).timestamp()
    if not 0 <= t <= MAX_TIME:
        raise ValueError(f"{name} must be between 1970 and 9999")
    return t


def silence_from(body: SilenceIn, now: float) -> Silence:
    matchers = []
    for i, x in enumerate(body.matchers):
        op = {(False, True): MatchOp.EQ, (False, False): MatchOp.NE, (True, True): MatchOp.RE}
        try:
            matchers.append(Matcher(x.name, op.get((x.isRegex, x.isEqual), MatchOp.NRE), x.value))
        except ValueError as exc:
            raise ValueError(f"matchers[{i}]: {exc}") from None
    start = _epoch(body.startsAt, "startsAt") if body.startsAt else now
    if (body.endsAt is None) == (body.duration is None):
        raise ValueError("give either endsAt or duration")
    if body.endsAt is not None:
        end = _epoch(body.endsAt, "endsAt")
    else:
        try:
            seconds = parse_duration(body.duration)  # type: ignore[arg-type]
        except (ValueError, TypeError, OverflowError) as exc:
            raise ValueError(f"duration: {exc}") from None
        if not (math.isfinite(seconds) and seconds > 0 and start + seconds <= MAX_TIME):
            raise ValueError("duration must be positive and end before the year 9999")
        end = start + seconds
    if end <= start:
        raise ValueError("endsAt must be after startsAt")
    return Silence(new_silence_id(), tuple(matchers), start, end, body.createdBy, body.comment)
