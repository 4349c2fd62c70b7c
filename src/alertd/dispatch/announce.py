"""Turning what an action notifier did (a kill, a W&B run stopped, a Slurm job cancelled) into
notifications for people (pure)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Protocol

from alertd.dispatch.matchers import alert_label_map
from alertd.dispatch.routes import Route
from alertd.model import Alert, Notification, Transition, TransitionKind, make_labels


class Signal(Protocol):
    """One signal sent."""

    @property
    def name(self) -> str: ...
    @property
    def time(self) -> float: ...


class ActionReport(Protocol):
    """What an action notifier reports (the kill notifier's KillReport, wandb_stop's WandbStopReport).

    `action` names what was done ("kill", "wandb_stop", ...): the announcement's `action` label. A report
    may also have a `stamp` (str) telling it apart from the notifier's other reports on the same alert
    when its signals do not (wandb_stop: the firing's start).
    """

    @property
    def action(self) -> str: ...
    @property
    def notifier(self) -> str: ...
    @property
    def fingerprint(self) -> str: ...
    @property
    def rule(self) -> str: ...
    @property
    def refused(self) -> str | None: ...
    @property
    def signals(self) -> Sequence[Signal]: ...

    def summary(self) -> str: ...


def announcements(
    report: ActionReport, alert: Alert | Transition | None, route: Route, skip: Iterable[str], now: float
) -> list[Notification]:
    """One notification per receiver the alert routes to, but the receivers in `skip` (the actions, and
    those that take no reports). `alert`: the alert as it is, or its last transition when it has ended.

    The alert's labels gain `action` (the report's) and `notifier`; the summary says what was done. The
    group is `{action}:{fingerprint}`; the key includes the signals sent (else whether it was refused and
    the report's `stamp`), so each distinct report is delivered once.
    """
    labels = dict(alert.labels) if alert else {}
    labels |= {"action": report.action, "notifier": report.notifier}
    severity = alert.severity if alert else "critical"
    t = Transition(
        report.rule,
        TransitionKind.FIRING,
        now,
        alert.step if alert else None,
        alert.value if alert else math.nan,
        make_labels(labels),
        severity,
        (("summary", report.summary()),),
        now,
    )
    skipped = set(skip)
    receivers = {r for m in route.match(alert_label_map(report.rule, t.labels, severity)) for r in m.receivers}
    stamp = _stamp(report)
    group = f"{report.action}:{report.fingerprint}"
    return [
        Notification(r, group, (), "firing", (t,), f"{group}:{report.notifier}:{stamp}:{r}", now)
        for r in sorted(receivers - skipped)
    ]


def _stamp(report: ActionReport) -> str:
    """What tells this report apart in its key: the signals sent, else "refused" and the report's own
    stamp, else its stamp alone ("dry" without one: a kill's dry run)."""
    sent = "-".join(f"{s.name}{s.time:.3f}" for s in report.signals)
    if sent:
        return sent
    own = str(getattr(report, "stamp", "") or "")
    if report.refused:
        return f"refused-{own}" if own else "refused"
    return own or "dry"
