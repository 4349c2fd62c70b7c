"""`ntfy`: a push notification through an ntfy server (ntfy.sh or self-hosted), published as JSON.

`url` is the topic's URL, `https://ntfy.sh/<topic>` or `https://ntfy.example.com/<prefix>/<topic>`. ntfy's
JSON publishing posts to the server's root with the topic in the body: `{"topic", "title", "message",
"priority" (1..5), "tags": [...], "click"}`. The priority follows the most severe firing alert (critical 5,
warning 4, info 3); a resolution is sent at 2 with the `white_check_mark` tag. An access token (`token`, a
secret) goes in `Authorization: Bearer`. Answers: 2xx delivered; 429 (ntfy's rate limits) and 5xx retryable;
other 4xx (`{"code", "http", "error"}`: forbidden topic, bad token) final. Messages over 4096 bytes would
become attachments, so the text is kept under that.
"""

from __future__ import annotations

from collections.abc import Mapping

import httpx

from alertd.errors import NotifyError
from alertd.model import Notification
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
    shown_alerts,
    snippet,
    utf8_len,
)

MESSAGE_LIMIT = 4000
"""UTF-8 bytes of the message, under ntfy's default 4,096-byte message limit (larger becomes an attachment)."""
TITLE_LIMIT = 250
PRIORITY = {"critical": 5, "warning": 4, "info": 3}
"""ntfy priority (1 min .. 5 max) of a firing alert by its severity; others get the default 3."""
TAG = {"critical": "rotating_light", "warning": "warning", "info": "information_source"}
"""The emoji tag of a firing notification by its most severe alert."""
RESOLVED_PRIORITY = 2
RESOLVED_TAG = "white_check_mark"


def severity(n: Notification) -> str:
    """The most severe severity among the firing alerts ("" when none fires)."""
    found = [t.severity for t in n.alerts if firing(t)]
    return max(found, key=lambda s: PRIORITY.get(s, 0), default="")


def build(n: Notification, opts: Options) -> JSON:
    """The ntfy message for `n` (without the topic, which comes from the secret URL in `prepare`)."""
    shown, omitted = shown_alerts(n, opts)
    lines, omitted = body_lines(shown, omitted, opts)
    is_firing = n.status == "firing" and any(firing(t) for t in n.alerts)
    if is_firing:
        sev = severity(n)
        priority, tags = PRIORITY.get(sev, 3), [TAG.get(sev, "warning")]
    else:
        priority, tags = RESOLVED_PRIORITY, [RESOLVED_TAG]
    payload: JSON = {
        "title": cut(heading(n, opts), TITLE_LIMIT),
        "message": fit_lines("", lines, MESSAGE_LIMIT, omitted=omitted, measure=utf8_len),
        "priority": priority,
        "tags": tags,
    }
    if opts.external_url:
        payload["click"] = opts.external_url
    return payload


def prepare(url: str, payload: JSON, secret: str | None, now: float) -> Signed:
    """Split the topic URL: POST to the server's root (with any path prefix) and name the topic in the body."""
    u = httpx.URL(url)
    base, _, topic = u.path.rstrip("/").rpartition("/")
    if not topic:
        raise NotifyError("ntfy url must end with the topic (https://ntfy.sh/<topic>)", recoverable=False)
    return Signed(str(u.copy_with(path=base + "/")), {"topic": topic, **payload})


def authorize(signed: Signed, credentials: Mapping[str, str]) -> Signed:
    """`Authorization: Bearer <token>` when the notifier has an access token."""
    token = credentials.get("token")
    if not token:
        return signed
    return Signed(signed.url, signed.payload, {**signed.extra_headers, "Authorization": f"Bearer {token}"})


def check(reply: Reply) -> None:
    """2xx delivered; ntfy's error body `{"code", "http", "error"}` is quoted; 429 and 5xx are retryable."""
    body = reply.json()
    detail = reply.text
    if isinstance(body, dict) and "error" in body:
        detail = " ".join(str(body[k]) for k in ("code", "error") if k in body)
    check_http(reply, "ntfy", snippet(detail))


FORMAT = Format(name="ntfy", build=build, prepare=prepare, check=check, authorize=authorize)
