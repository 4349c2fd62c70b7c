"""What every webhook format shares: failures classified for the retrying stage, the Idempotency-Key
header, custom headers, and secrets (URL, signing secret, header values) kept out of errors and logs."""

from __future__ import annotations

import logging
from email.utils import formatdate
from typing import Any

import httpx
import pytest
from notify_helpers import SENT_AT, RecordingServer, notification, send, send_error, webhook

from alertd.notify.config import WebhookConfig
from alertd.notify.formats import FORMATS
from alertd.notify.webhook import WebhookNotifier

OK: dict[str, tuple[int, Any]] = {
    "generic": (200, ""),
    "slack": (200, "ok"),
    "discord": (200, {"id": "1", "content": "x"}),
    "teams": (202, ""),
    "feishu": (200, {"code": 0, "msg": "success", "data": {}}),
    "dingtalk": (200, {"errcode": 0, "errmsg": "ok"}),
    "wecom": (200, {"errcode": 0, "errmsg": "ok"}),
    "telegram": (200, {"ok": True, "result": {}}),
    "mattermost": (200, "ok"),
    "pagerduty": (202, {"status": "success", "message": "Event processed", "dedup_key": "x"}),
    "opsgenie": (202, {"result": "Request will be processed", "took": 0.3, "requestId": "r"}),
    "ntfy": (200, {"id": "sPs71M8A2T", "time": 1717000000, "event": "message", "topic": "x"}),
    "pushover": (200, {"status": 1, "request": "5042853c-402d-4a18-abcb-168734a801de"}),
}
EXTRA: dict[str, dict[str, str]] = {
    "telegram": {"chat_id": "42"},
    "feishu": {"secret": "feishu-secret-0042"},
    "dingtalk": {"secret": "SECdingtalk-secret-0042"},
    "pagerduty": {"routing_key": "pd-routing-key-secret-0042"},
    "opsgenie": {"api_key": "opsgenie-api-key-secret-0042"},
    "pushover": {"token": "app-token-secret-0042", "user": "user-key-secret-0042"},
}
TOKEN = "T000SECRET/B000SECRET/XXXXtokenXXXXtokenXXXX"
HEADER_SECRET = "Bearer header-secret-0042"


def test_every_format_is_registered() -> None:
    assert set(FORMATS) == set(OK)


def secret_webhook(url_base: str, fmt: str) -> WebhookNotifier:
    """A notifier whose URL path and query, signing secret and header all carry secrets."""
    return webhook(
        f"{url_base}/{TOKEN}?access_token=querysecret0042",
        fmt,
        headers={"Authorization": HEADER_SECRET},
        **EXTRA.get(fmt, {}),
    )


def assert_no_secret(text: str) -> None:
    for secret in (TOKEN, "XXXXtokenXXXXtokenXXXX", "querysecret0042", "header-secret-0042", "secret-0042"):
        assert secret not in text, f"secret {secret!r} leaked into: {text}"


formats = pytest.mark.parametrize("fmt", sorted(OK))


