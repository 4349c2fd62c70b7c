"""The SQLite outbox, notification log and open groups under alertd's state directory.

Every planned notification is written here, with the notification-log entries that plan it and the open
aggregation groups (a resolution waiting for its group's `group_interval` is one), in one transaction
BEFORE the first delivery attempt; the service adds the alert states and the source cursors to the same
transaction (`commit_plan(..., also=...)`), so what was evaluated, what is due and how far each source
has read are committed together. A crash either loses the plan as a whole (and the sources read the same
samples again, which plan the same notifications under the same keys) or keeps it (and it is delivered
after the restart). One process writes: the directory is locked with `flock` while an `Outbox` is open.
WAL mode keeps readers out of the writer's way.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from alertd.dispatch import codec
from alertd.dispatch.plan import LogEntry, LogKey
from alertd.model import Notification

log = logging.getLogger("alertd.state")

STATE_DIR_ENV = "ALERTD_STATE_DIR"
DB_NAME = "alertd.db"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS outbox (
    key TEXT PRIMARY KEY,
    receiver TEXT NOT NULL,
    group_key TEXT NOT NULL,
    payload TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'pending',
    attempts INTEGER NOT NULL DEFAULT 0,
    next_attempt_at REAL NOT NULL,
    created REAL NOT NULL,
    last_error TEXT,
    done_at REAL
);
CREATE INDEX IF NOT EXISTS outbox_due ON outbox (status, next_attempt_at);
CREATE INDEX IF NOT EXISTS outbox_group ON outbox (receiver, group_key, status, created);
CREATE TABLE IF NOT EXISTS nflog (
    group_key TEXT NOT NULL,
    receiver TEXT NOT NULL,
    firing TEXT NOT NULL,
    resolved TEXT NOT NULL,
    sent_at REAL NOT NULL,
    seq INTEGER NOT NULL,
    PRIMARY KEY (group_key, receiver)
);
CREATE TABLE IF NOT EXISTS groups (
    group_key TEXT PRIMARY KEY,
    data TEXT NOT NULL
);
"""

_HEAD = """NOT EXISTS (SELECT 1 FROM outbox AS p
    WHERE p.status = 'pending' AND p.receiver = o.receiver AND p.group_key = o.group_key
    AND (p.created < o.created OR (p.created = o.created AND p.rowid < o.rowid)))"""


def state_dir(default: str | Path = "./.state") -> Path:
    """The state directory: `$ALERTD_STATE_DIR` when set and not empty, else `default`."""
    return Path(os.environ.get(STATE_DIR_ENV) or default)


class StateDirError(RuntimeError):
    """The state directory can't be used (read-only, full, not a directory, ...): one clear message."""


class StateDirLocked(StateDirError):
    """Another alertd process already writes this state directory."""


@dataclass(frozen=True, slots=True)
class OutboxRow:
    """One notification in the outbox and its delivery record."""

    notification: Notification
    status: str
    attempts: int
    next_attempt_at: float
    last_error: str | None
    done_at: float | None

    @property
    def key(self) -> str:
        """The idempotency key."""
        return self.notification.key

    @property
    def receiver(self) -> str:
        """The receiver's name."""
        return self.notification.receiver


