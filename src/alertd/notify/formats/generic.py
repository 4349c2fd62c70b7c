"""`generic`: the Alertmanager webhook payload, version 4, so every existing Alertmanager receiver works.

The body is exactly Alertmanager's, field for field, alert order and `max_alerts` truncation included (no
extra fields): the idempotency key travels as the `Idempotency-Key` header only.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from functools import cmp_to_key

from alertd.model import Labels, Notification, Transition, am_labels, format_time, shown_annotations
from alertd.notify.formats.common import JSON, Format, Options, Reply, check_http, firing, shown_alerts

GO_ZERO_TIME = "0001-01-01T00:00:00Z"
"""What Alertmanager sends as `endsAt` while an alert fires (Go's zero time)."""


def alert_labels(t: Transition) -> dict[str, str]:
    """The alert's labels as Alertmanager knows them: the series labels plus `alertname` and `severity`."""
    return dict(am_labels(t.rule, t.labels, t.severity))


def _common(maps: list[dict[str, str]]) -> dict[str, str]:
    if not maps:
        return {}
    first, *rest = maps
    return {k: v for k, v in first.items() if all(m.get(k) == v for m in rest)}


def _alert(t: Transition, opts: Options) -> JSON:
    is_firing = firing(t)
    starts = t.since
    return {
        "status": "firing" if is_firing else "resolved",
        "labels": alert_labels(t),
        "annotations": shown_annotations(t),
        "startsAt": format_time(starts),
        "endsAt": GO_ZERO_TIME if is_firing else format_time(t.time),
        "generatorURL": generator_url(opts, t.rule),
        "fingerprint": t.fingerprint,
    }


def generator_url(opts: Options, rule: str) -> str:
    """A link to the rule in alertd's API when `external_url` is configured, else empty."""
    return f"{opts.external_url.rstrip('/')}/api/v1/rules#{rule}" if opts.external_url else ""


def _dict(labels: Labels) -> dict[str, str]:
    return dict(labels)


def _am_before(a: dict[str, str], b: dict[str, str]) -> bool:
    """Alertmanager's `AlertSlice.Less`: by `job`, then `instance` (an alert with the label before one
    without), then prometheus' `LabelSet.Before` (fewer labels first, then name by name)."""
    for key in ("job", "instance"):
        if key not in a and key not in b:
            continue
        if key not in a:
            return False
        if key not in b:
            return True
        if a[key] != b[key]:
            return a[key] < b[key]
    if len(a) != len(b):
        return len(a) < len(b)
    for name in sorted([*a, *b]):
        if name not in a:
            return True
        if name not in b:
            return False
        if a[name] != b[name]:
            return a[name] < b[name]
    return False


def am_sorted(alerts: Iterable[Transition]) -> list[Transition]:
    """The alerts in the order Alertmanager sends a group's alerts (a stable sort by `_am_before`)."""

    def cmp(x: tuple[Transition, dict[str, str]], y: tuple[Transition, dict[str, str]]) -> int:
        return -1 if _am_before(x[1], y[1]) else (1 if _am_before(y[1], x[1]) else 0)

    pairs = [(t, alert_labels(t)) for t in alerts]
    return [t for t, _ in sorted(pairs, key=cmp_to_key(cmp))]


def _quote_meta(text: str) -> str:
    """Go's `regexp.QuoteMeta`, which Alertmanager applies to the receiver's name in the body."""
    return "".join("\\" + c if c in r"\.+*?()|[]{}^$" else c for c in text)


def build(n: Notification, opts: Options) -> JSON:
    """Alertmanager's v4 webhook body for `n`, field for field.

    As Alertmanager: the alerts in its order, then cut to `max_alerts` (`truncatedAlerts` counts the rest),
    and `status`, `commonLabels` and `commonAnnotations` taken over the alerts sent, not the ones cut.
    """
    ordered = am_sorted(n.alerts)
    shown, truncated = shown_alerts(replace(n, alerts=tuple(ordered)), opts)
    return {
        "receiver": _quote_meta(n.receiver),
        "status": "firing" if any(firing(t) for t in shown) else "resolved",
        "alerts": [_alert(t, opts) for t in shown],
        "groupLabels": _dict(n.group_labels),
        "commonLabels": _common([alert_labels(t) for t in shown]),
        "commonAnnotations": _common([shown_annotations(t) for t in shown]),
        "externalURL": opts.external_url.rstrip("/"),  # as Alertmanager trims its --web.external-url
        "version": "4",
        "groupKey": n.group_key,
        "truncatedAlerts": truncated,
    }


def check(reply: Reply) -> None:
    """Any 2xx is delivered; 429/5xx are recoverable, other statuses are not."""
    check_http(reply, "webhook receiver")


FORMAT = Format(name="generic", build=build, check=check)
