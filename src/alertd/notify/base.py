"""The contract every notifier keeps."""

from __future__ import annotations

from typing import Protocol

from alertd.model import Notification


class Notifier(Protocol):
    """Delivers one notification, or raises `NotifyError(recoverable=...)`. It never retries itself."""

    name: str

    async def send(self, notification: Notification) -> None: ...

    async def aclose(self) -> None: ...
