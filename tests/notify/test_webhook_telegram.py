"""The telegram format: sendMessage with chat_id, HTML parse mode and escaping; the Bot API's answers."""

from __future__ import annotations

import pytest
from notify_helpers import RecordingServer, notification, send, send_error, transition, webhook

OK = {"ok": True, "result": {"message_id": 7}}
TOKEN = "123456:ABC-DEF1234ghIkl"


@pytest.mark.anyio
async def test_send_message_body(server: RecordingServer) -> None:
    server.answer(200, OK)
    t = transition(summary="loss <NaN> & grad > 1e4")
    await send(webhook(server.url(f"/bot{TOKEN}"), "telegram", chat_id="-1001234567890"), notification(t))

    req = server.last
    assert req.route == f"/bot{TOKEN}/sendMessage"
    assert req.json() == {
        "chat_id": -1001234567890,
        "text": "<b>[FIRING:1] loss_not_finite (run=exp1)</b>\n"
        "FIRING loss_not_finite: train/loss = NaN at step 250 in run exp1 (2026-05-28T20:27:10Z): "
        "loss &lt;NaN&gt; &amp; grad &gt; 1e4",
        "parse_mode": "HTML",
        "link_preview_options": {"is_disabled": True},
    }


@pytest.mark.anyio
async def test_url_naming_the_method_and_a_channel_name(server: RecordingServer) -> None:
    server.answer(200, OK)
    await send(webhook(server.url(f"/bot{TOKEN}/sendMessage"), "telegram", chat_id="@mlalerts"), notification())
    assert server.last.route == f"/bot{TOKEN}/sendMessage"
    assert server.last.json()["chat_id"] == "@mlalerts"


@pytest.mark.anyio
async def test_text_is_at_most_4096_characters_before_escaping(server: RecordingServer) -> None:
    server.answer(200, OK)
    alerts = [transition(run=f"r{i}", summary="a<b" * 50) for i in range(100)]
    await send(webhook(server.url(), "telegram", chat_id="42"), notification(*alerts))
    text = server.last.json()["text"]
    parsed = text.replace("<b>", "").replace("</b>", "").replace("&lt;", "<").replace("&amp;", "&")
    assert len(parsed) <= 4096
    assert parsed.endswith("(truncated to the service's limit)")


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("status", "answer", "recoverable"),
    [
        (401, {"ok": False, "error_code": 401, "description": "Unauthorized"}, False),
        (400, {"ok": False, "error_code": 400, "description": "Bad Request: chat not found"}, False),
        (
            403,
            {"ok": False, "error_code": 403, "description": "Forbidden: bot was kicked from the group chat"},
            False,
        ),
        (502, {"ok": False, "error_code": 502, "description": "Bad Gateway"}, True),
    ],
)
async def test_ok_false_is_a_failure(
    server: RecordingServer, status: int, answer: dict[str, object], recoverable: bool
) -> None:
    server.answer(status, answer)
    err = await send_error(webhook(server.url(), "telegram", chat_id="42"), notification())
    assert err.recoverable is recoverable
    assert str(answer["description"]) in str(err)


@pytest.mark.anyio
async def test_ok_false_with_http_200_is_a_failure(server: RecordingServer) -> None:
    server.answer(200, {"ok": False, "error_code": 400, "description": "Bad Request: message text is empty"})
    err = await send_error(webhook(server.url(), "telegram", chat_id="42"), notification())
    assert err.recoverable is False


@pytest.mark.anyio
async def test_429_uses_parameters_retry_after(server: RecordingServer) -> None:
    server.answer(
        429,
        {
            "ok": False,
            "error_code": 429,
            "description": "Too Many Requests: retry after 5",
            "parameters": {"retry_after": 5},
        },
    )
    err = await send_error(webhook(server.url(), "telegram", chat_id="42"), notification())
    assert err.recoverable is True and err.retry_after == 5.0
