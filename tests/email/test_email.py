"""EmailNotifier against a real SMTP server (aiosmtpd) on 127.0.0.1: plain, STARTTLS, implicit TLS, AUTH."""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from smtp_testkit import PASSWORD, USER, Cert, SmtpFactory, connections_closed, free_port

from alertd.errors import NotifyError
from alertd.model import Notification, Transition, TransitionKind, make_labels
from alertd.notify.config import EmailConfig
from alertd.notify.email import EmailNotifier

T0 = 1_780_000_000.0


def transition(run: str = "exp1", state: TransitionKind = TransitionKind.FIRING, **labels: str) -> Transition:
    return Transition(
        rule="loss_not_finite",
        state=state,
        time=T0 + 5,
        step=250,
        value=float("nan"),
        labels=make_labels({"metric": "train/loss", "run": run, "source": "tb", **labels}),
        severity="critical",
        annotations=(("summary", f"train/loss is NaN at step 250 in {run}"),),
        active_at=T0,
    )


def notification(*alerts: Transition, status: str = "firing", key: str = "fp1-1780000000-firing") -> Notification:
    alerts = alerts or (transition(),)
    return Notification(
        receiver="mail",
        group_key="{}:{rule=loss_not_finite,run=exp1}",
        group_labels=make_labels({"rule": "loss_not_finite", "run": "exp1"}),
        status=status,
        alerts=alerts,
        key=key,
        created=T0 + 6,
    )


def config(port: int, tls: str = "none", **kw: Any) -> EmailConfig:
    data: dict[str, Any] = {
        "type": "email",
        "host": "127.0.0.1",
        "port": port,
        "tls": tls,
        "from": "alertd@example.test",
        "to": ["oncall@example.test"],
        "timeout": "5s",
    }
    data.update(kw)
    return EmailConfig.model_validate(data)


async def deliver(cfg: EmailConfig, n: Notification | None = None) -> None:
    """Send `n` with a notifier of `cfg`; then, sent or not, the connection it opened must be closed (a TLS one ends
    its shutdown on the loop after `close()`: waited for, so that no test's loop ends before it)."""
    notifier = EmailNotifier("mail", cfg)
    try:
        await notifier.send(n or notification())
    finally:
        await notifier.aclose()
        assert await connections_closed(cfg.port) == set(), "a connection of the notifier's is left open"


@pytest.mark.anyio
async def test_plain_message_has_subject_headers_and_both_parts(smtp_server: SmtpFactory) -> None:
    handler, port = smtp_server("plain")
    await deliver(config(port))

    [got] = handler.received
    msg = got.message
    assert got.mail_from == "alertd@example.test"
    assert got.rcpt_tos == ["oncall@example.test"]
    assert msg["Subject"] == "[alertd] FIRING loss_not_finite run=exp1"
    assert msg["From"] == "alertd@example.test"
    assert msg["X-Alertd-Key"] == "fp1-1780000000-firing"
    assert msg["Message-ID"].startswith("<") and msg["Message-ID"].endswith("@example.test>")
    assert msg["Date"].datetime.timestamp() == T0 + 6
    assert msg.get_content_type() == "multipart/alternative"
    text = msg.get_body(preferencelist=("plain",)).get_content()
    assert "[FIRING:1] loss_not_finite (run=exp1)" in text
    assert "FIRING loss_not_finite: train/loss = NaN at step 250 in run exp1" in text
    assert "summary: train/loss is NaN at step 250 in exp1" in text
    html = msg.get_body(preferencelist=("html",)).get_content()
    assert "<table>" in html and "train/loss" in html and "NaN" in html


@pytest.mark.anyio
async def test_same_notification_gives_same_message_id(smtp_server: SmtpFactory) -> None:
    handler, port = smtp_server("plain")
    await deliver(config(port))
    await deliver(config(port))
    await deliver(config(port), notification(key="other-key"))
    ids = [r.message["Message-ID"] for r in handler.received]
    assert ids[0] == ids[1] != ids[2]


