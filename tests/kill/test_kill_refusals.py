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

from alertd.errors import NotifyError
from alertd.notify.config import KillConfig
from alertd.notify.kill import KillNotifier, KillReport

pytestmark = pytest.mark.anyio
HOST = socket.gethostname()


def kill_cfg(**kw: object) -> KillConfig:
    """A kill config with short graces (tests only)."""
    return KillConfig.model_validate({"type": "kill", "grace": 0.2, **kw})


async def refused(cfg: KillConfig, labels: dict[str, str], proc_root: Path | None = None) -> KillReport:
    """Send one firing alert and return the single report, which must be a refusal."""
    notifier = KillNotifier("stop", cfg, proc_root=proc_root or "/proc")
    await notifier.send(notification(firing(labels)))
    await notifier.wait_idle()
    (report,) = notifier.history
    assert report.refused is not None, report
    assert report.signals == () and not report.exited
    assert "REFUSED" in report.summary()
    return report


async def test_never_pid_1(caplog: pytest.LogCaptureFixture) -> None:
    """pid 1 from the labels is refused (and logged at error level); the config rejects `pid: 1`."""
    with caplog.at_level(logging.ERROR, logger="alertd.notify.kill"):
        report = await refused(kill_cfg(), {"host": HOST, "pid": "1"})
    assert "init" in str(report.refused)
    assert any(r.levelno == logging.ERROR and "REFUSED pid 1" in r.getMessage() for r in caplog.records)
    with pytest.raises(pydantic.ValidationError, match="greater than or equal to 2"):
        kill_cfg(target="pid", pid=1)


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
    assert "no process matches" in str(report.refused)


async def test_another_host(spawner: Spawner) -> None:
    """A writer on another host is refused, even when a local process has that pid."""
    proc, work = spawner.script("stubborn_script.py")
    report = await refused(kill_cfg(), {"host": "gpu-node-99", "pid": str(proc.pid)})
    assert "gpu-node-99" in str(report.refused) and report.host == "gpu-node-99"
    assert signals_received(work) == [] and proc.poll() is None


async def test_missing_labels_and_garbage_pid() -> None:
    """Target writer needs both labels, and a numeric pid."""
    assert "no pid label" in str((await refused(kill_cfg(), {"host": HOST})).refused)
    assert "no host label" in str((await refused(kill_cfg(), {"pid": "1234"})).refused)
    bad = await refused(kill_cfg(), {"host": HOST, "pid": "12a"})
    assert bad.refused == "the pid label '12a' is not a process id"


async def test_writer_pid_reused_after_the_alert(spawner: Spawner) -> None:
    """The pid in the labels now names a process that started after the alert: not the writer."""
    proc, work = spawner.script("stubborn_script.py")
    notifier = KillNotifier("stop", kill_cfg())
    alert = firing({"host": HOST, "pid": str(proc.pid)}, active_at=time.time() - 600)
    await notifier.send(notification(alert))
    (report,) = notifier.history
    assert "after the alert became active" in str(report.refused)
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
    notifier = KillNotifier("stop", kill_cfg(), proc_root=root)
    with pytest.raises(NotifyError) as err:
        await notifier.send(notification(firing({"host": HOST, "pid": "4242"})))
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
