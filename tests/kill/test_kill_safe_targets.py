"""The other targets made safe: pidfile (regular, small, read off the event loop, owned right, fresh) and
cmdline (only processes alertd may signal count). Real processes and the real /proc throughout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kill_helpers import (
    HERE,
    PYTHON,
    Spawner,
    firing,
    notification,
    proc_state,
    signals_received,
    wait_for,
)

from alertd.actions.config import KillConfig
from alertd.actions.kill import KillNotifier, KillReport
from alertd.runs.procfs import Procfs

pytestmark = pytest.mark.anyio
ROOT = os.geteuid() == 0


def kill_cfg(**kw: object) -> KillConfig:
    """A kill config with short graces (tests only)."""
    return KillConfig.model_validate({"type": "kill", "grace": 0.2, **kw})


async def one_report(cfg: KillConfig) -> KillReport:
    """Send one firing alert and return the single report once everything is done."""
    notifier = KillNotifier("stop", cfg)
    await notifier.send(notification(firing({})))
    await notifier.wait_idle()
    (report,) = notifier.history
    return report


async def test_pidfile_that_is_not_a_small_regular_file_is_refused_without_blocking(tmp_path: Path) -> None:
    """A FIFO (whose open or read would block), /dev/zero (endless), a 1 MB file and a link: refused, unread."""
    fifo = tmp_path / "fifo.pid"
    os.mkfifo(fifo)
    big = tmp_path / "big.pid"
    big.write_bytes(b"1234\n" + b" " * (1 << 20))
    real = tmp_path / "real.pid"
    real.write_text(f"{os.getpid()}\n")
    link = tmp_path / "link.pid"
    link.symlink_to(real)
    expected = {
        str(fifo): f"pidfile {fifo} is a FIFO, not a regular file: not read",
        "/dev/zero": "pidfile /dev/zero is a device, not a regular file: not read",
        str(big): f"pidfile {big} is {big.stat().st_size} bytes: a pidfile holds at most 64; not read",
        str(link): f"pidfile {link} is a symbolic link, not a regular file: not read",
        str(tmp_path): f"pidfile {tmp_path} is a directory, not a regular file: not read",
    }
    t0 = time.monotonic()
    for path, reason in expected.items():
        report = await one_report(kill_cfg(target="pidfile", pidfile=path))
        assert report.refused == reason and report.signals == ()
    assert time.monotonic() - t0 < 2.0


async def test_pidfile_is_read_in_a_worker_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The event loop keeps running while the pidfile is read (a slow file system can't stall the service)."""
    import threading

    seen: list[bool] = []
    real_open = os.open

    def watching_open(path: str | os.PathLike[str], flags: int, *a: int) -> int:
        if str(path).endswith("slow.pid"):
            seen.append(threading.current_thread() is threading.main_thread())
        return real_open(path, flags, *a)

    pidfile = tmp_path / "slow.pid"
    pidfile.write_text("4194000\n")
    monkeypatch.setattr(os, "open", watching_open)
    report = await one_report(kill_cfg(target="pidfile", pidfile=str(pidfile)))
    assert seen == [False] and report.refused == "no process with pid 4194000 on this machine"


async def test_pidfile_older_than_its_process_by_half_a_second_is_refused(spawner: Spawner, tmp_path: Path) -> None:
    """A pidfile written 0.5 s before the process it names started: that pid was reused (no 2 s slack)."""
    proc, work = spawner.script("stubborn_script.py")
    info = Procfs().read(proc.pid)
    assert info is not None
    started = Procfs().start_epoch(info)
    pidfile = tmp_path / "train.pid"
    pidfile.write_text(f"{proc.pid}\n")
    os.utime(pidfile, (started - 0.5, started - 0.5))
    report = await one_report(kill_cfg(target="pidfile", pidfile=str(pidfile)))
    assert report.refused is not None and "the pid now names another process" in report.refused
    assert f"after pidfile {pidfile} was written" in report.refused
    os.utime(pidfile, (started + 0.05, started + 0.05))  # written just after the process started: fine
    report = await one_report(kill_cfg(target="pidfile", pidfile=str(pidfile), dry_run=True))
    assert report.refused is None and report.pid == proc.pid
    assert signals_received(work) == [] and proc.poll() is None


