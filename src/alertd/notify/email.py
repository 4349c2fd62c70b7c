"""The e-mail notifier: one multipart (plain text + HTML) message per notification, sent with aiosmtplib.

TLS is STARTTLS (port 587 style), implicit TLS (port 465 style) or none. Failures are sorted as the
dispatcher needs them: SMTP 4xx, timeouts and connection errors can be retried; 5xx (a refused login
among them) cannot. The password is a `SecretStr`; it is handed to aiosmtplib and to nothing else.
"""

from __future__ import annotations

import hashlib
import html
import logging
import re
import ssl
from collections.abc import Sequence
from datetime import UTC, datetime
from email.message import EmailMessage
from email.utils import format_datetime

import aiosmtplib

from alertd.errors import NotifyError
from alertd.model import Notification, Transition, format_time, shown_annotations
from alertd.notify.config import EmailConfig
from alertd.notify.render import TitleText, alert_line, body, title, value_text

log = logging.getLogger(__name__)

KEY_HEADER = "X-Alertd-Key"
"""The header that carries the notification's idempotency key."""

_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")
_MAX_SUBJECT = 200


def _one_line(text: str) -> str:
    """Text safe for a header: control characters (CR and LF among them) become one space."""
    return _CONTROL.sub(" ", text).strip()


def subject(n: Notification) -> str:
    """`[alertd] FIRING loss_not_finite run=exp1`: status (count if several), rule(s), group labels."""
    firing = sum(1 for a in n.alerts if a.state.value in ("firing", "pending"))
    count = firing if n.status == "firing" else len(n.alerts)
    status = n.status.upper() + (f":{count}" if count > 1 else "")
    rules = ",".join(sorted({a.rule for a in n.alerts}))
    group = {k: v for k, v in n.group_labels if k != "rule"}
    runs = {dict(a.labels).get("run") for a in n.alerts}
    if "run" not in group and len(runs) == 1 and None not in runs:
        group["run"] = str(next(iter(runs)))
    text = " ".join([f"[alertd] {status} {rules}", *(f"{k}={v}" for k, v in group.items())])
    text = _one_line(text)
    return text if len(text) <= _MAX_SUBJECT else text[: _MAX_SUBJECT - 1] + "…"


def plain_text(n: Notification) -> str:
    """The readable plain-text part: the shared title and alert lines, then each alert's labels."""
    lines = [body(n), ""]
    for a in n.alerts:
        lines.append(f"{a.state.value.upper()} {a.rule} (severity {a.severity or 'none'})")
        lines.extend(f"  {k} = {v}" for k, v in a.labels)
        lines.extend(f"  {k}: {v}" for k, v in shown_annotations(a).items())
        lines.append("")
    lines.append(f"Notification key: {n.key}")
    return "\n".join(lines) + "\n"


def _html_alert(a: Transition) -> str:
    e = html.escape
    rows = [
        ("state", a.state.value),
        ("rule", a.rule),
        ("severity", a.severity),
        ("value", value_text(a.value)),
    ]
    if a.step is not None:
        rows.append(("step", str(a.step)))
    rows.append(("time", format_time(a.time)))
    rows += [(f"label {k}", v) for k, v in a.labels]
    rows += [(f"annotation {k}", v) for k, v in shown_annotations(a).items()]
    cells = "".join(
        f'<tr><th style="text-align:left;padding-right:1em">{e(k)}</th><td>{e(v)}</td></tr>' for k, v in rows
    )
    return f"<h3>{e(alert_line(a))}</h3>\n<table>{cells}</table>"


def html_text(n: Notification) -> str:
    """The HTML part: every value from the alerts escaped, since labels can hold anything."""
    parts = "\n".join(_html_alert(a) for a in n.alerts)
    return (
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8"></head><body>\n'
        f"<h2>{html.escape(title(n))}</h2>\n{parts}\n"
        f'<p style="color:#888">Notification key: {html.escape(n.key)}</p>\n</body></html>\n'
    )


def _domain(address: str) -> str:
    domain = address.rpartition("@")[2].strip(" >")
    return domain if re.fullmatch(r"[A-Za-z0-9.-]+", domain or "") else "alertd.invalid"


def own_text(text: str, n: Notification) -> str:
    """The plain-text part from the notifier's own `text` template: that text, then the notification key."""
    return f"{text}\n\nNotification key: {n.key}\n"


def own_html(text: str, n: Notification) -> str:
    """The HTML part from the notifier's own `text` template: the text escaped, its line breaks kept."""
    return (
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8"></head><body>\n'
        f'<pre style="font-family:inherit;white-space:pre-wrap">{html.escape(text)}</pre>\n'
        f'<p style="color:#888">Notification key: {html.escape(n.key)}</p>\n</body></html>\n'
    )


