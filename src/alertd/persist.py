"""State that survives a restart: alert tracks (pending, firing, absent watches, streaks) and source cursors.

Stored in the outbox's database (`alertd.db` in the state directory) and written in the same transaction
as the plans (`Outbox.commit_plan(..., also=store.writer(...))`): what was evaluated, what is due and how
far each source has read are committed together, after every evaluation. Only what changed since the
last commit is written: the pairs the evaluations said they changed (the engine's `dirty`, from each
`EvalState.written`), and after a rule changed, each track that is not the object last written or is among
those pairs (a steady track's new sample is noted on it in place, `in_place`). A track is
restored only for a rule whose definition is unchanged (its config's fingerprint is stored with it).
Restored tracks start at position 0 of the new, empty buffer; the sources resume from their cursors, so
old data is not read again, a firing alert does not fire again, and a pending `for:` keeps its start time.
A cursor is taken only while its source's samples are all evaluated, so the one committed is never ahead of
the tracks committed with it; what a source reads again that the tracks had evaluated (a crash in the middle
of a large read) is left out after the restart (`alertd.rules.carry.unseen`).
A `state.db` left by an earlier version is read once and renamed `state.db.imported`.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alertd.model import AlertState, SeriesKey, make_labels
from alertd.rules.evaluate import PairKey
from alertd.rules.state import Track

log = logging.getLogger(__name__)
VERSION = 2
_FIELDS = ("streak", "cond", "clock", "active_at", "fired_at", "keep_since", "last_time", "step", "time")
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tracks (rule TEXT, rule_fp TEXT, series TEXT, data TEXT, PRIMARY KEY (rule, series));
CREATE TABLE IF NOT EXISTS cursors (source TEXT PRIMARY KEY, config_fp TEXT, data TEXT);
CREATE TABLE IF NOT EXISTS cursor_items (source TEXT, item TEXT, data TEXT, PRIMARY KEY (source, item));
"""
_ITEMS = '{"__items__": true}'
"""A cursor's `data` when the cursor is a mapping kept item by item in `cursor_items` (one row per file:
a commit writes the files whose position changed, not the position of every file)."""
_GONE = object()


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What the service commits with each plan: its alert tracks, their rules' fingerprints, the cursors."""

    tracks: Mapping[PairKey, Track]
    rule_fps: Mapping[str, str]
    cursors: Mapping[str, tuple[str, Any]]
    now: float
    dirty: frozenset[PairKey] | None = None
    """The pairs whose tracks changed since the last committed snapshot (None: compare them all)."""


