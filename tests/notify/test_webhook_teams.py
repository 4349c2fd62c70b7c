"""The teams format: a Workflows (Power Automate) message carrying an Adaptive Card."""

from __future__ import annotations

import json

import pytest
from notify_helpers import RecordingServer, notification, send, send_error, transition, webhook

from alertd.model import TransitionKind


@pytest.mark.anyio
async def test_body_is_a_workflows_adaptive_card(server: RecordingServer) -> None:
    server.answer(202, "")
    await send(webhook(server.url(), "teams"), notification(transition()))

    body = server.last.json()
    assert body["type"] == "message"
    (att,) = body["attachments"]
    assert att["contentType"] == "application/vnd.microsoft.card.adaptive"
    assert att["contentUrl"] is None
    card = att["content"]
    assert card["$schema"] == "http://adaptivecards.io/schemas/adaptive-card.json"
    assert card["type"] == "AdaptiveCard"
    assert card["version"] == "1.4"
    assert card["msteams"] == {"width": "full"}
    head, facts, line = card["body"]
    assert head == {
        "type": "TextBlock",
        "text": "[FIRING:1] loss_not_finite (run=exp1)",
        "weight": "Bolder",
        "size": "Medium",
        "color": "Attention",
        "wrap": True,
    }
    assert facts == {
        "type": "FactSet",
        "facts": [
            {"title": "Status", "value": "firing"},
            {"title": "Receiver", "value": "chat"},
            {"title": "rule", "value": "loss_not_finite"},
            {"title": "run", "value": "exp1"},
        ],
    }
    assert line["type"] == "TextBlock" and line["wrap"] is True
    assert line["text"].startswith("FIRING loss_not_finite: train/loss = NaN at step 250 in run exp1")


@pytest.mark.anyio
async def test_resolved_title_is_green(server: RecordingServer) -> None:
    await send(webhook(server.url(), "teams"), notification(transition(state=TransitionKind.RESOLVED)))
    head = server.last.json()["attachments"][0]["content"]["body"][0]
    assert head["color"] == "Good" and head["text"].startswith("[RESOLVED]")


@pytest.mark.anyio
async def test_card_stays_under_teams_size_limit(server: RecordingServer) -> None:
    alerts = [transition(run=f"run-{i}", summary="w" * 500) for i in range(200)]
    await send(webhook(server.url(), "teams"), notification(*alerts))
    raw = server.last.body
    assert len(raw) <= 28_000
    blocks = json.loads(raw)["attachments"][0]["content"]["body"]
    shown = sum(1 for b in blocks if b.get("text", "").startswith("FIRING"))
    assert blocks[-1]["text"] == f"… and {200 - shown} more alerts (truncated to the service's limit)"


@pytest.mark.anyio
async def test_logic_apps_error_is_quoted(server: RecordingServer) -> None:
    server.answer(400, {"error": {"code": "InvalidRequestContent", "message": "The request content is not valid"}})
    err = await send_error(webhook(server.url(), "teams"), notification())
    assert err.recoverable is False
    assert "InvalidRequestContent" in str(err)
