"""Turning what an action notifier did (a kill, a stop file) into notifications for people (pure)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Protocol

from alertd.dispatch.matchers import alert_label_map
from alertd.dispatch.routes import Route
from alertd.model import Alert, Notification, Transition, TransitionKind, make_labels


class Signal(Protocol):
    """One signal sent."""

    name: str
    time: float


class ActionReport(Protocol):
    """What an action notifier reports (the kill notifier's KillReport has this shape)."""

    notifier: str
    fingerprint: str
    rule: str
    refused: str | None
    signals: Sequence[Signal]

    def summary(self) -> str: ...


def announcements(
    report: ActionReport, alert: Alert | None, route: Route, skip: Iterable[str], now: float
) -> list[Notification]:
    """One notification per receiver the alert routes to, but the receivers in `skip` (the actions).

    The alert's labels gain `action: kill` and `notifier`; the summary says what was done. The key
    includes the signals sent, so each distinct report is delivered once.
    """
    labels = dict(alert.labels) if alert else {}
    labels |= {"action": "kill", "notifier": report.notifier}
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
    stamp = "-".join(f"{s.name}{s.time:.3f}" for s in report.signals) or ("refused" if report.refused else "dry")
    group = f"kill:{report.fingerprint}"
    return [
        Notification(r, group, (), "firing", (t,), f"{group}:{report.notifier}:{stamp}:{r}", now)
        for r in sorted(receivers - skipped)
    ]
