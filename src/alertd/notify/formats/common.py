"""Pieces every webhook format shares: options, the service's answer, limits and HTTP-status classification.

A format is pure: `build(notification, options) -> payload` never reads a clock or a socket, and
`check(reply)` turns the service's answer into `None` (delivered) or a `NotifyError` that says whether a
retry can help. Nothing here sees a secret except the signers, which return values, never log them.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Any

from alertd.errors import NotifyError
from alertd.model import Notification, Transition, TransitionKind
from alertd.notify.render import alert_line, title

JSON = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Options:
    """What a payload builder may know besides the notification (no secrets)."""

    max_alerts: int = 0
    """Alerts sent at most per message (0: all); the rest are counted, as Alertmanager's `truncatedAlerts`."""
    chat_id: str | None = None
    external_url: str = ""
    msgtype: str = "markdown"
    title: str | None = None
    """The notifier's `title` template as rendered for this notification (None: alertd's own title)."""
    text: str | None = None
    """The notifier's `text` template as rendered for this notification (None: one line per alert)."""
    retry: int = 60
    """Pushover's emergency priority: seconds between repeats until acknowledged (at least 30)."""
    expire: int = 3600
    """Pushover's emergency priority: seconds the repeats go on (at most 10800)."""


@dataclass(frozen=True, slots=True)
class Reply:
    """The service's answer: HTTP status, headers (lower-case names), body text, and when it came."""

    status: int
    headers: Mapping[str, str]
    text: str
    received_at: float = 0.0

    def json(self) -> Any:
        """The body parsed as JSON, or None where it is not JSON."""
        try:
            return json.loads(self.text)
        except ValueError:
            return None


@dataclass(frozen=True, slots=True)
class Signed:
    """Where and what to POST after signing: the URL (a secret) and the payload."""

    url: str
    payload: JSON
    extra_headers: Mapping[str, str] = field(default_factory=dict)


def firing(t: Transition) -> bool:
    """True for a transition that reports a firing (or pending) alert, False for a resolution."""
    return t.state in (TransitionKind.FIRING, TransitionKind.PENDING)


def shown_alerts(n: Notification, opts: Options) -> tuple[tuple[Transition, ...], int]:
    """The alerts to put in the message, and how many were left out because of `max_alerts`."""
    if opts.max_alerts and len(n.alerts) > opts.max_alerts:
        return n.alerts[: opts.max_alerts], len(n.alerts) - opts.max_alerts
    return n.alerts, 0


def heading(n: Notification, opts: Options) -> str:
    """The message's title: the notifier's rendered `title` where it has one, else alertd's own."""
    return opts.title if opts.title is not None else title(n)


def body_lines(
    shown: tuple[Transition, ...], omitted: int, opts: Options, line: Callable[[Transition], str] = alert_line
) -> tuple[list[str], int]:
    """The message's lines and how many alerts they leave out: one `line` per shown alert, or the
    notifier's rendered `text` as one block (which then leaves none out: the template chose what to say)."""
    if opts.text is not None:
        return [opts.text], 0
    return [line(t) for t in shown], omitted


def one_line(text: str) -> str:
    """The text with line breaks replaced by spaces."""
    return re.sub(r"[\r\n]+", " ", text)


def cut(text: str, limit: int, measure: Callable[[str], int] = len) -> str:
    """`text` shortened to at most `limit` (as `measure` counts) with a trailing `…`."""
    if measure(text) <= limit:
        return text
    lo, hi = 0, len(text)
    while lo < hi:  # the longest prefix that fits together with the ellipsis
        mid = (lo + hi + 1) // 2
        if measure(text[:mid] + "…") <= limit:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo] + "…"


def utf8_len(text: str) -> int:
    """Length in UTF-8 bytes (WeCom, DingTalk and Feishu count bytes)."""
    return len(text.encode())


def fit_lines(
    head: str,
    lines: list[str],
    limit: int,
    *,
    omitted: int = 0,
    measure: Callable[[str], int] = len,
    sep: str = "\n",
) -> str:
    """`head` and as many whole `lines` as fit in `limit`, then a note saying how many alerts were left out.

    `omitted` counts alerts already left out (max_alerts). Where not even one line fits whole, the first
    is cut so the reader still sees something.
    """

    def text(kept: int, first: str | None = None) -> str:
        left = len(lines) - kept + omitted
        body = lines[:kept] if first is None else [first, *lines[1:kept]]
        parts = [p for p in (head, *body) if p]
        return sep.join(parts + ([truncation_note(left)] if left else []))

    lo, hi = 0, len(lines)
    while lo < hi:  # the most lines that fit (the text grows with every line kept)
        mid = (lo + hi + 1) // 2
        if measure(text(mid)) <= limit:
            lo = mid
        else:
            hi = mid - 1
    if lo == 0 and lines:
        room = limit - measure(text(1, "")) - measure(sep)
        if room > 20:
            return cut(text(1, cut(lines[0], room, measure)), limit, measure)
    return cut(text(lo), limit, measure)


