"""The generic format: Alertmanager's webhook body, version 4, field by field, over a real HTTP server."""

from __future__ import annotations

import pytest
from notify_helpers import T0, RecordingServer, notification, send, transition, webhook

from alertd.model import TransitionKind

V4_KEYS = {
    "version",
    "groupKey",
    "truncatedAlerts",
    "status",
    "receiver",
    "groupLabels",
    "commonLabels",
    "commonAnnotations",
    "externalURL",
    "alerts",
}
ALERT_KEYS = {"status", "labels", "annotations", "startsAt", "endsAt", "generatorURL", "fingerprint"}


@pytest.mark.anyio
async def test_firing_body_is_alertmanager_v4_exactly(server: RecordingServer) -> None:
    a = transition(run="exp1")
    b = transition(run="exp1", metric="eval/loss", summary="eval/loss is NaN")
    n = notification(a, b)
    await send(webhook(server.url()), n)

    req = server.last
    assert req.method == "POST" and req.route == "/hook"
    assert req.headers["content-type"] == "application/json"
    body = req.json()
    assert set(body) == V4_KEYS  # nothing extra: the idempotency key travels as a header only
    assert body["version"] == "4"
    assert body["groupKey"] == n.group_key
    assert body["truncatedAlerts"] == 0
    assert body["status"] == "firing"
    assert body["receiver"] == "chat"
    assert body["groupLabels"] == {"rule": "loss_not_finite", "run": "exp1"}
    assert body["commonLabels"] == {
        "alertname": "loss_not_finite",
        "run": "exp1",
        "severity": "critical",
        "source": "tb",
    }
    assert body["commonAnnotations"] == {}  # the summaries differ
    assert body["externalURL"] == ""
    # Alertmanager's order: same label names, so by label values: eval/loss before train/loss
    assert [x["labels"]["metric"] for x in body["alerts"]] == ["eval/loss", "train/loss"]
    first = body["alerts"][1]
    assert set(first) == ALERT_KEYS
    assert first == {
        "status": "firing",
        "labels": {
            "alertname": "loss_not_finite",
            "metric": "train/loss",
            "run": "exp1",
            "severity": "critical",
            "source": "tb",
        },
        "annotations": {"summary": "train/loss is NaN at step 250 in exp1"},
        "startsAt": "2026-05-28T20:26:40Z",
        "endsAt": "0001-01-01T00:00:00Z",
        "generatorURL": "",
        # what a real Alertmanager 0.25 shows for these labels (tests/alertmanager checks it live)
        "fingerprint": "c5fc6fb1f9508013",
    }
    assert first["fingerprint"] == a.fingerprint
    assert body["alerts"][0]["fingerprint"] == b.fingerprint != a.fingerprint
    assert req.headers["idempotency-key"] == n.key


@pytest.mark.anyio
async def test_resolved_alert_ends_at_its_resolution_time(server: RecordingServer) -> None:
    t = transition(state=TransitionKind.RESOLVED, value=0.5, time=T0 + 90.25, active_at=T0)
    await send(webhook(server.url(), external_url="http://alertd.local:9099/"), notification(t))

    body = server.last.json()
    assert body["status"] == "resolved"
    assert body["externalURL"] == "http://alertd.local:9099"  # the trailing / trimmed, as Alertmanager does
    alert = body["alerts"][0]
    assert alert["status"] == "resolved"
    assert alert["startsAt"] == "2026-05-28T20:26:40Z"
    assert alert["endsAt"] == "2026-05-28T20:28:10.250Z"
    assert alert["generatorURL"] == "http://alertd.local:9099/api/v1/rules#loss_not_finite"
    assert body["commonAnnotations"] == {"summary": "train/loss back to 0.5 at step 250"}  # not the firing words


@pytest.mark.anyio
async def test_max_alerts_truncates_and_counts_as_alertmanager_does(server: RecordingServer) -> None:
    alerts = [transition(run=f"exp{i}") for i in range(5)]
    await send(webhook(server.url(), max_alerts=2), notification(*alerts))

    body = server.last.json()
    assert [a["labels"]["run"] for a in body["alerts"]] == ["exp0", "exp1"]
    assert body["truncatedAlerts"] == 3
    # common labels are computed over every alert of the group, not only the ones shown
    assert "run" not in body["commonLabels"]


@pytest.mark.anyio
async def test_alert_without_active_at_starts_at_its_transition_time(server: RecordingServer) -> None:
    await send(webhook(server.url()), notification(transition(active_at=None, time=T0 + 5)))
    assert server.last.json()["alerts"][0]["startsAt"] == "2026-05-28T20:26:45Z"