class Outbox:
    """The outbox and notification log in `<directory>/alertd.db` (created with the directory if absent)."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._lock = _lock(self.directory / "alertd.lock")
        except OSError as exc:
            raise StateDirError(f"state directory {self.directory}: {exc.strerror or exc}") from None
        try:
            self._db = _open_db(self.directory / DB_NAME)
        except BaseException:
            self._lock.close()
            raise

    def close(self) -> None:
        """Close the database and release the directory lock."""
        self._db.close()
        self._lock.close()

    @property
    def db(self) -> sqlite3.Connection:
        """The connection, for the state that is committed with the plans (`also` in `commit_plan`)."""
        return self._db

    def commit_plan(
        self,
        notifications: Iterable[Notification],
        log_updates: Mapping[LogKey, LogEntry],
        *,
        groups: Mapping[str, str | None] | None = None,
        also: Callable[[sqlite3.Connection], None] | None = None,
    ) -> int:
        """Write planned notifications and their log entries in one transaction; return how many are new.

        `groups` maps open groups' keys to their JSON (None: the group is closed). `also` writes more state
        in the same transaction. A notification whose key is already in the outbox (planned before a
        restart, or delivered within the retention) is not added again.
        """
        notifications = list(notifications)
        if not notifications and not log_updates and not groups and also is None:
            return 0
        added = 0
        with _transaction(self._db):
            if also is not None:
                also(self._db)
            for gkey, data in (groups or {}).items():
                if data is None:
                    self._db.execute("DELETE FROM groups WHERE group_key = ?", (gkey,))
                else:
                    self._db.execute("INSERT OR REPLACE INTO groups VALUES (?, ?)", (gkey, data))
            for n in notifications:
                cur = self._db.execute(
                    "INSERT OR IGNORE INTO outbox"
                    " (key, receiver, group_key, payload, next_attempt_at, created) VALUES (?,?,?,?,?,?)",
                    (n.key, n.receiver, n.group_key, codec.dumps(n), n.created, n.created),
                )
                added += cur.rowcount
            for (gkey, receiver), e in log_updates.items():
                self._db.execute(
                    "INSERT OR REPLACE INTO nflog VALUES (?, ?, ?, ?, ?, ?)",
                    (
                        gkey,
                        receiver,
                        json.dumps(sorted(e.firing)),
                        json.dumps(sorted(e.resolved)),
                        e.sent_at,
                        e.seq,
                    ),
                )
        return added

    def load_log(self) -> dict[LogKey, LogEntry]:
        """The notification log as the planner wants it."""
        rows = self._db.execute("SELECT group_key, receiver, firing, resolved, sent_at, seq FROM nflog")
        return {
            (g, r): LogEntry(frozenset(json.loads(f)), frozenset(json.loads(s)), at, seq)
            for g, r, f, s, at, seq in rows
        }

    def load_groups(self) -> dict[str, str]:
        """The open groups' JSON by group key, as the last commit left them."""
        return dict(self._db.execute("SELECT group_key, data FROM groups"))

    def prune_log(self, before: float) -> int:
        """Forget log entries of groups with nothing firing last sent before `before`, and notifications
        delivered or failed before it; return how many log entries went."""
        with _transaction(self._db):
            cur = self._db.execute("DELETE FROM nflog WHERE firing = '[]' AND sent_at < ?", (before,))
            self._db.execute("DELETE FROM outbox WHERE status != 'pending' AND done_at < ?", (before,))
        return cur.rowcount

    def due(self, now: float) -> list[OutboxRow]:
        """Pending notifications whose next attempt is due, oldest first.

        Only the oldest pending notification of each group and receiver is offered, so a receiver
        never hears a group's resolution before the firing notification that is still being retried.
        """
        return self._rows(f"WHERE status = 'pending' AND next_attempt_at <= ? AND {_HEAD}", (now,))

    def rows(self, status: str | None = None) -> list[OutboxRow]:
        """Every row (or those with `status`), oldest first."""
        if status is None:
            return self._rows("", ())
        return self._rows("WHERE status = ?", (status,))

    def next_due(self) -> float | None:
        """When the earliest pending notification is due, or None."""
        (t,) = self._db.execute(
            f"SELECT MIN(next_attempt_at) FROM outbox AS o WHERE status = 'pending' AND {_HEAD}"
        ).fetchone()
        return None if t is None else float(t)

    def mark_delivered(self, key: str, now: float) -> None:
        """Record a successful delivery (counted as an attempt)."""
        self._update(key, "status = 'delivered', attempts = attempts + 1, done_at = ?", (now,))

    def mark_failed(self, key: str, error: str, now: float) -> None:
        """Record a failure a retry can't fix; the row is never tried again."""
        self._update(key, "status = 'failed', attempts = attempts + 1, last_error = ?, done_at = ?", (error, now))

    def mark_retry(self, key: str, error: str, next_attempt_at: float) -> None:
        """Record a failed attempt to be retried at `next_attempt_at`."""
        self._update(key, "attempts = attempts + 1, last_error = ?, next_attempt_at = ?", (error, next_attempt_at))

    def defer(self, key: str, next_attempt_at: float) -> None:
        """Move the next attempt later without counting an attempt (rate limits)."""
        self._update(key, "next_attempt_at = ?", (next_attempt_at,))

    def _update(self, key: str, assignments: str, params: tuple[object, ...]) -> None:
        with _transaction(self._db):
            self._db.execute(f"UPDATE outbox SET {assignments} WHERE key = ? AND status = 'pending'", (*params, key))

    def _rows(self, where: str, params: tuple[object, ...]) -> list[OutboxRow]:
        sql = (
            "SELECT payload, status, attempts, next_attempt_at, last_error, done_at FROM outbox AS o "
            f"{where} ORDER BY next_attempt_at, created, key"
        )
        return [
            OutboxRow(codec.loads(p), st, at, nxt, err, done)
            for p, st, at, nxt, err, done in self._db.execute(sql, params)
        ]


class _transaction:
    """BEGIN IMMEDIATE ... COMMIT (ROLLBACK on error) on an autocommit connection."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: object, *_: object) -> None:
        self.db.execute("ROLLBACK" if exc_type is not None else "COMMIT")


_CORRUPT = ("file is not a database", "malformed", "corrupt")


def _open_db(path: Path) -> sqlite3.Connection:
    """Open (or create) the database; a corrupt one is moved aside with a loud warning and started afresh."""
    try:
        return _connect(path)
    except sqlite3.DatabaseError as exc:
        if not any(word in str(exc) for word in _CORRUPT):
            raise StateDirError(f"state database {path}: {exc}") from None
        aside = path.with_name(f"{path.name}.corrupt-{int(time.time())}")
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.replace(f"{path}{suffix}", f"{aside}{suffix}")
        log.error(
            "state database %s is corrupt (%s): moved aside to %s; starting with no saved state "
            "(alerts already sent may be sent again)",
            path,
            exc,
            aside,
        )
        try:
            return _connect(path)
        except sqlite3.DatabaseError as again:
            raise StateDirError(f"state database {path}: {again}") from None
    except OSError as exc:
        raise StateDirError(f"state database {path}: {exc.strerror or exc}") from None


def _connect(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        (check,) = db.execute("PRAGMA quick_check").fetchone()
        if check != "ok":
            raise sqlite3.DatabaseError(f"database disk image is malformed: {check}")
        db.executescript(_SCHEMA)
    except BaseException:
        db.close()
        raise
    return db


def _lock(path: Path) -> IO[str]:
    handle = path.open("a")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise StateDirLocked(f"{path.parent}: another alertd process is using this state directory") from None
    return handle
