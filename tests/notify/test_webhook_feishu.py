"""The feishu format: `post` message, the signature recomputed from the docs, Feishu's `code` answers."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest
from notify_helpers import SENT_AT, RecordingServer, notification, send, send_error, transition, webhook

from alertd.notify.formats import feishu

OK = {"code": 0, "msg": "success", "data": {}}
SECRET = "feishu-signing-secret-42"


def documented_sign(timestamp: str, secret: str) -> str:
    """Feishu's samples: the string `timestamp\\nsecret` is the HMAC-SHA256 key, the message is empty."""
    key = f"{timestamp}\n{secret}".encode()
    return base64.b64encode(hmac.new(key, b"", hashlib.sha256).digest()).decode()


def test_signature_matches_the_reference_vector() -> None:
    # computed in shared/reference/nvml-and-webhooks.md B7 (the DingTalk-style mix-up gives bwOSU6...)
    assert feishu.sign("1599360473", "test-secret") == "wSds2BzzFIIGf/WrhUO+NI1q/9j+FRJd3JNHKAq0NZY="


@pytest.mark.anyio
async def test_signed_post_body(server: RecordingServer) -> None:
    server.answer(200, OK)
    await send(webhook(server.url("/open-apis/bot/v2/hook/uuid-1"), "feishu", secret=SECRET), notification())

    req = server.last
    assert req.route == "/open-apis/bot/v2/hook/uuid-1" and req.query == ""
    body = req.json()
    ts = str(int(SENT_AT))
    assert body["timestamp"] == ts  # seconds, a string, in the body
    assert body["sign"] == documented_sign(ts, SECRET)
    assert body["msg_type"] == "post"
    post = body["content"]["post"]["zh_cn"]
    assert post["title"] == "[FIRING:1] loss_not_finite (run=exp1)"
    assert post["content"] == [
        [
            {
                "tag": "text",
                "text": "FIRING loss_not_finite: train/loss = NaN at step 250 in run exp1 "
                "(2026-05-28T20:27:10Z): train/loss is NaN at step 250 in exp1",
            }
        ]
    ]
    assert set(body) == {"timestamp", "sign", "msg_type", "content"}


@pytest.mark.anyio
async def test_unsigned_without_a_secret(server: RecordingServer) -> None:
    server.answer(200, OK)
    await send(webhook(server.url(), "feishu"), notification())
    assert set(server.last.json()) == {"msg_type", "content"}


@pytest.mark.anyio
async def test_body_stays_under_20_kb(server: RecordingServer) -> None:
    server.answer(200, OK)
    alerts = [transition(run=f"实验-{i}", summary="损失为 NaN " * 20) for i in range(300)]
    await send(webhook(server.url(), "feishu", secret=SECRET), notification(*alerts))
    assert len(server.last.body) <= 20 * 1024
    text = server.last.json()["content"]["post"]["zh_cn"]["content"][0][0]["text"]
    assert text.endswith("(truncated to the service's limit)")


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("status", "answer", "recoverable"),
    [
        (
            200,
            {"code": 19021, "msg": "sign match fail or timestamp is not within one hour from current time"},
            False,
        ),
        (200, {"code": 19024, "msg": "Key Words Not Found"}, False),
        (400, {"code": 9499, "msg": "Bad Request"}, False),
        (200, {"code": 11232, "msg": "frequency limited psm[lark.oapi.app_platform_runtime]appID[1]"}, True),
        (200, {"StatusCode": 19022, "StatusMessage": "Ip Not Allowed"}, False),
    ],
)
async def test_feishu_codes_are_failures(
    server: RecordingServer, status: int, answer: dict[str, object], recoverable: bool
) -> None:
    server.answer(status, answer)
    err = await send_error(webhook(server.url(), "feishu", secret=SECRET), notification())
    assert err.recoverable is recoverable
    code = answer.get("code", answer.get("StatusCode"))
    assert f"code {code}" in str(err)


@pytest.mark.anyio
async def test_success_with_the_older_status_fields(server: RecordingServer) -> None:
    server.answer(200, {"Extra": None, "StatusCode": 0, "StatusMessage": "success"})
    await send(webhook(server.url(), "feishu"), notification())  # no error


@pytest.mark.anyio
async def test_unreadable_200_answer_is_recoverable(server: RecordingServer) -> None:
    server.answer(200, "<html>gateway</html>")
    err = await send_error(webhook(server.url(), "feishu"), notification())
    assert err.recoverable is True and "unreadable" in str(err)
