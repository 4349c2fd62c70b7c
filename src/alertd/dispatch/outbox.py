"""The SQLite outbox, notification log and open groups under alertd's state directory.

Every planned notification is written here, with the notification-log entries that plan it and the open
aggregation groups (a resolution waiting for its group's `group_interval` is one), in one transaction
BEFORE the first delivery attempt; the service adds the alert states and the source cursors to the same
transaction (`commit_plan(..., also=...)`), so what was evaluated, what is due and how far each source
has read are committed together. A crash either loses the plan as a whole (and the sources read the same
samples again, which plan the same notifications under the same keys) or keeps it (and it is delivered
after the restart). One process writes: the directory is locked with `flock` while an `Outbox` is open.
WAL mode keeps readers out of the writer's way.

A directory that can't be written any more (full, read-only, the database locked by another process) does
not stop the alerting: the outbox goes on in memory (`unsaved` says why), so what is planned is still
delivered, retried and recorded, and every `RETRY_EVERY` seconds a commit that brings the service's state
(`also`) tries to write everything held in memory, with that state, in one transaction; once one does,
the outbox is on disk again. What stays in memory is lost to a crash or a stop meanwhile (sent again after
the restart, or not at all).
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
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO

from alertd.dispatch import codec
from alertd.dispatch.plan import LogEntry, LogKey
from alertd.model import Notification

log = logging.getLogger("alertd.state")

STATE_DIR_ENV = "ALERTD_STATE_DIR"
DB_NAME = "alertd.db"
RETRY_EVERY = 5.0
"""Seconds between two tries to write what the outbox holds in memory (the directory could not be written)."""
BUSY_TIMEOUT_MS = 5000
"""How long a write waits for a lock another process holds on the database (sqlite3's default)."""
BUSY_TIMEOUT_UNSAVED_MS = 100
"""... while the outbox is in memory: a retry against a database held locked costs the loop 0.1 s, not 5."""

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
    """The outbox and notification log in `<directory>/alertd.db` (created with the directory if absent); in
    memory while the directory can't be written (see the module docstring)."""

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
        self.unsaved: str | None = None
        """Why the directory can't be written now: the outbox is in memory (None: all of it is on disk)."""
        self._mem: dict[str, OutboxRow] | None = None
        self._mem_log: dict[LogKey, LogEntry] = {}
        self._mem_groups: dict[str, str | None] = {}
        self._retry_at = 0.0

    def close(self) -> None:
        """Close the database and release the directory lock."""
        self._db.close()
        self._lock.close()

    def checkpoint(self) -> None:
        """Copy the write-ahead log into the database (SQLite's passive checkpoint: it never waits for the writer,
        and the writer never waits for it). Its own connection, so it runs in a worker thread while the event loop
        commits; an error is logged, never raised (the next housekeeping tries again; the log's size is capped
        by WAL_AUTOCHECKPOINT_PAGES meanwhile)."""
        if self.unsaved is not None:
            return
        try:
            uri = (self.directory / DB_NAME).absolute().as_uri() + "?mode=rw"  # never creates a file that is gone
            db = sqlite3.connect(uri, uri=True, isolation_level=None, timeout=0)
            try:
                db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            finally:
                db.close()
        except sqlite3.Error as exc:
            log.debug("state database checkpoint: %s", exc)

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
        if self._mem is None:
            try:
                return self._commit(notifications, log_updates, groups, also)
            except sqlite3.Error as exc:
                self._spill(exc)
        added = self._hold(notifications, log_updates, groups or {})
        if also is not None:
            self._write_back(also)
        return added

    def retry_now(self) -> None:
        """Let the next commit that brings the state try to write what is in memory at once (at shutdown)."""
        self._retry_at = 0.0

    def _commit(
        self,
        notifications: list[Notification],
        log_updates: Mapping[LogKey, LogEntry],
        groups: Mapping[str, str | None] | None,
        also: Callable[[sqlite3.Connection], None] | None,
    ) -> int:
        added = 0
        with _transaction(self._db):
            if also is not None:
                also(self._db)
            self._commit_groups(groups or {})
            for n in notifications:
                cur = self._db.execute(
                    "INSERT OR IGNORE INTO outbox"
                    " (key, receiver, group_key, payload, next_attempt_at, created) VALUES (?,?,?,?,?,?)",
                    (n.key, n.receiver, n.group_key, codec.dumps(n), n.created, n.created),
                )
                added += cur.rowcount
            self._commit_log(log_updates)
        return added

    def _commit_groups(self, groups: Mapping[str, str | None]) -> None:
        for gkey, data in groups.items():
            if data is None:
                self._db.execute("DELETE FROM groups WHERE group_key = ?", (gkey,))
            else:
                self._db.execute("INSERT OR REPLACE INTO groups VALUES (?, ?)", (gkey, data))

    def _commit_log(self, log_updates: Mapping[LogKey, LogEntry]) -> None:
        for (gkey, receiver), e in log_updates.items():
            self._db.execute(
                "INSERT OR REPLACE INTO nflog VALUES (?, ?, ?, ?, ?, ?)",
                (gkey, receiver, json.dumps(sorted(e.firing)), json.dumps(sorted(e.resolved)), e.sent_at, e.seq),
            )

    def _spill(self, exc: sqlite3.Error) -> None:
        """The directory can't be written: go on in memory, with the pending rows the database holds."""
        if self._db.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                self._db.execute("ROLLBACK")
        self.unsaved = str(exc) or type(exc).__name__
        self._retry_at = time.monotonic() + RETRY_EVERY
        log.error(
            "can't write the state directory %s (%s): alerting goes on from memory (notifications are sent and "
            "retried); the state is written again as soon as it can be (tried every %gs; rule state_not_saved)",
            self.directory,
            self.unsaved,
            RETRY_EVERY,
        )
        try:
            pending = self._rows("WHERE status = 'pending'", ())
        except sqlite3.Error as again:  # not even readable: those are delivered once the directory works
            log.error("state directory %s: the pending notifications can't be read either (%s)", self.directory, again)
            pending = []
        self._mem = {row.key: row for row in pending}
        with contextlib.suppress(sqlite3.Error):
            self._db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_UNSAVED_MS}")

    def _hold(
        self,
        notifications: list[Notification],
        log_updates: Mapping[LogKey, LogEntry],
        groups: Mapping[str, str | None],
    ) -> int:
        """Keep a plan in memory (a key seen before, in memory or in the database, is not added again)."""
        assert self._mem is not None
        added = 0
        for n in notifications:
            if n.key in self._mem or self._on_disk(n.key):
                continue
            self._mem[n.key] = OutboxRow(n, "pending", 0, n.created, None, None)
            added += 1
        self._mem_log.update(log_updates)
        self._mem_groups.update(groups)
        return added

    def _on_disk(self, key: str) -> bool:
        try:
            return self._db.execute("SELECT 1 FROM outbox WHERE key = ?", (key,)).fetchone() is not None
        except sqlite3.Error:
            return False

    def _write_back(self, also: Callable[[sqlite3.Connection], None]) -> None:
        """Write what memory holds, with `also`, in one transaction, at most every RETRY_EVERY seconds; once
        that commits, the outbox is on disk again."""
        assert self._mem is not None
        if time.monotonic() < self._retry_at:
            return
        self._retry_at = time.monotonic() + RETRY_EVERY
        rows = [_row_values(r) for r in self._mem.values()]
        try:
            with _transaction(self._db):
                also(self._db)
                self._commit_groups(self._mem_groups)
                self._db.executemany(
                    "INSERT INTO outbox (key, receiver, group_key, payload, status, attempts, next_attempt_at,"
                    " created, last_error, done_at) VALUES (?,?,?,?,?,?,?,?,?,?) ON CONFLICT (key) DO UPDATE SET"
                    " status = excluded.status, attempts = excluded.attempts, next_attempt_at ="
                    " excluded.next_attempt_at, last_error = excluded.last_error, done_at = excluded.done_at",
                    rows,
                )
                self._commit_log(self._mem_log)
        except sqlite3.Error as exc:
            if self._db.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    self._db.execute("ROLLBACK")
            self.unsaved = str(exc) or type(exc).__name__
            log.debug("state directory %s: still not writable (%s)", self.directory, self.unsaved)
            return
        log.warning(
            "the state directory %s is written again: %d notifications and the alert states saved",
            self.directory,
            len(rows),
        )
        self._mem, self._mem_log, self._mem_groups, self.unsaved = None, {}, {}, None
        with contextlib.suppress(sqlite3.Error):
            self._db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")

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
        delivered or failed before it; return how many log entries went (none while in memory)."""
        if self._mem is not None:
            return 0
        try:
            with _transaction(self._db):
                cur = self._db.execute("DELETE FROM nflog WHERE firing = '[]' AND sent_at < ?", (before,))
                self._db.execute("DELETE FROM outbox WHERE status != 'pending' AND done_at < ?", (before,))
        except sqlite3.Error as exc:
            self._spill(exc)
            return 0
        return cur.rowcount

    def due(self, now: float) -> list[OutboxRow]:
        """Pending notifications whose next attempt is due, oldest first.

        Only the oldest pending notification of each group and receiver is offered, so a receiver
        never hears a group's resolution before the firing notification that is still being retried.
        """
        if self._mem is not None:
            return sorted((r for r in self._heads() if r.next_attempt_at <= now), key=_order)
        return self._rows(f"WHERE status = 'pending' AND next_attempt_at <= ? AND {_HEAD}", (now,))

    def rows(self, status: str | None = None) -> list[OutboxRow]:
        """Every row (or those with `status`), oldest first."""
        if self._mem is not None:
            try:
                on_disk = {r.key: r for r in self._rows("", ())}
            except sqlite3.Error:
                on_disk = {}
            every = on_disk | self._mem
            return sorted((r for r in every.values() if status is None or r.status == status), key=_order)
        if status is None:
            return self._rows("", ())
        return self._rows("WHERE status = ?", (status,))

    def next_due(self) -> float | None:
        """When the earliest pending notification is due, or None."""
        if self._mem is not None:
            return min((r.next_attempt_at for r in self._heads()), default=None)
        (t,) = self._db.execute(
            f"SELECT MIN(next_attempt_at) FROM outbox AS o WHERE status = 'pending' AND {_HEAD}"
        ).fetchone()
        return None if t is None else float(t)

    def _heads(self) -> list[OutboxRow]:
        """In memory: the oldest pending row of each receiver and group (as `_HEAD` picks on disk)."""
        assert self._mem is not None
        heads: dict[tuple[str, str], OutboxRow] = {}
        for row in self._mem.values():  # in the order they were planned
            if row.status == "pending":
                head = heads.setdefault((row.receiver, row.notification.group_key), row)
                if row.notification.created < head.notification.created:
                    heads[(row.receiver, row.notification.group_key)] = row
        return list(heads.values())

    def mark_delivered(self, key: str, now: float) -> None:
        """Record a successful delivery (counted as an attempt)."""
        self._update(
            key,
            "status = 'delivered', attempts = attempts + 1, done_at = ?",
            (now,),
            lambda r: replace(r, status="delivered", attempts=r.attempts + 1, done_at=now),
        )

    def mark_failed(self, key: str, error: str, now: float) -> None:
        """Record a failure a retry can't fix; the row is never tried again."""
        self._update(
            key,
            "status = 'failed', attempts = attempts + 1, last_error = ?, done_at = ?",
            (error, now),
            lambda r: replace(r, status="failed", attempts=r.attempts + 1, last_error=error, done_at=now),
        )

    def mark_retry(self, key: str, error: str, next_attempt_at: float) -> None:
        """Record a failed attempt to be retried at `next_attempt_at`."""
        self._update(
            key,
            "attempts = attempts + 1, last_error = ?, next_attempt_at = ?",
            (error, next_attempt_at),
            lambda r: replace(r, attempts=r.attempts + 1, last_error=error, next_attempt_at=next_attempt_at),
        )

    def defer(self, key: str, next_attempt_at: float) -> None:
        """Move the next attempt later without counting an attempt (rate limits)."""
        self._update(
            key, "next_attempt_at = ?", (next_attempt_at,), lambda r: replace(r, next_attempt_at=next_attempt_at)
        )

    def _update(
        self, key: str, assignments: str, params: tuple[object, ...], change: Callable[[OutboxRow], OutboxRow]
    ) -> None:
        if self._mem is None:
            try:
                with _transaction(self._db):
                    self._db.execute(
                        f"UPDATE outbox SET {assignments} WHERE key = ? AND status = 'pending'", (*params, key)
                    )
                return
            except sqlite3.Error as exc:
                self._spill(exc)
        assert self._mem is not None
        row = self._mem.get(key)
        if row is not None and row.status == "pending":
            self._mem[key] = change(row)

    def _rows(self, where: str, params: tuple[object, ...]) -> list[OutboxRow]:
        sql = (
            "SELECT payload, status, attempts, next_attempt_at, last_error, done_at FROM outbox AS o "
            f"{where} ORDER BY next_attempt_at, created, key"
        )
        return [
            OutboxRow(codec.loads(p), st, at, nxt, err, done)
            for p, st, at, nxt, err, done in self._db.execute(sql, params)
        ]


