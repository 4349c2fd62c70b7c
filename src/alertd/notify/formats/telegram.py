"""`telegram`: the Bot API's `sendMessage`, HTML parse mode, to the configured `chat_id`.

`url` is `https://api.telegram.org/bot<token>` (or the full `.../sendMessage`). The text may be 4096
characters after entity parsing, so it is measured before HTML escaping. The API answers `{"ok": true}`
or `{"ok": false, "error_code", "description", "parameters": {"retry_after"}}`.
"""

from __future__ import annotations

import html
import re

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
    fit_lines,
    heading,
    shown_alerts,
    snippet,
)

TEXT_LIMIT = 4096


def chat_id_value(chat_id: str | None) -> int | str:
    """A numeric chat id as a number (as the API documents it), `@channel` names as they are."""
    if chat_id is None:
        raise NotifyError("telegram format needs chat_id", recoverable=False)
    return int(chat_id) if re.fullmatch(r"-?\d+", chat_id) else chat_id


def build(n: Notification, opts: Options) -> JSON:
    """The sendMessage request for `n`: a bold title and one line per alert, HTML-escaped."""
    shown, omitted = shown_alerts(n, opts)
    head = cut(heading(n, opts), 300)
    lines, omitted = body_lines(shown, omitted, opts)
    plain = fit_lines(head, lines, TEXT_LIMIT, omitted=omitted)
    rest = plain[len(head) :]
    return {
        "chat_id": chat_id_value(opts.chat_id),
        "text": f"<b>{html.escape(head, quote=False)}</b>{html.escape(rest, quote=False)}",
        "parse_mode": "HTML",
        "link_preview_options": {"is_disabled": True},
    }


def prepare(url: str, payload: JSON, secret: str | None, now: float) -> Signed:
    """Point the bot URL at the `sendMessage` method unless it already names it."""
    u = httpx.URL(url)
    if not u.path.rstrip("/").endswith("/sendMessage"):
        u = u.copy_with(path=u.path.rstrip("/") + "/sendMessage")
    return Signed(str(u), payload)


def check(reply: Reply) -> None:
    """Delivered only on `ok: true`; 429 carries `parameters.retry_after`; other refusals are final."""
    body = reply.json()
    if isinstance(body, dict) and body.get("ok") is False:
        code = body.get("error_code")
        detail = f"error {code} {snippet(str(body.get('description', '')))}".strip()
        params = body.get("parameters")
        hint = params.get("retry_after") if isinstance(params, dict) else None
        if code == 429 or reply.status == 429:
            retry = float(hint) if isinstance(hint, int | float) and not isinstance(hint, bool) else None
            raise NotifyError(
                f"Telegram refused the message: {detail} (rate limited)", recoverable=True, retry_after=retry
            )
        check_http(reply, "Telegram", detail)
        raise NotifyError(f"Telegram refused the message: {detail}", recoverable=False)
    check_http(reply, "Telegram", snippet(reply.text))
    if not isinstance(body, dict) or body.get("ok") is not True:
        raise NotifyError(f"Telegram gave an unreadable answer: {snippet(reply.text)!r}", recoverable=True)


FORMAT = Format(name="telegram", build=build, prepare=prepare, check=check)
