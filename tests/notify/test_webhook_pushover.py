"""The pushover format: messages.json with the app token and user key (secrets), title and message within
Pushover's limits, priority from severity with the emergency priority's retry/expire, and its answers."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from notify_helpers import RecordingServer, notification, send, send_error, transition, webhook
from pydantic import ValidationError

from alertd.model import TransitionKind
from alertd.notify.config import WebhookConfig
from alertd.notify.webhook import WebhookNotifier

OK = {"status": 1, "request": "647d2300-702c-4b38-8b2f-d56326ae460b"}
APP_TOKEN = "azGDORePK8gMaC0QOYAMyEEuzJnyUi"
USER_KEY = "uQiRzpo4DXghDmr9QzzfQu27cmVRsG"
LINE = (
    "FIRING loss_not_finite: train/loss = NaN at step 250 in run exp1 (2026-05-28T20:27:10Z): "
    "train/loss is NaN at step 250 in exp1"
)


def pushover(server: RecordingServer, **kw: Any) -> WebhookNotifier:
    return webhook(server.url("/1/messages.json"), "pushover", token=APP_TOKEN, user=USER_KEY, **kw)


@pytest.mark.anyio
async def test_critical_is_an_emergency_with_retry_and_expire(server: RecordingServer) -> None:
    server.answer(200, OK)
    await send(pushover(server), notification(transition(severity="critical")))

    req = server.last
    assert req.route == "/1/messages.json"
    assert req.headers["content-type"] == "application/json"
    assert req.json() == {
        "token": APP_TOKEN,
        "user": USER_KEY,
        "title": "[FIRING:1] loss_not_finite (run=exp1)",
        "message": LINE,
        "priority": 2,
        "retry": 60,
        "expire": 3600,
    }


@pytest.mark.anyio
async def test_retry_and_expire_are_configurable(server: RecordingServer) -> None:
    server.answer(200, OK)
    await send(pushover(server, retry="2m", expire="3h"), notification(transition(severity="critical")))
    body = server.last.json()
    assert (body["retry"], body["expire"]) == (120, 10800)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("severities", "priority"),
    [(["warning"], 1), (["info"], 0), (["page-me"], 0), (["info", "warning"], 1)],
)
async def test_priority_follows_the_most_severe_firing_alert(
    server: RecordingServer, severities: list[str], priority: int
) -> None:
    server.answer(200, OK)
    alerts = [transition(run=f"r{i}", severity=s) for i, s in enumerate(severities)]
    await send(pushover(server), notification(*alerts))
    body = server.last.json()
    assert body["priority"] == priority
    assert "retry" not in body and "expire" not in body  # only the emergency priority takes them


@pytest.mark.anyio
async def test_resolved_is_quiet(server: RecordingServer) -> None:
    server.answer(200, OK)
    await send(pushover(server), notification(transition(state=TransitionKind.RESOLVED, severity="critical")))
    body = server.last.json()
    assert body["title"].startswith("[RESOLVED]")
    assert body["priority"] == -1
    assert "retry" not in body


@pytest.mark.anyio
async def test_message_is_at_most_1024_and_title_250_characters(server: RecordingServer) -> None:
    server.answer(200, OK)
    alerts = [transition(run=f"r{i}", summary="x" * 120) for i in range(30)]
    await send(pushover(server, title="T" * 400), notification(*alerts))
    body = server.last.json()
    assert len(body["message"]) <= 1024
    assert body["message"].endswith("(truncated to the service's limit)")
    assert len(body["title"]) == 250


def test_the_default_url_is_pushovers_api() -> None:
    cfg = WebhookConfig.model_validate({"type": "webhook", "format": "pushover", "token": "a" * 30, "user": "u" * 30})
    assert cfg.url.get_secret_value() == "https://api.pushover.net/1/messages.json"


def test_dry_run_payload_has_no_credentials(server: RecordingServer) -> None:
    payload = pushover(server).payload(notification())
    assert "token" not in payload and "user" not in payload


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("status", "answer", "recoverable"),
    [
        (400, {"token": "invalid", "errors": ["application token is invalid"], "status": 0}, False),
        (400, {"user": "invalid", "errors": ["user identifier is not a valid user"], "status": 0}, False),
        (429, {"errors": ["application is over its monthly message limit"], "status": 0}, True),
        (500, "Internal Server Error", True),
        (503, {"errors": ["try again later"], "status": 0}, True),
    ],
)
async def test_error_answers(
    server: RecordingServer,
    status: int,
    answer: Any,
    recoverable: bool,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    server.answer(status, answer)
    err = await send_error(pushover(server), notification())
    assert err.recoverable is recoverable
    assert f"Pushover answered HTTP {status}" in str(err)
    if isinstance(answer, dict):
        assert answer["errors"][0] in str(err)
    for secret in (APP_TOKEN, USER_KEY):
        assert secret not in str(err)
        assert secret not in caplog.text


@pytest.mark.anyio
async def test_status_0_with_http_200_is_not_delivered(server: RecordingServer) -> None:
    server.answer(200, {"status": 0, "request": "x"})
    err = await send_error(pushover(server), notification())
    assert err.recoverable is True
    assert "unreadable answer" in str(err)


@pytest.mark.anyio
async def test_keys_echoed_in_an_answer_are_scrubbed(server: RecordingServer) -> None:
    server.answer(400, {"errors": [f"user {USER_KEY} with token {APP_TOKEN} is invalid"], "status": 0})
    err = await send_error(pushover(server), notification())
    assert APP_TOKEN not in str(err) and USER_KEY not in str(err)
    assert "user … with token … is invalid" in str(err)


def test_keys_from_files(tmp_path: Path) -> None:
    (tmp_path / "token").write_text(APP_TOKEN + "\n")
    (tmp_path / "user").write_text(USER_KEY)
    cfg = WebhookConfig.model_validate(
        {
            "type": "webhook",
            "format": "pushover",
            "token_file": str(tmp_path / "token"),
            "user_file": str(tmp_path / "user"),
        }
    )
    assert cfg.token is not None and cfg.token.get_secret_value() == APP_TOKEN
    assert cfg.user is not None and cfg.user.get_secret_value() == USER_KEY
    assert APP_TOKEN not in repr(cfg) and USER_KEY not in repr(cfg)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"token": APP_TOKEN}, "format pushover needs token"),
        ({"user": USER_KEY}, "format pushover needs token"),
        ({"token": APP_TOKEN, "user": USER_KEY, "retry": "10s"}, "retry must be at least 30s"),
        ({"token": APP_TOKEN, "user": USER_KEY, "expire": "4h"}, "expire must be more than 0s and at most 3h"),
    ],
)
def test_bad_options_are_refused(extra: dict[str, str], message: str) -> None:
    with pytest.raises(ValidationError) as e:
        WebhookConfig.model_validate({"type": "webhook", "format": "pushover", **extra})
    assert message in str(e.value)
    assert APP_TOKEN not in str(e.value) and USER_KEY not in str(e.value)  # the keys are never echoed
