"""`feishu`: a Feishu / Lark custom bot, as a rich-text `post` message, signed when a secret is set.

Signature (Feishu's own samples): `timestamp` in seconds, and `sign` = base64(HMAC-SHA256(key =
f"{timestamp}\\n{secret}", message = empty)), both in the JSON body. The bot answers `{"code": 0}`;
a non-zero `code` is a refusal (19021 bad signature, 19024 keyword missing, 9499 bad request, 11232 rate
limited), whatever the HTTP status. The body may be at most 20 KB.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

from alertd.model import Notification
from alertd.notify.formats.common import (
    JSON,
    Format,
    Options,
    Reply,
    Signed,
    body_lines,
    check_code,
    cut,
    fit_lines,
    heading,
    json_len,
    shown_alerts,
)

TEXT_LIMIT = 19_000
"""JSON bytes for the alert lines, leaving room for the rest under Feishu's 20 KB body limit."""
RATE_LIMITED = {11232: None}


def sign(timestamp: str, secret: str) -> str:
    """Feishu's signature: the string `timestamp\\nsecret` is the HMAC key, the message is empty."""
    digest = hmac.new(f"{timestamp}\n{secret}".encode(), b"", hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


def build(n: Notification, opts: Options) -> JSON:
    """The Feishu `post` message for `n`: the title and the alert lines in one text paragraph."""
    shown, omitted = shown_alerts(n, opts)
    lines, omitted = body_lines(shown, omitted, opts)
    text = fit_lines("", lines, TEXT_LIMIT, omitted=omitted, measure=json_len)
    return {
        "msg_type": "post",
        "content": {
            "post": {"zh_cn": {"title": cut(heading(n, opts), 200), "content": [[{"tag": "text", "text": text}]]}}
        },
    }


def prepare(url: str, payload: JSON, secret: str | None, now: float) -> Signed:
    """Add `timestamp` (seconds) and `sign` to the body when the bot has a signing secret."""
    if not secret:
        return Signed(url, payload)
    ts = str(int(now))
    return Signed(url, {"timestamp": ts, "sign": sign(ts, secret), **payload})


def check(reply: Reply) -> None:
    """Delivered only when the body's `code` (or the older `StatusCode`) is 0."""
    check_code(
        reply,
        "Feishu",
        code_keys=("code", "StatusCode"),
        message_keys=("msg", "StatusMessage"),
        recoverable_codes=RATE_LIMITED,
    )


FORMAT = Format(name="feishu", build=build, prepare=prepare, check=check)
