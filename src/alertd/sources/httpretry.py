"""What the HTTP sources (W&B, MLflow) share: the retry loop, backoff, Retry-After, the auth error."""

from __future__ import annotations

import email.utils
import random
from collections.abc import Awaitable, Callable
from typing import Any

from alertd.errors import SourceError

__all__ = ["Attempt", "AuthError", "Sleep", "backoff", "parse_retry_after", "retrying"]

Sleep = Callable[[float], Awaitable[None]]


Attempt = tuple[dict[str, Any] | None, float, str]
"""One try: `(data, 0, "")` on success, else `(None, seconds to wait, why)`."""


async def retrying(
    attempt: Callable[[int], Awaitable[Attempt]],
    what: str,
    max_retries: int,
    max_wait: float,
    sleep: Callable[[float], Awaitable[None]],
) -> dict[str, Any]:
    """Call `attempt(0)`, `attempt(1)`, ... until one returns data; wait between them as it says.

    Raises SourceError after `max_retries` retries, or at once when the server asks for a wait longer
    than `max_wait` (a Retry-After of an hour ends the poll instead of holding it). `what` names the
    request in messages (never a secret).
    """
    n = 0
    while True:
        data, wait, why = await attempt(n)
        if data is not None:
            return data
        n += 1
        if n > max_retries:
            raise SourceError(f"{what}: {why}, giving up after {n} tries")
        if wait > max_wait:
            raise SourceError(f"{what}: {why}, server asks to wait {wait:.0f}s")
        await sleep(wait)


def backoff(attempt: int, max_wait: float) -> float:
    """Exponential backoff from 2 s with 25 % jitter, capped at `max_wait`."""
    base = min(max_wait, 2.0 * 2**attempt)
    return float(min(max_wait, base * (1 + 0.25 * random.random())))


class AuthError(SourceError):
    """The server refused the API key (401/403)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, recoverable=False)


def parse_retry_after(value: str | None, now: float) -> float | None:
    """Seconds to wait from a `Retry-After` (or `RateLimit-Reset`) value: a number or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - now)
