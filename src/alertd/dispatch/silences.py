"""The silence store: in memory, optionally persisted to `<state dir>/silences.db` (an adapter)."""

from __future__ import annotations

import builtins
import json
import sqlite3
import uuid
from dataclasses import replace
from pathlib import Path

from alertd.dispatch.matchers import Matcher, Silence

_SCHEMA = """
CREATE TABLE IF NOT EXISTS silences (
    id TEXT PRIMARY KEY,
    matchers TEXT NOT NULL,
    starts_at REAL NOT NULL,
    ends_at REAL NOT NULL,
    created_by TEXT NOT NULL,
    comment TEXT NOT NULL
)
"""


def new_silence_id() -> str:
    """A fresh random silence id."""
    return str(uuid.uuid4())


class SilenceStore:
    """Silences by id. With `directory`, every change is written to SQLite and reloaded on start."""

    def __init__(self, directory: str | Path | None = None) -> None:
        self._items: dict[str, Silence] = {}
        self._db: sqlite3.Connection | None = None
        if directory is not None:
            Path(directory).mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(Path(directory) / "silences.db", isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(_SCHEMA)
            for row in self._db.execute("SELECT * FROM silences"):
                sid, matchers, start, end, by, comment = row
                parsed = tuple(Matcher.parse(m) for m in json.loads(matchers))
                self._items[sid] = Silence(sid, parsed, start, end, by, comment)

    def add(self, silence: Silence) -> Silence:
        """Add or replace a silence (by id) and return it."""
        self._items[silence.id] = silence
        self._save(silence)
        return silence

    def get(self, silence_id: str) -> Silence | None:
        """The silence with this id, or None."""
        return self._items.get(silence_id)

    def expire(self, silence_id: str, now: float) -> Silence:
        """End a silence at `now` (a pending one never starts); raise KeyError for an unknown id."""
        old = self._items[silence_id]
        if old.ends_at <= now:
            return old
        new = replace(old, starts_at=min(old.starts_at, now), ends_at=now)
        return self.add(new)

    def list(self) -> list[Silence]:
        """Every silence, expired ones included, by start time."""
        return sorted(self._items.values(), key=lambda s: (s.starts_at, s.id))

    def active(self, now: float) -> builtins.list[Silence]:
        """The silences that mute alerts at `now`."""
        return [s for s in self.list() if s.is_active(now)]

    def prune(self, before: float) -> int:
        """Drop silences that ended before `before`; return how many."""
        old = [sid for sid, s in self._items.items() if s.ends_at < before]
        for sid in old:
            del self._items[sid]
            if self._db is not None:
                self._db.execute("DELETE FROM silences WHERE id = ?", (sid,))
        return len(old)

    def close(self) -> None:
        """Close the database, if any."""
        if self._db is not None:
            self._db.close()
            self._db = None

    def _save(self, s: Silence) -> None:
        if self._db is None:
            return
        self._db.execute(
            "INSERT OR REPLACE INTO silences VALUES (?, ?, ?, ?, ?, ?)",
            (s.id, json.dumps([str(m) for m in s.matchers]), s.starts_at, s.ends_at, s.created_by, s.comment),
        )
