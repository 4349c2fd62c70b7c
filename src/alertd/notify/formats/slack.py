"""`slack`: a Slack incoming webhook: `text` (the notification preview) plus a coloured attachment of blocks.

Slack answers 200 with the plain-text body `ok`; anything else is a failure whose body names the error
(`invalid_payload`, `invalid_token`, `no_service`, `channel_is_archived`, ...).
"""

from __future__ import annotations

from alertd.errors import NotifyError
from alertd.model import Notification
from alertd.notify.formats.common import (
    JSON,
    Format,
    Options,
    Reply,
    body_lines,
    check_http,
    cut,
    firing,
    fit_lines,
    heading,
    shown_alerts,
    snippet,
)

SECTION_LIMIT = 3000
"""Slack rejects a section whose text is longer (400 invalid_blocks)."""
TEXT_LIMIT = 3000
"""The top-level `text` is the notification preview: keep it short (Slack's hard limit is 40,000)."""

RED = "#E01E5A"
GREEN = "#2EB67D"


def escape(text: str) -> str:
    """Escape Slack's control characters (`&`, `<`, `>`) in mrkdwn and plain text."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def build(n: Notification, opts: Options) -> JSON:
    """The Slack message for `n`: a preview text and one coloured attachment holding the alert lines."""
    shown, omitted = shown_alerts(n, opts)
    head = escape(heading(n, opts))
    plain, omitted = body_lines(shown, omitted, opts)
    lines = [escape(line) for line in plain]
    section = fit_lines("", lines, SECTION_LIMIT, omitted=omitted)
    any_firing = any(firing(t) for t in n.alerts)
    return {
        "text": cut(head, TEXT_LIMIT),
        "attachments": [
            {
                "color": RED if n.status == "firing" and any_firing else GREEN,
                "fallback": cut(head, TEXT_LIMIT),
                "blocks": [
                    {"type": "section", "text": {"type": "mrkdwn", "text": cut(f"*{head}*", SECTION_LIMIT)}},
                    {"type": "section", "text": {"type": "mrkdwn", "text": section or "(no alerts)"}},
                    {
                        "type": "context",
                        "elements": [{"type": "mrkdwn", "text": cut(f"alertd · receiver {n.receiver}", 300)}],
                    },
                ],
            }
        ],
    }


def check(reply: Reply) -> None:
    """Delivered only on 2xx with the body `ok`; the body's error word says what went wrong."""
    detail = snippet(reply.text, 100)
    check_http(reply, "Slack", detail)
    if reply.text.strip() != "ok":
        raise NotifyError(f"Slack refused the message: {detail or '(empty answer)'}", recoverable=False)


FORMAT = Format(name="slack", build=build, check=check)
