"""The slack format: incoming-webhook body and Slack's plain-text answers."""

from __future__ import annotations

import pytest
from notify_helpers import RecordingServer, notification, send, send_error, transition, webhook

from alertd.model import TransitionKind


@pytest.mark.anyio
async def test_body_has_text_and_a_red_attachment_of_blocks(server: RecordingServer) -> None:
    t = transition(summary="loss <NaN> & friends")
    await send(webhook(server.url(), "slack"), notification(t))

    body = server.last.json()
    assert set(body) == {"text", "attachments"}
    assert body["text"] == "[FIRING:1] loss_not_finite (run=exp1)"
    (att,) = body["attachments"]
    assert att["color"] == "#E01E5A"
    assert att["fallback"] == body["text"]
    head, alerts, context = att["blocks"]
    assert head == {
        "type": "section",
        "text": {"type": "mrkdwn", "text": "*[FIRING:1] loss_not_finite (run=exp1)*"},
    }
    assert alerts["type"] == "section" and alerts["text"]["type"] == "mrkdwn"
    assert alerts["text"]["text"] == (
        "FIRING loss_not_finite: train/loss = NaN at step 250 in run exp1 (2026-05-28T20:27:10Z): "
        "loss &lt;NaN&gt; &amp; friends"
    )
    assert context == {"type": "context", "elements": [{"type": "mrkdwn", "text": "alertd · receiver chat"}]}


@pytest.mark.anyio
async def test_resolved_is_green(server: RecordingServer) -> None:
    await send(webhook(server.url(), "slack"), notification(transition(state=TransitionKind.RESOLVED)))
    body = server.last.json()
    assert body["text"].startswith("[RESOLVED] loss_not_finite")
    assert body["attachments"][0]["color"] == "#2EB67D"


@pytest.mark.anyio
async def test_section_text_stays_under_slacks_3000_characters(server: RecordingServer) -> None:
    alerts = [transition(run=f"run-{i:03d}", summary="x" * 80) for i in range(100)]
    await send(webhook(server.url(), "slack"), notification(*alerts))
    section = server.last.json()["attachments"][0]["blocks"][1]["text"]["text"]
    assert len(section) <= 3000
    shown = section.count("FIRING loss_not_finite")
    assert 0 < shown < 100
    assert section.endswith(f"… and {100 - shown} more alerts (truncated to the service's limit)")


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("status", "answer", "recoverable"),
    [
        (200, "invalid_token", False),
        (400, "invalid_payload", False),
        (403, "action_prohibited", False),
        (404, "no_service", False),
        (410, "channel_is_archived", False),
        (500, "rollup_error", True),
    ],
)
async def test_slack_errors_are_classified(
    server: RecordingServer, status: int, answer: str, recoverable: bool
) -> None:
    server.answer(status, answer)
    err = await send_error(webhook(server.url(), "slack"), notification())
    assert err.recoverable is recoverable
    assert answer in str(err)
