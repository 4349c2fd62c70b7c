"""The kill notifier's polite first step (`ask_first`): a stop file, a wait, and only then signals."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pydantic
import pytest
from kill_helpers import PYTHON, Spawner, firing, notification, signals_received, wait_for

from alertd.actions.config import KillConfig
from alertd.actions.kill import KillNotifier

pytestmark = pytest.mark.anyio

POLITE = """
import os, sys, time
path = sys.argv[1]
open(sys.argv[2], "w").write("ready")
deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    if os.path.exists(path):
        open(sys.argv[2] + ".ckpt", "w").write("saved")
        sys.exit(0)
    time.sleep(0.02)
sys.exit(3)
"""


def kill_cfg(tmp: Path, wait: str = "3s", **kw: object) -> KillConfig:
    """A kill config that asks first through `<tmp>/<run>/ALERTD_STOP`."""
    ask = {"stop_file": str(tmp) + "/{run}/ALERTD_STOP", "wait": wait}
    return KillConfig.model_validate({"type": "kill", "grace": 0.2, "ask_first": ask, **kw})


def polite_child(spawner: Spawner, tmp: Path, run: str) -> tuple[int, Path]:
    """A training stand-in that saves and exits 0 as soon as its stop file appears."""
    (tmp / run).mkdir(exist_ok=True)
    ready = tmp / f"{run}.ready"
    p = spawner.popen([PYTHON, "-c", POLITE, str(tmp / run / "ALERTD_STOP"), str(ready)])
    wait_for(ready.exists, "the polite child to start", proc=p)
    return p.pid, ready


async def test_a_process_that_stops_when_asked_gets_no_signal(spawner: Spawner, tmp_path: Path) -> None:
    """The stop file appears, the process saves and exits 0 by itself: nothing is signalled."""
    pid, ready = polite_child(spawner, tmp_path, "exp1")
    notifier = KillNotifier("stop", kill_cfg(tmp_path, target="pid", pid=pid))
    t0 = time.monotonic()
    await notifier.send(notification(firing({"run": "exp1"})))
    assert time.monotonic() - t0 < 1.0  # the wait runs in the background
    await notifier.wait_idle()
    (report,) = notifier.history
    stop = tmp_path / "exp1" / "ALERTD_STOP"
    assert report.signals == () and report.exited and report.exit_status == 0 and report.refused is None
    assert report.note.startswith(f"asked to stop via {stop}; exited after ") and report.note.endswith(" s")
    assert report.cmdline == ""  # never signalled: its command line is not reported
    assert "sent no signal to" in report.summary() and "exited with status 0" in report.summary()
    assert json.loads(stop.read_text())["rule"] == "loss_not_finite"
    assert Path(f"{ready}.ckpt").exists()


async def test_a_process_that_ignores_the_request_is_escalated_after_wait(spawner: Spawner, tmp_path: Path) -> None:
    """No exit within `wait`: the signal sequence starts then, and the report says so."""
    proc, work = spawner.script("stubborn_script.py")
    (tmp_path / "exp2").mkdir()
    notifier = KillNotifier("stop", kill_cfg(tmp_path, wait="0.4s", target="pid", pid=proc.pid))
    t0 = time.time()
    await notifier.send(notification(firing({"run": "exp2"})))
    assert signals_received(work) == []
    await notifier.wait_idle()
    (report,) = notifier.history
    assert [s.name for s in report.signals] == ["SIGINT", "SIGTERM", "SIGKILL"]
    assert report.signals[0].time - t0 >= 0.35
    stop = tmp_path / "exp2" / "ALERTD_STOP"
    assert report.note == f"asked to stop via {stop}; did not stop within 0.4s: escalating"
    assert report.exited and report.exit_status == -9 and report.cmdline == ""
    assert report.program.endswith(" stubborn_script.py")  # the program, not its arguments
    assert signals_received(work) == ["SIGINT", "SIGTERM"]


async def test_the_stop_file_is_created_even_when_the_target_is_refused(tmp_path: Path) -> None:
    """Asking is always safe: with no process to signal, the file still asks the run to stop."""
    (tmp_path / "exp3").mkdir()
    notifier = KillNotifier("stop", kill_cfg(tmp_path))  # target writer, no registry: refused
    await notifier.send(notification(firing({"run": "exp3", "source": "tb"})))
    (report,) = notifier.history
    stop = tmp_path / "exp3" / "ALERTD_STOP"
    assert report.refused is not None and stop.exists()
    assert report.note == f"asked to stop via {stop}; nothing signalled"


async def test_a_stop_file_that_cannot_be_written_means_signals_at_once(spawner: Spawner, tmp_path: Path) -> None:
    """The run's directory is missing: the failure is noted and SIGINT goes out at once."""
    proc, work = spawner.script("stubborn_script.py")
    notifier = KillNotifier("stop", kill_cfg(tmp_path, target="pid", pid=proc.pid, signals=["SIGINT"]))
    await notifier.send(notification(firing({"run": "no-such-dir"})))
    wait_for(lambda: signals_received(work) == ["SIGINT"], "SIGINT at once")
    await notifier.wait_idle()
    (report,) = notifier.history
    assert [s.name for s in report.signals] == ["SIGINT"]
    assert report.note.startswith("could not ask via stop file: stop_file stop: directory ")
    assert "signalling at once" in report.note


async def test_dry_run_creates_nothing(spawner: Spawner, tmp_path: Path) -> None:
    """dry_run says it would create the file and wait; it creates nothing and signals nothing."""
    proc, work = spawner.script("stubborn_script.py")
    (tmp_path / "exp4").mkdir()
    notifier = KillNotifier("stop", kill_cfg(tmp_path, target="pid", pid=proc.pid, dry_run=True))
    await notifier.send(notification(firing({"run": "exp4"})))
    (report,) = notifier.history
    stop = tmp_path / "exp4" / "ALERTD_STOP"
    assert report.note == (
        f"would create {stop} and wait 3s, then would send SIGINT, then SIGTERM, then SIGKILL, 0.2s apart; sent nothing"
    )
    assert not stop.exists() and signals_received(work) == [] and proc.poll() is None


async def test_aclose_during_the_wait_sends_nothing(spawner: Spawner, tmp_path: Path) -> None:
    """Shutting down while waiting for the process to stop by itself: no signal is ever sent."""
    proc, work = spawner.script("stubborn_script.py")
    (tmp_path / "exp5").mkdir()
    notifier = KillNotifier("stop", kill_cfg(tmp_path, wait="30s", target="pid", pid=proc.pid))
    await notifier.send(notification(firing({"run": "exp5"})))
    await notifier.aclose()
    (report,) = notifier.history
    assert report.signals == () and not report.exited
    assert report.note == "escalation cancelled at shutdown before any signal was sent"
    time.sleep(0.1)
    assert signals_received(work) == [] and proc.poll() is None


def test_ask_first_config() -> None:
    """The stop file path follows the stop_file notifier's rules; wait is a duration."""
    ok = KillConfig.model_validate(
        {"type": "kill", "ask_first": {"stop_file": "{run}/ALERTD_STOP", "base_dir": "/data/runs", "wait": "2m"}}
    )
    assert ok.ask_first is not None and ok.ask_first.wait == 120.0
    with pytest.raises(pydantic.ValidationError, match="stop_file: path must be absolute unless base_dir"):
        KillConfig.model_validate({"type": "kill", "ask_first": {"stop_file": "{run}/ALERTD_STOP"}})
    with pytest.raises(pydantic.ValidationError, match="stray"):
        KillConfig.model_validate({"type": "kill", "ask_first": {"stop_file": "/r/{run/S"}})