def truncation_note(count: int) -> str:
    """The note that ends a message from which `count` alerts were left out."""
    return f"… and {count} more alert{'s' if count != 1 else ''} (truncated to the service's limit)"


def retry_after_seconds(reply: Reply) -> float | None:
    """The `Retry-After` header in seconds (delta-seconds or an HTTP date), or None."""
    raw = reply.headers.get("retry-after")
    if raw is None:
        return None
    raw = raw.strip()
    try:
        seconds = float(raw)
    except ValueError:
        try:
            when = parsedate_to_datetime(raw)
        except (TypeError, ValueError, IndexError):
            return None
        seconds = when.timestamp() - reply.received_at
    if math.isnan(seconds) or math.isinf(seconds):
        return None
    return max(0.0, seconds)


def snippet(text: str, limit: int = 200) -> str:
    """A short, single-line excerpt of a service's answer for an error message."""
    return cut(one_line(text.strip()), limit)


def check_http(reply: Reply, service: str, detail: str = "") -> None:
    """Raise NotifyError for a non-2xx answer: 429, 408 and 5xx are recoverable, other statuses are not."""
    status = reply.status
    if 200 <= status < 300:
        return
    what = f"{service} answered HTTP {status}" + (f": {detail}" if detail else "")
    if status == 429:
        raise NotifyError(what + " (rate limited)", recoverable=True, retry_after=retry_after_seconds(reply))
    if status >= 500 or status == 408:
        raise NotifyError(what, recoverable=True, retry_after=retry_after_seconds(reply))
    raise NotifyError(what, recoverable=False)


def check_code(
    reply: Reply,
    service: str,
    *,
    code_keys: tuple[str, ...],
    message_keys: tuple[str, ...],
    recoverable_codes: Mapping[int, float | None],
) -> None:
    """Check a Chinese chat API's answer: HTTP status first, then a non-zero `errcode`/`code` in the body.

    `recoverable_codes` maps the service's rate-limit codes to a retry hint in seconds (or None).
    A 2xx body that is not JSON is recoverable: the message may not have arrived.
    """
    body = reply.json()
    code, message = _code_and_message(body, code_keys, message_keys)
    if code is not None and code != 0:
        detail = f"code {code}" + (f" {message}" if message else "")
        if code in recoverable_codes:
            raise NotifyError(
                f"{service} refused the message: {detail} (rate limited)",
                recoverable=True,
                retry_after=retry_after_seconds(reply) or recoverable_codes[code],
            )
        check_http(reply, service, detail)
        raise NotifyError(f"{service} refused the message: {detail}", recoverable=False)
    check_http(reply, service, snippet(reply.text) if not isinstance(body, dict) else "")
    if not isinstance(body, dict):
        raise NotifyError(f"{service} gave an unreadable answer: {snippet(reply.text)!r}", recoverable=True)
    if code is None:
        raise NotifyError(f"{service} answered without a result code: {snippet(reply.text)!r}", recoverable=True)


def _code_and_message(body: Any, code_keys: tuple[str, ...], message_keys: tuple[str, ...]) -> tuple[int | None, str]:
    if not isinstance(body, dict):
        return None, ""
    code: int | None = None
    for key in code_keys:
        value = body.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            code = value
            break
    message = next((str(body[k]) for k in message_keys if isinstance(body.get(k), str)), "")
    return code, snippet(message)


Builder = Callable[[Notification, Options], JSON]
Checker = Callable[[Reply], None]
Preparer = Callable[[str, JSON, "str | None", float], Signed]
Authorizer = Callable[[Signed, Mapping[str, str]], Signed]
"""Adds the notifier's credentials (`token`, `user`: secrets) to the prepared request, after `payload()`, so a
dry-run never shows them."""


def unsigned(url: str, payload: JSON, secret: str | None, now: float) -> Signed:
    """The request as built: for services that need no signature and no URL change."""
    return Signed(url, payload)


@dataclass(frozen=True, slots=True)
class Format:
    """One webhook format: a pure payload builder, a request preparer (signer) and an answer checker.

    `rate_limit` is the service's own limit as (messages, per seconds), for the delivery pipeline.
    """

    name: str
    build: Builder
    check: Checker
    prepare: Preparer = unsigned
    rate_limit: tuple[int, float] | None = None
    authorize: Authorizer | None = None


def json_len(text: str) -> int:
    """Bytes `text` takes as a JSON string in UTF-8 (quotes and escapes included)."""
    return len(json.dumps(text, ensure_ascii=False).encode())
