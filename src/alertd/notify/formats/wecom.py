"""`wecom`: a WeCom (企业微信) group robot, markdown (default) or text message.

The key in the URL is the only credential (no signature). Limits: markdown content 4096 bytes, text content
2048 bytes (UTF-8), 20 messages a minute. Errors come with HTTP 200 and `errcode != 0` (40058 content too
long, 93000 bad webhook key, 45009 frequency limit); decide on `errcode`, never on `errmsg`.
"""

from __future__ import annotations

from alertd.model import Notification
from alertd.notify.formats.common import (
    JSON,
    Format,
    Options,
    Reply,
    body_lines,
    check_code,
    firing,
    fit_lines,
    heading,
    shown_alerts,
    utf8_len,
)

MARKDOWN_LIMIT = 4096
TEXT_LIMIT = 2048
RATE_LIMITED = {45009: 60.0}
RATE_LIMIT = (20, 60.0)


def build(n: Notification, opts: Options) -> JSON:
    """The WeCom message for `n`: markdown with a coloured title, or plain text (`msgtype: text`)."""
    shown, omitted = shown_alerts(n, opts)
    plain, omitted = body_lines(shown, omitted, opts)
    if opts.msgtype == "text":
        content = fit_lines(heading(n, opts), plain, TEXT_LIMIT, omitted=omitted, measure=utf8_len)
        return {"msgtype": "text", "text": {"content": content}}
    colour = "warning" if n.status == "firing" and any(firing(t) for t in n.alerts) else "info"
    head = f'### <font color="{colour}">{heading(n, opts)}</font>'
    lines = plain if opts.text is not None else [f"> {line}" for line in plain]
    content = fit_lines(head, lines, MARKDOWN_LIMIT, omitted=omitted, measure=utf8_len)
    return {"msgtype": "markdown", "markdown": {"content": content}}


def check(reply: Reply) -> None:
    """Delivered only when the body's `errcode` is 0."""
    check_code(reply, "WeCom", code_keys=("errcode",), message_keys=("errmsg",), recoverable_codes=RATE_LIMITED)


FORMAT = Format(name="wecom", build=build, check=check, rate_limit=RATE_LIMIT)
