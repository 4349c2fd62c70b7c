"""`generic`: the Alertmanager webhook payload, version 4, so every existing Alertmanager receiver works.

The body is exactly Alertmanager's (no extra fields): the idempotency key travels as a header only.
"""

from __future__ import annotations

from alertd.model import Labels, Notification, Transition, format_time
from alertd.notify.formats.common import JSON, Format, Options, Reply, check_http, firing, shown_alerts

GO_ZERO_TIME = "0001-01-01T00:00:00Z"
"""What Alertmanager sends as `endsAt` while an alert fires (Go's zero time)."""


def alert_labels(t: Transition) -> dict[str, str]:
    """The alert's labels as Alertmanager knows them: the series labels plus `alertname` and `severity`."""
    labels = dict(t.labels)
    labels["alertname"] = t.rule
    if t.severity:
        labels["severity"] = t.severity
    return dict(sorted(labels.items()))


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
        "annotations": dict(t.annotations),
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


def build(n: Notification, opts: Options) -> JSON:
    """The Alertmanager v4 webhook body for `n`; `truncatedAlerts` counts what `max_alerts` left out."""
    shown, truncated = shown_alerts(n, opts)
    return {
        "version": "4",
        "groupKey": n.group_key,
        "truncatedAlerts": truncated,
        "status": n.status,
        "receiver": n.receiver,
        "groupLabels": _dict(n.group_labels),
        "commonLabels": _common([alert_labels(t) for t in n.alerts]),
        "commonAnnotations": _common([dict(t.annotations) for t in n.alerts]),
        "externalURL": opts.external_url,
        "alerts": [_alert(t, opts) for t in shown],
    }


def check(reply: Reply) -> None:
    """Any 2xx is delivered; 429/5xx are recoverable, other statuses are not."""
    check_http(reply, "webhook receiver")


FORMAT = Format(name="generic", build=build, check=check)
