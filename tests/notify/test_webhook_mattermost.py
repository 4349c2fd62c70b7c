"""The mattermost format: `{"text": markdown}` and Mattermost's answers."""

from __future__ import annotations

import pytest
from notify_helpers import RecordingServer, notification, send, send_error, transition, webhook


@pytest.mark.anyio
async def test_body_is_markdown_text(server: RecordingServer) -> None:
    t = transition(metric="train/loss_scale", summary=None)
    await send(webhook(server.url(), "mattermost"), notification(t))

    assert server.last.json() == {
        "text": "#### \\[FIRING:1\\] loss\\_not\\_finite (run=exp1)\n"
        "- FIRING loss\\_not\\_finite: train/loss\\_scale = NaN at step 250 in run exp1 "
        "(2026-05-28T20:27:10Z)"
    }


@pytest.mark.anyio
async def test_long_messages_are_cut_with_a_note(server: RecordingServer) -> None:
    alerts = [transition(run=f"r{i}", summary="y" * 200) for i in range(200)]
    await send(webhook(server.url(), "mattermost"), notification(*alerts))
    text = server.last.json()["text"]
    assert len(text) <= 16383
    assert text.endswith("(truncated to the service's limit)")


@pytest.mark.anyio
async def test_error_answer_is_quoted_and_final(server: RecordingServer) -> None:
    server.answer(
        400,
        {"id": "web.incoming_webhook.invalid.app_error", "message": "Invalid webhook.", "status_code": 400},
    )
    err = await send_error(webhook(server.url(), "mattermost"), notification())
    assert err.recoverable is False
    assert "HTTP 400" in str(err) and "Invalid webhook." in str(err)
