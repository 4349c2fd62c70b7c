"""`alertd exec` stops its child on a NaN: at once, once per run, relaunch after relaunch; with the built-in
rules too; beside a service that holds `./.state`. Real alertd processes, real children, real signals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
CHILD = HERE / "nan_child.py"
STOP_RULES = """
notifiers:
  console: {type: log}
  stop: {type: kill, target: child, signals: [SIGINT, SIGTERM], grace: 30s}
route:
  receivers: [console]
  group_by: [rule, run]
  group_wait: 0s
  routes: [{match: {severity: critical}, receivers: [console, stop]}]
rules:
  - {name: loss_not_finite, metric: ["*loss"], condition: nonfinite, severity: critical}
"""
NOT_LATE = 5.0
"""Seconds a stop may take here at most: far under the minute a notification group waits (`group_interval`),
which is what a relaunched run used to wait for. The latency itself is a figure `make bench` prints."""


def alertd_exec(
    cwd: Path, *args: str, timeout: float = 120, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "alertd", "exec", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env={**os.environ, **(env or {})},
    )


def notifications(stderr: str) -> list[str]:
    """The console notifier's lines (`alertd notify receiver=console status=... [FIRING:N] rule ...`)."""
    return [line for line in stderr.splitlines() if line.startswith("alertd notify receiver=console")]


def test_five_relaunches_are_each_stopped_at_once_with_one_sigint(tmp_path: Path) -> None:
    (tmp_path / "stop.yaml").write_text(STOP_RULES)
    delays = []
    for i in range(5):
        result = tmp_path / f"run{i}.json"
        done = alertd_exec(tmp_path, "--rules", "stop.yaml", "--", sys.executable, str(CHILD), str(result))
        assert done.returncode == 0, done.stderr[-3000:]
        got = json.loads(result.read_text())
        assert len(got["sigints"]) == 1, f"relaunch {i}: {len(got['sigints'])} SIGINTs\n{done.stderr[-3000:]}"
        delays.append(got["sigints"][0] - got["nan_at"])
        said = notifications(done.stderr)
        firing = [line for line in said if "status=firing" in line and "loss_not_finite (run=" in line]
        assert len(firing) == 1 and "[FIRING:1]" in firing[0], f"relaunch {i}:\n" + "\n".join(said)
        assert any("status=resolved" in line and "loss_not_finite" in line for line in said), "\n".join(said)
        assert "sent SIGINT at" in done.stderr and f"pid {got['pid']}" in done.stderr
    print("NaN -> SIGINT under alertd exec, 5 relaunches (ms):", [round(d * 1000, 1) for d in delays])
    assert max(delays) < NOT_LATE, delays
    assert (tmp_path / ".state" / "exec" / "nan_child.py" / "alertd.db").is_file()  # one state, reused


