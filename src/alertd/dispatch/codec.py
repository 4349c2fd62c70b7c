"""JSON form of notifications and open groups for the outbox: every field kept, NaN and ±Inf as strings."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from alertd.model import Labels, Notification, Transition, TransitionKind, format_value


def _value(raw: Any) -> float:
    if raw == "NaN":
        return math.nan
    if raw == "+Inf":
        return math.inf
    if raw == "-Inf":
        return -math.inf
    return float(raw)


def _time(t: float | None) -> float | str | None:
    """A time as JSON: a number, or the string of a NaN or infinite one (a source's odd time; never an error)."""
    return t if t is None or math.isfinite(t) else format_value(t)


def transition_to_dict(t: Transition) -> dict[str, Any]:
    """A transition as plain JSON types."""
    return {
        "rule": t.rule,
        "state": t.state.value,
        "time": _time(t.time),
        "step": t.step,
        "value": format_value(t.value),
        "labels": [list(p) for p in t.labels],
        "severity": t.severity,
        "annotations": [list(p) for p in t.annotations],
        "active_at": _time(t.active_at),
        "notify": list(t.notify),
    }


def transition_from_dict(d: dict[str, Any]) -> Transition:
    """The inverse of `transition_to_dict`."""
    return Transition(
        rule=d["rule"],
        state=TransitionKind(d["state"]),
        time=_value(d["time"]),
        step=d["step"],
        value=_value(d["value"]),
        labels=tuple((str(k), str(v)) for k, v in d["labels"]),
        severity=d["severity"],
        annotations=tuple((str(k), str(v)) for k, v in d["annotations"]),
        active_at=None if d["active_at"] is None else _value(d["active_at"]),
        notify=tuple(d["notify"]),
    )


def dumps(n: Notification) -> str:
    """The notification as one strict JSON document (no bare NaN)."""
    doc = {
        "receiver": n.receiver,
        "group_key": n.group_key,
        "group_labels": [list(p) for p in n.group_labels],
        "status": n.status,
        "alerts": [transition_to_dict(t) for t in n.alerts],
        "key": n.key,
        "created": n.created,
    }
    return _dumps(doc)


def loads(text: str) -> Notification:
    """The inverse of `dumps`."""
    d = json.loads(text)
    return Notification(
        receiver=d["receiver"],
        group_key=d["group_key"],
        group_labels=tuple((str(k), str(v)) for k, v in d["group_labels"]),
        status=d["status"],
        alerts=tuple(transition_from_dict(a) for a in d["alerts"]),
        key=d["key"],
        created=float(d["created"]),
    )


def group_to_json(route_key: str, labels: Labels, alerts: Mapping[str, Transition], next_flush: float) -> str:
    """An open aggregation group as JSON: its route's key, labels, latest transition per alert, next flush."""
    doc = {
        "route": route_key,
        "labels": [list(p) for p in labels],
        "alerts": {fp: transition_to_dict(t) for fp, t in alerts.items()},
        "next_flush": _time(next_flush),
    }
    return _dumps(doc)


class GroupTexts:
    """`group_to_json` for a dispatcher's open groups, each alert's part kept while its transition is the same
    object: a group that holds thousands of alerts (a storm in one group) is written whenever one joins it, and
    then costs a join of the parts kept, not every alert turned into JSON again. The text is the same as
    `group_to_json`'s, character for character."""

    def __init__(self) -> None:
        self._parts: dict[str, dict[str, tuple[Transition, str]]] = {}

    def text(
        self, key: str, route_key: str, labels: Labels, alerts: Mapping[str, Transition], next_flush: float
    ) -> str:
        """`group_to_json` of the group `key` (its alerts' parts kept for the next call)."""
        last = self._parts.get(key, {})
        parts: dict[str, tuple[Transition, str]] = {}
        for fp, t in alerts.items():
            hit = last.get(fp)
            if hit is None or hit[0] is not t:
                hit = (t, _dumps(fp) + ":" + _dumps(transition_to_dict(t)))
            parts[fp] = hit
        self._parts[key] = parts
        head = _dumps({"route": route_key, "labels": [list(p) for p in labels]})
        tail = _dumps(_time(next_flush))
        return head[:-1] + ',"alerts":{' + ",".join(part for _, part in parts.values()) + '},"next_flush":' + tail + "}"

    def forget(self, key: str) -> None:
        """The group `key` is gone."""
        self._parts.pop(key, None)


def _dumps(doc: Any) -> str:
    """`doc` as strict, compact JSON (no bare NaN: a non-finite number is an error)."""
    return json.dumps(doc, allow_nan=False, separators=(",", ":"))


def group_from_json(text: str) -> tuple[str, Labels, dict[str, Transition], float]:
    """The inverse of `group_to_json`."""
    d = json.loads(text)
    labels = tuple((str(k), str(v)) for k, v in d["labels"])
    alerts = {str(fp): transition_from_dict(a) for fp, a in d["alerts"].items()}
    return str(d["route"]), labels, alerts, _value(d["next_flush"])
