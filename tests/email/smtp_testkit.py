"""A real SMTP server (aiosmtpd, in its own thread) on 127.0.0.1, with TLS from a self-signed certificate."""

from __future__ import annotations

import asyncio
import ssl
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from email import message_from_bytes, policy
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

from alertd.testing.fds import sockets_to
from alertd.testing.receiver import free_port

USER = "alertd-bot"
PASSWORD = "s3cret-Pa55word!"


async def connections_closed(port: int, within: float = 2.0) -> set[str]:
    """Wait (the event loop running) until this process holds no connection to `port`, at most `within` seconds;
    return those still open. A TLS connection's close ends its shutdown exchange on the loop, after `close()`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while (left := sockets_to(port)) and loop.time() < deadline:
        await asyncio.sleep(0.02)
    return left


@dataclass
class Received:
    """One message as the server took it."""

    mail_from: str
    rcpt_tos: list[str]
    message: EmailMessage
    tls: bool
    login: str | None


@dataclass
class Recorder:
    """The SMTP handler: records each message, or answers DATA with `reply` (`451 ...`, `550 ...`)."""

    reply: str | None = None
    refuse_rcpt: dict[str, str] = field(default_factory=dict)
    received: list[Received] = field(default_factory=list)

    async def handle_RCPT(self, server: Any, session: Any, envelope: Any, address: str, options: Any) -> str:
        if address in self.refuse_rcpt:
            return self.refuse_rcpt[address]
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        if self.reply is not None:
            return self.reply
        msg = message_from_bytes(envelope.original_content, policy=policy.default)
        assert isinstance(msg, EmailMessage)
        login = session.auth_data.login.decode() if isinstance(session.auth_data, LoginPassword) else None
        tls = session.ssl is not None
        self.received.append(Received(envelope.mail_from, list(envelope.rcpt_tos), msg, tls, login))
        return "250 Message accepted for delivery"


def authenticator(server: Any, session: Any, envelope: Any, mechanism: str, auth_data: Any) -> AuthResult:
    """Accepts exactly USER / PASSWORD (LOGIN and PLAIN)."""
    ok = (
        isinstance(auth_data, LoginPassword)
        and auth_data.login == USER.encode()
        and auth_data.password == PASSWORD.encode()
    )
    return AuthResult(success=ok, handled=False, auth_data=auth_data if ok else None)


@dataclass
class Cert:
    """A self-signed certificate for 127.0.0.1 and localhost."""

    cert: Path
    key: Path

    def server_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(self.cert, self.key)
        return ctx


@pytest.fixture(scope="session")
def cert(tmp_path_factory: pytest.TempPathFactory) -> Cert:
    """Made with the openssl CLI (the `cryptography` package is not in the venv)."""
    d = tmp_path_factory.mktemp("tls")
    crt, key = d / "cert.pem", d / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
         "-keyout", str(key), "-out", str(crt), "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
        check=True, capture_output=True,
    )  # fmt: skip
    return Cert(crt, key)


SmtpFactory = Callable[..., tuple[Recorder, int]]


@pytest.fixture
def smtp_server(cert: Cert) -> Iterator[SmtpFactory]:
    """Starts servers on demand: `smtp_server(mode="plain"|"starttls"|"implicit", auth=False, reply=None)`."""
    controllers: list[Controller] = []

    def start(mode: str = "plain", *, auth: bool = False, **handler_kw: Any) -> tuple[Recorder, int]:
        handler, port = Recorder(**handler_kw), free_port()
        kw: dict[str, Any] = {}
        if mode == "starttls":
            kw.update(tls_context=cert.server_context(), require_starttls=True)
        elif mode == "implicit":
            kw.update(ssl_context=cert.server_context())
        if auth:
            kw.update(authenticator=authenticator, auth_required=True, auth_require_tls=mode == "starttls")
        c = Controller(handler, hostname="127.0.0.1", port=port, **kw)
        c.start()
        controllers.append(c)
        return handler, port

    yield start
    for c in controllers:
        c.stop()
