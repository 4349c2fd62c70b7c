"""`mattermost`: a Mattermost incoming webhook, `{"text": markdown}`.

Mattermost answers 200 `ok`; errors come as 4xx with a JSON body `{"id", "message", "status_code"}`.
"""

from __future__ import annotations

from alertd.model import Notification
from alertd.notify.formats.common import (
    JSON,
    Format,
    Options,
    Reply,
    body_lines,
    check_http,
    fit_lines,
    heading,
    shown_alerts,
    snippet,
)

TEXT_LIMIT = 16383
"""Mattermost's default maximum post size (characters)."""

_MD_SPECIAL = "\\`*_~[]"


def escape(text: str) -> str:
    """Backslash-escape Markdown control characters so metric names like `train_loss` show as written."""
    return "".join("\\" + c if c in _MD_SPECIAL else c for c in text)


def build(n: Notification, opts: Options) -> JSON:
    """The Mattermost message for `n`: a bold title and one list item per alert."""
    shown, omitted = shown_alerts(n, opts)
    plain, omitted = body_lines(shown, omitted, opts)
    lines = [escape(line) if opts.text is not None else f"- {escape(line)}" for line in plain]
    return {"text": fit_lines(f"#### {escape(heading(n, opts))}", lines, TEXT_LIMIT, omitted=omitted)}


def check(reply: Reply) -> None:
    """Any 2xx is delivered; an error's JSON `message` is quoted."""
    body = reply.json()
    detail = str(body.get("message", "")) if isinstance(body, dict) else reply.text
    check_http(reply, "Mattermost", snippet(detail))


FORMAT = Format(name="mattermost", build=build, check=check)
