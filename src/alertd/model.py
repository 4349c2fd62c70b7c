"""Frozen value types shared by every part of alertd.

Time in the core is a float: seconds since the Unix epoch, UTC. The one clock object
(`alertd.clock.SystemClock`) is the only reader of the wall clock; everything else is given
`now` as an argument. Values keep NaN and +-Inf: they are the most important readings here.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache
from typing import NamedTuple

Labels = tuple[tuple[str, str], ...]
"""Sorted (name, value) pairs: hashable and cheap to compare."""


_UNENCODABLE = re.compile("[\ud800-\udfff]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"


def encodable(text: str) -> str:
    """`text` as UTF-8 can carry it: each lone surrogate written as a backslash escape, everything else kept.

    A byte that is not UTF-8 in a file name (Python's surrogateescape: U+DC80..U+DCFF, from os.listdir and
    os.scandir) becomes the text `\\xNN` (the byte: `bad\\xff`); any other lone surrogate (JSON may carry
    one: `"\\ud800"`) becomes the text `\\uNNNN`. Names and label values are made so where they enter
    (`make_labels`, `SeriesKey`), so that no fingerprint, database row, JSON body or log line fails on them.
    """
    if text.isascii():
        return text
    return _UNENCODABLE.sub(_escape, text)


def make_labels(labels: Mapping[str, str] | Iterable[tuple[str, str]] = ()) -> Labels:
    """Return labels in their canonical, sorted form, dropping empty values; names and values that UTF-8
    can't carry (a file name's invalid bytes, a lone surrogate) are escaped (`encodable`)."""
    items = labels.items() if isinstance(labels, Mapping) else labels
    out = tuple(sorted((str(k), str(v)) for k, v in items if v is not None and v != ""))
    if "".join([k + v for k, v in out]).isascii():
        return out
    return tuple(sorted((encodable(k), encodable(v)) for k, v in out))


@dataclass(frozen=True, slots=True)
class SeriesKey:
    """One time series: a metric name and its labels (`source`, `run`, `gpu`, ...)."""

    metric: str
    labels: Labels = ()
    _hash: int = field(default=0, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.metric.isascii():  # a tag, file or JSON name UTF-8 can't carry: escaped (`encodable`)
            object.__setattr__(self, "metric", encodable(self.metric))
        object.__setattr__(self, "_hash", hash((self.metric, self.labels)))

    def __hash__(self) -> int:
        return self._hash

    def label(self, name: str) -> str | None:
        """Return the value of label `name`, or None."""
        for k, v in self.labels:
            if k == name:
                return v
        return None

    def label_dict(self) -> dict[str, str]:
        """The labels as a new dict."""
        return dict(self.labels)

    def __str__(self) -> str:
        inner = ",".join(f'{k}="{v}"' for k, v in self.labels)
        return f"{self.metric}{{{inner}}}"


class Sample(NamedTuple):
    """One reading: `time` in epoch seconds (UTC), `step` None where the source has none (NVML).

    A named tuple rather than a frozen dataclass: as immutable, and three times quicker to build,
    which matters when a source reads a million of them.
    """

    series: SeriesKey
    time: float
    step: int | None
    value: float


@dataclass(frozen=True, slots=True)
class Restart:
    """A series whose step went backwards: the run resumed from a checkpoint."""

    series: SeriesKey
    time: float
    from_step: int
    to_step: int
    dropped: int


class AlertState(enum.Enum):
    """The states of one alert, as in Prometheus."""

    INACTIVE = "inactive"
    PENDING = "pending"
    FIRING = "firing"


class TransitionKind(enum.Enum):
    """What a transition reports; `resolved` is firing -> inactive, `inactive` is pending -> inactive."""

    PENDING = "pending"
    FIRING = "firing"
    RESOLVED = "resolved"
    INACTIVE = "inactive"


@dataclass(frozen=True, slots=True)
class Transition:
    """A change of state of one alert (one rule on one series) at one instant."""

    rule: str
    state: TransitionKind
    time: float
    step: int | None
    value: float
    labels: Labels
    severity: str
    annotations: tuple[tuple[str, str], ...] = ()
    active_at: float | None = None
    notify: tuple[str, ...] = field(default=())

    @property
    def fingerprint(self) -> str:
        """The alert's identity: Alertmanager's fingerprint of its labels, `alertname` and `severity` included."""
        return alert_fingerprint(self.rule, self.labels, self.severity)

    @property
    def since(self) -> float:
        """When the alert became active (its start), or the transition's time where that is unknown."""
        return self.active_at if self.active_at is not None else self.time

    @property
    def firing_id(self) -> tuple[str, float]:
        """One firing of one alert: its fingerprint and start. Repeats and re-sends share it."""
        return (self.fingerprint, self.since)


