"""Delivery: send what is due in the outbox, retrying only what a retry can fix (the one retry stage).

- A recoverable `NotifyError` is retried with exponential backoff and full jitter (AWS's "full jitter":
  a uniform wait in [0, min(cap, base * 2**(n-1))] after the n-th failure), or after the receiver's own
  `retry_after` when it gave one, capped at `max_retry_after` (5 min by default): a receiver that
  answers 429 with a Retry-After of a year holds that group's notifications for 5 minutes, not a year.
  Only that group waits: the other groups, to the same receiver too, go on.
- A non-recoverable one marks the notification failed, with its error, logged once.
- Any other exception from a notifier is a bug in it; it is logged and retried like a recoverable error,
  so nothing is lost.
- A notifier with `rate_limit = (count, per_seconds)` gets at most `count` attempts in any `per_seconds`;
  the rest wait (they are delayed, never dropped).
- Receivers are served concurrently, each one's notifications in order.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections import Counter, defaultdict, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from alertd.dispatch.outbox import Outbox, OutboxRow
from alertd.errors import NotifyError
from alertd.notify.base import Notifier

log = logging.getLogger("alertd.dispatch")

MAX_RETRY_AFTER = 300.0
"""The longest a receiver's Retry-After may hold a notification (seconds)."""


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential backoff with full jitter: `base` seconds doubling per failure, capped at `cap`."""

    base: float = 1.0
    cap: float = 300.0

    def delay(self, failures: int, rng: random.Random) -> float:
        """The wait after the `failures`-th consecutive failure (1 for the first)."""
        ceiling = min(self.cap, self.base * 2.0 ** min(max(failures - 1, 0), 60))
        return rng.uniform(0.0, ceiling)


@dataclass
class DeliveryCounters:
    """Delivery outcomes per receiver, for `/metrics`."""

    delivered: Counter[str] = field(default_factory=Counter)
    failed: Counter[str] = field(default_factory=Counter)
    retried: Counter[str] = field(default_factory=Counter)
    deferred: Counter[str] = field(default_factory=Counter)

    def snapshot(self) -> dict[str, dict[str, int]]:
        """`{outcome: {receiver: count}}` as plain dicts."""
        return {
            "delivered": dict(self.delivered),
            "failed": dict(self.failed),
            "retried": dict(self.retried),
            "deferred": dict(self.deferred),
        }


@dataclass(frozen=True, slots=True)
class Outcome:
    """What happened to one outbox row in one delivery pass: `delivered`, `retry`, `failed` or `deferred`."""

    key: str
    receiver: str
    result: str
    error: str | None = None
    next_attempt_at: float | None = None


class RateLimiter:
    """Sliding-window attempt counts per receiver."""

    def __init__(self) -> None:
        self._sent: dict[str, deque[float]] = defaultdict(deque)

    def allowed_at(self, receiver: str, limit: tuple[int, float] | None, now: float) -> float:
        """The earliest time the next attempt to `receiver` may be made (`now` when it may go now)."""
        if limit is None:
            return now
        count, per = limit
        window = self._sent[receiver]
        while window and window[0] <= now - per:
            window.popleft()
        if len(window) < count:
            return now
        return window[len(window) - count] + per

    def record(self, receiver: str, now: float) -> None:
        """Count an attempt."""
        self._sent[receiver].append(now)


class Delivery:
    """Sends due outbox rows through the named notifiers and records every outcome in the outbox."""

    def __init__(
        self,
        outbox: Outbox,
        notifiers: Mapping[str, Notifier],
        *,
        backoff: Backoff | None = None,
        rng: random.Random | None = None,
        counters: DeliveryCounters | None = None,
        max_retry_after: float = MAX_RETRY_AFTER,
    ) -> None:
        self.outbox = outbox
        self.max_retry_after = max_retry_after
        self.notifiers = dict(notifiers)
        self.backoff = backoff or Backoff()
        self.rng = rng or random.Random()
        self.counters = counters or DeliveryCounters()
        self.limiter = RateLimiter()

    async def deliver_due(self, now: float) -> list[Outcome]:
        """Attempt every notification due at `now`; return what happened to each."""
        done: list[Outcome] = []
        seen: set[str] = set()
        while True:  # a delivered notification may let the next one of its group go in the same call
            by_receiver: dict[str, list[OutboxRow]] = defaultdict(list)
            for row in self.outbox.due(now):
                if row.key not in seen:
                    by_receiver[row.receiver].append(row)
            if not by_receiver:
                return done
            results = await asyncio.gather(*(self._serve(r, rows, now) for r, rows in by_receiver.items()))
            for outcome in (o for outcomes in results for o in outcomes):
                seen.add(outcome.key)
                done.append(outcome)

    async def _serve(self, receiver: str, rows: Sequence[OutboxRow], now: float) -> list[Outcome]:
        notifier = self.notifiers.get(receiver)
        out: list[Outcome] = []
        limit = _rate_limit(notifier)
        for i, row in enumerate(rows):
            if notifier is None:
                out.append(self._fail(row, f"no notifier named {receiver!r} is configured", now))
                continue
            at = self.limiter.allowed_at(receiver, limit, now)
            if at > now:
                out += [self._defer(r, at) for r in rows[i:]]
                break
            self.limiter.record(receiver, now)
            out.append(await self._attempt(notifier, row, now))
        return out

    async def _attempt(self, notifier: Notifier, row: OutboxRow, now: float) -> Outcome:
        try:
            await notifier.send(row.notification)
        except NotifyError as exc:
            if not exc.recoverable:
                return self._fail(row, str(exc), now)
            return self._retry(row, str(exc), exc.retry_after, now)
        except Exception as exc:  # a notifier bug: keep the notification, say so
            log.exception("notifier %s raised an unexpected error; will retry", row.receiver)
            return self._retry(row, f"{type(exc).__name__}: {exc}", None, now)
        self.outbox.mark_delivered(row.key, now)
        self.counters.delivered[row.receiver] += 1
        return Outcome(row.key, row.receiver, "delivered")

    def _retry(self, row: OutboxRow, error: str, retry_after: float | None, now: float) -> Outcome:
        failures = row.attempts + 1
        if retry_after is not None and retry_after >= 0:  # NaN compares false: backoff
            wait = min(retry_after, self.max_retry_after)
        else:
            wait = self.backoff.delay(failures, self.rng)
        at = now + wait
        self.outbox.mark_retry(row.key, error, at)
        self.counters.retried[row.receiver] += 1
        level = logging.WARNING if failures == 1 else logging.DEBUG
        log.log(
            level,
            "delivery to %s failed (attempt %d), retry in %.1fs: %s",
            row.receiver,
            failures,
            wait,
            error,
        )
        return Outcome(row.key, row.receiver, "retry", error, at)

    def _fail(self, row: OutboxRow, error: str, now: float) -> Outcome:
        self.outbox.mark_failed(row.key, error, now)
        self.counters.failed[row.receiver] += 1
        log.error("delivery to %s failed for good (key %s): %s", row.receiver, row.key, error)
        return Outcome(row.key, row.receiver, "failed", error)

    def _defer(self, row: OutboxRow, at: float) -> Outcome:
        self.outbox.defer(row.key, at)
        self.counters.deferred[row.receiver] += 1
        return Outcome(row.key, row.receiver, "deferred", None, at)


def _rate_limit(notifier: Notifier | None) -> tuple[int, float] | None:
    limit = getattr(notifier, "rate_limit", None)
    if limit is None:
        return None
    count, per = limit
    return int(count), float(per)
