"""The pagerduty format: Events API v2 trigger/resolve on one dedup_key, severity mapping, the answers, and
the routing key kept out of payloads, errors and logs."""

from __future__ import annotations

import hashlib
import logging
import pathlib

import pytest
from notify_helpers import RecordingServer, notification, send, send_error, transition, webhook

from alertd.model import TransitionKind
from alertd.notify.config import WebhookConfig

KEY = "R0ut1ngKeyPagerDuty0123456789ab"
ACCEPTED = {"status": "success", "message": "Event processed", "dedup_key": "x"}
GROUP_KEY = hashlib.sha256(b'{}:{rule="loss_not_finite", run="exp1"}').hexdigest()


@pytest.mark.anyio
async def test_trigger_event_body(server: RecordingServer) -> None:
    server.answer(202, ACCEPTED)
    await send(webhook(server.url("/v2/enqueue"), "pagerduty", routing_key=KEY), notification(transition()))

    req = server.last
    assert req.route == "/v2/enqueue"
    assert req.headers["content-type"] == "application/json"
    assert req.json() == {
        "routing_key": KEY,
        "event_action": "trigger",
        "dedup_key": GROUP_KEY,
        "payload": {
            "summary": "[FIRING:1] loss_not_finite (run=exp1)",
            "source": "exp1",
            "severity": "critical",
            "timestamp": "2026-05-28T20:27:11Z",
            "component": "train/loss",
            "group": "tb",
            "class": "loss_not_finite",
            "custom_details": {
                "alerts": "FIRING loss_not_finite: train/loss = NaN at step 250 in run exp1 "
                "(2026-05-28T20:27:10Z): train/loss is NaN at step 250 in exp1",
                "firing": 1,
                "resolved": 0,
                "group_labels": {"rule": "loss_not_finite", "run": "exp1"},
                "receiver": "chat",
            },
        },
        "client": "alertd",
    }


@pytest.mark.anyio
async def test_resolve_names_the_same_dedup_key(server: RecordingServer) -> None:
    server.answer(202, ACCEPTED)
    server.answer(202, ACCEPTED)
    notifier = webhook(server.url("/v2/enqueue"), "pagerduty", routing_key=KEY, external_url="http://alertd:9464")
    await notifier.send(notification(transition()))
    await send(notifier, notification(transition(state=TransitionKind.RESOLVED)))

    trigger, resolve = (r.json() for r in server.requests)
    assert trigger["event_action"] == "trigger" and trigger["client_url"] == "http://alertd:9464"
    assert resolve == {"routing_key": KEY, "event_action": "resolve", "dedup_key": trigger["dedup_key"]}


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("severities", "expected"),
    [
        (["critical"], "critical"),
        (["warning"], "warning"),
        (["info"], "info"),
        (["page"], "error"),
        ([""], "error"),
        (["info", "warning"], "warning"),
        (["warning", "high", "info"], "error"),
        (["info", "critical", "warning"], "critical"),
    ],
)
async def test_severity_mapping(server: RecordingServer, severities: list[str], expected: str) -> None:
    server.answer(202, ACCEPTED)
    alerts = [transition(run=f"r{i}", severity=s) for i, s in enumerate(severities)]
    await send(webhook(server.url(), "pagerduty", routing_key=KEY), notification(*alerts))
    payload = server.last.json()["payload"]
    assert payload["severity"] == expected
    if len(alerts) > 1:  # alerts of several runs: no common run to name as the source
        assert payload["source"] == "alertd"


@pytest.mark.anyio
async def test_summary_is_at_most_1024_characters(server: RecordingServer) -> None:
    server.answer(202, ACCEPTED)
    notifier = webhook(server.url(), "pagerduty", routing_key=KEY, title="x" * 3000 + "\nsecond line")
    await send(notifier, notification())
    summary = server.last.json()["payload"]["summary"]
    assert len(summary) == 1024 and summary.endswith("…") and "\n" not in summary


@pytest.mark.anyio
async def test_400_invalid_event_is_permanent(server: RecordingServer) -> None:
    server.answer(
        400, {"status": "invalid event", "message": "Event object is invalid", "errors": ["Length of 'source' is 0"]}
    )
    err = await send_error(webhook(server.url(), "pagerduty", routing_key=KEY), notification())
    assert err.recoverable is False
    assert "HTTP 400" in str(err) and "Event object is invalid" in str(err) and "'source'" in str(err)


@pytest.mark.anyio
@pytest.mark.parametrize("status", [429, 503])
async def test_429_and_5xx_are_retried_after_retry_after(server: RecordingServer, status: int) -> None:
    server.answer(
        status,
        {"status": "throttle event", "message": "Requests for this service are arriving too quickly"},
        headers={"Retry-After": "7"},
    )
    err = await send_error(webhook(server.url(), "pagerduty", routing_key=KEY), notification())
    assert err.recoverable is True and err.retry_after == 7.0
    assert f"HTTP {status}" in str(err)


@pytest.mark.anyio
async def test_routing_key_never_in_payload_errors_or_logs(
    server: RecordingServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    server.answer(400, {"status": "invalid event", "message": f"bad routing_key {KEY}"})
    notifier = webhook(server.url(), "pagerduty", routing_key=KEY)
    assert KEY not in repr(notifier.payload(notification()))
    err = await send_error(notifier, notification())
    assert server.last.json()["routing_key"] == KEY  # it was sent ...
    assert KEY not in str(err) and KEY not in caplog.text  # ... and shown nowhere
    assert "bad routing_key" in str(err)


def test_config_defaults_needs_and_key_file(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "pd-key"
    path.write_text(KEY + "\n")
    cfg = WebhookConfig.model_validate({"type": "webhook", "format": "pagerduty", "routing_key_file": str(path)})
    assert cfg.url.get_secret_value() == "https://events.pagerduty.com/v2/enqueue"
    assert cfg.routing_key is not None and cfg.routing_key.get_secret_value() == KEY
    assert KEY not in repr(cfg)
    with pytest.raises(ValueError, match="format pagerduty needs routing_key"):
        WebhookConfig.model_validate({"type": "webhook", "format": "pagerduty"})
    with pytest.raises(ValueError, match="routing_key is only used by format pagerduty") as info:
        WebhookConfig.model_validate({"type": "webhook", "format": "slack", "url": "https://x", "routing_key": KEY})
    assert KEY not in str(info.value)