@dataclass(frozen=True, slots=True)
class Alert:
    """An alert that is pending or firing now."""

    rule: str
    state: AlertState
    labels: Labels
    severity: str
    value: float
    step: int | None
    time: float
    active_at: float
    fired_at: float | None
    annotations: tuple[tuple[str, str], ...] = ()
    notify: tuple[str, ...] = ()
    fingerprint: str = field(init=False, repr=False, compare=False)
    """The alert's identity: Alertmanager's fingerprint of its labels, `alertname` and `severity` included (worked
    out once, as the alert is made: a plan looks it up for every firing alert)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "fingerprint", alert_fingerprint(self.rule, self.labels, self.severity))


def am_labels(rule: str, labels: Labels, severity: str) -> Labels:
    """The alert's labels as Alertmanager knows them: its own, `alertname` (the rule's name) and, when the
    rule sets one, `severity`. The webhook body shows these and the fingerprint is taken over them."""
    out = dict(labels)
    out["alertname"] = rule
    if severity:
        out["severity"] = severity
    return tuple(sorted(out.items()))


def labels_fingerprint(labels: Iterable[tuple[str, str]]) -> str:
    """Alertmanager's fingerprint (`model.LabelSet.Fingerprint` of prometheus/common): FNV-1a 64 over the
    labels sorted by name, each name and value followed by a 0xff byte; 16 hex digits. Never fails: a lone
    surrogate (labels are escaped where they are made: `make_labels`) is hashed as its UTF-8 form."""
    h = 0xCBF29CE484222325
    text = [(n.encode("utf-8", "surrogatepass"), v.encode("utf-8", "surrogatepass")) for n, v in sorted(labels)]
    for byte in b"".join(n + b"\xff" + v + b"\xff" for n, v in text):
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


@lru_cache(maxsize=65536)
def alert_fingerprint(rule: str, labels: Labels, severity: str = "") -> str:
    """The alert's identity: Alertmanager's fingerprint of `am_labels(rule, labels, severity)`, so the same
    alert has the same fingerprint here, in alertd's webhook bodies and in a real Alertmanager."""
    return labels_fingerprint(am_labels(rule, labels, severity))


def legacy_fingerprint(rule: str, labels: Labels) -> str:
    """The fingerprint alertd used before it took Alertmanager's (rule and labels; no severity): kept only
    to read a state directory written by an older alertd (`alertd.dispatch.plan.migrate_fingerprints`)."""
    h = 0xCBF29CE484222325
    for part in (rule, *(f"{k}\x00{v}" for k, v in labels)):
        for byte in part.encode("utf-8", "surrogatepass") + b"\xff":
            h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def format_value(value: float) -> str | float:
    """JSON form of a value: a number, or the string NaN, +Inf or -Inf."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return value


RESOLVED_SUMMARY = "resolved_summary"
"""The annotation a rule may give for the words of its resolved notifications (`{{ metric }} back to {{ value }}`)."""
RUN_ENDED = "run_ended"
"""The annotation the engine gives an alert that its run's end resolved (`run r1 ended; loss was NaN at step 9`):
said instead of "back to" (the condition may still hold on the last sample); not shown as an annotation."""


def value_text(value: float) -> str:
    """A value as a person reads it: `NaN`, `+Inf`, `0.1235`, `1.2e+06`."""
    v = format_value(value)
    return v if isinstance(v, str) else f"{v:.6g}"


def resolved_text(t: Transition) -> str:
    """What a resolved alert says by default: `train/grad_norm back to 1.1 at step 9` (never the firing words,
    which rendered at the resolution's value would claim the condition still holds)."""
    ended = dict(t.annotations).get(RUN_ENDED)
    if ended:
        return ended
    metric = dict(t.labels).get("metric", "the series")
    return f"{metric} back to {value_text(t.value)}" + (f" at step {t.step}" if t.step is not None else "")


def shown_annotations(t: Transition) -> dict[str, str]:
    """The annotations a notification shows for `t`: while it fires, the rule's own (without
    `resolved_summary`); once resolved, `summary` says so: the rule's `resolved_summary`, else `resolved_text`."""
    notes = dict(t.annotations)
    resolved = notes.pop(RESOLVED_SUMMARY, None)
    notes.pop(RUN_ENDED, None)
    if t.state not in (TransitionKind.FIRING, TransitionKind.PENDING) and ("summary" in notes or resolved):
        notes["summary"] = resolved or resolved_text(t)
    return notes


def format_time(t: float) -> str:
    """RFC 3339 UTC with a Z; milliseconds only where the instant has them."""
    dt = datetime.fromtimestamp(t, tz=UTC)
    if dt.microsecond:
        return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"
    return dt.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True, slots=True)
class Notification:
    """What one receiver is sent for one group of alerts.

    `status` is `firing` when any alert in the group fires, else `resolved`. `key` is the idempotency
    key (group fingerprint + start time + state) that lets a receiver drop a repeat.
    """

    receiver: str
    group_key: str
    group_labels: Labels
    status: str
    alerts: tuple[Transition, ...]
    key: str
    created: float
