"""Notifier `title`/`text` templates: checked at load, rendered over a notification with Alertmanager's data.

The names are those of Alertmanager's template `Data` (template/template.go), in the Jinja spelling:

- `status` (`firing`/`resolved`), `receiver`, `externalURL`,
- `groupLabels`, `commonLabels`, `commonAnnotations` (a missing key prints `<no value>`),
- `alerts`: one entry per alert, each with `status`, `labels`, `annotations`, `startsAt`, `endsAt`
  (RFC 3339 text; `endsAt` is Go's zero time while it fires), `generatorURL`, `fingerprint`, and alertd's
  `value`, `step`, `rule`, `severity`.

The Go names work too: `.Status`, `.Receiver`, `.Alerts` (each with `.Labels`, `.Annotations`,
`.StartsAt`, `.EndsAt`, `.GeneratorURL`, `.Fingerprint`, `.Value`), `.GroupLabels`, `.CommonLabels`,
`.CommonAnnotations`, `.ExternalURL`. Alerts' labels carry `alertname` and `severity` as Alertmanager's do.
"""

from __future__ import annotations

import functools
from typing import Any

from alertd.model import Notification, Transition, TransitionKind, format_time, shown_annotations
from alertd.templating.compiled import Compiled, compile_template
from alertd.templating.errors import CheckError
from alertd.templating.labels import LabelView

GO_ZERO_TIME = "0001-01-01T00:00:00Z"

_NAMES = {
    "status": "Status",
    "receiver": "Receiver",
    "alerts": "Alerts",
    "groupLabels": "GroupLabels",
    "commonLabels": "CommonLabels",
    "commonAnnotations": "CommonAnnotations",
    "externalURL": "ExternalURL",
}
NAMES = tuple(_NAMES)
"""The names a notifier template may use (and their capitalised Go twins)."""
_ALERT_NAMES = {
    "status": "Status",
    "labels": "Labels",
    "annotations": "Annotations",
    "startsAt": "StartsAt",
    "endsAt": "EndsAt",
    "generatorURL": "GeneratorURL",
    "fingerprint": "Fingerprint",
    "value": "Value",
    "step": "Step",
    "rule": "Rule",
    "severity": "Severity",
}
_HINTS = {
    "labels": "a notification has many alerts: use commonLabels.NAME, groupLabels.NAME or alert.labels.NAME "
    "inside {% for alert in alerts %}",
    "value": "a notification has many alerts: use alert.value inside {% for alert in alerts %}",
    "Labels": "use CommonLabels.NAME, or alert.Labels.NAME inside {% for alert in Alerts %}",
}


@functools.lru_cache(maxsize=256)
def compile_notifier_template(source: str) -> Compiled:
    """Check and compile a notifier template; CheckError naming the line and column if it is bad."""
    return compile_template(source, (*_NAMES, *_NAMES.values()), hints=_HINTS)


def check_notifier_template(source: str) -> str:
    """The pydantic validator of `title:`/`text:`: the source, or ValueError naming the template's place."""
    try:
        compile_notifier_template(source)
    except CheckError as e:
        raise ValueError(f"template {e}") from None
    return source


def _alert_labels(t: Transition) -> dict[str, str]:
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


def template_data(n: Notification, external_url: str = "") -> dict[str, Any]:
    """The data a notifier template sees for `n` (Alertmanager's names and their Go twins)."""
    missing: list[str] = []  # a missing key prints <no value>: that is no failure for a notification
    alerts = []
    label_maps = [_alert_labels(t) for t in n.alerts]
    for t, labels in zip(n.alerts, label_maps, strict=True):
        firing = t.state in (TransitionKind.FIRING, TransitionKind.PENDING)
        alert = {
            "status": "firing" if firing else "resolved",
            "labels": LabelView(labels, missing),
            "annotations": LabelView(shown_annotations(t), missing),
            "startsAt": format_time(t.since),
            "endsAt": GO_ZERO_TIME if firing else format_time(t.time),
            "generatorURL": f"{external_url.rstrip('/')}/api/v1/rules#{t.rule}" if external_url else "",
            "fingerprint": t.fingerprint,
            "value": t.value,
            "step": t.step,
            "rule": t.rule,
            "severity": t.severity,
        }
        alert.update({go: alert[name] for name, go in _ALERT_NAMES.items()})
        alerts.append(alert)
    data: dict[str, Any] = {
        "status": n.status,
        "receiver": n.receiver,
        "alerts": alerts,
        "groupLabels": LabelView(dict(n.group_labels), missing),
        "commonLabels": LabelView(_common(label_maps), missing),
        "commonAnnotations": LabelView(_common([shown_annotations(t) for t in n.alerts]), missing),
        "externalURL": external_url,
    }
    data.update({go: data[name] for name, go in _NAMES.items()})
    return data
