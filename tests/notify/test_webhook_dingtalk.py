"""The dingtalk format: markdown/text messages, the URL signature, DingTalk's `errcode` answers."""

from __future__ import annotations

import base64
import hashlib
import hmac
import urllib.parse

import pytest
from notify_helpers import SENT_AT, RecordingServer, notification, send, send_error, transition, webhook

from alertd.notify.formats import dingtalk

OK = {"errcode": 0, "errmsg": "ok"}
SECRET = "SECabcdef0123456789"


def documented_sign(timestamp: str, secret: str) -> str:
    """DingTalk's docs: quote_plus(base64(HMAC-SHA256(key=secret, msg="timestamp\\nsecret")))."""
    digest = hmac.new(secret.encode(), f"{timestamp}\n{secret}".encode(), hashlib.sha256).digest()
    return urllib.parse.quote_plus(base64.b64encode(digest))


def test_signature_matches_the_reference_vector() -> None:
    assert dingtalk.sign("1599360473000", "test-secret") == "Mee7fHPnIHChjJIuEtxRUaKgA9a/2itMq8Jj5AtfVkc="


@pytest.mark.anyio
async def test_signed_markdown_message(server: RecordingServer) -> None:
    server.answer(200, OK)
    url = server.url("/robot/send?access_token=tok0123456789")
    await send(webhook(url, "dingtalk", secret=SECRET), notification())

    req = server.last
    assert req.route == "/robot/send"
    ts = str(round(SENT_AT * 1000))
    # the raw query as it went over the wire: the sign URL-encoded exactly once
    assert req.query == f"access_token=tok0123456789&timestamp={ts}&sign={documented_sign(ts, SECRET)}"
    assert req.json() == {
        "msgtype": "markdown",
        "markdown": {
            "title": "[FIRING:1] loss_not_finite (run=exp1)",
            "text": "#### [FIRING:1] loss_not_finite (run=exp1)\n\n"
            "- FIRING loss_not_finite: train/loss = NaN at step 250 in run exp1 (2026-05-28T20:27:10Z): "
            "train/loss is NaN at step 250 in exp1",
        },
    }


@pytest.mark.anyio
async def test_text_message_without_secret(server: RecordingServer) -> None:
    server.answer(200, OK)
    await send(webhook(server.url("/robot/send?access_token=t"), "dingtalk", msgtype="text"), notification())
    req = server.last
    assert req.query == "access_token=t"
    body = req.json()
    assert body["msgtype"] == "text"
    assert body["text"]["content"].startswith("[FIRING:1] loss_not_finite (run=exp1)\nFIRING loss_not_finite:")


@pytest.mark.anyio
async def test_long_message_is_cut_under_20000_bytes(server: RecordingServer) -> None:
    server.answer(200, OK)
    alerts = [transition(run=f"实验{i}", summary="梯度爆炸" * 30) for i in range(200)]
    await send(webhook(server.url(), "dingtalk"), notification(*alerts))
    text = server.last.json()["markdown"]["text"]
    assert len(text.encode()) <= 20_000
    assert text.endswith("(truncated to the service's limit)")


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("answer", "recoverable", "retry_after"),
    [
        ({"errcode": 310000, "errmsg": "sign not match"}, False, None),
        ({"errcode": 310000, "errmsg": "keywords not in content"}, False, None),
        ({"errcode": 130101, "errmsg": "send too fast, exceed 20 times per minute"}, True, 600.0),
        ({"errcode": 300001, "errmsg": "token is not exist"}, False, None),
    ],
)
async def test_errcode_with_http_200_is_a_failure(
    server: RecordingServer, answer: dict[str, object], recoverable: bool, retry_after: float | None
) -> None:
    server.answer(200, answer)
    err = await send_error(webhook(server.url(), "dingtalk", secret=SECRET), notification())
    assert err.recoverable is recoverable
    assert err.retry_after == retry_after
    assert f"code {answer['errcode']} {answer['errmsg']}" in str(err)


def test_rate_limit_is_twenty_a_minute(server: RecordingServer) -> None:
    assert webhook(server.url(), "dingtalk").rate_limit == (20, 60.0)
