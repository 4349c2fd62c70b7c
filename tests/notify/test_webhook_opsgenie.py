"""The opsgenie format: Alert API v2 create and close on one alias, priority mapping, the GenieKey header,
the region's base URL, the answers, and the API key kept out of payloads, errors and logs."""

from __future__ import annotations

import hashlib
import logging
import pathlib

import pytest
from notify_helpers import RecordingServer, notification, send, send_error, transition, webhook

from alertd.model import TransitionKind
from alertd.notify.config import WebhookConfig

KEY = "eb243592-faa2-4ba2-a551q-1afdf565c889"
ACCEPTED = {"result": "Request will be processed", "took": 0.302, "requestId": "43a29c5c-3dbf-4fa4-9c26-f4f71023e120"}
ALIAS = hashlib.sha256(b'{}:{rule="loss_not_finite", run="exp1"}').hexdigest()


@pytest.mark.anyio
async def test_create_body_and_genie_key(server: RecordingServer) -> None:
    server.answer(202, ACCEPTED)
    await send(webhook(server.url(""), "opsgenie", api_key=KEY), notification(transition()))

    req = server.last
    assert req.route == "/v2/alerts" and req.query == ""
    assert req.headers["authorization"] == f"GenieKey {KEY}"
    assert req.json() == {
        "message": "[FIRING:1] loss_not_finite (run=exp1)",
        "alias": ALIAS,
        "description": "[FIRING:1] loss_not_finite (run=exp1)\n"
        "FIRING loss_not_finite: train/loss = NaN at step 250 in run exp1 (2026-05-28T20:27:10Z): "
        "train/loss is NaN at step 250 in exp1",
        "tags": ["critical", "loss_not_finite"],
        "details": {"receiver": "chat", "rule": "loss_not_finite", "run": "exp1"},
        "source": "alertd",
        "priority": "P1",
    }


@pytest.mark.anyio
async def test_close_names_the_created_alias(server: RecordingServer) -> None:
    server.answer(202, ACCEPTED)
    server.answer(202, ACCEPTED)
    notifier = webhook(server.url("/"), "opsgenie", api_key=KEY)
    await notifier.send(notification(transition()))
    await send(notifier, notification(transition(state=TransitionKind.RESOLVED)))

    create, close = server.requests
    assert create.route == "/v2/alerts"
    assert close.route == f"/v2/alerts/{create.json()['alias']}/close"
    assert close.query == "identifierType=alias"
    assert close.headers["authorization"] == f"GenieKey {KEY}"
    assert close.json() == {"source": "alertd", "note": "[RESOLVED] loss_not_finite (run=exp1)"}


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("severities", "expected"),
    [
        (["critical"], "P1"),
        (["page"], "P2"),
        (["warning"], "P3"),
        (["info"], "P5"),
        (["info", "warning"], "P3"),
        (["warning", "critical"], "P1"),
    ],
)
async def test_priority_mapping(server: RecordingServer, severities: list[str], expected: str) -> None:
    server.answer(202, ACCEPTED)
    alerts = [transition(run=f"r{i}", severity=s) for i, s in enumerate(severities)]
    await send(webhook(server.url(""), "opsgenie", api_key=KEY), notification(*alerts))
    assert server.last.json()["priority"] == expected


@pytest.mark.anyio
async def test_message_is_at_most_130_characters(server: RecordingServer) -> None:
    server.answer(202, ACCEPTED)
    await send(webhook(server.url(""), "opsgenie", api_key=KEY, title="t" * 500), notification())
    message = server.last.json()["message"]
    assert len(message) == 130 and message.endswith("…")


@pytest.mark.anyio
@pytest.mark.parametrize(("status", "recoverable"), [(400, False), (401, False), (403, False), (422, False)])
async def test_4xx_is_permanent(server: RecordingServer, status: int, recoverable: bool) -> None:
    server.answer(status, {"message": "Key format is not valid!", "took": 0.001, "requestId": "r"})
    err = await send_error(webhook(server.url(""), "opsgenie", api_key=KEY), notification())
    assert err.recoverable is recoverable
    assert f"HTTP {status}" in str(err) and "Key format is not valid!" in str(err)


@pytest.mark.anyio
@pytest.mark.parametrize("status", [429, 503])
async def test_429_and_5xx_are_retried_after_retry_after(server: RecordingServer, status: int) -> None:
    server.answer(status, {"message": "Too many requests", "took": 0.0}, headers={"Retry-After": "11"})
    err = await send_error(webhook(server.url(""), "opsgenie", api_key=KEY), notification())
    assert err.recoverable is True and err.retry_after == 11.0


@pytest.mark.anyio
async def test_api_key_never_in_payload_errors_or_logs(
    server: RecordingServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    server.answer(401, {"message": f"Could not authenticate with GenieKey {KEY}"})
    notifier = webhook(server.url(""), "opsgenie", api_key=KEY)
    assert KEY not in repr(notifier.payload(notification()))
    err = await send_error(notifier, notification())
    assert server.last.headers["authorization"] == f"GenieKey {KEY}"
    assert KEY not in str(err) and KEY not in caplog.text
    assert "Could not authenticate" in str(err)


def test_config_region_url_and_key_file(tmp_path: pathlib.Path) -> None:
    def cfg(**kw: object) -> WebhookConfig:
        return WebhookConfig.model_validate({"type": "webhook", "format": "opsgenie", **kw})

    assert cfg(api_key=KEY).url.get_secret_value() == "https://api.opsgenie.com"
    assert cfg(api_key=KEY, region="eu").url.get_secret_value() == "https://api.eu.opsgenie.com"
    (tmp_path / "og").write_text(KEY + "\n")
    from_file = cfg(api_key_file=str(tmp_path / "og"))
    assert from_file.api_key is not None and from_file.api_key.get_secret_value() == KEY
    with pytest.raises(ValueError, match="format opsgenie needs api_key"):
        cfg()
    with pytest.raises(ValueError, match="give region or url, not both"):
        cfg(api_key=KEY, region="eu", url="https://api.opsgenie.com")
    with pytest.raises(ValueError, match="region is only used by format opsgenie"):
        WebhookConfig.model_validate({"type": "webhook", "format": "slack", "url": "https://x", "region": "eu"})
    with pytest.raises(ValueError) as info:
        cfg(api_key=KEY, region="mars")
    assert KEY not in str(info.value)
