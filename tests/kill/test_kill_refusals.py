"""KillNotifier refusals: each is reported (refused reason, error log), nothing is signalled, no raise."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import time
from pathlib import Path

import pydantic
import pytest
from kill_helpers import Spawner, firing, notification, proc_state, signals_received, wait_for

from alertd.actions.config import KillConfig
from alertd.actions.kill import KillNotifier, KillReport
from alertd.actions.targets import WriterLookup
from alertd.errors import NotifyError
from alertd.runs.procfs import Procfs
from alertd.runs.writers import VerifiedWriter

pytestmark = pytest.mark.anyio
HOST = socket.gethostname()


def kill_cfg(**kw: object) -> KillConfig:
    """A kill config with short graces (tests only)."""
    return KillConfig.model_validate({"type": "kill", "grace": 0.2, **kw})


async def refused(
    cfg: KillConfig, labels: dict[str, str], proc_root: Path | None = None, writers: WriterLookup | None = None
) -> KillReport:
    """Send one firing alert and return the single report, which must be a refusal naming no command line."""
    notifier = KillNotifier("stop", cfg, proc_root=proc_root or "/proc", writers=writers)
    await notifier.send(notification(firing(labels)))
    await notifier.wait_idle()
    (report,) = notifier.history
    assert report.refused is not None, report
    assert report.signals == () and not report.exited and report.cmdline == ""
    assert "REFUSED" in report.summary()
    return report


def verified(pid: int, start_ticks: int, *, alive: bool = True) -> WriterLookup:
    """A writers lookup that answers one verified writer of run `.` of source `tb` (shape only)."""
    w = VerifiedWriter("tb", ".", "/logs/events", HOST, pid, start_ticks, os.getuid(), 0.0, True, alive)
    return lambda source, run: w if (source, run) == ("tb", ".") else None


async def test_never_pid_1(caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    """pid 1 from a pidfile is refused (and logged at error level); the config rejects `pid: 1`."""
    pidfile = tmp_path / "init.pid"
    pidfile.write_text("1\n")
    with caplog.at_level(logging.ERROR, logger="alertd.actions.kill"):
        report = await refused(kill_cfg(target="pidfile", pidfile=str(pidfile)), {})
    assert "init" in str(report.refused)
    assert any(r.levelno == logging.ERROR and "REFUSED pid 1" in r.getMessage() for r in caplog.records)
    with pytest.raises(pydantic.ValidationError, match="greater than or equal to 2"):
        kill_cfg(target="pid", pid=1)
    init = Procfs().read(1)
    assert init is not None
    report = await refused(kill_cfg(), {"source": "tb", "run": "."}, writers=verified(1, init.start_ticks))
    assert report.refused == "pid 1 is init or the kernel: never signalled"  # even a "verified" pid 1


async def test_never_itself() -> None:
    """alertd's own pid is refused."""
    report = await refused(kill_cfg(target="pid", pid=os.getpid()), {})
    assert report.refused == f"pid {os.getpid()} is alertd itself"


async def test_never_its_parent() -> None:
    """alertd's parent (and any ancestor) is refused."""
    report = await refused(kill_cfg(target="pid", pid=os.getppid()), {})
    assert "ancestor of alertd" in str(report.refused)


async def test_ambiguous_cmdline_names_the_pids(spawner: Spawner) -> None:
    """A pattern that matches two processes refuses, naming both; neither is signalled."""
    token = f"alertd-ambiguous-{os.getpid()}"
    (a, wa), (b, wb) = (
        spawner.script("stubborn_script.py", token),
        spawner.script("stubborn_script.py", token),
    )
    report = await refused(kill_cfg(target="cmdline", cmdline=token), {})
    assert f"matches 2 processes (pids {min(a.pid, b.pid)}, {max(a.pid, b.pid)})" in str(report.refused)
    time.sleep(0.1)
    assert signals_received(wa) == signals_received(wb) == [] and a.poll() is None and b.poll() is None