@pytest.mark.skipif(not ROOT, reason="needs root to give the pidfile to another uid")
async def test_pidfile_of_another_uid_names_only_its_owners_processes(spawner: Spawner, tmp_path: Path) -> None:
    """A pidfile owned by uid 65534 naming one of root's processes: refused, even with allow_other_users."""
    proc, work = spawner.script("stubborn_script.py")
    pidfile = tmp_path / "train.pid"
    pidfile.write_text(f"{proc.pid}\n")
    os.chown(pidfile, 65534, 65534)
    report = await one_report(kill_cfg(target="pidfile", pidfile=str(pidfile), allow_other_users=True))
    assert report.refused == (
        f"pidfile {pidfile} was written by uid 65534, but pid {proc.pid} belongs to uid 0: "
        "a pidfile names only processes of its owner"
    )
    time.sleep(0.1)
    assert signals_received(work) == [] and proc.poll() is None


@pytest.mark.skipif(not ROOT, reason="needs root to start a process as another uid")
async def test_cmdline_decoy_of_another_user_neither_blocks_nor_is_matched(spawner: Spawner) -> None:
    """A process of uid 65534 whose command line matches too: ignored; the real target is still stopped."""
    token = f"alertd-decoy-{os.getpid()}"
    decoy = spawner.popen(["sh", "-c", "sleep 30; exit 0", token], user=65534)
    wait_for(lambda: token.encode() in Path(f"/proc/{decoy.pid}/cmdline").read_bytes(), "the decoy to start")
    proc, work = spawner.script("stubborn_script.py", token)
    report = await one_report(kill_cfg(target="cmdline", cmdline=token))
    assert report.refused is None and report.pid == proc.pid and report.exited
    assert signals_received(work) == ["SIGINT", "SIGTERM"]
    assert decoy.poll() is None and proc_state(decoy.pid) == "S"

    proc.wait()
    report = await one_report(kill_cfg(target="cmdline", cmdline=token))  # the decoy alone matches
    assert report.refused == (
        f"no process that alertd may signal matches cmdline {token!r} "
        "(1 other matching process(es) alertd may not signal were ignored)"
    )
    assert decoy.poll() is None


def test_cmdline_matching_alertd_itself_does_not_block(spawner: Spawner) -> None:
    """alertd's own command line matches the pattern too (it may never signal itself): the target is stopped.

    Runs without privilege: the notifier runs in a child whose argv carries the token.
    """
    token = f"alertd-self-{os.getpid()}"
    proc, work = spawner.script("stubborn_script.py", token)
    script = (
        "import asyncio, json, sys\n"
        f"sys.path.insert(0, {str(HERE)!r})\n"
        "from kill_helpers import firing, notification\n"
        "from alertd.actions.config import KillConfig\n"
        "from alertd.actions.kill import KillNotifier\n"
        "async def main():\n"
        "    spec = {'type': 'kill', 'target': 'cmdline', 'cmdline': sys.argv[1], 'grace': 0.2}\n"
        "    cfg = KillConfig.model_validate(spec)\n"
        "    n = KillNotifier('stop', cfg)\n"
        "    await n.send(notification(firing({})))\n"
        "    await n.wait_idle()\n"
        "    print(json.dumps([{'pid': r.pid, 'refused': r.refused, 'exited': r.exited} for r in n.history]))\n"
        "asyncio.run(main())\n"
    )
    out = subprocess.run([sys.executable, "-c", script, token], capture_output=True, text=True, timeout=20, check=True)
    assert json.loads(out.stdout) == [{"pid": proc.pid, "refused": None, "exited": True}]
    assert signals_received(work) == ["SIGINT", "SIGTERM"]


async def test_refusals_name_no_command_line(spawner: Spawner) -> None:
    """Refusing a process (here: alertd's parent) names its pid, never its command line."""
    parent_cmd = Path(f"/proc/{os.getppid()}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    report = await one_report(kill_cfg(target="pid", pid=os.getppid()))
    assert report.refused is not None and report.cmdline == ""
    if parent_cmd:
        assert parent_cmd[:20] not in report.summary()
    z = spawner.popen([PYTHON, "-c", "pass"])
    wait_for(lambda: proc_state(z.pid) == "Z", "the child to become a zombie")
    report = await one_report(kill_cfg(target="pid", pid=z.pid))
    assert report.refused == f"pid {z.pid} has already exited (zombie)" and report.cmdline == ""
