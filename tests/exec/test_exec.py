"""`alertd exec -- COMMAND`: the trainer as alertd's child: exit status, output, signals, alerts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from alertd.testing.receiver import Receiver

RULES = """
notifiers:
  hook: {{type: webhook, format: generic, url: "{url}", timeout: 5s}}
route: {{receivers: [hook], group_by: [rule, run], group_wait: 0s}}
rules:
  - {{name: loss_not_finite, metric: ["*loss"], condition: nonfinite, severity: critical}}
  - {{name: run_crashed, metric: run.end, labels_match: {{reason: "=~crashed|killed|lost"}}, condition: "> 0"}}
  - {{name: run_finished, metric: run.end, labels_match: {{reason: finished}}, condition: "> 0", severity: info}}
"""


@pytest.fixture
def receiver():  # type: ignore[no-untyped-def]
    r = Receiver()
    yield r
    r.stop()


@pytest.fixture
def rules(tmp_path: Path, receiver: Receiver) -> Path:
    path = tmp_path / "rules.yaml"
    path.write_text(RULES.format(url=receiver.url))
    return path


def alertd_exec(rules: Path, tmp_path: Path, code: str, **kw: object) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "alertd", "exec", "--rules", str(rules), "--state-dir", str(tmp_path / "state")]
    return subprocess.Popen(
        [*cmd, "--run", "t", "--", sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
        **kw,  # type: ignore[call-overload]
    )


def fired(receiver: Receiver) -> list[tuple[str, str, dict[str, str]]]:
    with receiver.recorder.lock:
        bodies = list(receiver.recorder.bodies)
    return [(b["status"], a["labels"]["alertname"], a["labels"]) for b in bodies for a in b["alerts"]]


@pytest.mark.parametrize(
    ("code", "status", "reason"),
    [
        ("print('step=1 loss=2.0')", 0, "finished"),
        ("import sys; print('step=1 loss=2.0'); sys.exit(1)", 1, "crashed"),
        (
            "import os, signal; print('step=1 loss=2.0', flush=True); os.kill(os.getpid(), signal.SIGKILL)",
            137,
            "killed",
        ),
    ],
)
def test_the_child_s_exit_status_is_alertd_s_and_its_end_is_alerted(
    rules: Path, tmp_path: Path, receiver: Receiver, code: str, status: int, reason: str
) -> None:
    proc = alertd_exec(rules, tmp_path, code)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == status, err.decode()
    assert out == b"step=1 loss=2.0\n"
    rule = "run_finished" if reason == "finished" else "run_crashed"
    ends = [labels for state, name, labels in fired(receiver) if name == rule and state == "firing"]
    assert len(ends) == 1 and ends[0]["reason"] == reason and ends[0]["run"] == "t"
    if status:
        assert ends[0]["exit_code"] == ("-9" if status == 137 else str(status))


def test_a_cuda_oom_traceback_then_exit_0_is_one_crashed_end_never_finished(
    rules: Path, tmp_path: Path, receiver: Receiver
) -> None:
    """A wrapper that prints the trainer's CUDA-OOM traceback and exits 0: crashed, once; no "training is done"."""
    code = (
        "import sys\n"
        "print('step=1 loss=2.0', flush=True)\n"
        "print('Traceback (most recent call last):', file=sys.stderr)\n"
        "print('  File \"train.py\", line 9, in <module>', file=sys.stderr)\n"
        "print('torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB', file=sys.stderr)\n"
    )
    proc = alertd_exec(rules, tmp_path, code)
    out, err = proc.communicate(timeout=60)
    assert out == b"step=1 loss=2.0\n"
    assert proc.returncode == 0, err.decode()
    ends = [(name, labels["reason"]) for state, name, labels in fired(receiver) if state == "firing"]
    assert ends == [("run_crashed", "crashed")], err.decode()[-3000:]


def test_output_passes_through_byte_for_byte(rules: Path, tmp_path: Path) -> None:
    blob = bytes(range(256)) * 40 + b"\r 10%|# | loss=1.0\r 20%|## | loss=nan\nno newline at the end"
    (tmp_path / "blob").write_bytes(blob)
    code = (
        "import sys, time\n"
        "data = open('blob', 'rb').read()\n"
        "for i in range(0, len(data), 997):\n"
        "    sys.stdout.buffer.write(data[i:i + 997]); sys.stdout.flush()\n"
        "sys.stderr.write('to stderr\\n')\n"
    )
    proc = alertd_exec(rules, tmp_path, code)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert out == blob
    assert b"to stderr\n" in err


def test_sigterm_is_forwarded_and_the_child_s_answer_is_the_exit_status(
    rules: Path, tmp_path: Path, receiver: Receiver
) -> None:
    code = (
        "import signal, sys, time\n"
        "def bye(n, f):\n"
        "    print('got', signal.Signals(n).name, flush=True); sys.exit(3)\n"
        "signal.signal(signal.SIGTERM, bye)\n"
        "print('step=1 loss=nan', flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = alertd_exec(rules, tmp_path, code)
    deadline = time.monotonic() + 30
    while not [f for f in fired(receiver) if f[1] == "loss_not_finite"] and time.monotonic() < deadline:
        time.sleep(0.05)
    (nan,) = [labels for state, name, labels in fired(receiver) if name == "loss_not_finite"]
    assert nan["run"] == "t" and nan["source"] == "exec" and nan["metric"] == "loss"
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert out == b"step=1 loss=nan\ngot SIGTERM\n"
    assert proc.returncode == 3, err.decode()
    assert b"forwarding SIGTERM" in err


def test_a_command_that_does_not_exist_is_127(rules: Path, tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "alertd", "exec", "--rules", str(rules), "--state-dir", str(tmp_path / "s")]
    done = subprocess.run([*cmd, "--", "no-such-command-here"], capture_output=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 127
    assert b"can't start no-such-command-here" in done.stderr
    # with the built-in rules, whose sources are being polled as alertd stops at once: no job's traceback
    builtin = [sys.executable, "-m", "alertd", "exec", "--state-dir", str(tmp_path / "b"), "--", "no-such-command"]
    done = subprocess.run(builtin, capture_output=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 127 and b"can't start no-such-command" in done.stderr
    assert b"Traceback" not in done.stderr and b"CancelledError" not in done.stderr, done.stderr.decode()[-2000:]


def test_bad_rules_start_nothing_and_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("rules: [{name: x, metric: m, condition: maybe}]\n")
    marker = tmp_path / "ran"
    cmd = [sys.executable, "-m", "alertd", "exec", "--rules", str(bad), "--"]
    done = subprocess.run([*cmd, "touch", str(marker)], capture_output=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 2 and not marker.exists()
    assert b"unknown condition 'maybe'" in done.stderr


def test_console_notifications_go_to_stderr_not_into_the_child_s_output(tmp_path: Path) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text("rules: [{name: nan, metric: loss, condition: nonfinite}]\n")
    cmd = [sys.executable, "-m", "alertd", "exec", "--rules", str(rules), "--state-dir", str(tmp_path / "s"), "--"]
    done = subprocess.run([*cmd, "echo", "loss=nan"], capture_output=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 0
    assert done.stdout == b"loss=nan\n"
    assert b"alertd notify receiver=console status=firing" in done.stderr
    assert json.loads(done.stderr.splitlines()[0])["msg"]  # alertd's own logs: JSON lines on stderr
    assert os.path.isdir(tmp_path / "s")
