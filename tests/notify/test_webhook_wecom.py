"""The wecom format: markdown/text group-robot messages and WeCom's `errcode` answers."""

from __future__ import annotations

import pytest
from notify_helpers import RecordingServer, notification, send, send_error, transition, webhook

from alertd.model import TransitionKind

OK = {"errcode": 0, "errmsg": "ok"}
LINE = (
    "FIRING loss_not_finite: train/loss = NaN at step 250 in run exp1 (2026-05-28T20:27:10Z): "
    "train/loss is NaN at step 250 in exp1"
)


@pytest.mark.anyio
async def test_markdown_message(server: RecordingServer) -> None:
    server.answer(200, OK)
    await send(webhook(server.url("/cgi-bin/webhook/send?key=k-0123456789"), "wecom"), notification())
    req = server.last
    assert req.query == "key=k-0123456789"
    assert req.json() == {
        "msgtype": "markdown",
        "markdown": {"content": '### <font color="warning">[FIRING:1] loss_not_finite (run=exp1)</font>\n> ' + LINE},
    }


@pytest.mark.anyio
async def test_resolved_markdown_is_info_coloured(server: RecordingServer) -> None:
    server.answer(200, OK)
    await send(webhook(server.url(), "wecom"), notification(transition(state=TransitionKind.RESOLVED)))
    assert server.last.json()["markdown"]["content"].startswith('### <font color="info">[RESOLVED]')


@pytest.mark.anyio
async def test_text_message(server: RecordingServer) -> None:
    server.answer(200, OK)
    await send(webhook(server.url(), "wecom", msgtype="text"), notification())
    assert server.last.json() == {
        "msgtype": "text",
        "text": {"content": "[FIRING:1] loss_not_finite (run=exp1)\n" + LINE},
    }


@pytest.mark.anyio
@pytest.mark.parametrize(("msgtype", "key", "limit"), [("markdown", "markdown", 4096), ("text", "text", 2048)])
async def test_content_fits_the_byte_limits(server: RecordingServer, msgtype: str, key: str, limit: int) -> None:
    server.answer(200, OK)
    alerts = [transition(run=f"实验{i}", summary="显存不足" * 20) for i in range(50)]
    await send(webhook(server.url(), "wecom", msgtype=msgtype), notification(*alerts))
    content = server.last.json()[key]["content"]
    assert len(content.encode()) <= limit
    assert content.endswith("(truncated to the service's limit)")


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("answer", "recoverable"),
    [
        (
            {
                "errcode": 40058,
                "errmsg": "markdown.content exceed max length 4096. invalid Request Parameter, "
                "more info at https://open.work.weixin.qq.com/devtool/query?e=40058",
            },
            False,
        ),
        ({"errcode": 93000, "errmsg": "invalid webhook url"}, False),
        ({"errcode": 45009, "errmsg": "api freq out of limit"}, True),
    ],
)
async def test_errcode_with_http_200_is_a_failure(
    server: RecordingServer, answer: dict[str, object], recoverable: bool
) -> None:
    server.answer(200, answer)
    err = await send_error(webhook(server.url(), "wecom"), notification())
    assert err.recoverable is recoverable
    assert f"code {answer['errcode']}" in str(err)


def test_rate_limit_is_twenty_a_minute(server: RecordingServer) -> None:
    assert webhook(server.url(), "wecom").rate_limit == (20, 60.0)
