"""The state store writes only the tracks that changed since its last commit, and what it holds is then
exactly what a full comparison would have written: reloading gives the tracks worth keeping."""

from __future__ import annotations

import itertools
import json
import sqlite3

from hypothesis import given, settings
from hypothesis import strategies as st
from test_properties import RULES, build, stream

from alertd.buffer import BufferLimits, SeriesBuffer
from alertd.persist import Snapshot, StateStore, _track_data, _worth_keeping
from alertd.rules import RuleSet
from alertd.rules.carry import rule_fingerprints
from alertd.rules.evaluate import EvalState, evaluate


@settings(max_examples=60, deadline=None)
@given(spec=stream, cuts=st.lists(st.integers(0, 60), max_size=6), commits=st.lists(st.booleans(), min_size=8))
def test_committing_only_the_changed_tracks_keeps_the_store_equal_to_the_state(spec, cuts, commits) -> None:  # type: ignore[no-untyped-def]
    ruleset, buffer = RuleSet(RULES), SeriesBuffer(BufferLimits(max_samples=64, max_age=1e6))
    fps = rule_fingerprints(ruleset)
    store = StateStore(sqlite3.connect(":memory:"))
    state, dirty = EvalState(), None
    data = build(spec)
    points = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    for (a, b), commit in zip(itertools.pairwise(points), itertools.cycle(commits), strict=False):
        buffer.append(data[a:b], data[b - 1].time if b > a else 0.0)
        ev = evaluate(ruleset, buffer, data[b - 1].time + 5 if b > a else 0.0, state)
        state = ev.state
        dirty = None if dirty is None else dirty | ev.state.written
        if commit:
            snap = Snapshot(state.tracks, fps, {}, 0.0, None if dirty is None else frozenset(dirty))
            with store.db:
                store.writer(snap)(store.db)
            store.committed()
            dirty = set()
    with store.db:
        store.writer(Snapshot(state.tracks, fps, {}, 0.0, None if dirty is None else frozenset(dirty)))(store.db)
    store.committed()
    expected = {p: json.dumps(_track_data(t)) for p, t in state.tracks.items() if _worth_keeping(t)}  # NaN as text
    assert expected  # the rules did keep some tracks
    assert {p: json.dumps(_track_data(t)) for p, t in store.load_tracks(fps).items()} == expected


def test_a_cursor_of_many_files_is_written_file_by_file_and_read_back_whole() -> None:
    store = StateStore(sqlite3.connect(":memory:"))

    def commit(cursors: dict[str, tuple[str, object]]) -> int:
        before = store.db.total_changes
        with store.db:
            store.writer(Snapshot({}, {}, cursors, 0.0, frozenset()))(store.db)
        store.committed()
        return store.db.total_changes - before

    files = {f"run{i}/events.out.tfevents.{i}": [i * 100, 4096, i] for i in range(1000)}
    assert commit({"tb": ("fp", files), "s": ("fp2", {"offset": 5, "line": 1})}) > 1000
    moved = dict(files)
    moved["run7/events.out.tfevents.7"] = [999, 4096, 7]
    del moved["run8/events.out.tfevents.8"]
    rows = commit({"tb": ("fp", moved), "s": ("fp2", {"offset": 5, "line": 1})})
    assert rows <= 4  # the file that moved, the file gone, the time of the commit: not 1,000 rows
    assert store.load_cursors() == {"tb": ("fp", moved), "s": ("fp2", {"offset": 5, "line": 1})}
    store.db.execute("INSERT OR REPLACE INTO cursors VALUES ('old', 'fp3', '[1, 2]')")  # an earlier version's
    assert store.load_cursors()["old"] == ("fp3", [1, 2])


@settings(max_examples=60, deadline=None)
@given(spec=stream, commits=st.lists(st.booleans(), min_size=8), changed=st.integers(0, 60))
def test_the_service_ticks_and_a_changed_rule_keep_the_store_equal_to_the_state(spec, commits, changed) -> None:  # type: ignore[no-untyped-def]
    """One sample per evaluation, the state handed over (`in_place`: a steady track is noted on in place, the same
    object; a quiet one is parked, `rules/parking.py`, its notes told at the commit as `StateKeeper.writer` asks
    for them), and one rule's definition changed midway (its fingerprint: the commit then compares every track):
    the store still ends up holding every track as it is."""
    ruleset, buffer = RuleSet(RULES), SeriesBuffer(BufferLimits(max_samples=64, max_age=1e6))
    fps = rule_fingerprints(ruleset)
    store = StateStore(sqlite3.connect(":memory:"))
    state, dirty = EvalState(), None
    data = build(spec)
    for k, (s, commit) in enumerate(zip(data, itertools.cycle(commits), strict=False)):
        buffer.append([s], s.time)
        state = evaluate(ruleset, buffer, s.time, state, in_place=True, park=True).state
        dirty = None if dirty is None else dirty | state.written
        if k == changed % len(data):
            fps = {**fps, "hi": "changed"}
        if commit or k == changed % len(data):
            dirty = None if dirty is None else dirty | state.take_parked()  # as `StateKeeper.writer`
            with store.db:
                store.writer(Snapshot(state.tracks, fps, {}, 0.0, None if dirty is None else frozenset(dirty)))(
                    store.db
                )
            store.committed()
            dirty = set()
    dirty = None if dirty is None else dirty | state.take_parked()
    with store.db:
        store.writer(Snapshot(state.tracks, fps, {}, 0.0, None if dirty is None else frozenset(dirty)))(store.db)
    store.committed()
    expected = {p: json.dumps(_track_data(t)) for p, t in state.tracks.items() if _worth_keeping(t)}
    assert expected
    assert {p: json.dumps(_track_data(t)) for p, t in store.load_tracks(fps).items()} == expected