async def test_cmdline_matching_one_child_acts(spawner: Spawner) -> None:
    """The same kind of pattern with one match acts on it (and never on alertd, whose argv differs)."""
    token = f"alertd-single-{os.getpid()}"
    proc, work = spawner.script("stubborn_script.py", token)
    notifier = KillNotifier("stop", kill_cfg(target="cmdline", cmdline=rf"stubborn_script\.py .*{token}"))
    await notifier.send(notification(firing({})))
    await notifier.wait_idle()
    (report,) = notifier.history
    assert report.pid == proc.pid and report.exited
    assert signals_received(work) == ["SIGINT", "SIGTERM"]


async def test_no_cmdline_match() -> None:
    """A pattern that matches nothing is refused by name."""
    report = await refused(kill_cfg(target="cmdline", cmdline="no-such-process-[x]{3}-alertd"), {})
    assert report.refused == "no process that alertd may signal matches cmdline 'no-such-process-[x]{3}-alertd'"


async def test_another_host(spawner: Spawner) -> None:
    """A writer on another host is refused, even when a local process has that pid and is verified."""
    proc, work = spawner.script("stubborn_script.py")
    info = Procfs().read(proc.pid)
    assert info is not None
    labels = {"source": "tb", "run": ".", "host": "gpu-node-99", "pid": str(proc.pid)}
    report = await refused(kill_cfg(), labels, writers=verified(proc.pid, info.start_ticks))
    assert "gpu-node-99" in str(report.refused) and report.host == "gpu-node-99"
    assert signals_received(work) == [] and proc.poll() is None


async def test_missing_labels_and_no_registry() -> None:
    """Target writer needs a writers lookup, and the alert's source and run labels; a pid label alone is nothing."""
    none = await refused(kill_cfg(), {"source": "tb", "run": ".", "host": HOST, "pid": "1234"})
    assert none.refused == "no writer registry: target writer acts only on a writer alertd has verified"
    lookup = verified(4194000, 1)
    for labels in ({"host": HOST, "pid": "1234"}, {"source": "tb", "pid": "1234"}):
        report = await refused(kill_cfg(), labels, writers=lookup)
        assert (
            report.refused
            == "the alert has no source and run labels: target writer acts only on a run's verified writer"
        )
    report = await refused(kill_cfg(), {"source": "tb", "run": "other", "pid": "1234"}, writers=lookup)
    assert report.refused == (
        "no writer of run 'other' (source 'tb') has been verified (holding one of its event files open, or "
        "owning one it started before): a pid in a file name is not trusted"
    )


async def test_writer_pid_reused_after_verification(spawner: Spawner) -> None:
    """The verified writer's pid now names a process with another start time: not the writer, not signalled."""
    proc, work = spawner.script("stubborn_script.py")
    info = Procfs().read(proc.pid)
    assert info is not None
    lookup = verified(proc.pid, info.start_ticks - 1)
    report = await refused(kill_cfg(), {"source": "tb", "run": "."}, writers=lookup)
    assert report.refused == (
        f"the verified writer of run '.' (pid {proc.pid}) has exited: pid {proc.pid} now names another process"
    )
    report = await refused(kill_cfg(), {"source": "tb", "run": "."}, writers=verified(proc.pid, 1, alive=False))
    assert report.refused == f"the verified writer of run '.' (pid {proc.pid}) has exited"
    assert signals_received(work) == [] and proc.poll() is None


async def test_pidfile_missing_garbage_and_stale(spawner: Spawner, tmp_path: Path) -> None:
    """A missing pidfile, one without a pid, and one older than the process it names are refused."""
    pidfile = tmp_path / "train.pid"
    cfg = kill_cfg(target="pidfile", pidfile=str(pidfile))
    assert (await refused(cfg, {})).refused == f"pidfile {pidfile} does not exist"
    pidfile.write_text("hello\n")
    assert "does not hold a process id: 'hello\\n'" in str((await refused(cfg, {})).refused)
    proc, _ = spawner.script("stubborn_script.py")
    pidfile.write_text(f"{proc.pid}\n")
    old = time.time() - 600
    os.utime(pidfile, (old, old))
    assert "after pidfile" in str((await refused(cfg, {})).refused)
    os.utime(pidfile)  # fresh again: now it acts
    notifier = KillNotifier("stop", cfg)
    await notifier.send(notification(firing({})))
    await notifier.wait_idle()
    assert notifier.history[0].refused is None and notifier.history[0].exited


