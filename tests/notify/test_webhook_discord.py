"""The discord format: `?wait=true`, content and embed within Discord's limits, Discord's error bodies."""

from __future__ import annotations

import json

import pytest
from notify_helpers import RecordingServer, notification, send, send_error, transition, webhook

MESSAGE = {"id": "1", "type": 0, "content": "x", "channel_id": "2"}


@pytest.mark.anyio
async def test_posts_with_wait_true_and_an_embed(server: RecordingServer) -> None:
    server.answer(200, MESSAGE)
    t = transition(metric="train/grad_norm", summary=None)
    n = notification(t)
    await send(webhook(server.url("/api/webhooks/123/tok-abcdef?thread_id=9"), "discord"), n)

    req = server.last
    assert req.route == "/api/webhooks/123/tok-abcdef"
    assert sorted(req.query.split("&")) == ["thread_id=9", "wait=true"]
    body = req.json()
    assert body["username"] == "alertd"
    assert body["content"] == "[FIRING:1] loss\\_not\\_finite (run=exp1)"
    assert body["allowed_mentions"] == {"parse": []}
    (embed,) = body["embeds"]
    assert embed == {
        "title": "[FIRING:1] loss\\_not\\_finite (run=exp1)",
        "description": "FIRING loss\\_not\\_finite: train/grad\\_norm = NaN at step 250 in run exp1 "
        "(2026-05-28T20:27:10Z)",
        "color": 0xE74C3C,
        "timestamp": "2026-05-28T20:27:11Z",
        "footer": {"text": "alertd · receiver chat"},
    }


@pytest.mark.anyio
async def test_respects_content_embed_and_total_limits(server: RecordingServer) -> None:
    server.answer(200, MESSAGE)
    alerts = [transition(run=f"run-{i}", summary="z" * 300) for i in range(60)]
    await send(webhook(server.url(), "discord"), notification(*alerts))
    body = server.last.json()
    embed = body["embeds"][0]
    assert len(body["content"]) <= 2000
    assert len(embed["title"]) <= 256 and len(embed["description"]) <= 4096
    assert len(embed["title"]) + len(embed["description"]) + len(embed["footer"]["text"]) <= 6000
    assert embed["description"].endswith("(truncated to the service's limit)")


@pytest.mark.anyio
async def test_invalid_form_body_is_final(server: RecordingServer) -> None:
    server.answer(400, {"code": 50035, "errors": {}, "message": "Invalid Form Body"})
    err = await send_error(webhook(server.url(), "discord"), notification())
    assert err.recoverable is False
    assert "50035 Invalid Form Body" in str(err)


@pytest.mark.anyio
async def test_bad_token_is_final(server: RecordingServer) -> None:
    server.answer(401, {"message": "Invalid Webhook Token", "code": 50027})
    err = await send_error(webhook(server.url(), "discord"), notification())
    assert err.recoverable is False and "Invalid Webhook Token" in str(err)


@pytest.mark.anyio
async def test_429_without_header_uses_the_bodys_retry_after(server: RecordingServer) -> None:
    body = {"message": "You are being rate limited.", "retry_after": 0.75, "global": False}
    server.answer(429, json.dumps(body), headers={"Content-Type": "application/json"})
    err = await send_error(webhook(server.url(), "discord"), notification())
    assert err.recoverable is True
    assert err.retry_after == 0.75
