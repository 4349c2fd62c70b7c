"""A state directory alertd can't write any more does not stop the alerting: a real alertd whose database
another process holds locked (BEGIN EXCLUSIVE), or (as root) whose tmpfs fills up, still delivers each NaN
to a real webhook receiver, from memory; the default rule state_not_saved fires; once the directory works
again the state is written (the delivered notifications recorded) and the alert resolves."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from service_helpers import Alertd, fill_disk, tmpfs, wait_for

from alertd.testing.receiver import Receiver

REPO = Path(__file__).resolve().parents[2]
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root (CI runs as root)")


def _rules(tmp_path: Path, samples: Path, url: str) -> Path:
    """A samples source, a webhook, a NaN rule and the default rules' state_not_saved as shipped."""
    default = yaml.safe_load((REPO / "rules" / "default.yaml").read_text())
    shipped = next(r for r in default["rules"] if r["name"] == "state_not_saved")
    cfg = {
        "sources": [{"name": "s", "type": "samples", "path": str(samples), "interval": "0.2s"}],
        "notifiers": {"hook": {"type": "webhook", "url": url}},
        "route": {"receivers": ["hook"], "group_by": ["rule", "run"], "group_wait": "0s", "group_interval": "1s"},
        "rules": [{"name": "nan", "metric": "loss", "condition": "nonfinite"}, shipped],
    }
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _nan(samples: Path, run: str) -> None:
    line = {"metric": "loss", "labels": {"source": "s", "run": run}, "time": time.time(), "step": 1, "value": "NaN"}
    with samples.open("a") as f:
        f.write(json.dumps(line) + "\n")


def _got(receiver: Receiver, alertname: str, status: str, run: str | None = None) -> bool:
    with receiver.recorder.lock:
        bodies: list[Any] = list(receiver.recorder.bodies)
    return any(
        a["labels"].get("alertname") == alertname and a["status"] == status and a["labels"].get("run") == run
        for b in bodies
        for a in b["alerts"]
    )


def _delivered_on_disk(state: Path) -> list[str]:
    """The notifications the database records as delivered (read by another process, as a person would)."""
    with contextlib.closing(sqlite3.connect(f"file:{state / 'alertd.db'}?mode=ro", uri=True)) as db:
        return [k for (k,) in db.execute("SELECT key FROM outbox WHERE status = 'delivered'")]


@contextlib.contextmanager
def _locked(db: Path) -> Iterator[None]:
    """Another process holds the database's write lock (BEGIN EXCLUSIVE) until the block ends."""
    code = (
        "import sqlite3, sys; db = sqlite3.connect(sys.argv[1], isolation_level=None); "
        "db.execute('BEGIN EXCLUSIVE'); print('locked', flush=True); sys.stdin.read(); db.execute('COMMIT')"
    )
    locker = subprocess.Popen(
        [sys.executable, "-c", code, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert locker.stdout is not None and locker.stdout.readline().strip() == "locked"
        yield
    finally:
        assert locker.stdin is not None
        locker.communicate(timeout=10)  # stdin closed (the lock let go), stdout read to the end and closed


def test_a_locked_database_alerting_goes_on_from_memory_and_state_not_saved_fires_then_resolves(
    tmp_path: Path,
) -> None:
    samples = tmp_path / "samples.jsonl"
    samples.touch()
    receiver = Receiver()
    state = tmp_path / "state"
    alertd = Alertd(_rules(tmp_path, samples, receiver.url), state)
    try:
        alertd.wait_log("alertd started")
        with _locked(state / "alertd.db"):
            _nan(samples, "a")
            wait_for(lambda: _got(receiver, "nan", "firing", "a"), "run a's NaN to be delivered", 30, alertd)
            alertd.wait_log("alerting goes on from memory")
            assert "database is locked" in alertd.logs()
            wait_for(lambda: _got(receiver, "state_not_saved", "firing"), "state_not_saved to fire", 40, alertd)
            _nan(samples, "b")  # more while it lasts: delivered too
            wait_for(lambda: _got(receiver, "nan", "firing", "b"), "run b's NaN to be delivered", 30, alertd)
        alertd.wait_log("is written again", 30)
        wait_for(lambda: _got(receiver, "state_not_saved", "resolved"), "state_not_saved to resolve", 40, alertd)
        assert len(_delivered_on_disk(state)) >= 3  # a's, state_not_saved's, b's: recorded once written
    finally:
        code = alertd.stop()
        receiver.stop()
    assert code == 0
    logs = alertd.logs()
    assert "Traceback" not in logs and logs.count("alerting goes on from memory") == 1
    # each NaN was delivered once
    with receiver.recorder.lock:
        firing = [
            a["labels"]["run"]
            for b in receiver.recorder.bodies
            for a in b["alerts"]  # type: ignore[attr-defined]
            if a["labels"].get("alertname") == "nan" and a["status"] == "firing"
        ]
    assert sorted(firing) == ["a", "b"]


@root_only
def test_a_full_disk_alerting_goes_on_from_memory_and_the_state_is_written_once_there_is_room(
    tmp_path: Path,
) -> None:
    samples = tmp_path / "samples.jsonl"
    samples.touch()
    receiver = Receiver()
    with tmpfs(tmp_path / "full", "1m") as mnt:
        alertd = Alertd(_rules(tmp_path, samples, receiver.url), mnt)
        try:
            alertd.wait_log("alertd started")
            filler = fill_disk(mnt)
            runs = []
            for i in range(60):  # new alerts to write, until a write finds the disk full
                runs.append(f"r{i}")
                _nan(samples, runs[-1])
                wait_for(lambda: _got(receiver, "nan", "firing", runs[-1]), f"{runs[-1]}'s NaN delivered", 30, alertd)
                if "alerting goes on from memory" in alertd.logs():
                    break
            assert "database or disk is full" in alertd.logs()
            _nan(samples, "after")  # the disk is full: still delivered
            wait_for(lambda: _got(receiver, "nan", "firing", "after"), "a NaN delivered from memory", 30, alertd)
            wait_for(lambda: _got(receiver, "state_not_saved", "firing"), "state_not_saved to fire", 40, alertd)
            filler.unlink()  # room again
            alertd.wait_log("is written again", 30)
            wait_for(lambda: _got(receiver, "state_not_saved", "resolved"), "state_not_saved to resolve", 40, alertd)
            assert len(_delivered_on_disk(mnt)) >= len(runs) + 2
        finally:
            code = alertd.stop()
            receiver.stop()
    assert code == 0
    assert "Traceback" not in alertd.logs()