async def test_zombie(spawner: Spawner) -> None:
    """A child that exited but was not reaped yet is refused."""
    z = spawner.popen(["true"])
    wait_for(lambda: proc_state(z.pid) == "Z", "the child to become a zombie")
    report = await refused(kill_cfg(target="pid", pid=z.pid), {})
    assert report.refused == f"pid {z.pid} has already exited (zombie)"


async def test_gone() -> None:
    """A pid with no process is refused."""
    p = subprocess.Popen(["true"])
    p.wait()
    report = await refused(kill_cfg(target="pid", pid=p.pid), {})
    assert report.refused == f"no process with pid {p.pid} on this machine"


async def test_another_users_process(spawner: Spawner, tmp_path: Path) -> None:
    """A process of another uid is refused unless allow_other_users.

    As root (the case here), the process is real: `sleep` started as uid 65534 (nobody). Without root
    a process of another uid can't be created, so the same check is shown through a fake /proc tree
    (see test_procs.py, which runs it either way).
    """
    if os.geteuid() == 0:
        other = spawner.popen(["sleep", "30"], user=65534)
        wait_for(lambda: proc_state(other.pid) == "S", "sleep to start")
        report = await refused(kill_cfg(target="pid", pid=other.pid), {})
        assert f"belongs to uid 65534, alertd runs as uid {os.getuid()}" in str(report.refused)
        assert other.poll() is None
        notifier = KillNotifier("stop", kill_cfg(target="pid", pid=other.pid, allow_other_users=True))
        await notifier.send(notification(firing({})))
        await notifier.wait_idle()
        assert notifier.history[0].exited and other.wait(timeout=5) == -2  # sleep dies of SIGINT
    else:
        from test_procs import fake_proc

        root = fake_proc(tmp_path, {4242: {"uid": os.getuid() + 1}})
        report = await refused(kill_cfg(target="pid", pid=4242), {}, proc_root=root)
        assert "belongs to uid" in str(report.refused)


async def test_internal_error_is_not_recoverable(tmp_path: Path) -> None:
    """An unreadable /proc (here a fake tree without /proc/stat) raises NotifyError(recoverable=False)."""
    from test_procs import fake_proc

    root = fake_proc(tmp_path, {4242: {}}, btime=False)
    pidfile = tmp_path / "train.pid"
    pidfile.write_text("4242\n")
    notifier = KillNotifier("stop", kill_cfg(target="pidfile", pidfile=str(pidfile)), proc_root=root)
    with pytest.raises(NotifyError) as err:
        await notifier.send(notification(firing({})))
    assert not err.value.recoverable and "internal error" in str(err.value)


def test_config_errors() -> None:
    """Signal names are checked, and each target needs its own field."""
    with pytest.raises(pydantic.ValidationError, match="unknown signal 'SIGSTOPP'"):
        kill_cfg(signals=["SIGINT", "SIGSTOPP"])
    assert kill_cfg(signals=["int", "term"]).signals == ["SIGINT", "SIGTERM"]
    with pytest.raises(pydantic.ValidationError, match="target: pidfile needs `pidfile`"):
        kill_cfg(target="pidfile")
    with pytest.raises(pydantic.ValidationError, match="only used with target: cmdline"):
        kill_cfg(cmdline="train.py")
    with pytest.raises(pydantic.ValidationError, match="not a valid regular expression"):
        kill_cfg(target="cmdline", cmdline="train(")
    with pytest.raises(pydantic.ValidationError, match="`all` is only used"):
        kill_cfg(all=True)
