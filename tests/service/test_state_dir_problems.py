"""State directory problems at start end in one clear message and exit 1 (or, a corrupt database, a loud
warning and a fresh start), never a traceback: a real alertd against a corrupt file, a second alertd, and
(as root) a tmpfs the test mounts read-only or fills up. A directory that fails while alertd runs does not
stop it: test_state_unsaved.py."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from service_helpers import Alertd, fill_disk, tmpfs

RULES = """
sources: [{{name: s, type: samples, path: "{path}", interval: 0.2s}}]
notifiers: {{console: {{type: log}}}}
rules:
  - {{name: nan, metric: loss, condition: nonfinite}}
"""
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root (CI runs as root)")


def _rules(tmp_path: Path) -> tuple[Path, Path]:
    samples, rules = tmp_path / "samples.jsonl", tmp_path / "rules.yaml"
    samples.touch()
    rules.write_text(RULES.format(path=samples))
    return samples, rules


def _nan(samples: Path) -> None:
    line = {"metric": "loss", "labels": {"source": "s", "run": "a"}, "time": time.time(), "step": 1, "value": "NaN"}
    with samples.open("a") as f:
        f.write(json.dumps(line) + "\n")


def _ended(alertd: Alertd, timeout: float = 15.0) -> tuple[int, str]:
    code = alertd.proc.wait(timeout)
    alertd.stop()
    return code, alertd.logs()


def test_a_corrupt_database_is_moved_aside_with_a_warning_and_alertd_starts_afresh(tmp_path: Path) -> None:
    samples, rules = _rules(tmp_path)
    state = tmp_path / "state"
    state.mkdir()
    (state / "alertd.db").write_bytes(b"this is not an SQLite database" * 100)
    alertd = Alertd(rules, state)
    try:
        alertd.wait_log("alertd started")
        _nan(samples)
        alertd.wait_log('"state": "firing"')
    finally:
        assert alertd.stop() == 0
    logs = alertd.logs()
    assert "is corrupt" in logs and "moved aside" in logs and "Traceback" not in logs
    assert [p.name.split(".corrupt-")[0] for p in state.glob("alertd.db.corrupt-*")] == ["alertd.db"]


def test_a_second_alertd_on_the_same_state_directory_exits_1_with_one_message(tmp_path: Path) -> None:
    _, rules = _rules(tmp_path)
    state = tmp_path / "state"
    first = Alertd(rules, state)
    try:
        first.wait_log("alertd started")
        second = Alertd(rules, state)
        code, logs = _ended(second)
    finally:
        assert first.stop() == 0
    assert code == 1
    assert "another alertd process is using this state directory" in logs
    assert "Traceback" not in logs


@root_only
def test_a_read_only_state_directory_exits_1_with_one_message(tmp_path: Path) -> None:
    _, rules = _rules(tmp_path)
    with tmpfs(tmp_path / "ro", "1m") as mnt:
        subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
        code, logs = _ended(Alertd(rules, mnt))  # the state directory itself is read-only
    assert code == 1
    assert "Read-only file system" in logs and "Traceback" not in logs


@root_only
def test_a_full_disk_at_start_exits_1_with_one_message(tmp_path: Path) -> None:
    _, rules = _rules(tmp_path)
    with tmpfs(tmp_path / "full", "256k") as mnt:
        fill_disk(mnt)
        code, logs = _ended(Alertd(rules, mnt))
    assert code == 1
    assert "full" in logs and "Traceback" not in logs
