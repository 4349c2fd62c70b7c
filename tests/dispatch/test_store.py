"""The outbox, its JSON form, the state directory and the silence store, on real files."""

from __future__ import annotations

import contextlib
import math
import shutil
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest

from alertd.dispatch import codec
from alertd.dispatch.matchers import Matcher, Silence
from alertd.dispatch.outbox import Outbox, StateDirLocked, state_dir
from alertd.dispatch.plan import LogEntry
from alertd.dispatch.silences import SilenceStore, new_silence_id
from alertd.model import Notification

from .helpers import FIRING, RESOLVED, tr


def _note(key: str, created: float = 0.0, group: str = "{}:{}") -> Notification:
    alerts = (
        tr("nan", FIRING, 1.5, value=math.nan),
        tr("big", FIRING, 2.0, value=math.inf, notify=("stop",)),
        tr("small", RESOLVED, 3.0, value=-math.inf),
    )
    return Notification("hook", group, (("run", "r1"),), "firing", alerts, key, created)


def test_notifications_round_trip_through_strict_json_with_nan_and_inf() -> None:
    n = _note("k1")
    text = codec.dumps(n)
    assert "NaN" in text and '"+Inf"' in text and '"-Inf"' in text
    back = codec.loads(text)
    assert math.isnan(back.alerts[0].value) and back.alerts[1].value == math.inf
    assert back.alerts[2].value == -math.inf
    assert back.alerts[1:] == n.alerts[1:]
    assert (back.key, back.group_labels, back.alerts[1].notify) == ("k1", (("run", "r1"),), ("stop",))


def test_an_open_group_with_odd_times_round_trips_instead_of_failing_the_commit() -> None:
    a, b = tr("nan", FIRING, 5.0), tr("nan", FIRING, 6.0, run="r2")
    odd = {
        "a": replace(a, time=-math.inf),
        "b": replace(b, time=math.nan, active_at=math.inf),
        "c": tr("nan", FIRING, 7.0, value=1.0),
    }
    text = codec.group_to_json("{}", (("rule", "nan"),), odd, math.inf)
    assert "Infinity" not in text  # strict JSON
    route, labels, alerts, next_flush = codec.group_from_json(text)
    assert (route, labels, next_flush) == ("{}", (("rule", "nan"),), math.inf)
    assert alerts["a"].time == -math.inf and math.isnan(alerts["b"].time) and alerts["b"].active_at == math.inf
    assert alerts["c"] == odd["c"]


def test_state_dir_honours_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("ALERTD_STATE_DIR", raising=False)
    assert state_dir() == Path("./.state")
    assert state_dir(tmp_path) == tmp_path
    monkeypatch.setenv("ALERTD_STATE_DIR", str(tmp_path / "s"))
    assert state_dir("./.state") == tmp_path / "s"


def test_outbox_keeps_plans_and_log_across_reopen_and_ignores_a_replanned_key(tmp_path: Path) -> None:
    box = Outbox(tmp_path / "state")
    entry = LogEntry(frozenset({"a", "b"}), frozenset({"c"}), 5.0, 2)
    assert box.commit_plan([_note("k1", 5.0, "a"), _note("k2", 5.0, "b")], {("g", "hook"): entry}) == 2
    assert box.commit_plan([_note("k1", 6.0)], {}) == 0
    box.close()
    again = Outbox(tmp_path / "state")
    assert [r.key for r in again.due(5.0)] == ["k1", "k2"]
    assert again.due(4.0) == []
    assert again.load_log() == {("g", "hook"): entry}
    again.mark_delivered("k1", 7.0)
    again.mark_retry("k2", "HTTP 503", 9.0)
    assert again.next_due() == 9.0
    (row,) = again.rows("pending")
    assert (row.key, row.attempts, row.last_error) == ("k2", 1, "HTTP 503")
    again.mark_failed("k1", "late", 10.0)  # a delivered row stays delivered
    assert [r.status for r in again.rows()] == ["delivered", "pending"]
    again.close()


def test_a_newer_notification_of_a_group_waits_for_the_older_one(tmp_path: Path) -> None:
    box = Outbox(tmp_path)
    box.commit_plan([_note("old", 0.0, "g"), _note("new", 60.0, "g"), _note("other", 60.0, "h")], {})
    box.mark_retry("old", "HTTP 503", 100.0)
    assert [r.key for r in box.due(60.0)] == ["other"]
    assert box.next_due() == 60.0
    box.mark_delivered("other", 60.0)
    assert box.next_due() == 100.0
    assert [r.key for r in box.due(100.0)] == ["old"]
    box.mark_delivered("old", 100.0)
    assert [r.key for r in box.due(100.0)] == ["new"]
    box.close()