@pytest.mark.anyio
async def test_label_with_markup_is_escaped_in_html_and_kept_in_text(smtp_server: SmtpFactory) -> None:
    handler, port = smtp_server("plain")
    evil = transition(run="<script>alert('x')</script>", note='a "quoted" & <b>bold</b>\r\nBcc: x@evil.test')
    await deliver(config(port), notification(evil))

    msg = handler.received[0].message
    html = msg.get_body(preferencelist=("html",)).get_content()
    assert "<script>" not in html and "<b>bold</b>" not in html
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in html
    assert "&lt;b&gt;bold&lt;/b&gt;" in html
    text = msg.get_body(preferencelist=("plain",)).get_content()
    assert "run = <script>alert('x')</script>" in text
    # The group label in the subject is exp1; a header never gains a line from a label.
    assert msg["Bcc"] is None
    assert handler.received[0].rcpt_tos == ["oncall@example.test"]


@pytest.mark.anyio
async def test_subject_counts_several_alerts_and_resolved(smtp_server: SmtpFactory) -> None:
    handler, port = smtp_server("plain")
    two = notification(transition(run="exp1"), transition(run="exp1", gpu="1"))
    resolved = notification(transition(state=TransitionKind.RESOLVED), status="resolved", key="k-res")
    await deliver(config(port), two)
    await deliver(config(port), resolved)
    assert handler.received[0].message["Subject"] == "[alertd] FIRING:2 loss_not_finite run=exp1"
    assert handler.received[1].message["Subject"] == "[alertd] RESOLVED loss_not_finite run=exp1"


@pytest.mark.anyio
async def test_several_recipients_get_one_message(smtp_server: SmtpFactory) -> None:
    handler, port = smtp_server("plain")
    to = ["a@example.test", "b@example.test", "c@example.test"]
    await deliver(config(port, to=to))
    [got] = handler.received
    assert got.rcpt_tos == to
    assert got.message["To"] == "a@example.test, b@example.test, c@example.test"


@pytest.mark.anyio
async def test_starttls_with_trusted_self_signed_cert(smtp_server: SmtpFactory, cert: Cert) -> None:
    handler, port = smtp_server("starttls")
    await deliver(config(port, tls="starttls", ca_file=str(cert.cert)))
    assert handler.received[0].tls


@pytest.mark.anyio
async def test_starttls_untrusted_cert_is_not_recoverable(smtp_server: SmtpFactory) -> None:
    _, port = smtp_server("starttls")
    with pytest.raises(NotifyError) as err:
        await deliver(config(port, tls="starttls"))
    assert not err.value.recoverable
    assert f"127.0.0.1:{port}" in str(err.value)
    assert "certificate" in str(err.value).lower()


@pytest.mark.anyio
async def test_starttls_without_verification(smtp_server: SmtpFactory) -> None:
    handler, port = smtp_server("starttls")
    await deliver(config(port, tls="starttls", tls_verify=False))
    assert handler.received[0].tls


@pytest.mark.anyio
async def test_implicit_tls(smtp_server: SmtpFactory, cert: Cert) -> None:
    handler, port = smtp_server("implicit")
    await deliver(config(port, tls="implicit", ca_file=str(cert.cert)))
    assert len(handler.received) == 1


@pytest.mark.anyio
async def test_implicit_tls_untrusted_cert_is_not_recoverable(smtp_server: SmtpFactory) -> None:
    _, port = smtp_server("implicit")
    with pytest.raises(NotifyError) as err:
        await deliver(config(port, tls="implicit"))
    assert not err.value.recoverable
    assert "certificate" in str(err.value).lower()


@pytest.mark.anyio
async def test_starttls_asked_of_a_server_without_it_is_not_recoverable(smtp_server: SmtpFactory) -> None:
    _, port = smtp_server("plain")
    with pytest.raises(NotifyError) as err:
        await deliver(config(port, tls="starttls"))
    assert not err.value.recoverable
    assert "STARTTLS" in str(err.value)