def _row_values(r: OutboxRow) -> tuple[object, ...]:
    n = r.notification
    payload = codec.dumps(n)
    return (
        r.key,
        r.receiver,
        n.group_key,
        payload,
        r.status,
        r.attempts,
        r.next_attempt_at,
        n.created,
        r.last_error,
        r.done_at,
    )


def _order(row: OutboxRow) -> tuple[float, float, str]:
    return (row.next_attempt_at, row.notification.created, row.key)


class _transaction:
    """BEGIN IMMEDIATE ... COMMIT (ROLLBACK on error) on an autocommit connection."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: object, *_: object) -> None:
        if exc_type is None:
            self.db.execute("COMMIT")
        elif self.db.in_transaction:  # (SQLite may have rolled back already: a full disk)
            with contextlib.suppress(sqlite3.Error):
                self.db.execute("ROLLBACK")


_CORRUPT = ("file is not a database", "malformed", "corrupt")
WAL_AUTOCHECKPOINT_PAGES = 16384
"""Pages (4 KiB) the write-ahead log may hold before a commit copies it into the database itself: a safety net.
The service checkpoints at its housekeeping, off the event loop (`Outbox.checkpoint`), so that no commit on the
way from a sample to its notification waits for a checkpoint's writes and fsync (5-6 ms, once every ~250
commits at SQLite's default of 1,000 pages)."""


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
        db.execute(f"PRAGMA wal_autocheckpoint={WAL_AUTOCHECKPOINT_PAGES}")
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
