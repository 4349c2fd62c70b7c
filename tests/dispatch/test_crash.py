"""SIGKILL while the receiver is down, then a restart: every notification arrives exactly once."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

import alertd

from .receiver import Receiver, free_port

HERE = Path(__file__).parent
WORKER = HERE / "crash_worker.py"


def _env(state: Path) -> dict[str, str]:
    src = Path(alertd.__file__).parents[1]
    return {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{HERE.parent}", "ALERTD_STATE_DIR": str(state)}


def _rows(state: Path) -> list[tuple[str, str, int]]:
    db = sqlite3.connect(f"file:{state / 'alertd.db'}?mode=ro", uri=True)
    try:
        return list(db.execute("SELECT key, status, attempts FROM outbox ORDER BY key"))
    finally:
        db.close()


@pytest.mark.slow
def test_sigkill_while_receiver_down_then_restart_delivers_each_exactly_once(tmp_path: Path) -> None:
    state = tmp_path / "state"
    port = free_port()
    url = f"http://127.0.0.1:{port}/hook"
    count = 5
    first = subprocess.Popen(
        [sys.executable, str(WORKER), url, str(count)], stdout=subprocess.PIPE, text=True, env=_env(state)
    )
    try:
        assert first.stdout is not None
        assert first.stdout.readline().strip() == f"planned {count}"
        deadline = time.monotonic() + 15
        while min((a for _, _, a in _rows(state)), default=0) < 2:  # every row was tried and refused twice
            assert time.monotonic() < deadline, "the worker made no delivery attempts"
            time.sleep(0.05)
    finally:
        first.send_signal(signal.SIGKILL)
        first.communicate(timeout=10)  # its pipe read to the end and closed
    assert first.returncode == -signal.SIGKILL
    before = _rows(state)
    assert len(before) == count and {s for _, s, _ in before} == {"pending"}

    receiver = Receiver(port)
    try:
        second = subprocess.run(
            [sys.executable, str(WORKER), url, str(count)],
            capture_output=True,
            text=True,
            env=_env(state),
            timeout=30,
        )
        assert second.returncode == 0, second.stderr
        assert second.stdout.split() == ["planned", "0", "done"]  # nothing planned again after the restart
        delivered = receiver.recorder.delivered()
    finally:
        receiver.stop()
    assert delivered == {key: 1 for key, _, _ in before}
    assert receiver.recorder.requests() == count
    assert {s for _, s, _ in _rows(state)} == {"delivered"}
