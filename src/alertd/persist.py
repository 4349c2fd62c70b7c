"""State that survives a restart: alert tracks (pending, firing, absent watches, streaks) and source cursors.

Stored in `state.db` (SQLite) in the state directory, beside the outbox. A track is restored only for a
rule whose definition is unchanged (its config's fingerprint is stored with it). Restored tracks start
at position 0 of the new, empty buffer; the sources resume from their cursors, so old data is not read
again, a firing alert does not fire again, and a pending `for:` keeps its start time.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from alertd.model import AlertState, SeriesKey
from alertd.rules.evaluate import PairKey
from alertd.rules.state import Track

log = logging.getLogger(__name__)
VERSION = 1
_FIELDS = ("streak", "cond", "clock", "active_at", "fired_at", "keep_since", "last_time", "step", "time")


class StateStore:
    """Reads and writes `state.db`."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / "state.db"
        self.db = sqlite3.connect(self.path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.executescript(
            """
            CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
            CREATE TABLE IF NOT EXISTS tracks (rule TEXT, rule_fp TEXT, series TEXT, data TEXT,
                                               PRIMARY KEY (rule, series));
            CREATE TABLE IF NOT EXISTS cursors (source TEXT PRIMARY KEY, config_fp TEXT, data TEXT);
            """
        )

    def close(self) -> None:
        """Close the database."""
        self.db.close()

    def save(
        self,
        tracks: Mapping[PairKey, Track],
        rule_fps: Mapping[str, str],
        cursors: Mapping[str, tuple[str, Any]],
        now: float,
    ) -> None:
        """Replace the stored state with this one, in one transaction."""
        rows = [
            (name, rule_fps[name], _series_json(key), json.dumps(_track_data(tr), allow_nan=True))
            for (name, key), tr in tracks.items()
            if name in rule_fps and _worth_keeping(tr)
        ]
        with self.db:
            self.db.execute("BEGIN")
            self.db.execute("DELETE FROM tracks")
            self.db.executemany("INSERT INTO tracks VALUES (?, ?, ?, ?)", rows)
            self.db.execute("DELETE FROM cursors")
            self.db.executemany(
                "INSERT INTO cursors VALUES (?, ?, ?)", [(n, fp, json.dumps(c)) for n, (fp, c) in cursors.items()]
            )
            self.db.execute("INSERT OR REPLACE INTO meta VALUES ('version', ?), ('saved_at', ?)", (VERSION, now))

    def load_tracks(self, rule_fps: Mapping[str, str]) -> dict[PairKey, Track]:
        """The stored tracks of rules whose definition is unchanged."""
        out: dict[PairKey, Track] = {}
        for rule, fp, series, data in self.db.execute("SELECT rule, rule_fp, series, data FROM tracks"):
            if rule_fps.get(rule) != fp:
                continue
            try:
                out[(rule, _series_key(series))] = _track(json.loads(data))
            except (ValueError, KeyError, TypeError) as exc:
                log.warning("state.db: dropped an unreadable alert state of rule %s: %s", rule, exc)
        return out

    def load_cursors(self) -> dict[str, tuple[str, Any]]:
        """The stored source cursors by source name, each with the fingerprint of the source's config."""
        out = {}
        for name, fp, data in self.db.execute("SELECT source, config_fp, data FROM cursors"):
            try:
                out[name] = (fp, json.loads(data))
            except ValueError:
                log.warning("state.db: dropped an unreadable cursor of source %s", name)
        return out


def _worth_keeping(tr: Track) -> bool:
    return tr.state is not AlertState.INACTIVE or tr.streak > 0 or tr.last_time is not None


def _series_json(key: SeriesKey) -> str:
    return json.dumps([key.metric, list(key.labels)])


def _series_key(text: str) -> SeriesKey:
    metric, labels = json.loads(text)
    return SeriesKey(str(metric), tuple((str(k), str(v)) for k, v in labels))


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