class StateStore:
    """Reads and writes the tracks and cursors tables of the outbox's database."""

    def __init__(self, db: sqlite3.Connection, legacy: Path | None = None) -> None:
        self.db = db
        self.db.executescript(_SCHEMA)
        self._tracks: dict[PairKey, Track] = {}
        self._fps: dict[str, str] = {}
        self._cursors: dict[str, tuple[str, str, object]] = {}
        """Per source, the committed cursor: (config fingerprint, its JSON, the object it was made from)."""
        self._pending: tuple[dict[PairKey, Track], dict[str, str], dict[str, tuple[str, str, object]]] | None = None
        self._full = True
        if legacy is not None and legacy.exists():
            self._import(legacy)

    def writer(self, snap: Snapshot) -> Callable[[sqlite3.Connection], None]:
        """A writer of what changed since the last committed snapshot, for `Outbox.commit_plan(also=...)`.

        Call `committed()` after the transaction commits; on a failure the next writer rewrites everything.
        """

        def write(db: sqlite3.Connection) -> None:
            self._write(db, snap)

        return write

    def committed(self) -> None:
        """The last writer's transaction committed: remember what it wrote."""
        if self._pending is not None:
            self._tracks, self._fps, self._cursors = self._pending
            self._pending = None

    def failed(self) -> None:
        """The last writer's transaction rolled back: write everything next time."""
        self._pending = None
        self._tracks, self._fps, self._cursors = {}, {}, {}
        self._full = True

    def _write(self, db: sqlite3.Connection, snap: Snapshot) -> None:
        fps = dict(snap.rule_fps)
        if self._full:
            db.execute("DELETE FROM tracks")
            db.execute("DELETE FROM cursors")
            db.execute("DELETE FROM cursor_items")
            old_tracks: dict[PairKey, Track] = {}
            old_fps: dict[str, str] = {}
            old_cursors: dict[str, tuple[str, str, object]] = {}
        else:
            old_tracks, old_fps, old_cursors = self._tracks, self._fps, self._cursors
        if not self._full and snap.dirty is not None and fps == old_fps:
            kept = old_tracks  # only the pairs that changed: the cost follows the change (a failed commit
            # makes the next one write everything: `failed()`)
            upsert, gone = [], []
            for pair in snap.dirty:
                tr = snap.tracks.get(pair)
                if tr is not None and pair[0] in fps and _worth_keeping(tr):
                    kept[pair] = tr
                    upsert.append(
                        (pair[0], fps[pair[0]], _series_json(pair[1]), json.dumps(_track_data(tr), allow_nan=True))
                    )
                elif kept.pop(pair, None) is not None:
                    gone.append((pair[0], _series_json(pair[1])))
            db.executemany("DELETE FROM tracks WHERE rule = ? AND series = ?", gone)
            db.executemany("INSERT OR REPLACE INTO tracks VALUES (?, ?, ?, ?)", upsert)
        else:
            kept = {pair: tr for pair, tr in snap.tracks.items() if pair[0] in snap.rule_fps and _worth_keeping(tr)}
            gone = [(name, _series_json(key)) for name, key in old_tracks.keys() - kept.keys()]
            db.executemany("DELETE FROM tracks WHERE rule = ? AND series = ?", gone)
            dirty = snap.dirty  # a quiet track is noted on in place (`evaluate`, `in_place`): the same object,
            # changed, so the pairs said to have changed are written whatever their identity
            changed = [
                (name, fps[name], _series_json(key), json.dumps(_track_data(tr), allow_nan=True))
                for (name, key), tr in kept.items()
                if old_tracks.get((name, key)) is not tr
                or old_fps.get(name) != fps[name]
                or dirty is None
                or (name, key) in dirty
            ]
            db.executemany("INSERT OR REPLACE INTO tracks VALUES (?, ?, ?, ?)", changed)
        cursors: dict[str, tuple[str, str, object]] = {}
        for name, (fp, c) in snap.cursors.items():
            old = old_cursors.get(name)
            if old is not None and old[2] is c and old[0] == fp:
                cursors[name] = old  # a source hands the same object while its position is unchanged
            elif isinstance(c, dict) and all(type(k) is str for k in c):
                cursors[name] = (fp, _ITEMS, c)
                _write_items(db, name, c, old[2] if old is not None and old[1] == _ITEMS else None)
            else:
                cursors[name] = (fp, json.dumps(c), c)
                if old is not None and old[1] == _ITEMS:
                    db.execute("DELETE FROM cursor_items WHERE source = ?", (name,))
        for name in old_cursors.keys() - cursors.keys():
            db.execute("DELETE FROM cursors WHERE source = ?", (name,))
            db.execute("DELETE FROM cursor_items WHERE source = ?", (name,))
        for name, row in cursors.items():
            old = old_cursors.get(name)
            if old is None or old[:2] != row[:2]:
                db.execute("INSERT OR REPLACE INTO cursors VALUES (?, ?, ?)", (name, row[0], row[1]))
        db.execute("INSERT OR REPLACE INTO meta VALUES ('version', ?), ('saved_at', ?)", (VERSION, snap.now))
        self._full = False
        self._pending = (kept, fps, cursors)

    def load_tracks(self, rule_fps: Mapping[str, str]) -> dict[PairKey, Track]:
        """The stored tracks of rules whose definition is unchanged."""
        out: dict[PairKey, Track] = {}
        for rule, fp, series, data in self.db.execute("SELECT rule, rule_fp, series, data FROM tracks"):
            if rule_fps.get(rule) != fp:
                continue
            try:
                out[(rule, _series_key(series))] = _track(json.loads(data))
            except (ValueError, KeyError, TypeError) as exc:
                log.warning("state: dropped an unreadable alert state of rule %s: %s", rule, exc)
        return out

    def load_cursors(self) -> dict[str, tuple[str, Any]]:
        """The stored source cursors by source name, each with the fingerprint of the source's config."""
        out = {}
        for name, fp, data in list(self.db.execute("SELECT source, config_fp, data FROM cursors")):
            try:
                if data == _ITEMS:
                    rows = self.db.execute("SELECT item, data FROM cursor_items WHERE source = ?", (name,))
                    out[name] = (fp, {_item_name(item): json.loads(value) for item, value in rows})
                else:
                    out[name] = (fp, json.loads(data))
            except ValueError:
                log.warning("state: dropped an unreadable cursor of source %s", name)
        return out

    def _import(self, legacy: Path) -> None:
        """Take the tracks and cursors of an earlier version's `state.db`, once."""
        try:
            old = sqlite3.connect(f"file:{legacy}?mode=ro", uri=True)
            try:
                tracks = list(old.execute("SELECT rule, rule_fp, series, data FROM tracks"))
                cursors = list(old.execute("SELECT source, config_fp, data FROM cursors"))
            finally:
                old.close()
        except sqlite3.Error as exc:
            log.warning("%s: not imported (%s)", legacy, exc)
            return
        with self.db:
            self.db.execute("BEGIN")
            self.db.executemany("INSERT OR IGNORE INTO tracks VALUES (?, ?, ?, ?)", tracks)
            self.db.executemany("INSERT OR IGNORE INTO cursors VALUES (?, ?, ?)", cursors)
        os.replace(legacy, legacy.with_name(legacy.name + ".imported"))
        log.info("%s imported: %d alert states, %d source cursors", legacy, len(tracks), len(cursors))