@pytest.mark.anyio
@formats
async def test_success_sends_idempotency_key_and_custom_headers(
    server: RecordingServer, fmt: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    server.answer(*OK[fmt])
    n = notification()
    await send(secret_webhook(server.url(""), fmt), n)
    req = server.last
    assert req.headers["idempotency-key"] == n.key
    # Opsgenie's own `Authorization: GenieKey` wins over a custom header of the same name
    assert req.headers["authorization"] == (HEADER_SECRET if fmt != "opsgenie" else f"GenieKey {EXTRA[fmt]['api_key']}")
    assert req.headers["content-type"] == "application/json"
    assert any("127.0.0.1" in r.getMessage() for r in caplog.records)  # httpx logged the request ...
    assert_no_secret(caplog.text)  # ... with the URL redacted


@pytest.mark.anyio
@formats
@pytest.mark.parametrize("status", [500, 502, 503])
async def test_5xx_is_recoverable(server: RecordingServer, fmt: str, status: int) -> None:
    server.answer(status, "upstream unavailable")
    err = await send_error(secret_webhook(server.url(""), fmt), notification())
    assert err.recoverable is True
    assert f"HTTP {status}" in str(err)
    assert_no_secret(str(err))


@pytest.mark.anyio
@formats
async def test_429_with_retry_after_seconds(server: RecordingServer, fmt: str) -> None:
    server.answer(429, "slow down", headers={"Retry-After": "7"})
    err = await send_error(secret_webhook(server.url(""), fmt), notification())
    assert err.recoverable is True
    assert err.retry_after == 7.0


@pytest.mark.anyio
async def test_429_with_retry_after_date(server: RecordingServer) -> None:
    server.answer(429, "", headers={"Retry-After": formatdate(SENT_AT + 120, usegmt=True)})
    err = await send_error(webhook(server.url()), notification())
    assert err.recoverable is True and err.retry_after == 120.0


@pytest.mark.anyio
@formats
@pytest.mark.parametrize("status", [400, 403, 404])
async def test_other_4xx_is_final(server: RecordingServer, fmt: str, status: int) -> None:
    server.answer(status, "nope")
    err = await send_error(secret_webhook(server.url(""), fmt), notification())
    assert err.recoverable is False
    assert err.retry_after is None


@pytest.mark.anyio
@formats
async def test_connection_refused_is_recoverable(closed_port: int, fmt: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    err = await send_error(secret_webhook(f"http://127.0.0.1:{closed_port}", fmt), notification())
    assert err.recoverable is True
    assert "ConnectError" in str(err)
    assert f"({fmt}, http://127.0.0.1/…)" in str(err)
    assert_no_secret(str(err))
    assert_no_secret(caplog.text)
    assert err.__cause__ is None and err.__suppress_context__  # no httpx exception (holding the URL) attached


@pytest.mark.anyio
@formats
async def test_timeout_is_recoverable(server: RecordingServer, fmt: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    server.answer(*OK[fmt], delay=3.0)
    n = webhook(
        f"{server.url('')}/{TOKEN}",
        fmt,
        timeout="200ms",
        headers={"X-Token": HEADER_SECRET},
        **EXTRA.get(fmt, {}),
    )
    err = await send_error(n, notification())
    assert err.recoverable is True
    assert "no answer within 0.2s" in str(err)
    assert_no_secret(str(err))
    assert_no_secret(caplog.text)


@pytest.mark.anyio
async def test_secrets_echoed_by_the_service_are_scrubbed(server: RecordingServer) -> None:
    url = server.url(f"/robot/send?access_token={'a1b2' * 16}")
    server.answer(200, {"errcode": 300001, "errmsg": f"token {'a1b2' * 16} is not exist, sign SECsecret-0042"})
    err = await send_error(webhook(url, "dingtalk", secret="SECsecret-0042"), notification())
    assert "a1b2a1b2" not in str(err) and "SECsecret-0042" not in str(err)
    assert "code 300001 token … is not exist, sign …" in str(err)


@pytest.mark.anyio
async def test_redirect_is_not_followed_and_is_final(server: RecordingServer) -> None:
    server.answer(302, "", headers={"Location": "http://127.0.0.1:1/elsewhere"})
    err = await send_error(webhook(server.url()), notification())
    assert err.recoverable is False and "HTTP 302" in str(err)
    assert len(server.requests) == 1


@pytest.mark.anyio
async def test_shared_client_is_left_open(server: RecordingServer) -> None:
    cfg = WebhookConfig(type="webhook", url=server.url())  # type: ignore[arg-type]
    async with httpx.AsyncClient() as client:
        notifier = WebhookNotifier("a", cfg, client=client)
        await notifier.send(notification())
        await notifier.aclose()
        assert not client.is_closed
        await WebhookNotifier("b", cfg, client=client).send(notification())
    assert len(server.requests) == 2


@pytest.mark.anyio
async def test_own_client_is_closed(server: RecordingServer) -> None:
    notifier = webhook(server.url())
    await notifier.aclose()
    with pytest.raises(RuntimeError):
        await notifier.send(notification())


@pytest.mark.parametrize("fmt", sorted(set(OK) - {"dingtalk", "wecom", "pagerduty", "teams"}))
def test_no_rate_limit_for_other_services(fmt: str) -> None:
    assert webhook("https://example.invalid/x", fmt, **EXTRA.get(fmt, {})).rate_limit is None


def test_target_is_redacted() -> None:
    notifier = webhook(f"https://hooks.slack.com/services/{TOKEN}", "slack")
    assert notifier.target == "https://hooks.slack.com/…"
    assert_no_secret(repr(notifier.__dict__.get("_cfg")))
