"""The contract every notifier (and action) keeps, and the capabilities some declare."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from alertd.model import Notification


class Notifier(Protocol):
    """Delivers one notification, or raises `NotifyError(recoverable=...)`. It never retries itself."""

    name: str

    async def send(self, notification: Notification) -> None: ...

    async def aclose(self) -> None: ...


@runtime_checkable
class Resending(Protocol):
    """A notifier that posts firing alerts again while they fire (the alertmanager notifier: its `endsAt`):
    the service calls `resend(now)` every `resend_every` seconds."""

    resend_every: float

    async def resend(self, now: float) -> int: ...


@runtime_checkable
class Draining(Protocol):
    """A notifier with work under way after `send` returned (an escalation, a wait for a job's end):
    `wait_idle` returns once it is done, so the reports of an ending alertd exec go out."""

    async def wait_idle(self) -> None: ...
