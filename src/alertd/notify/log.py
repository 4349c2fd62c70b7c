"""The log notifier: one line per notification on stdout, for a terminal or a container log."""

from __future__ import annotations

import re
import sys
from typing import TextIO

from alertd.errors import NotifyError
from alertd.model import Notification, TransitionKind
from alertd.notify.config import LogConfig
from alertd.notify.render import TitleText, alert_line, title


def level_of(n: Notification) -> str:
    """`warning` while a critical or warning alert (any severity but `info`) of `n` is firing or pending,
    else `info` (an info alert, a resolution): the levels alertd's own log gives transitions."""
    loud = any(a.state in (TransitionKind.FIRING, TransitionKind.PENDING) and a.severity != "info" for a in n.alerts)
    return "warning" if loud else "info"


def log_line(n: Notification, own_title: str | None = None, own_text: str | None = None) -> str:
    """`alertd notify receiver=console status=firing level=warning [FIRING:1] rule ... | FIRING rule: ...`,
    one line; `level` follows the alerts' severity (`level_of`).

    `own_title` and `own_text` (the notifier's rendered templates) replace the title and the alert lines.
    """
    lines = [own_text] if own_text is not None else [alert_line(a) for a in n.alerts]
    parts = [own_title if own_title is not None else title(n), *lines]
    text = " | ".join(parts)
    return re.sub(
        r"[\r\n\x0b\x0c\x1c-\x1e\x85\u2028\u2029]+",
        " ",
        f"alertd notify receiver={n.receiver} status={n.status} level={level_of(n)} {text}",
    )


class LogNotifier:
    """Prints each notification as one physical line on stdout (`stream`: stderr under `alertd exec`,
    whose stdout is the trainer's) and flushes it."""

    def __init__(self, name: str, cfg: LogConfig, *, stream: TextIO | None = None) -> None:
        self.name = name
        self._cfg = cfg
        self._stream = stream
        self._title_text = TitleText(name, cfg.title, cfg.text)

    async def send(self, notification: Notification) -> None:
        """Print the notification's line; a closed or broken stream is a recoverable failure."""
        try:
            print(
                log_line(notification, *self._title_text.render(notification)),
                file=self._stream or sys.stdout,
                flush=True,
            )
        except (OSError, ValueError) as e:
            raise NotifyError(f"log notifier {self.name}: cannot write its line: {e}", recoverable=True) from None

    async def aclose(self) -> None:
        """Nothing to release."""
