"""The state directory, kept: the outbox and the silences, and the alert states and source cursors committed in
the same transaction as the plans (`alertd.dispatch.outbox`, `alertd.persist`).

A source's cursor is taken only while it is quiet (none of its polls runs, all it read is ingested), so a
cursor never runs ahead of what was evaluated: the commit of the transitions a poll's samples made carries the
cursor of that poll; a read that brought samples and made no transition is committed within CURSOR_SAVE_AFTER;
the cursor owed is taken before the source's next read starts. After a restart, what a source reads again that
the saved alert states had evaluated is left out (`alertd.rules.carry.unseen`), so nothing is judged twice.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from alertd.clock import Clock
from alertd.config import Config
from alertd.dispatch.outbox import Outbox, StateDirError
from alertd.dispatch.silences import SilenceStore
from alertd.model import Sample, SeriesKey
from alertd.persist import Snapshot, StateStore
from alertd.rules.carry import Seen, fingerprint, restored, rule_fingerprints, seen_before, unseen
from alertd.rules.evaluate import PairKey
from alertd.service.engine import Engine, log
from alertd.sources.base import Resumable, Source

STATE_SAVED = "alertd.state.saved"
"""1 while the state directory takes every commit, 0 while it can't be written and alerting goes on from memory
(appended when it changes; the series appears with the first failure): the default rule state_not_saved."""
RECORD = "record:"
"""The prefix of the keys of `save_record` in the meta table."""
SAVE_EVERY = 10.0
"""Seconds between two commits of the alert states and cursors when no evaluation made a transition (one
that did is committed at once, with what it planned and the cursor of the source whose samples made it)."""
CURSOR_SAVE_AFTER = 1.0
"""Seconds after a read that brought samples and made no transition by which the next evaluation commits its
source's cursor, with the alert states those samples made: a crash reads again at most this much, and what the
saved state had evaluated of it is left out (`alertd.rules.carry.unseen`), so it plans nothing new. Longer
where writing the states takes long (thousands of series changing at once): SAVE_SHARE."""
SAVE_SHARE = 0.05
"""At most this share of the time goes to writing the alert states for the cursors' sake (CURSOR_SAVE_AFTER is
stretched to the last write's duration divided by it)."""


