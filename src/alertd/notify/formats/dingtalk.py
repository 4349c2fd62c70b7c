"""`dingtalk`: a DingTalk custom robot, markdown (or text) message, signed when a secret is set.

Signature: `timestamp` in milliseconds and `sign` = urlencode(base64(HMAC-SHA256(key = secret, message =
f"{timestamp}\\n{secret}"))), both added to the URL's query. Errors come with HTTP 200 and `errcode != 0`:
310000 (bad signature, keyword or IP), 130101 (more than 20 messages a minute: throttled for 10 minutes).
"""

from __future__ import annotations

import base64
import hashlib
import hmac

import httpx

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

TEXT_LIMIT = 18_000
"""JSON bytes of the message text, under DingTalk's 20,000-byte content limit."""
RATE_LIMITED = {130101: 600.0}
"""130101: sending too fast; DingTalk then throttles the robot for 10 minutes."""
RATE_LIMIT = (20, 60.0)


def sign(timestamp: str, secret: str) -> str:
    """DingTalk's signature before URL encoding: base64(HMAC-SHA256(secret, "timestamp\\nsecret"))."""
    digest = hmac.new(secret.encode(), f"{timestamp}\n{secret}".encode(), hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


def build(n: Notification, opts: Options) -> JSON:
    """The DingTalk message for `n`: markdown with a heading and a list, or plain text (`msgtype: text`)."""
    shown, omitted = shown_alerts(n, opts)
    head = heading(n, opts)
    plain, omitted = body_lines(shown, omitted, opts)
    if opts.msgtype == "text":
        lines = plain
        return {
            "msgtype": "text",
            "text": {"content": fit_lines(head, lines, TEXT_LIMIT, omitted=omitted, measure=json_len)},
        }
    lines = plain if opts.text is not None else [f"- {line}" for line in plain]
    text = fit_lines(f"#### {head}\n", lines, TEXT_LIMIT, omitted=omitted, measure=json_len)
    return {"msgtype": "markdown", "markdown": {"title": cut(head, 100), "text": text}}


def prepare(url: str, payload: JSON, secret: str | None, now: float) -> Signed:
    """Add `timestamp` (ms) and the URL-encoded `sign` to the query when the robot has a secret."""
    if not secret:
        return Signed(url, payload)
    ts = str(round(now * 1000))
    signed = httpx.URL(url).copy_merge_params({"timestamp": ts, "sign": sign(ts, secret)})
    return Signed(str(signed), payload)


def check(reply: Reply) -> None:
    """Delivered only when the body's `errcode` is 0."""
    check_code(reply, "DingTalk", code_keys=("errcode",), message_keys=("errmsg",), recoverable_codes=RATE_LIMITED)


FORMAT = Format(name="dingtalk", build=build, prepare=prepare, check=check, rate_limit=RATE_LIMIT)