def test_an_earlier_child_s_alert_restored_after_a_sigkill_is_not_acted_on(tmp_path: Path) -> None:
    """alertd exec SIGKILLed while its child's NaN alert fires: the next exec restores that alert; it is over
    (its run ended unseen), and only the new child's own NaN is acted on, once."""
    (tmp_path / "stop.yaml").write_text(STOP_RULES)
    base = [sys.executable, "-m", "alertd", "exec", "--rules", "stop.yaml", "--"]
    first = subprocess.Popen(
        [*base, sys.executable, str(CHILD), str(tmp_path / "first.json"), "--ignore-sigint"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        seen = ""
        while "sent SIGINT" not in seen:  # the alert fired and was acted on (the child ignores SIGINT)
            assert time.monotonic() < deadline and first.stderr is not None
            seen += first.stderr.readline()
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # alertd and its child, at once: nothing is saved at exit
        first.communicate(timeout=10)  # its pipes read to the end and closed
    done = alertd_exec(tmp_path, "--rules", "stop.yaml", "--", sys.executable, str(CHILD), str(tmp_path / "2.json"))
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads((tmp_path / "2.json").read_text())
    assert len(got["sigints"]) == 1, done.stderr[-3000:]
    assert "state restored: 1 alert states" in done.stderr
    assert done.stderr.count("sent SIGINT to pid") == 1
    said = notifications(done.stderr)
    assert not any("[FIRING:2]" in line for line in said), "\n".join(said)


def test_the_built_in_rules_stop_a_nan_child_asking_first(tmp_path: Path) -> None:
    """No rules file: the stop file the callbacks watch is created, the child stops by itself, no signal."""
    result = tmp_path / "r.json"
    done = alertd_exec(tmp_path, "--", sys.executable, str(CHILD), str(result), "--stop-file")
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(result.read_text())
    assert got["stop_file"] is not None and got["sigints"] == [], done.stderr[-3000:]
    assert "asked to stop via" in done.stderr and "exec_stop" in done.stderr


def test_the_built_in_rules_interrupt_a_plain_script_that_does_not_ask(tmp_path: Path) -> None:
    """The README's `alertd exec -- python train.py` with a script that knows nothing of alertd: it is asked
    (stop file), then gets SIGINT, and does not train on to its last step."""
    script = tmp_path / "train.py"
    script.write_text(
        "import time\n"
        "for step in range(1, 100000):\n"
        "    print(f'step={step} loss={\"nan\" if step >= 5 else 1.0}', flush=True)\n"
        "    time.sleep(0.1)\n"
        "print('reached the last step')\n"
    )
    started = time.monotonic()
    done = alertd_exec(tmp_path, "--", sys.executable, str(script))
    assert done.returncode == 130, done.stderr[-3000:]  # 128 + SIGINT: KeyboardInterrupt
    assert "reached the last step" not in done.stdout
    assert "KeyboardInterrupt" in done.stderr
    assert time.monotonic() - started < 60


def test_no_stop_only_tells(tmp_path: Path) -> None:
    script = (
        "import time\n"
        "for s in range(1, 30):\n"
        "    print(f'step={s} loss=nan', flush=True)\n"
        "    time.sleep(0.02)\n"
        "print('end')\n"
    )
    done = alertd_exec(tmp_path, "--no-stop", "--", sys.executable, "-c", script)
    assert done.returncode == 0 and done.stdout.rstrip().endswith("end"), done.stderr[-3000:]
    assert "loss_not_finite" in done.stderr and "SIGINT" not in done.stderr
    bad = alertd_exec(tmp_path, "--no-stop", "--rules", "x.yaml", "--", "true")
    assert bad.returncode == 1 and "--no-stop is for the built-in rules" in bad.stderr


@pytest.fixture
def service(tmp_path: Path):  # type: ignore[no-untyped-def]
    """`alertd --rules rules.yaml` running in tmp_path: it holds ./.state."""
    (tmp_path / "rules.yaml").write_text("rules: [{name: nf, metric: loss, condition: nonfinite}]\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "alertd", "--rules", "rules.yaml"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    assert proc.stderr is not None
    line = ""
    while "alertd started" not in line:
        line = proc.stderr.readline()
        assert line, "the service exited"
    yield proc
    proc.terminate()
    proc.communicate(timeout=30)


def test_exec_starts_its_trainer_beside_a_running_service(tmp_path: Path, service: subprocess.Popen[str]) -> None:
    done = alertd_exec(tmp_path, "--", sys.executable, "-c", "print('trained')")
    assert done.returncode == 0 and done.stdout == "trained\n", done.stderr[-3000:]
    # two at once under one run name: the second takes the next state directory
    code = "import time; print('started', flush=True); time.sleep(3)"
    cmd = [sys.executable, "-m", "alertd", "exec", "--run", "twin", "--", sys.executable, "-c", code]
    a = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert a.stdout is not None and a.stdout.readline() == "started\n"
        b = alertd_exec(tmp_path, "--run", "twin", "--", sys.executable, "-c", "print('second')")
        assert b.returncode == 0 and b.stdout == "second\n", b.stderr[-3000:]
        assert (tmp_path / ".state" / "exec" / "twin.2" / "alertd.db").is_file()
    finally:
        a.communicate(timeout=30)
    # a state directory given explicitly and held: refused, saying what to do
    held = alertd_exec(tmp_path, "--state-dir", ".state", "--", "true")
    assert held.returncode == 2
    assert "another alertd process is using this state directory" in held.stderr
    assert "--state-dir DIR" in held.stderr
