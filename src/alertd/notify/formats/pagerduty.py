"""`pagerduty`: PagerDuty's Events API v2 (`POST https://events.pagerduty.com/v2/enqueue`).

One event per notification, as Alertmanager's PagerDuty integration sends: `dedup_key` is the SHA-256 of
the group's key, so the group's trigger and its later resolve name the same PagerDuty alert. A firing
notification triggers (again: PagerDuty folds repeats into the open alert), a resolved one resolves. The
`routing_key` (a secret) is added by `prepare`, never by `build`, so a dry-run payload does not show it.
Limits (PagerDuty's documentation): summary 1024 characters, dedup_key 255, an event 512 KB; answers are
202 (accepted), 400 (invalid event: permanent), 429 (throttled) and 5xx (retry).
"""

from __future__ import annotations

import hashlib

from alertd.errors import NotifyError
from alertd.model import Notification, Transition, format_time
from alertd.notify.formats.common import (
    JSON,
    Format,
    Options,
    Reply,
    Signed,
    body_lines,
    check_http,
    cut,
    firing,
    fit_lines,
    heading,
    one_line,
    shown_alerts,
    snippet,
)

SUMMARY_LIMIT = 1024
DETAILS_LIMIT = 16 * 1024
"""The alert lines in `custom_details` stay under this many characters (the whole event may be 512 KB)."""

SEVERITIES = ("critical", "error", "warning", "info")
"""PagerDuty's severities, most severe first; an alert severity outside them is sent as `error`."""


def dedup_key(n: Notification) -> str:
    """The PagerDuty alert this notification's group maps to (the same for its trigger and its resolve)."""
    return hashlib.sha256(n.group_key.encode()).hexdigest()


def severity(alerts: tuple[Transition, ...]) -> str:
    """The most severe of the firing alerts' severities as PagerDuty names them (critical, warning, info;
    anything else is `error`)."""
    mapped = [a.severity if a.severity in SEVERITIES else "error" for a in alerts if firing(a)] or ["error"]
    return min(mapped, key=SEVERITIES.index)


def _common(alerts: tuple[Transition, ...], label: str) -> str | None:
    values = {dict(a.labels).get(label) for a in alerts}
    value = values.pop() if len(values) == 1 else None
    return cut(value, 255) if value else None


def build(n: Notification, opts: Options) -> JSON:
    """The Events API v2 event for `n`: a trigger while the group fires, a resolve once it has resolved."""
    key = dedup_key(n)
    if n.status != "firing":
        return {"event_action": "resolve", "dedup_key": key}
    shown, omitted = shown_alerts(n, opts)
    lines, omitted = body_lines(shown, omitted, opts)
    payload: JSON = {
        "summary": cut(one_line(heading(n, opts)), SUMMARY_LIMIT),
        "source": _common(n.alerts, "run") or "alertd",
        "severity": severity(n.alerts),
        "timestamp": format_time(n.created),
    }
    for field, value in (
        ("component", _common(n.alerts, "metric")),
        ("group", _common(n.alerts, "source")),
        ("class", cut(", ".join(sorted({a.rule for a in n.alerts})), 255)),
    ):
        if value:
            payload[field] = value
    payload["custom_details"] = {
        "alerts": fit_lines("", lines, DETAILS_LIMIT, omitted=omitted),
        "firing": sum(1 for a in n.alerts if firing(a)),
        "resolved": sum(1 for a in n.alerts if not firing(a)),
        "group_labels": {k: cut(v, 1024) for k, v in n.group_labels},
        "receiver": n.receiver,
    }
    event: JSON = {"event_action": "trigger", "dedup_key": key, "payload": payload, "client": "alertd"}
    if opts.external_url:
        event["client_url"] = opts.external_url
    return event


def prepare(url: str, payload: JSON, secret: str | None, now: float) -> Signed:
    """Put the integration's `routing_key` first in the event."""
    if not secret:
        raise NotifyError("pagerduty format needs routing_key", recoverable=False)
    return Signed(url, {"routing_key": secret, **payload})


def check(reply: Reply) -> None:
    """202 is accepted; 400 (an invalid event) is final; 429 and 5xx are retried, honouring `Retry-After`."""
    body = reply.json()
    detail = ""
    if isinstance(body, dict):
        errors = body.get("errors")
        parts = [str(body.get("message") or body.get("status") or "")]
        if isinstance(errors, list):
            parts += [str(e) for e in errors[:5]]
        detail = "; ".join(p for p in parts if p)
    check_http(reply, "PagerDuty", snippet(detail or reply.text))


FORMAT = Format(name="pagerduty", build=build, prepare=prepare, check=check, rate_limit=(120, 60.0))
