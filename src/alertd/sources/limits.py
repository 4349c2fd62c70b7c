"""What a source left out of a poll at one of its limits, for the source's health.

A source that cuts its data at a limit (a CSV header wider than `max_columns`, a `meta.yaml` over the YAML
bounds) says so with a message that names the limit; the service takes the messages after each poll
(`take_cuts`) and shows them as the source's error (`/api/v1/sources`, the log, `alertd.source.up` 0) while
the rest of the source's data is read on. A poll that reads data and meets no limit clears it.
"""

from __future__ import annotations

import threading


class Cuts:
    """The messages of the limits met since they were last taken (each once, in order)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._messages: dict[str, None] = {}

    def add(self, message: str) -> None:
        """A limit was met (in the poll's thread)."""
        with self._lock:
            if len(self._messages) < 100:
                self._messages[message] = None

    def take(self) -> list[str]:
        """The messages since the last take, and forget them."""
        with self._lock:
            out, self._messages = list(self._messages), {}
        return out
