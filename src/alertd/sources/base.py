"""The contract every source keeps, and the capabilities some declare (the service asks `isinstance`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from alertd.model import Sample


class Source(Protocol):
    """Produces samples. Owns its client and its cursor; never touches the buffer.

    `poll(now)` returns the samples that are new since the previous poll (the first poll returns
    everything the source can see). It raises `SourceError` on failure; the caller retries with
    backoff. Blocking work (file reads, NVML calls) runs off the event loop inside the source.
    """

    name: str
    interval: float

    async def poll(self, now: float) -> Sequence[Sample]: ...

    async def aclose(self) -> None: ...


@runtime_checkable
class Resumable(Protocol):
    """A source that can say how far it has read (`cursor`, a JSON value) and resume there after a restart."""

    def cursor(self) -> object: ...

    def restore(self, cursor: Any) -> None: ...


@runtime_checkable
class ReadsChanges(Protocol):
    """A file source that can read only what file-system notifications reported (`paths`)."""

    async def poll_changed(self, now: float, paths: frozenset[str]) -> Sequence[Sample]: ...


@runtime_checkable
class Cuts(Protocol):
    """A source that may leave data out at its limits (columns, series, an answer's size): `take_cuts` says what,
    once, after each poll (the service shows it in the source's health)."""

    def take_cuts(self) -> list[str]: ...
