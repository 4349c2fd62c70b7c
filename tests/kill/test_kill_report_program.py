"""A kill report names the program and pid of the process it signalled, never its arguments (which carry
secrets: `python -c` code, `--api-key=...`), unless `report_cmdline: true` asks for them: real processes."""

from __future__ import annotations

import logging
import os
import subprocess
from pathlib import Path

import pytest
from kill_helpers import PYTHON, Spawner, firing, notification, wait_for

from alertd.actions.config import KillConfig
from alertd.actions.kill import KillNotifier, KillReport
from alertd.runs.procfs import program_name

pytestmark = pytest.mark.anyio

SECRET = "sk-live-4f9a1c7e2b"
PY = os.path.basename(PYTHON)


def _started(spawner: Spawner, argv: list[str]) -> subprocess.Popen[bytes]:
    p = spawner.popen(argv, stderr=subprocess.DEVNULL)
    wait_for(lambda: SECRET.encode() in Path(f"/proc/{p.pid}/cmdline").read_bytes(), "the process to run", proc=p)
    return p


async def _kill(pid: int, **cfg: object) -> KillReport:
    notifier = KillNotifier("stop", KillConfig.model_validate({"type": "kill", "target": "pid", "pid": pid, **cfg}))
    await notifier.send(notification(firing({"run": "exp1"})))
    await notifier.wait_idle()
    (report,) = notifier.history
    return report


async def test_python_c_code_and_its_arguments_are_never_reported(
    spawner: Spawner, caplog: pytest.LogCaptureFixture
) -> None:
    code = f"import time; API_KEY = {SECRET!r}; time.sleep(60)"
    p = _started(spawner, [PYTHON, "-c", code, f"--api-key={SECRET}"])
    with caplog.at_level(logging.INFO):
        report = await _kill(p.pid)
    assert report.pid == p.pid and [s.name for s in report.signals] == ["SIGINT"] and report.exited
    assert report.program == f"{PY} -c" and report.cmdline == ""
    line = report.summary()
    assert "sent SIGINT at" in line and f"to pid {p.pid} ({PY} -c) on" in line
    seen = caplog.text + line
    assert SECRET not in seen and "time.sleep" not in seen and "--api-key" not in seen
    assert f"kill stop: sent SIGINT to pid {p.pid} ({PY} -c)" in caplog.text


async def test_a_script_is_named_without_its_arguments(spawner: Spawner, caplog: pytest.LogCaptureFixture) -> None:
    proc, work = spawner.script("stubborn_script.py", f"--password={SECRET}")
    with caplog.at_level(logging.INFO):
        report = await _kill(proc.pid, signals=["SIGKILL"])
    assert report.program == f"{PY} stubborn_script.py" and report.exited and report.exit_status == -9
    assert f"pid {proc.pid} ({PY} stubborn_script.py)" in report.summary()
    assert SECRET not in caplog.text + report.summary() and str(work) not in report.summary()


async def test_report_cmdline_asks_for_the_whole_command_line(spawner: Spawner) -> None:
    p = _started(spawner, [PYTHON, "-c", "import time; time.sleep(60)", f"--tag={SECRET}"])
    report = await _kill(p.pid, report_cmdline=True)
    assert report.program == f"{PY} -c" and report.cmdline.endswith(f"time.sleep(60) --tag={SECRET}")
    assert f"({PYTHON} -c import time; time.sleep(60) --tag=" in report.summary()  # cut at 80 characters


def test_program_names() -> None:
    cases = {
        ("/usr/bin/python3", "-u", "/home/ana/train.py", "--token", SECRET): "python3 train.py",
        ("python3", "-c", f"print({SECRET!r})"): "python3 -c",
        ("python", "-Bc", "code"): "python -c",
        ("python3.11", "-m", "torch.distributed.run", f"--rdzv={SECRET}"): "python3.11 -m torch.distributed.run",
        ("python", "-W", "ignore", "t.py"): "python t.py",
        ("/opt/bin/torchrun", "--nproc-per-node=8", "train.py", SECRET): "torchrun",
        (f"python train.py --key={SECRET}",): "python",  # a title set by the process (setproctitle)
        ("/bin/sleep", "30"): "sleep",
        (): "",
    }
    for argv, shown in cases.items():
        assert program_name(argv) == shown, argv
