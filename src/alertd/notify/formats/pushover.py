"""`pushover`: Pushover's message API, `POST https://api.pushover.net/1/messages.json`, as JSON.

The body is `{"token" (the application's API token), "user" (the user or group key), "title" (<= 250
characters), "message" (<= 1024 characters), "priority" (-2..2)}`; both keys are secrets, added only when
the request is sent. The priority follows the most severe firing alert: critical 2 (emergency: repeated every
`retry` seconds, at least 30, until acknowledged or `expire` seconds, at most 10800, have passed), warning 1,
info 0; a resolution is sent at -1 (quiet). Answers: `{"status": 1, "request": ...}` delivered; 4xx with
`{"status": 0, "errors": [...]}` final (bad token, user or parameters); 429 (over the monthly quota) and 5xx
retryable.
"""

from __future__ import annotations

from collections.abc import Mapping

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
)

MESSAGE_LIMIT = 1024
TITLE_LIMIT = 250
URL_LIMIT = 512
EMERGENCY = 2
PRIORITY = {"critical": EMERGENCY, "warning": 1, "info": 0}
"""Pushover priority of a firing notification by its most severe alert; other severities get 0."""
RESOLVED_PRIORITY = -1
MIN_RETRY = 30
MAX_EXPIRE = 10800


def build(n: Notification, opts: Options) -> JSON:
    """The message for `n`, without the credentials (see `authorize`)."""
    shown, omitted = shown_alerts(n, opts)
    lines, omitted = body_lines(shown, omitted, opts)
    is_firing = n.status == "firing" and any(firing(t) for t in n.alerts)
    if is_firing:
        severities = [PRIORITY.get(t.severity, 0) for t in n.alerts if firing(t)]
        priority = max(severities, default=0)
    else:
        priority = RESOLVED_PRIORITY
    payload: JSON = {
        "title": cut(heading(n, opts), TITLE_LIMIT),
        "message": fit_lines("", lines, MESSAGE_LIMIT, omitted=omitted),
        "priority": priority,
    }
    if priority == EMERGENCY:
        payload["retry"] = max(MIN_RETRY, opts.retry)
        payload["expire"] = min(MAX_EXPIRE, opts.expire)
    if opts.external_url and len(opts.external_url) <= URL_LIMIT:
        payload["url"] = opts.external_url
    return payload


def authorize(signed: Signed, credentials: Mapping[str, str]) -> Signed:
    """The application token and the user key put first in the body."""
    token, user = credentials.get("token"), credentials.get("user")
    if not token or not user:
        raise NotifyError("pushover format needs token and user", recoverable=False)
    return Signed(signed.url, {"token": token, "user": user, **signed.payload}, signed.extra_headers)


def check(reply: Reply) -> None:
    """Delivered only on a 2xx `{"status": 1}`; the `errors` of a refusal are quoted (never the request)."""
    body = reply.json()
    detail = snippet(reply.text)
    if isinstance(body, dict) and isinstance(body.get("errors"), list):
        detail = snippet("; ".join(str(e) for e in body["errors"]))
    check_http(reply, "Pushover", detail)
    if not isinstance(body, dict) or body.get("status") != 1:
        raise NotifyError(f"Pushover gave an unreadable answer: {detail!r}", recoverable=True)


FORMAT = Format(name="pushover", build=build, check=check, authorize=authorize)
