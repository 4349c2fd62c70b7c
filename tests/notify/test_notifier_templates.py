"""Per-notifier `title`/`text` templates, delivered to a real HTTP receiver in every chat format."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from notify_helpers import RecordingServer, notification, send, transition, webhook

from alertd.model import TransitionKind
from alertd.notify.config import LogConfig
from alertd.notify.log import LogNotifier

TITLE = "{{ status | upper }} {{ groupLabels.run }} x{{ alerts | length }}"
TEXT = "{% for a in alerts %}run {{ a.labels.run }} step {{ a.step }} value {{ a.value | humanize }}{% endfor %}"
WANT_TITLE = "FIRING exp1 x1"
WANT_TEXT = "run exp1 step 250 value 1.235M"

ANSWERS: dict[str, tuple[int, Any]] = {
    "slack": (200, "ok"),
    "discord": (200, {"id": "1", "type": 0, "content": "x", "channel_id": "2"}),
    "teams": (202, ""),
    "mattermost": (200, "ok"),
    "telegram": (200, {"ok": True, "result": {"message_id": 7}}),
    "feishu": (200, {"code": 0, "msg": "success", "data": {}}),
    "dingtalk": (200, {"errcode": 0, "errmsg": "ok"}),
    "wecom": (200, {"errcode": 0, "errmsg": "ok"}),
}


def _slack(b: Any) -> tuple[str, str]:
    return b["text"], b["attachments"][0]["blocks"][1]["text"]["text"]


def _discord(b: Any) -> tuple[str, str]:
    assert b["content"] == b["embeds"][0]["title"]
    return b["content"], b["embeds"][0]["description"]


def _teams(b: Any) -> tuple[str, str]:
    blocks = b["attachments"][0]["content"]["body"]
    return blocks[0]["text"], blocks[2]["text"]


def _mattermost(b: Any) -> tuple[str, str]:
    head, _, rest = b["text"].partition("\n")
    return head.removeprefix("#### "), rest


def _telegram(b: Any) -> tuple[str, str]:
    head, _, rest = b["text"].partition("\n")
    return head.removeprefix("<b>").removesuffix("</b>"), rest


def _feishu(b: Any) -> tuple[str, str]:
    post = b["content"]["post"]["zh_cn"]
    return post["title"], post["content"][0][0]["text"]


def _dingtalk(b: Any) -> tuple[str, str]:
    head, _, rest = b["markdown"]["text"].partition("\n\n")
    assert head == f"#### {b['markdown']['title']}"
    return b["markdown"]["title"], rest


def _wecom(b: Any) -> tuple[str, str]:
    head, _, rest = b["markdown"]["content"].partition("\n")
    return head.removeprefix('### <font color="warning">').removesuffix("</font>"), rest


PARTS: dict[str, Callable[[Any], tuple[str, str]]] = {
    "slack": _slack,
    "discord": _discord,
    "teams": _teams,
    "mattermost": _mattermost,
    "telegram": _telegram,
    "feishu": _feishu,
    "dingtalk": _dingtalk,
    "wecom": _wecom,
}


def chat(server: RecordingServer, fmt: str, **kw: Any) -> Any:
    status, body = ANSWERS[fmt]
    server.answer(status, body)
    extra = {"chat_id": "42"} if fmt == "telegram" else {}
    return webhook(server.url("/hook/secret-token-123"), fmt, **extra, **kw)


@pytest.mark.anyio
@pytest.mark.parametrize("fmt", sorted(PARTS))
async def test_title_and_text_are_the_messages_title_and_body(server: RecordingServer, fmt: str) -> None:
    await send(chat(server, fmt, title=TITLE, text=TEXT), notification(transition(value=1234567.0)))
    assert PARTS[fmt](server.last.json()) == (WANT_TITLE, WANT_TEXT)


@pytest.mark.anyio
@pytest.mark.parametrize("fmt", sorted(PARTS))
async def test_without_templates_the_message_is_alertds_own(server: RecordingServer, fmt: str) -> None:
    await send(chat(server, fmt), notification(transition(value=1234567.0)))
    title, body = PARTS[fmt](server.last.json())
    assert "loss" in title and "not" in title and "FIRING:1" in title
    assert "train/loss = 1.23457e+06 at step 250 in run exp1" in body


@pytest.mark.anyio
async def test_go_names_and_alertmanager_data(server: RecordingServer) -> None:
    text = (
        "{{ .Receiver }}/{{ .Status }}/{{ .CommonLabels.alertname }}/{{ .CommonLabels.severity }}/"
        "{{ commonAnnotations.summary }}/{{ externalURL }}/{{ commonLabels.gpu }}|"
        "{% for a in .Alerts %}{{ a.Status }} {{ a.StartsAt }} {{ a.endsAt }} {{ a.generatorURL }} "
        "{{ a.fingerprint == a.Fingerprint }} {{ a.annotations.summary }};{% endfor %}"
    )
    alerts = [transition(), transition(run="exp2", state=TransitionKind.RESOLVED, value=0.25)]
    await send(chat(server, "mattermost", text=text, external_url="http://alertd:9090"), notification(*alerts))
    _, body = _mattermost(server.last.json())
    # the resolved alert's summary says it resolved (not the firing words), so the summaries have nothing in common
    assert body == (
        "chat/firing/loss\\_not\\_finite/critical/<no value>/http://alertd:9090/<no value>|"
        "firing 2026-05-28T20:26:40Z 0001-01-01T00:00:00Z http://alertd:9090/api/v1/rules#loss\\_not\\_finite True "
        "train/loss is NaN at step 250 in exp1;"
        "resolved 2026-05-28T20:26:40Z 2026-05-28T20:27:10Z http://alertd:9090/api/v1/rules#loss\\_not\\_finite True "
        "train/loss back to 0.25 at step 250;"
    )


@pytest.mark.anyio
async def test_the_formats_escape_what_a_template_prints(server: RecordingServer) -> None:
    evil = transition(run="<!channel> & <b>x</b>")
    await send(chat(server, "slack", text="{{ alerts[0].labels.run }}"), notification(evil))
    assert _slack(server.last.json())[1] == "&lt;!channel&gt; &amp; &lt;b&gt;x&lt;/b&gt;"
    await send(chat(server, "telegram", title="{{ alerts[0].labels.run }}"), notification(evil))
    assert _telegram(server.last.json())[0] == "&lt;!channel&gt; &amp; &lt;b&gt;x&lt;/b&gt;"


@pytest.mark.anyio
async def test_a_long_text_is_cut_to_the_services_limit(server: RecordingServer) -> None:
    await send(chat(server, "slack", text="{% for i in range(2000) %}word {% endfor %}"), notification())
    body = _slack(server.last.json())[1]
    assert len(body) <= 3000 and body.startswith("word word") and body.endswith("…")


@pytest.mark.anyio
async def test_a_failing_template_still_delivers_with_alertds_own_text_and_logs_why(
    server: RecordingServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    notifier = chat(server, "slack", title=TITLE, text="{{ alerts[0].labels.run | humanize }}")
    await send(notifier, notification(transition(value=1234567.0)))
    title, body = _slack(server.last.json())
    assert title == WANT_TITLE  # the title still rendered
    assert body.startswith("FIRING loss_not_finite: train/loss = 1.23457e+06 at step 250")
    assert "notifier chat: its text template failed" in caplog.text and "humanize" in caplog.text
    assert "secret-token-123" not in caplog.text and "127.0.0.1" not in caplog.text


@pytest.mark.anyio
async def test_a_hostile_template_is_stopped_and_the_notification_delivered(
    server: RecordingServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    bomb = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    await send(chat(server, "discord", title=bomb), notification())
    assert _discord(server.last.json())[0].startswith("[FIRING:1] loss")
    assert "its title template failed (refused: the template ran more than 20000" in caplog.text


@pytest.mark.anyio
async def test_a_template_cannot_change_the_notification(
    server: RecordingServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    title = "{% set f = alerts[0].update %}{{ f({'labels': {'run': 'changed'}}) }}"  # rendered first
    await send(chat(server, "slack", title=title, text="{{ alerts[0].labels.run }}"), notification())
    head, body = _slack(server.last.json())
    assert head.startswith("[FIRING:1] loss") and body == "exp1"
    assert "its title template failed (refused: calling .update() is not allowed" in caplog.text


@pytest.mark.anyio
async def test_the_log_notifier_takes_title_and_text(capsys: pytest.CaptureFixture[str]) -> None:
    notifier = LogNotifier("console", LogConfig(type="log", title=TITLE, text="{{ alerts | length }} alert(s)\nok"))
    await notifier.send(notification(transition(value=1234567.0), receiver="console"))
    out = capsys.readouterr().out
    assert out == f"alertd notify receiver=console status=firing level=warning {WANT_TITLE} | 1 alert(s) ok\n"


def test_generic_format_refuses_title_and_text(server: RecordingServer) -> None:
    with pytest.raises(ValueError, match="title and text are not used by format generic"):
        webhook(server.url(), "generic", title=TITLE)


def test_alertd_check_names_each_bad_notifier_template(tmp_path: Path) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(
        "notifiers:\n"
        "  team-chat:\n"
        "    type: webhook\n"
        "    format: slack\n"
        "    url: https://hooks.slack.example/services/T000/B000/SECRETSECRET\n"
        "    title: '{{ .CommonLabels.alertname }} {{ nope }}'\n"
        "    text: '{{ $labels.run }}'\n"
        "  mail:\n"
        "    type: email\n"
        "    host: 127.0.0.1\n"
        "    from: a@example.test\n"
        "    to: [b@example.test]\n"
        "    title: '{% for a in alerts %}'\n"
        "  console:\n"
        "    type: log\n"
        "    text: '{{ alerts[0].__class__ }}'\n"
        "rules:\n"
        "  - {name: r, metric: loss, condition: nonfinite}\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "alertd", "check", str(rules)], capture_output=True, text=True, timeout=120
    )
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert f"{rules}:6: notifiers.team-chat.title: template line 1, column 34: unknown name 'nope'" in out
    assert "notifiers.team-chat.text: template line 1, column 5: unknown name 'labels' (a notification has many" in out
    assert "notifiers.mail.title: template line 1: syntax error" in out
    assert "notifiers.console.text: template line 1, column 14: names starting with '_'" in out
    assert "SECRETSECRET" not in out
