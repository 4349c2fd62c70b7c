"""`discord`: a Discord webhook, posted with `?wait=true` so that a refused message comes back as an error.

Limits (Discord's documentation): content 2000 characters, embed title 256, description 4096, footer 2048,
and 6000 characters over all embeds of a message. Errors are JSON `{"code", "message"}`; 429 carries
`Retry-After` and a `retry_after` (seconds) in the body.
"""

from __future__ import annotations

import httpx

from alertd.errors import NotifyError
from alertd.model import Notification, format_time
from alertd.notify.formats.common import (
    JSON,
    Format,
    Options,
    Reply,
    Signed,
    body_lines,
    check_http,
    cut,
    firing,
    fit_lines,
    heading,
    retry_after_seconds,
    shown_alerts,
    snippet,
)

CONTENT_LIMIT = 2000
TITLE_LIMIT = 256
DESCRIPTION_LIMIT = 4096
EMBEDS_TOTAL_LIMIT = 6000

RED = 0xE74C3C
GREEN = 0x2ECC71

_MD_SPECIAL = "\\`*_~|"


def escape(text: str) -> str:
    """Backslash-escape Discord markdown so `train_loss` does not turn into italics."""
    return "".join("\\" + c if c in _MD_SPECIAL else c for c in text)


def build(n: Notification, opts: Options) -> JSON:
    """The Discord message for `n`: the title as content, one embed with the alert lines; no mentions."""
    shown, omitted = shown_alerts(n, opts)
    head = escape(heading(n, opts))
    plain, omitted = body_lines(shown, omitted, opts)
    footer = cut(f"alertd · receiver {n.receiver}", 200)
    embed_title = cut(head, TITLE_LIMIT)
    room = min(DESCRIPTION_LIMIT, EMBEDS_TOTAL_LIMIT - len(embed_title) - len(footer))
    description = fit_lines("", [escape(line) for line in plain], room, omitted=omitted)
    return {
        "username": "alertd",
        "content": cut(head, CONTENT_LIMIT),
        "allowed_mentions": {"parse": []},
        "embeds": [
            {
                "title": embed_title,
                "description": description or "(no alerts)",
                "color": RED if n.status == "firing" and any(firing(t) for t in n.alerts) else GREEN,
                "timestamp": format_time(n.created),
                "footer": {"text": footer},
            }
        ],
    }


def prepare(url: str, payload: JSON, secret: str | None, now: float) -> Signed:
    """Add `wait=true` to the URL: without it Discord drops a refused message silently."""
    return Signed(str(httpx.URL(url).copy_set_param("wait", "true")), payload)


def check(reply: Reply) -> None:
    """2xx is delivered; 429 uses `Retry-After` or the body's `retry_after`; errors quote code and message."""
    body = reply.json()
    detail = ""
    if isinstance(body, dict):
        code, message = body.get("code"), body.get("message")
        detail = " ".join(str(x) for x in (code, message) if x is not None)
        if reply.status == 429 and retry_after_seconds(reply) is None:
            hint = body.get("retry_after")
            if isinstance(hint, int | float) and not isinstance(hint, bool) and hint >= 0:
                raise NotifyError(
                    f"Discord answered HTTP 429: {snippet(detail)} (rate limited)",
                    recoverable=True,
                    retry_after=float(hint),
                )
    check_http(reply, "Discord", snippet(detail or reply.text))


FORMAT = Format(name="discord", build=build, prepare=prepare, check=check)
