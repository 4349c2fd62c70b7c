"""The apprise notifier (optional extra `alertd[apprise]`): one title/body per notification to Apprise URLs.

Apprise's `notify()` blocks, so it runs in a worker thread with a timeout. Apprise reports only success or
failure, never why: a False is a recoverable failure (the outbox retries it). The URLs carry tokens: they
are never logged and never in an error message.
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any

from alertd.errors import NotifyError
from alertd.model import Notification
from alertd.notify.config import AppriseConfig
from alertd.notify.render import TitleText, alert_line, title

log = logging.getLogger(__name__)

_PIECES = re.compile(r"[/?&=:@#,;+]+")
_REDACTED_LOGGERS = ("apprise", "urllib3.connectionpool")


class _Redact(logging.Filter):
    """Replaces every token-like piece of the configured URLs in the records of Apprise and of urllib3
    (which log the URLs they post to, tokens included) with `<secret>`."""

    def __init__(self) -> None:
        super().__init__()
        self.pieces: set[str] = set()

    def add(self, url: str) -> None:
        rest = url.partition("://")[2]
        self.pieces.update(p for p in _PIECES.split(rest) if len(p) >= 6 and "." not in p)

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        hits = [p for p in self.pieces if p in text]
        if hits:
            for p in sorted(hits, key=len, reverse=True):
                text = text.replace(p, "<secret>")
            record.msg, record.args = text, ()
        return True


_REDACT = _Redact()
for _name in _REDACTED_LOGGERS:
    logging.getLogger(_name).addFilter(_REDACT)


def _notify_type(n: Notification) -> str:
    """Apprise's message type: failure while firing (warning for a non-critical one), success when resolved."""
    if n.status != "firing":
        return "success"
    critical = any(a.severity == "critical" for a in n.alerts)
    return "failure" if critical else "warning"


class AppriseNotifier:
    """Sends each notification to every configured Apprise URL."""

    def __init__(self, name: str, cfg: AppriseConfig, **_: Any) -> None:
        import apprise  # the optional extra; `alertd check` has already said when it is missing

        self.name = name
        self._cfg = cfg
        self._title_text = TitleText(name, cfg.title, cfg.text)
        self._apprise = apprise.Apprise()
        for i, url in enumerate(cfg.urls):
            _REDACT.add(url.get_secret_value())
            if not self._apprise.add(url.get_secret_value()):
                log.warning("apprise notifier %s: urls[%d] is not a URL Apprise understands; skipped", name, i)

    def _message(self, n: Notification) -> tuple[str, str]:
        own_title, own_text = self._title_text.render(n)
        text = own_text if own_text is not None else "\n".join(alert_line(a) for a in n.alerts)
        return (own_title if own_title is not None else title(n)), text

    async def send(self, notification: Notification) -> None:
        """Deliver through Apprise in a worker thread; False or a timeout is a recoverable failure."""
        if len(self._apprise) == 0:
            raise NotifyError(f"apprise notifier {self.name}: no usable URL", recoverable=False)
        head, text = self._message(notification)
        kind = _notify_type(notification)
        try:
            ok = await asyncio.wait_for(
                asyncio.to_thread(self._apprise.notify, body=text, title=head, notify_type=kind),
                timeout=self._cfg.timeout,
            )
        except TimeoutError:
            raise NotifyError(
                f"apprise notifier {self.name}: no answer within {self._cfg.timeout:g}s", recoverable=True
            ) from None
        except Exception as e:  # apprise's plugins may raise anything; never echo a URL
            raise NotifyError(
                f"apprise notifier {self.name}: delivery raised {type(e).__name__}", recoverable=True
            ) from None
        if not ok:
            raise NotifyError(
                f"apprise notifier {self.name}: delivery failed for at least one URL (Apprise does not say why)",
                recoverable=True,
            )

    async def aclose(self) -> None:
        """Nothing to release."""