@pytest.mark.anyio
@pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS")
@pytest.mark.parametrize("mode", ["starttls", "plain"])
async def test_auth_with_good_credentials(smtp_server: SmtpFactory, cert: Cert, mode: str) -> None:
    handler, port = smtp_server(mode, auth=True)
    tls = "starttls" if mode == "starttls" else "none"
    await deliver(config(port, tls=tls, ca_file=str(cert.cert), username=USER, password=PASSWORD))
    [got] = handler.received
    assert got.login == USER


@pytest.mark.anyio
@pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS")
@pytest.mark.parametrize("mode", ["starttls", "plain"])
async def test_bad_password_is_one_clear_error_without_the_password(
    smtp_server: SmtpFactory, cert: Cert, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    handler, port = smtp_server(mode, auth=True)
    tls = "starttls" if mode == "starttls" else "none"
    wrong = "wrong-" + PASSWORD
    cfg = config(port, tls=tls, ca_file=str(cert.cert), username=USER, password=wrong)
    with pytest.raises(NotifyError) as err:
        await deliver(cfg)  # which also checks that the refused connection is closed
    msg = str(err.value)
    assert not err.value.recoverable
    assert msg.startswith(f"email notifier 'mail': SMTP server 127.0.0.1:{port} refused the login of user")
    assert "535" in msg
    assert msg.count("\n") == 0
    assert wrong not in msg and PASSWORD not in msg
    assert wrong not in caplog.text and wrong not in repr(cfg)
    assert handler.received == []


@pytest.mark.anyio
async def test_server_down_is_recoverable() -> None:
    port = free_port()
    with pytest.raises(NotifyError) as err:
        await deliver(config(port))
    assert err.value.recoverable
    assert f"127.0.0.1:{port}" in str(err.value)


@pytest.fixture
def silent_server() -> Iterator[int]:
    """Accepts TCP connections and never says a word: the client must time out."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(4)
    conns: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        sock.settimeout(0.1)
        while not stop.is_set():
            try:
                conns.append(sock.accept()[0])
            except TimeoutError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield int(sock.getsockname()[1])
    stop.set()
    t.join()
    for c in conns:
        c.close()
    sock.close()


@pytest.mark.anyio
async def test_timeout_is_recoverable(silent_server: int) -> None:
    with pytest.raises(NotifyError) as err:
        await deliver(config(silent_server, timeout="300ms"))
    assert err.value.recoverable
    assert f"127.0.0.1:{silent_server}" in str(err.value)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("reply", "recoverable"),
    [("451 4.3.0 Mailbox busy, try later", True), ("550 5.7.1 Message rejected as spam", False)],
)
async def test_data_reply_decides_recoverable(smtp_server: SmtpFactory, reply: str, recoverable: bool) -> None:
    _, port = smtp_server("plain", reply=reply)
    with pytest.raises(NotifyError) as err:
        await deliver(config(port))
    assert err.value.recoverable is recoverable
    assert str(err.value) == f"email notifier 'mail': SMTP server 127.0.0.1:{port} answered {reply}"


@pytest.mark.anyio
async def test_one_refused_recipient_is_reported_by_name(smtp_server: SmtpFactory) -> None:
    handler, port = smtp_server("plain", refuse_rcpt={"gone@example.test": "550 5.1.1 No such user"})
    with pytest.raises(NotifyError) as err:
        await deliver(config(port, to=["oncall@example.test", "gone@example.test"]))
    assert not err.value.recoverable
    assert "gone@example.test: 550 5.1.1 No such user" in str(err.value)
    assert "delivered to oncall@example.test" in str(err.value)
    assert handler.received[0].rcpt_tos == ["oncall@example.test"]


@pytest.mark.anyio
async def test_all_recipients_refused_with_4xx_is_recoverable(smtp_server: SmtpFactory) -> None:
    handler, port = smtp_server("plain", refuse_rcpt={"oncall@example.test": "452 4.2.2 Mailbox full"})
    with pytest.raises(NotifyError) as err:
        await deliver(config(port))
    assert err.value.recoverable
    assert "oncall@example.test: 452 4.2.2 Mailbox full" in str(err.value)
    assert handler.received == []
