"""A restart neither repeats nor rereads: each source's cursor is committed with the transitions its samples made.

Against a real alertd and a real webhook receiver: SIGKILL just as a run's second NaN episode starts (NaN, finite,
NaN again), at several moments, loses no firing and delivers each notification under one key (twice only where
the SIGKILL cut off its answer); a restart after a few seconds of running restores the sources' cursors and reads
none of what was read before.
"""

from __future__ import annotations

import json
import math
import re
import signal
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from service_helpers import Alertd, wait_for

from alertd.testing.receiver import Receiver, free_port
from alertd.testing.tbwriter import scalar_record

RULES = """
sources: [{source}]
notifiers: {{hook: {{type: webhook, format: generic, url: "{url}", timeout: 2s}}}}
route: {{receivers: [hook], group_by: [run], group_wait: 0s, group_interval: 1s, repeat_interval: 1h}}
rules:
  - {{name: nan, metric: loss, condition: nonfinite}}
"""
KILL_AFTER = (0.0, 0.03, 0.1, 0.25, 0.6)
"""Seconds between the second episode's NaN being written and the SIGKILL: before alertd reads it, while it
evaluates and plans it, and after."""

Writer = Callable[[str, int, float], None]
"""Logs `loss` = value at step for a run."""


def _samples_source(tmp: Path) -> tuple[str, Writer]:
    path = tmp / "samples.jsonl"
    path.touch()

    def write(run: str, step: int, value: float) -> None:
        v = "NaN" if math.isnan(value) else value
        line = {"metric": "loss", "labels": {"run": run}, "time": time.time(), "step": step, "value": v}
        with path.open("a") as f:
            f.write(json.dumps(line) + "\n")

    return f'{{name: s, type: samples, path: "{path}", interval: 0.2s}}', write


def _tensorboard_source(tmp: Path) -> tuple[str, Writer]:
    logdir = tmp / "logs"
    logdir.mkdir()

    def write(run: str, step: int, value: float) -> None:
        (logdir / run).mkdir(exist_ok=True)
        with (logdir / run / "events.out.tfevents.1700000000.node.1.0").open("ab") as f:
            f.write(scalar_record("loss", value, step))

    return f'{{name: tb, type: tensorboard, logdir: "{logdir}", interval: 0.2s}}', write


def _textlog_source(tmp: Path) -> tuple[str, Writer]:
    logs = tmp / "logs"
    logs.mkdir()

    def write(run: str, step: int, value: float) -> None:
        with (logs / f"{run}.log").open("a") as f:
            f.write(f"step={step} loss={value}\n")

    return f'{{name: logs, type: textlog, path: "{logs}/*.log", interval: 0.2s}}', write


def _csv_source(tmp: Path) -> tuple[str, Writer]:
    runs = tmp / "csv"
    runs.mkdir()

    def write(run: str, step: int, value: float) -> None:
        path = runs / run / "metrics.csv"
        if not path.exists():
            path.parent.mkdir()
            path.write_text("step,loss\n")
        with path.open("a") as f:
            f.write(f"{step},{value}\n")

    return f'{{name: pl, type: csv, path: "{runs}/*/metrics.csv", interval: 0.2s}}', write


SOURCES = {"samples": _samples_source, "tensorboard": _tensorboard_source}
SOURCES |= {"textlog": _textlog_source, "csv": _csv_source}


def _statuses(receiver: Receiver, run: str, by_key: bool = False) -> list[str]:
    """The statuses of the notifications `run`'s group got, in order; `by_key`: each idempotency key once (what a
    receiver that drops repeated keys sees)."""
    with receiver.recorder.lock:
        keys = [key for key, status in receiver.recorder.received if 200 <= status < 300]
        bodies = list(receiver.recorder.bodies)
    seen: set[str] = set()
    out = []
    for key, body in zip(keys, bodies, strict=True):
        if body["groupLabels"].get("run") == run and not (by_key and key in seen):
            seen.add(key)
            out.append(body["status"])
    return out


def _recorded(state: Path) -> bool:
    """Whether alertd has recorded each notification it planned as sent (none pending in its outbox). The receiver
    keeps a body before it answers: a body it holds may be a delivery alertd has not heard answered yet, and sends
    again (under the same key) after a SIGKILL."""
    db = sqlite3.connect(state / "alertd.db", timeout=5)
    try:
        (pending,) = db.execute("SELECT COUNT(*) FROM outbox WHERE status = 'pending'").fetchone()
    finally:
        db.close()
    return int(pending) == 0


