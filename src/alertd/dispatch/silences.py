"""The silence store: in memory, optionally persisted to `<state dir>/silences.db` (an adapter).

A change the database can't take (a full or read-only directory, a lock held elsewhere) stays in memory, in
force; `unsaved` says why, and each later change or `prune` tries to write what is left over again."""

from __future__ import annotations

import builtins
import contextlib
import json
import logging
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


log = logging.getLogger("alertd.state")


def new_silence_id() -> str:
    """A fresh random silence id."""
    return str(uuid.uuid4())


class SilenceStore:
    """Silences by id. With `directory`, every change is written to SQLite and reloaded on start."""

    def __init__(self, directory: str | Path | None = None) -> None:
        self._items: dict[str, Silence] = {}
        self._db: sqlite3.Connection | None = None
        self.unsaved: str | None = None
        """Why the last write failed (the silences it did not write are kept in `_pending`); None: all written."""
        self._pending: set[str] = set()
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
        self._write(old)
        return len(old)

    def close(self) -> None:
        """Close the database, if any."""
        if self._db is not None:
            self._db.close()
            self._db = None

    def _save(self, s: Silence) -> None:
        self._write([s.id])

    def _write(self, ids: builtins.list[str]) -> None:
        """Write (or delete, when gone) these silences and those a failed write left over, in one transaction."""
        if self._db is None:
            return
        todo = self._pending | set(ids)
        if not todo:
            return
        try:
            self._db.execute("BEGIN IMMEDIATE")
            for sid in todo:
                s = self._items.get(sid)
                if s is None:
                    self._db.execute("DELETE FROM silences WHERE id = ?", (sid,))
                    continue
                matchers = json.dumps([str(m) for m in s.matchers])
                self._db.execute(
                    "INSERT OR REPLACE INTO silences VALUES (?, ?, ?, ?, ?, ?)",
                    (s.id, matchers, s.starts_at, s.ends_at, s.created_by, s.comment),
                )
            self._db.execute("COMMIT")
        except sqlite3.Error as exc:
            if self._db.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    self._db.execute("ROLLBACK")
            if self.unsaved is None:
                log.error("can't write the silences (%s): they are in force, written once the directory works", exc)
            self.unsaved, self._pending = str(exc) or type(exc).__name__, todo
            return
        if self.unsaved is not None:
            log.warning("the silences are written again")
        self.unsaved, self._pending = None, set()
