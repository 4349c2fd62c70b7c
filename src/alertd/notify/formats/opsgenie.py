"""`opsgenie`: Opsgenie's Alert API v2, create on firing and close on resolution.

A firing notification creates an alert (`POST {base}/v2/alerts`) whose `alias` is the SHA-256 of the
group's key; a resolved one closes that alias (`POST {base}/v2/alerts/{alias}/close?identifierType=alias`),
as Alertmanager's Opsgenie integration does. Opsgenie folds a repeated create with an open alias into the
open alert. The API key goes in `Authorization: GenieKey <key>`, added by `prepare` (never in the payload).
Limits (Opsgenie's documentation): message 130 characters, alias 512, description 15000, 20 tags of 50,
source 100, details 8000 in all. Opsgenie answers 202 (accepted: processed later), 4xx (refused: final,
except 429) and 5xx (retry).
"""

from __future__ import annotations

from urllib.parse import quote

import httpx

from alertd.errors import NotifyError
from alertd.model import Notification, Transition
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
    one_line,
    shown_alerts,
    snippet,
)
from alertd.notify.formats.pagerduty import dedup_key

BASE_URLS = {"us": "https://api.opsgenie.com", "eu": "https://api.eu.opsgenie.com"}
"""Opsgenie's API for each `region`."""

MESSAGE_LIMIT = 130
DESCRIPTION_LIMIT = 15000
TAG_LIMIT = 50
MAX_TAGS = 20
DETAILS_LIMIT = 8000
SOURCE = "alertd"

PRIORITIES = {"critical": "P1", "error": "P2", "warning": "P3", "info": "P5"}
"""Opsgenie priority by alert severity; any other severity is P2, as `error`."""


def priority(alerts: tuple[Transition, ...]) -> str:
    """The highest priority among the firing alerts' severities (P2 where none is known)."""
    found = [PRIORITIES.get(a.severity, "P2") for a in alerts if firing(a)] or ["P2"]
    return min(found)


def _details(n: Notification) -> dict[str, str]:
    out: dict[str, str] = {}
    used = 0
    for k, v in [("receiver", n.receiver), *n.group_labels]:
        k, v = cut(k, 100), cut(v, 500)
        if used + len(k) + len(v) > DETAILS_LIMIT:
            break
        out[k] = v
        used += len(k) + len(v)
    return out


def build(n: Notification, opts: Options) -> JSON:
    """The create request while the group fires; the close request (with its alias) once it has resolved."""
    alias = dedup_key(n)
    head = one_line(heading(n, opts))
    if n.status != "firing":
        return {"alias": alias, "source": SOURCE, "note": cut(head, 1000)}
    shown, omitted = shown_alerts(n, opts)
    lines, omitted = body_lines(shown, omitted, opts)
    tags = sorted({cut(t, TAG_LIMIT) for a in n.alerts for t in (a.rule, a.severity) if t})[:MAX_TAGS]
    return {
        "message": cut(head, MESSAGE_LIMIT),
        "alias": alias,
        "description": fit_lines(head, lines, DESCRIPTION_LIMIT, omitted=omitted),
        "tags": tags,
        "details": _details(n),
        "source": SOURCE,
        "priority": priority(n.alerts),
    }


def prepare(url: str, payload: JSON, secret: str | None, now: float) -> Signed:
    """Aim a create at `{base}/v2/alerts` and a close at its alias; authenticate with the GenieKey."""
    if not secret:
        raise NotifyError("opsgenie format needs api_key", recoverable=False)
    u = httpx.URL(url)
    base = u.path.rstrip("/").removesuffix("/v2/alerts")
    headers = {"Authorization": f"GenieKey {secret}"}
    if "message" in payload:
        return Signed(str(u.copy_with(path=base + "/v2/alerts", query=None)), payload, headers)
    body = {k: v for k, v in payload.items() if k != "alias"}
    path = f"{base}/v2/alerts/{quote(str(payload['alias']), safe='')}/close"
    target = u.copy_with(raw_path=f"{path}?identifierType=alias".encode())
    return Signed(str(target), body, headers)


def check(reply: Reply) -> None:
    """2xx (202) is accepted; 429 and 5xx are retried, honouring `Retry-After`; other 4xx are final."""
    body = reply.json()
    message = body.get("message") if isinstance(body, dict) else None
    check_http(reply, "Opsgenie", snippet(str(message) if message else reply.text))


FORMAT = Format(name="opsgenie", build=build, prepare=prepare, check=check)