def _worth_keeping(tr: Track) -> bool:
    return tr.state is not AlertState.INACTIVE or tr.streak > 0 or tr.last_time is not None


def _series_json(key: SeriesKey) -> str:
    return json.dumps([key.metric, list(key.labels)])


def _series_key(text: str) -> SeriesKey:
    metric, labels = json.loads(text)  # an earlier alertd's row may hold a lone surrogate: escaped, as sources do
    return SeriesKey(str(metric), make_labels((str(k), str(v)) for k, v in labels))


def _track_data(tr: Track) -> dict[str, Any]:
    data: dict[str, Any] = {name: getattr(tr, name) for name in _FIELDS}
    data["state"] = tr.state.value
    data["value"] = repr(tr.value)
    data["annotations"] = [list(a) for a in tr.annotations]
    return data


def _track(data: dict[str, Any]) -> Track:
    tr = Track()
    for name in _FIELDS:
        setattr(tr, name, data[name])
    tr.state = AlertState(data["state"])
    tr.value = float(data["value"])
    tr.annotations = tuple((str(k), str(v)) for k, v in data["annotations"])
    return tr


def _write_items(db: sqlite3.Connection, name: str, cursor: dict[str, Any], old: object) -> None:
    """Write a mapping cursor item by item: only the items that differ from the last committed one's."""
    if not isinstance(old, dict):
        db.execute("DELETE FROM cursor_items WHERE source = ?", (name,))
        old = {}
    changed = []
    for item, value in cursor.items():
        before = old.get(item, _GONE)
        if before is not value and before != value:
            changed.append((name, _item_key(item), json.dumps(value)))
    db.executemany("INSERT OR REPLACE INTO cursor_items VALUES (?, ?, ?)", changed)
    gone = old.keys() - cursor.keys()
    db.executemany("DELETE FROM cursor_items WHERE source = ? AND item = ?", [(name, _item_key(i)) for i in gone])


def _item_key(item: str) -> str | bytes:
    """A cursor item's name as SQLite takes it: the text, or where UTF-8 can't carry it (a file name with bytes
    that are not UTF-8, a surrogateescape'd str) its bytes, stored as a BLOB; `_item_name` reads either back."""
    if item.isascii():
        return item
    try:
        item.encode("utf-8")
    except UnicodeEncodeError:
        try:
            return item.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:
            return item.encode("utf-8", "surrogatepass")
    return item


def _item_name(item: str | bytes) -> str:
    return item.decode("utf-8", "surrogateescape") if isinstance(item, bytes) else item
