"""The contract every source keeps."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

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