def _told(receiver: Receiver, run: str, statuses: list[str], what: str, alertd: Alertd, by_key: bool = False) -> None:
    """Wait until the receiver has had exactly `statuses` for `run` (`by_key`: each idempotency key once)."""
    wait_for(lambda: _statuses(receiver, run, by_key) == statuses, f"{run}'s {what}", 30, alertd)


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "flapping"), [("samples", False), ("samples", True), ("tensorboard", False)])
def test_a_sigkill_as_a_second_nan_episode_starts_loses_no_firing(tmp_path: Path, kind: str, flapping: bool) -> None:
    receiver = Receiver()
    receiver.recorder.fail_every = 3 if flapping else 0
    source, write = SOURCES[kind](tmp_path)
    rules, state = tmp_path / "rules.yaml", tmp_path / "state"
    rules.write_text(RULES.format(source=source, url=receiver.url))
    alertd = Alertd(rules, state)
    try:
        for i, delay in enumerate(KILL_AFTER):
            run = f"r{i}"
            for step in range(3):
                write(run, step, 1.0)
            write(run, 3, math.nan)
            _told(receiver, run, ["firing"], "first firing", alertd)
            write(run, 4, 1.0)
            _told(receiver, run, ["firing", "resolved"], "first resolution", alertd)
            wait_for(lambda: _recorded(state), "alertd to record the resolution as sent", 30, alertd)
            write(run, 5, math.nan)  # the second episode: killed as it starts
            time.sleep(delay)
            assert alertd.stop(signal.SIGKILL) == -signal.SIGKILL
            alertd = Alertd(rules, state)
            second = f"second firing (killed after {delay}s)"
            _told(receiver, run, ["firing", "resolved", "firing"], second, alertd, by_key=True)
            wait_for(lambda: _recorded(state), "alertd to record the second firing as sent", 30, alertd)
        time.sleep(2.0)  # nothing more may come
        assert alertd.stop() == 0
    finally:
        alertd.stop(signal.SIGKILL)
        receiver.stop()
    # A delivery whose answer the SIGKILL cut off (the receiver had the body, alertd not yet its answer) is sent
    # again after the restart, under its key: at least once, never under another key, nothing lost.
    for i in range(len(KILL_AFTER)):
        assert _statuses(receiver, f"r{i}", by_key=True) == ["firing", "resolved", "firing"]
    assert len(receiver.recorder.delivered()) == 3 * len(KILL_AFTER)
    many = {c: keys for c, keys in receiver.recorder.keys_by_content().items() if len(keys) > 1}
    assert not many, f"notifications delivered under several keys: {many}"


def _sources_api(port: int) -> dict[str, int]:
    answer = httpx.get(f"http://127.0.0.1:{port}/api/v1/sources", timeout=10).json()
    return {s["name"]: s["samples"] for s in answer}


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(SOURCES))
def test_a_restart_restores_the_cursors_and_reads_nothing_old(tmp_path: Path, kind: str) -> None:
    receiver = Receiver()
    source, write = SOURCES[kind](tmp_path)
    run = "r0.log" if kind == "textlog" else "r0"
    name = source.split(",")[0].removeprefix("{name: ")
    rules, state, port = tmp_path / "rules.yaml", tmp_path / "state", free_port()
    rules.write_text(RULES.format(source=source, url=receiver.url))
    alertd = Alertd(rules, state, "--listen", f"127.0.0.1:{port}")
    try:
        stem = run.removesuffix(".log")
        for step in range(20):
            write(stem, step, math.nan if step == 5 else 1.0)  # an episode, and the run goes on
        wait_for(lambda: _statuses(receiver, run) == ["firing", "resolved"], "the episode", 30, alertd)
        for step in range(20, 40):  # more samples, with no transition
            write(stem, step, 1.0)
        wait_for(lambda: _sources_api(port).get(name) == 40, "the 40 samples read", 30, alertd)
        time.sleep(3.0)  # running a few seconds
        assert alertd.stop(signal.SIGKILL) == -signal.SIGKILL
        alertd = Alertd(rules, state, "--listen", f"127.0.0.1:{port}")
        alertd.wait_log("state restored")
        restored = re.search(r"state restored: (\d+) alert states, (\d+) source cursors", alertd.logs())
        assert restored is not None and int(restored.group(2)) == 1, alertd.logs()
        wait_for(lambda: name in _sources_api(port), "the API", 30, alertd)
        time.sleep(1.5)  # several polls: nothing old is read again
        assert _sources_api(port)[name] == 0
        write(stem, 40, math.nan)  # what comes after the restart is read, and only that
        wait_for(lambda: _statuses(receiver, run) == ["firing", "resolved", "firing"], "the new NaN", 30, alertd)
        assert _sources_api(port)[name] == 1
        assert alertd.stop() == 0
        transitions = [line for line in alertd.logs().splitlines() if '"msg": "alert nan' in line]
        assert len(transitions) == 1 and '"step": 40' in transitions[0]  # none of the old ones again
    finally:
        alertd.stop(signal.SIGKILL)
        receiver.stop()


@pytest.mark.slow
def test_a_state_saved_ahead_of_its_cursor_judges_nothing_twice_and_loses_no_firing(tmp_path: Path) -> None:
    """A source's cursor behind the saved alert states (an older alertd's state directory; a crash between the
    slices of a large read): what it reads again, the restored state had evaluated, and is not judged again,
    so the end of the first episode is not undone and the second episode's firing is told."""
    receiver = Receiver()
    source, write = _samples_source(tmp_path)
    rules, state = tmp_path / "rules.yaml", tmp_path / "state"
    rules.write_text(RULES.format(source=source, url=receiver.url))
    alertd = Alertd(rules, state)
    try:
        for step, value in enumerate((1.0, 1.0, math.nan)):
            write("r", step, value)
        _told(receiver, "r", ["firing"], "first firing", alertd)
        write("r", 3, 1.0)
        _told(receiver, "r", ["firing", "resolved"], "first resolution", alertd)
        assert alertd.stop() == 0
        db = sqlite3.connect(state / "alertd.db")
        with db:
            db.execute("DELETE FROM cursors")  # the source reads everything again
            db.execute("DELETE FROM cursor_items")
        db.close()
        write("r", 4, math.nan)
        alertd = Alertd(rules, state)
        alertd.wait_log("0 source cursors")
        _told(receiver, "r", ["firing", "resolved", "firing"], "second firing", alertd)
        time.sleep(1.5)
        assert alertd.stop() == 0
    finally:
        alertd.stop(signal.SIGKILL)
        receiver.stop()
    transitions = [line for line in alertd.logs().splitlines() if '"msg": "alert nan' in line]
    assert len(transitions) == 1 and '"step": 4' in transitions[0]  # the first episode is not judged again
    assert set(receiver.recorder.delivered().values()) == {1}
