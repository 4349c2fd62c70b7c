"""`teams`: Microsoft Teams through a Power Automate Workflows webhook, as an Adaptive Card.

Workflows accept Adaptive Cards only (the old MessageCard of Office 365 connectors is not supported),
wrapped as `{"type": "message", "attachments": [{"contentType": "application/vnd.microsoft.card.adaptive",
...}]}`, the shape the "Post to a channel when a webhook request is received" template expects. The
trigger answers 202 Accepted; Teams caps a message near 28 KB.
"""

from __future__ import annotations

import json

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
    heading,
    shown_alerts,
    snippet,
    truncation_note,
)

CARD_CONTENT_TYPE = "application/vnd.microsoft.card.adaptive"
SIZE_LIMIT = 27_000
"""Bytes of JSON, a margin under Teams' ~28 KB message limit."""
LINE_LIMIT = 2000
TEXT_LIMIT = 20_000
"""A notifier's own `text` (one block) is cut to this many characters."""
RATE_LIMIT = (4, 1.0)
"""Teams' documented limit for a webhook: 4 requests a second (more are answered 429)."""


def _card(n: Notification, head: str, lines: list[str], omitted: int) -> JSON:
    is_firing = n.status == "firing" and any(firing(t) for t in n.alerts)
    facts = [{"title": "Status", "value": n.status}, {"title": "Receiver", "value": n.receiver}]
    facts += [{"title": k, "value": v} for k, v in n.group_labels]
    body: list[JSON] = [
        {
            "type": "TextBlock",
            "text": cut(head, 500),
            "weight": "Bolder",
            "size": "Medium",
            "color": "Attention" if is_firing else "Good",
            "wrap": True,
        },
        {"type": "FactSet", "facts": facts},
    ]
    body += [{"type": "TextBlock", "text": line, "wrap": True} for line in lines]
    if omitted:
        body.append({"type": "TextBlock", "text": truncation_note(omitted), "isSubtle": True, "wrap": True})
    return {
        "type": "message",
        "attachments": [
            {
                "contentType": CARD_CONTENT_TYPE,
                "contentUrl": None,
                "content": {
                    "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
                    "type": "AdaptiveCard",
                    "version": "1.4",
                    "msteams": {"width": "full"},
                    "body": body,
                },
            }
        ],
    }


def build(n: Notification, opts: Options) -> JSON:
    """The Workflows message for `n`: a title, a fact set (status, receiver, group) and one block per alert.

    Alerts are dropped from the end (and counted in a note) until the card fits Teams' size limit.
    """
    shown, omitted = shown_alerts(n, opts)
    plain, omitted = body_lines(shown, omitted, opts)
    limit = LINE_LIMIT if opts.text is None else TEXT_LIMIT
    lines = [cut(line, limit) for line in plain]
    head = heading(n, opts)
    keep = len(lines)
    while True:
        card = _card(n, head, lines[:keep], omitted + len(lines) - keep)
        if keep == 0 or len(json.dumps(card).encode()) <= SIZE_LIMIT:
            return card
        keep = keep * 3 // 4 if keep > 4 else keep - 1


def check(reply: Reply) -> None:
    """Any 2xx (normally 202) is accepted; a Logic Apps error `{"error": {"code", "message"}}` is quoted."""
    body = reply.json()
    detail = reply.text
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        err = body["error"]
        detail = " ".join(str(err[k]) for k in ("code", "message") if k in err)
    check_http(reply, "Teams workflow", snippet(detail))


FORMAT = Format(name="teams", build=build, check=check, rate_limit=RATE_LIMIT)
