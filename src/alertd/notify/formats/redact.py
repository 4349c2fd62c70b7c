"""Keeping webhook secrets out of messages and logs: the URL (its path and query hold tokens), the signing
secret and custom header values are replaced by `…`; a URL is shown as `scheme://host/…` only."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from urllib.parse import parse_qsl, unquote, urlsplit

import httpx

MIN_SECRET_PART = 6
"""URL parts shorter than this (`v2`, `hook`) are not treated as secrets on their own."""


def redact_url(url: str | httpx.URL) -> str:
    """`scheme://host/…`: enough to tell which service failed, nothing that grants access."""
    try:
        parts = urlsplit(str(url))
    except ValueError:
        return "<url>"
    host = parts.hostname or "?"
    return f"{parts.scheme or '?'}://{host}/…"


def url_secrets(url: str) -> list[str]:
    """The pieces of a webhook URL that may be credentials: the whole URL, path segments, query values."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return [url]
    found = [url, parts.path, parts.query, parts.netloc.rpartition("@")[0]]
    found += parts.path.split("/")
    found += [v for _, v in parse_qsl(parts.query, keep_blank_values=True)]
    found += parts.query.split("&")
    return found + [unquote(p) for p in found]


class Scrubber:
    """Replaces every known secret in a text by `…` (longest first, so a token inside a URL goes too)."""

    def __init__(self, secrets: Iterable[str]) -> None:
        unique = {s for s in secrets if len(s) >= MIN_SECRET_PART}
        self._secrets = sorted(unique, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        """`text` with every secret replaced."""
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, "…")
        return text


class _RedactHttpxUrls(logging.Filter):
    """httpx logs `HTTP Request: POST <full url> ...` at INFO: show the redacted URL instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and any(isinstance(a, httpx.URL) for a in record.args):
            record.args = tuple(redact_url(a) if isinstance(a, httpx.URL) else a for a in record.args)
        return True


_FILTER = _RedactHttpxUrls("alertd-redact-urls")


def install_httpx_log_redaction() -> None:
    """Make the `httpx` logger print redacted URLs (idempotent)."""
    logger = logging.getLogger("httpx")
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)