def test_one_writer_per_state_directory(tmp_path: Path) -> None:
    box = Outbox(tmp_path)
    with pytest.raises(StateDirLocked, match="another alertd process"):
        Outbox(tmp_path)
    box.close()
    Outbox(tmp_path).close()


def test_prune_forgets_only_old_resolved_groups(tmp_path: Path) -> None:
    box = Outbox(tmp_path)
    box.commit_plan(
        [],
        {
            ("old", "r"): LogEntry(frozenset(), frozenset({"x"}), 1.0),
            ("firing", "r"): LogEntry(frozenset({"y"}), frozenset(), 1.0),
            ("new", "r"): LogEntry(frozenset(), frozenset({"z"}), 100.0),
        },
    )
    assert box.prune_log(before=50.0) == 1
    assert sorted(box.load_log()) == [("firing", "r"), ("new", "r")]
    box.close()


def test_silence_store_persists_and_expires(tmp_path: Path) -> None:
    store = SilenceStore(tmp_path)
    sid = new_silence_id()
    s = Silence(sid, (Matcher.parse('run=~"exp.*"'),), 0.0, 100.0, created_by="ana", comment="tuning")
    store.add(s)
    future = store.add(Silence("later", (Matcher.parse("rule=x"),), 50.0, 80.0))
    assert [x.id for x in store.active(10.0)] == [sid]
    store.close()
    reopened = SilenceStore(tmp_path)
    assert reopened.get(sid) == s
    assert reopened.expire(sid, 30.0).state(30.0) == "expired"
    assert reopened.expire("later", 30.0).state(60.0) == "expired"  # a pending silence never starts
    assert reopened.active(60.0) == []
    assert future.state(60.0) == "active"
    with pytest.raises(KeyError):
        reopened.expire("nope", 1.0)
    assert reopened.prune(before=1000.0) == 2
    reopened.close()
    assert SilenceStore(tmp_path).list() == []


def test_a_resolution_waiting_for_group_interval_survives_reopening_the_outbox(tmp_path: Path) -> None:
    from alertd.dispatch.dispatcher import Dispatcher

    from .helpers import route

    root = route({"receivers": ["c"], "group_wait": "0s", "group_interval": "1m"})
    box = Outbox(tmp_path)
    first = Dispatcher(route=root, outbox=box, notifiers={})
    first.submit([tr("hot", FIRING, 0.0)], None, 0.0)
    first.submit([tr("hot", RESOLVED, 10.0)], None, 10.0)  # waits for the group's next flush at 60
    assert first.next_wakeup() == 0.0  # the firing notification is due
    box.close()

    box = Outbox(tmp_path)  # a restart
    again = Dispatcher(route=root, outbox=box, notifiers={})
    assert [r.notification.status for r in box.rows()] == ["firing"]
    plan = again.submit([], None, 60.0)
    assert [n.status for n in plan.notifications] == ["resolved"]
    assert [r.notification.status for r in box.rows()] == ["firing", "resolved"]
    box.close()


def test_a_checkpoint_puts_the_committed_plans_in_the_database_file_itself(tmp_path: Path) -> None:
    """Commits go to the write-ahead log (no commit on the way to a notification copies it: that is the
    housekeeping's `checkpoint`, in a worker thread); after a checkpoint the database file alone holds them."""
    outbox = Outbox(tmp_path / "state")
    try:
        outbox.commit_plan([_note(f"k{i}") for i in range(50)], {})

        def copied_rows(name: str) -> int:
            copy = tmp_path / name
            copy.mkdir()
            shutil.copy(tmp_path / "state" / "alertd.db", copy / "alertd.db")  # the file alone, not its -wal
            with contextlib.closing(sqlite3.connect(copy / "alertd.db")) as db:
                if not db.execute("SELECT count(*) FROM sqlite_master WHERE name = 'outbox'").fetchone()[0]:
                    return 0  # not even the tables: everything is in the log
                return int(db.execute("SELECT count(*) FROM outbox").fetchone()[0])

        assert copied_rows("before") == 0  # still in the log
        outbox.checkpoint()
        assert copied_rows("after") == 50
        assert len(outbox.rows()) == 50
    finally:
        outbox.close()


def test_a_checkpoint_of_a_database_deleted_meanwhile_creates_nothing(tmp_path: Path) -> None:
    outbox = Outbox(tmp_path / "state")
    try:
        for name in ("alertd.db", "alertd.db-wal", "alertd.db-shm"):
            (tmp_path / "state" / name).unlink(missing_ok=True)
        outbox.checkpoint()  # logged at debug level, never raised
        assert not (tmp_path / "state" / "alertd.db").exists()
    finally:
        outbox.close()
