"""The ntfy format: JSON publishing to the server's root with the topic in the body; priority and tags from
severity; the access token as a bearer header and never in an error or a log; ntfy's error answers."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from notify_helpers import RecordingServer, notification, send, send_error, transition, webhook
from pydantic import ValidationError

from alertd.model import TransitionKind
from alertd.notify.config import WebhookConfig

OK = {"id": "sPs71M8A2T", "time": 1717000000, "expires": 1717043200, "event": "message", "topic": "alerts-7f3a"}
TOPIC = "alerts-7f3a9c"
TOKEN = "tk_AgQdq7mVBoFD37zQVN29RhuMzNIz2"
LINE = (
    "FIRING loss_not_finite: train/loss = NaN at step 250 in run exp1 (2026-05-28T20:27:10Z): "
    "train/loss is NaN at step 250 in exp1"
)


@pytest.mark.anyio
async def test_firing_critical_is_published_as_json_to_the_root(server: RecordingServer) -> None:
    server.answer(200, OK)
    await send(webhook(server.url(f"/{TOPIC}"), "ntfy"), notification(transition(severity="critical")))

    req = server.last
    assert req.route == "/"
    assert req.headers["content-type"] == "application/json"
    assert "authorization" not in req.headers
    assert req.json() == {
        "topic": TOPIC,
        "title": "[FIRING:1] loss_not_finite (run=exp1)",
        "message": LINE,
        "priority": 5,
        "tags": ["rotating_light"],
    }


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("severities", "priority", "tag"),
    [
        (["warning"], 4, "warning"),
        (["info"], 3, "information_source"),
        (["page-me"], 3, "warning"),
        (["info", "critical", "warning"], 5, "rotating_light"),
    ],
)
async def test_priority_follows_the_most_severe_firing_alert(
    server: RecordingServer, severities: list[str], priority: int, tag: str
) -> None:
    server.answer(200, OK)
    alerts = [transition(run=f"r{i}", severity=s) for i, s in enumerate(severities)]
    await send(webhook(server.url(f"/{TOPIC}"), "ntfy"), notification(*alerts))
    body = server.last.json()
    assert (body["priority"], body["tags"]) == (priority, [tag])


@pytest.mark.anyio
async def test_resolved_is_low_priority_with_a_check_mark(server: RecordingServer) -> None:
    server.answer(200, OK)
    t = transition(state=TransitionKind.RESOLVED, severity="critical")
    await send(webhook(server.url(f"/{TOPIC}"), "ntfy"), notification(t))
    body = server.last.json()
    assert body["title"].startswith("[RESOLVED]")
    assert (body["priority"], body["tags"]) == (2, ["white_check_mark"])


@pytest.mark.anyio
async def test_self_hosted_base_with_a_path_prefix_and_click_link(server: RecordingServer) -> None:
    server.answer(200, OK)
    notifier = webhook(server.url(f"/ntfy/{TOPIC}"), "ntfy", external_url="https://alertd.example.com/")
    await send(notifier, notification())
    assert server.last.route == "/ntfy/"
    assert server.last.json()["topic"] == TOPIC
    assert server.last.json()["click"] == "https://alertd.example.com/"


@pytest.mark.anyio
async def test_access_token_is_a_bearer_header(server: RecordingServer) -> None:
    server.answer(200, OK)
    await send(webhook(server.url(f"/{TOPIC}"), "ntfy", token=TOKEN), notification())
    assert server.last.headers["authorization"] == f"Bearer {TOKEN}"
    assert TOKEN not in server.last.body.decode()


@pytest.mark.anyio
async def test_message_stays_under_ntfys_4096_bytes(server: RecordingServer) -> None:
    server.answer(200, OK)
    alerts = [transition(run=f"r{i}", summary="ß" * 150) for i in range(100)]
    await send(webhook(server.url(f"/{TOPIC}"), "ntfy"), notification(*alerts))
    message = server.last.json()["message"]
    assert len(message.encode()) <= 4096
    assert message.endswith("(truncated to the service's limit)")


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("status", "answer", "recoverable"),
    [
        (429, {"code": 42901, "http": 429, "error": "limit reached: too many requests"}, True),
        (403, {"code": 40301, "http": 403, "error": "forbidden"}, False),
        (401, {"code": 40101, "http": 401, "error": "unauthorized"}, False),
        (400, {"code": 40009, "http": 400, "error": "invalid request: priority invalid"}, False),
        (500, {"code": 50001, "http": 500, "error": "internal server error"}, True),
        (502, "<html>Bad Gateway</html>", True),
    ],
)
async def test_error_answers(
    server: RecordingServer,
    status: int,
    answer: object,
    recoverable: bool,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    server.answer(status, answer)  # type: ignore[arg-type]
    err = await send_error(webhook(server.url(f"/{TOPIC}"), "ntfy", token=TOKEN), notification())
    assert err.recoverable is recoverable
    assert f"ntfy answered HTTP {status}" in str(err)
    if isinstance(answer, dict):
        assert str(answer["error"]) in str(err)
    for secret in (TOKEN, TOPIC):
        assert secret not in str(err)
        assert secret not in caplog.text


@pytest.mark.anyio
async def test_token_echoed_in_an_answer_is_scrubbed(server: RecordingServer) -> None:
    server.answer(401, {"code": 40101, "http": 401, "error": f"unauthorized token {TOKEN}"})
    err = await send_error(webhook(server.url(f"/{TOPIC}"), "ntfy", token=TOKEN), notification())
    assert TOKEN not in str(err)
    assert "unauthorized token …" in str(err)


def test_token_file_is_read(tmp_path: Path) -> None:
    path = tmp_path / "ntfy-token"
    path.write_text(TOKEN + "\n")
    cfg = WebhookConfig.model_validate(
        {"type": "webhook", "format": "ntfy", "url": f"https://ntfy.sh/{TOPIC}", "token_file": str(path)}
    )
    assert cfg.token is not None and cfg.token.get_secret_value() == TOKEN
    assert TOKEN not in repr(cfg)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"url": "https://ntfy.sh/"}, "format ntfy needs the topic in the url"),
        ({"url": "https://ntfy.sh/t", "user": "u"}, "user is only used by format pushover"),
        ({"url": "https://ntfy.sh/t", "retry": "60s"}, "retry and expire are only used by format pushover"),
        ({"url": "https://hooks.slack.com/x", "format": "slack", "token": "t"}, "token is only used by formats"),
    ],
)
def test_bad_options_are_refused(extra: dict[str, str], message: str) -> None:
    with pytest.raises(ValidationError) as e:
        WebhookConfig.model_validate({"type": "webhook", "format": "ntfy", **extra})
    assert message in str(e.value)