class StateKeeper:
    """The state directory and what is committed to it. `busy(name)`: whether a poll of that source runs."""

    def __init__(self, directory: Path, clock: Clock, busy: Callable[[str], bool]) -> None:
        self.directory = directory
        self.clock = clock
        self._busy = busy
        self.outbox = Outbox(directory)  # StateDirError: the state directory can't be used
        try:
            self.silences = SilenceStore(directory)
            self.store = StateStore(self.outbox.db, legacy=directory / "state.db")
        except (sqlite3.Error, OSError) as exc:
            self.outbox.close()
            raise StateDirError(f"state directory {directory}: {exc}") from None
        self._cursors: dict[str, tuple[str, Any]] = {}
        self._cursor_due: set[str] = set()
        """Sources that read something since their cursor was last taken."""
        self._ingesting: dict[str, int] = {}
        """Per source, polls that returned and whose samples are not ingested yet."""
        self._cursor_owed: set[str] = set()
        """Sources whose ingested samples their cursor taken does not cover: taken before their next read starts."""
        self._save_took = 0.0
        """Seconds the last commit of the alert states and cursors took to write them."""
        self._seen: Seen = {}
        """Per series, the last sample the restored state evaluated: what a source reads again is left out."""
        self._source_fps: dict[str, tuple[Config, str]] = {}
        """Per source, its configuration's fingerprint (and the configuration it is of)."""
        self._next_save = float("-inf")
        self._saved_shown: float | None = None
        """The last value of `alertd.state.saved` appended (None: none yet)."""

    # restart

    def restore(self, engine: Engine, sources: Mapping[str, Source]) -> None:
        """Take up the alert states and source cursors saved by the previous run."""
        tracks = self.store.load_tracks(rule_fingerprints(engine.ruleset))
        engine.state = restored(tracks, engine.ruleset, engine.buffer)
        self._seen = seen_before(tracks)
        cursors = self.store.load_cursors()
        for name, source in sources.items():
            saved = cursors.get(name)
            if saved and isinstance(source, Resumable) and saved[0] == config_fp(engine.config, name):
                source.restore(saved[1])
                self._cursors[name] = saved
        if tracks or cursors:
            log.info("state restored: %d alert states, %d source cursors", len(tracks), len(cursors))

    def unseen(self, samples: list[Sample]) -> list[Sample]:
        """`samples` without what the restored state evaluated already (a source reading again after a restart)."""
        return unseen(samples, self._seen) if self._seen else samples

    # cursors, as the polls go

    def before_read(self, name: str, source: Source, config: Config) -> None:
        """A read of `name` starts: what it read so far is evaluated; a commit while it reads on keeps that cursor."""
        if name in self._cursor_owed and not self._ingesting.get(name):
            self.take_cursor(name, source, config)

    def read_done(self, name: str) -> None:
        """A poll of `name` returned samples that are not ingested yet."""
        self._ingesting[name] = self._ingesting.get(name, 0) + 1

    def ingested(self, name: str, samples: bool) -> None:
        """A poll's samples are in the buffer, or go there in the evaluation that follows at once: the source's
        cursor may be taken from now on, by the commit of the transitions they make (the same transaction),
        else by the next commit, at the latest before the source's next read starts (`samples`: it brought some)."""
        if self._ingesting.get(name):
            self._ingesting[name] -= 1
            self._cursor_due.add(name)
            if samples:
                self._cursor_owed.add(name)
                after = max(CURSOR_SAVE_AFTER, self._save_took / SAVE_SHARE)
                self._next_save = min(self._next_save, self.clock.now() + after)

    def take_cursor(self, name: str, source: Source, config: Config) -> None:
        """Note how far `source` has read: at a commit, or before its next read starts, while none of its polls
        runs and all it read is ingested (its lock is free, its reading done). A source hands the same cursor
        while it has read nothing new."""
        if isinstance(source, Resumable):
            fp = self._source_fps.get(name)
            if fp is None or fp[0] is not config:
                fp = self._source_fps[name] = (config, config_fp(config, name) or "")
            self._cursors[name] = (fp[1], source.cursor())
        self._cursor_due.discard(name)
        self._cursor_owed.discard(name)

    # commits

    def save_due(self, now: float) -> bool:
        """Whether the next commit should write the alert states and cursors (SAVE_EVERY, a cursor owed)."""
        return now >= self._next_save

    def writer(self, engine: Engine, sources: Mapping[str, Source]) -> Callable[[sqlite3.Connection], None]:
        """What a commit writes beside its plan: the alert states that changed and the cursors of quiet sources."""
        self._next_save = self.clock.now() + SAVE_EVERY
        for name in list(self._cursor_due):  # not of a source reading now, or whose samples await their turn
            if name in sources and not self._busy(name) and not self._ingesting.get(name):
                self.take_cursor(name, sources[name], engine.config)
            elif name not in sources:
                self._cursor_due.discard(name)
        cursors = {n: c for n, c in self._cursors.items() if n in sources}
        dirty = frozenset(engine.dirty) if engine.dirty is not None else None
        parked = engine.state.take_parked()  # the parked pairs that noted samples: not in `written`
        dirty = dirty | parked if dirty is not None else None
        snap = Snapshot(engine.state.tracks, rule_fingerprints(engine.ruleset), cursors, self.clock.now(), dirty)
        engine.dirty = set()  # from here on; `failed()` makes the next commit compare everything
        write = self.store.writer(snap)

        def timed(db: sqlite3.Connection) -> None:
            began = time.perf_counter()
            write(db)
            self._save_took = time.perf_counter() - began

        return timed

    def save(self, engine: Engine, sources: Mapping[str, Source]) -> None:
        """Commit the alert states and source cursors now (no plan: nothing new is due)."""
        self.outbox.commit_plan((), {}, also=self.writer(engine, sources))
        self.saved()

    def save_record(self, key: str, value: str | None, engine: Engine, sources: Mapping[str, Source]) -> None:
        """Commit `value` under `key` (None: delete it) in the same transaction as the alert states and cursors:
        what a recovery decided is never saved without the alert state that made it, nor the other way round."""
        write = self.writer(engine, sources)

        def both(db: sqlite3.Connection) -> None:
            write(db)
            if value is None:
                db.execute("DELETE FROM meta WHERE key = ?", (RECORD + key,))
            else:
                db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (RECORD + key, value))

        self.outbox.commit_plan((), {}, also=both)
        self.saved()

    def record(self, key: str) -> str | None:
        """The value committed under `key`, or None."""
        row = self.store.db.execute("SELECT value FROM meta WHERE key = ?", (RECORD + key,)).fetchone()
        return str(row[0]) if row is not None else None

    def saved(self) -> None:
        """After a commit: the state store remembers what it wrote; where the directory could not take it (the
        outbox went on in memory: `Outbox.unsaved`), the next commit that gets through writes everything."""
        if self.outbox.unsaved is None:
            self.store.committed()
        else:
            self.store.failed()

    def failed(self) -> None:
        """A commit failed outright: the next one compares everything."""
        self.store.failed()

    def saved_series(self, now: float, active: frozenset[PairKey]) -> list[Sample]:
        """`alertd.state.saved` when it changes: none while all is well from the start (unless an alert restored
        from an earlier run is on it, which needs the 1 to end)."""
        value = 1.0 if self.outbox.unsaved is None and self.silences.unsaved is None else 0.0
        if self._saved_shown is None and value == 1.0 and not any(key.metric == STATE_SAVED for _, key in active):
            self._saved_shown = 1.0
        if value == self._saved_shown:
            return []
        self._saved_shown = value
        return [Sample(SeriesKey(STATE_SAVED, ()), now, None, value)]

    def close(self) -> None:
        """Close the state directory's databases."""
        self.silences.close()
        self.outbox.close()


def config_fp(config: Config, name: str) -> str | None:
    """The fingerprint of source `name`'s configuration (None: no such source): a cursor is of one configuration."""
    cfg = next((s for s in config.sources if s.name == name), None)
    return None if cfg is None else fingerprint(cfg.model_dump_json())
