"""The e-mail notifier's own `title` (Subject) and `text` (body) templates, through a real SMTP server."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from smtp_testkit import SmtpFactory

from alertd.model import Notification, Transition, TransitionKind, make_labels
from alertd.notify.config import EmailConfig
from alertd.notify.email import EmailNotifier

T0 = 1_780_000_000.0


def alert(run: str, value: float) -> Transition:
    return Transition(
        rule="loss_high",
        state=TransitionKind.FIRING,
        time=T0 + 5,
        step=250,
        value=value,
        labels=make_labels({"metric": "train/loss", "run": run}),
        severity="warning",
        annotations=(("summary", f"loss is high in {run}"),),
        active_at=T0,
    )


def notification(*alerts: Transition) -> Notification:
    return Notification(
        receiver="mail",
        group_key="{}:{rule=loss_high}",
        group_labels=make_labels({"rule": "loss_high"}),
        status="firing",
        alerts=alerts,
        key="fp1-1780000000-firing",
        created=T0 + 6,
    )


async def deliver(port: int, n: Notification, **templates: Any) -> None:
    cfg = EmailConfig.model_validate(
        {
            "type": "email",
            "host": "127.0.0.1",
            "port": port,
            "tls": "none",
            "from": "alertd@example.test",
            "to": ["oncall@example.test"],
            "timeout": "5s",
            **templates,
        }
    )
    notifier = EmailNotifier("mail", cfg)
    try:
        await notifier.send(n)
    finally:
        await notifier.aclose()


TITLE = "[{{ status | upper }}] {{ commonLabels.alertname }}: {{ alerts | length }} run(s)\r\nBcc: evil@example.test"
TEXT = (
    "{% for a in alerts %}- {{ a.labels.run }}: {{ a.value | humanize }} at step {{ a.step }}"
    " ({{ a.annotations.summary }})\n{% endfor %}"
)


@pytest.mark.anyio
async def test_subject_and_body_come_from_the_templates(smtp_server: SmtpFactory) -> None:
    handler, port = smtp_server("plain")
    await deliver(port, notification(alert("exp1", 1234567.0), alert("<b>exp2</b>", 0.00123)), title=TITLE, text=TEXT)

    [got] = handler.received
    msg = got.message
    assert msg["Subject"] == "[FIRING] loss_high: 2 run(s) Bcc: evil@example.test"  # one line: no header injected
    assert msg["Bcc"] is None and got.rcpt_tos == ["oncall@example.test"]
    plain = msg.get_body(preferencelist=("plain",)).get_content().replace("\r\n", "\n")
    assert plain == (
        "- exp1: 1.235M at step 250 (loss is high in exp1)\n"
        "- <b>exp2</b>: 1.23m at step 250 (loss is high in <b>exp2</b>)\n"
        "\nNotification key: fp1-1780000000-firing\n"
    )
    html = msg.get_body(preferencelist=("html",)).get_content()
    assert "- &lt;b&gt;exp2&lt;/b&gt;: 1.23m at step 250" in html and "<b>exp2</b>" not in html


@pytest.mark.anyio
async def test_a_failing_template_still_sends_alertds_own_mail(
    smtp_server: SmtpFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    handler, port = smtp_server("plain")
    await deliver(port, notification(alert("exp1", 2.0)), title="{{ alerts[0].labels.run | humanize }}", text=TEXT)

    [got] = handler.received
    assert got.message["Subject"] == "[alertd] FIRING loss_high run=exp1"
    plain = got.message.get_body(preferencelist=("plain",)).get_content().replace("\r\n", "\n")
    assert plain.startswith("- exp1: 2 at step 250 (loss is high in exp1)\n")
    assert "notifier mail: its title template failed" in caplog.text


@pytest.mark.anyio
async def test_without_templates_the_mail_is_unchanged(smtp_server: SmtpFactory) -> None:
    handler, port = smtp_server("plain")
    await deliver(port, notification(alert("exp1", 2.0)))
    msg = handler.received[0].message
    assert msg["Subject"] == "[alertd] FIRING loss_high run=exp1"
    assert (
        "FIRING loss_high: train/loss = 2 at step 250 in run exp1"
        in msg.get_body(preferencelist=("plain",)).get_content()
    )