def build_message(
    n: Notification, sender: str, recipients: Sequence[str], *, title: str | None = None, text: str | None = None
) -> EmailMessage:
    """The whole message. Message-ID and Date derive from the notification, so a retry is the same mail.

    `title` and `text` are the notifier's own Subject and body (rendered templates) where it has them.
    """
    msg = EmailMessage()
    if title is not None:
        one = _one_line(title)
        msg["Subject"] = one if len(one) <= _MAX_SUBJECT else one[: _MAX_SUBJECT - 1] + "…"
    else:
        msg["Subject"] = subject(n)
    msg["From"] = sender
    msg["To"] = ", ".join(recipients)
    msg["Date"] = format_datetime(datetime.fromtimestamp(n.created, tz=UTC))
    digest = hashlib.sha256(n.key.encode()).hexdigest()[:32]
    msg["Message-ID"] = f"<{digest}@{_domain(sender)}>"
    msg[KEY_HEADER] = _one_line(n.key)
    msg.set_content(own_text(text, n) if text is not None else plain_text(n))
    msg.add_alternative(own_html(text, n) if text is not None else html_text(n), subtype="html")
    return msg


class EmailNotifier:
    """Sends each notification as one e-mail to every address in `cfg.to`."""

    def __init__(self, name: str, cfg: EmailConfig) -> None:
        self.name = name
        self.cfg = cfg
        self.server = f"{cfg.host}:{cfg.port}"
        self._title_text = TitleText(name, cfg.title, cfg.text)

    async def send(self, notification: Notification) -> None:
        """Deliver the notification, or raise `NotifyError` saying whether a retry can help."""
        cfg = self.cfg
        title, text = self._title_text.render(notification)
        msg = build_message(notification, cfg.from_, cfg.to, title=title, text=text)
        password = cfg.password.get_secret_value() if cfg.password is not None else None
        try:
            refused, _ = await aiosmtplib.send(
                msg,
                sender=cfg.from_,
                recipients=cfg.to,
                hostname=cfg.host,
                port=cfg.port,
                username=cfg.username,
                password=password,
                use_tls=cfg.tls == "implicit",
                start_tls=cfg.tls == "starttls",
                validate_certs=cfg.tls_verify,
                cert_bundle=cfg.ca_file,
                timeout=cfg.timeout,
            )
        except (aiosmtplib.SMTPException, OSError, TimeoutError) as exc:
            raise self._error(exc, password) from None
        if refused:
            raise self._refused({r: (v.code, v.message) for r, v in refused.items()}, password, partial=True)
        log.info(
            "email %s: sent %s to %d recipient(s) via %s",
            self.name,
            notification.key,
            len(cfg.to),
            self.server,
        )

    async def aclose(self) -> None:
        """Nothing to release: every send opens and closes its own connection."""

    def _where(self) -> str:
        return f"email notifier {self.name!r}: SMTP server {self.server}"

    @staticmethod
    def _redact(text: str, password: str | None) -> str:
        return text.replace(password, "***") if password else text

    def _error(self, exc: Exception, password: str | None) -> NotifyError:
        """One clear message per failure: the server, the SMTP code where there is one, never the password."""
        if isinstance(exc, aiosmtplib.SMTPRecipientsRefused):
            return self._refused({r.recipient: (r.code, r.message) for r in exc.recipients}, password)
        if isinstance(exc, aiosmtplib.SMTPAuthenticationError):
            text = f"{self._where()} refused the login of user {self.cfg.username!r}: {exc.code} {exc.message}"
            return NotifyError(self._redact(text, password), recoverable=400 <= exc.code < 500)
        if isinstance(exc, aiosmtplib.SMTPResponseException):
            text = f"{self._where()} answered {exc.code} {exc.message}"
            return NotifyError(self._redact(text, password), recoverable=not 500 <= exc.code < 600)
        bad_cert = next((e for e in (exc, exc.__cause__) if isinstance(e, ssl.SSLCertVerificationError)), None)
        if bad_cert is not None:
            why = bad_cert.verify_message or str(bad_cert)
            text = f"{self._where()}: TLS certificate not trusted ({why}); set ca_file, or tls_verify: false"
            return NotifyError(text, recoverable=False)
        if isinstance(exc, OSError | TimeoutError | aiosmtplib.SMTPServerDisconnected | aiosmtplib.SMTPConnectError):
            return NotifyError(self._redact(f"{self._where()}: {exc}", password), recoverable=True)
        # STARTTLS or AUTH not offered, and the like: the configuration must change.
        return NotifyError(self._redact(f"{self._where()}: {exc}", password), recoverable=False)

    def _refused(
        self, refused: dict[str, tuple[int, str]], password: str | None, *, partial: bool = False
    ) -> NotifyError:
        detail = "; ".join(f"{r}: {code} {message}" for r, (code, message) in sorted(refused.items()))
        delivered = [r for r in self.cfg.to if r not in refused]
        head = f"{self._where()} refused recipient(s) {detail}"
        if partial and delivered:
            head += f" (delivered to {', '.join(delivered)})"
        recoverable = all(400 <= code < 500 for code, _ in refused.values())
        return NotifyError(self._redact(head, password), recoverable=recoverable)
