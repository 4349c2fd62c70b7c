"""procs.py: /proc parsing (a fake tree for odd cases), the safety predicate, the pinned handle."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from kill_helpers import PYTHON, Spawner, proc_state, spawn_with_pid, wait_for

from alertd.actions.procs import Delivery, ExitSeen, ProcessHandle, Procfs, refusal

BTIME = 1_700_000_000


def fake_proc(tmp: Path, procs: dict[int, dict[str, Any]], *, btime: bool = True) -> Path:
    """Write a fake /proc tree: `procs` maps pid -> {comm, state, ppid, uid, start, flags, cmdline, exit}."""
    root = tmp / "proc"
    root.mkdir()
    if btime:
        (root / "stat").write_text(f"cpu  1 2 3 4\nbtime {BTIME}\nprocesses 9\n")
    for pid, p in procs.items():
        d = root / str(pid)
        d.mkdir()
        after = ["0"] * 50
        after[0], after[1] = p.get("state", "S"), str(p.get("ppid", 1))
        after[6], after[19] = str(p.get("flags", 0x400000)), str(p.get("start", 500))
        after[49] = str(p.get("exit", 0))
        (d / "stat").write_text(f"{pid} ({p.get('comm', 'python')}) {' '.join(after)}\n")
        uid = p.get("uid", os.getuid())
        (d / "status").write_text(f"Name:\tx\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nGid:\t0\t0\t0\t0\n")
        (d / "cmdline").write_bytes(b"\0".join(a.encode() for a in p.get("cmdline", ["python", "train.py"])))
    return root


def test_parses_stat_with_spaces_and_parens_in_comm(tmp_path: Path) -> None:
    """comm may hold spaces and ')': fields are read after the last ')'."""
    root = fake_proc(tmp_path, {4242: {"comm": "a) b (c", "ppid": 77, "start": 12345, "state": "R"}})
    info = Procfs(root).read(4242)
    assert info is not None
    assert (info.pid, info.ppid, info.state, info.start_ticks) == (4242, 77, "R", 12345)
    assert info.cmdline == "python train.py" and not info.zombie and not info.kernel_thread
    assert Procfs(root).read(4243) is None


def test_start_epoch_and_ancestors(tmp_path: Path) -> None:
    """Start time = boot time + ticks / CLK_TCK; ancestors follow ppid up to 1."""
    root = fake_proc(tmp_path, {1: {"ppid": 0}, 10: {"ppid": 1}, 20: {"ppid": 10, "start": 250}})
    fs = Procfs(root)
    info = fs.read(20)
    assert info is not None
    assert fs.start_epoch(info) == BTIME + 250 / os.sysconf("SC_CLK_TCK")
    assert fs.ancestors(20) == [10, 1]


def test_refusal_predicate_on_a_fake_tree(tmp_path: Path) -> None:
    """Other uid, zombie and kernel thread are refused; a same-uid live process is allowed."""
    me = os.getuid()
    root = fake_proc(
        tmp_path,
        {
            100: {},
            101: {"uid": me + 1},
            102: {"state": "Z", "cmdline": []},
            103: {"flags": 0x00200000, "cmdline": [], "uid": me},
        },
    )
    fs = Procfs(root)

    def why(pid: int, allow: bool = False) -> str | None:
        return refusal(fs, pid, fs.read(pid), allow_other_users=allow)

    assert why(100) is None
    hint = "(set allow_other_users: true to allow this)"
    assert why(101) == f"pid 101 belongs to uid {me + 1}, alertd runs as uid {me} {hint}"
    assert why(101, allow=True) is None
    assert why(102) == "pid 102 has already exited (zombie)"
    assert why(103) == "pid 103 is a kernel thread"
    assert why(1) == "pid 1 is init or the kernel: never signalled"
    assert why(0) == "pid 0 is init or the kernel: never signalled"
    assert why(555) == "no process with pid 555 on this machine"


def test_a_fake_tree_is_never_signalled(tmp_path: Path) -> None:
    """A handle from a fake tree refuses to send real signals (its pids mean nothing here)."""
    fs = Procfs(fake_proc(tmp_path, {os.getpid(): {}}))
    info = fs.read(os.getpid())
    assert info is not None
    with pytest.raises(RuntimeError, match="fake /proc"):
        ProcessHandle(fs, info).signal(signal.SIGTERM)


def test_real_child_facts(spawner: Spawner) -> None:
    """A real child: its parent is us, our uid, its argv, a start time after ours."""
    child = spawner.popen([PYTHON, "-c", "import time; time.sleep(30)", "marker-arg"])
    wait_for(lambda: "marker-arg" in Path(f"/proc/{child.pid}/cmdline").read_text(), "exec")
    fs = Procfs()
    info, me = fs.read(child.pid), fs.read(os.getpid())
    assert info is not None and me is not None
    assert info.ppid == os.getpid() and info.uid == os.getuid()
    assert info.cmdline.endswith("-c import time; time.sleep(30) marker-arg")
    assert info.start_ticks >= me.start_ticks
    assert abs(fs.start_epoch(info) - time.time()) < 5
    assert os.getppid() in fs.ancestors(os.getpid())
    assert refusal(fs, os.getppid(), fs.read(os.getppid()), allow_other_users=True) is not None


def test_signal_checks_the_start_time_before_sending(spawner: Spawner) -> None:
    """A pid now held by another process is not signalled.

    What is exercised: a handle pins child A (pid + start time); A exits and is reaped; the test starts
    B with A's pid through /proc/sys/kernel/ns_last_pid (a real pid reuse), then asks the handle to
    send SIGTERM: it answers GONE and B lives on. Where the kernel won't let the test choose the pid
    (not root), B is a live process and the handle pins it with a start time one tick off, which is
    exactly what a reused pid looks like to the check. Last, with a real reuse and a pidfd, B's own start
    time is written into the handle, as if A and B had started within one clock tick: the pidfd, which
    knows A has exited, still answers GONE.
    """
    fs = Procfs()
    a = spawner.popen(["sleep", "30"])
    info = fs.read(a.pid)
    assert info is not None
    handle = ProcessHandle(fs, info)
    time.sleep(0.03)  # B starts at least one clock tick after A
    a.kill()
    a.wait()
    b = spawn_with_pid(spawner, a.pid, ["sleep", "30"])
    if b is None:
        b = spawner.popen(["sleep", "30"])
        b_info = fs.read(b.pid)
        assert b_info is not None
        handle.close()
        handle = ProcessHandle(fs, dataclasses.replace(b_info, start_ticks=b_info.start_ticks - 1))
    wait_for(lambda: proc_state(b.pid) == "S", "B to start")
    assert handle.current() is None
    assert handle.signal(signal.SIGTERM) is Delivery.GONE
    assert handle.poll_exit() == ExitSeen(None)
    time.sleep(0.1)
    assert b.poll() is None
    if handle._pidfd is not None and info.pid == b.pid:
        b_info = fs.read(b.pid)
        assert b_info is not None
        handle.start_ticks = b_info.start_ticks
        assert handle.current() is None and handle.signal(signal.SIGTERM) is Delivery.GONE
        time.sleep(0.05)
        assert b.poll() is None
    handle.close()


def test_zombie_child_exit_status_is_read_without_reaping(spawner: Spawner) -> None:
    """Our own child's exit status comes from waitid(WNOWAIT): its owner still reaps the same code."""
    fs = Procfs()
    child = spawner.popen([PYTHON, "-c", "import time, sys; time.sleep(0.2); sys.exit(7)"])
    info = fs.read(child.pid)
    assert info is not None
    handle = ProcessHandle(fs, info)
    assert handle.poll_exit() is None
    wait_for(lambda: proc_state(child.pid) == "Z", "the child to exit")
    assert handle.signal(signal.SIGTERM) is Delivery.EXITED
    assert handle.poll_exit() == ExitSeen(7)
    assert child.wait(timeout=5) == 7
    handle.close()


class ExitsRightAfterRead(Procfs):
    """The real /proc, where the pinned child is killed right after its next read (`arm`), and that read
    returns only once the kernel has turned it into a zombie: the read saw a process that was still running
    and is gone on its way by the time anything looks again."""

    def __init__(self) -> None:
        super().__init__()
        self.victim: subprocess.Popen[bytes] | None = None

    def read(self, pid: int) -> Any:
        info = super().read(pid)
        victim, self.victim = self.victim, None
        if victim is not None and victim.pid == pid:
            victim.kill()
            wait_for(lambda: proc_state(pid) == "Z", "the killed child to become a zombie")
        return info


def test_an_exit_just_after_the_read_is_an_exit_not_a_reused_pid(spawner: Spawner) -> None:
    """A SIGKILLed child read by /proc just before it died (its pidfd readable right after) is seen as the
    zombie it became, with its status -9: not as a pid reused by a live process (which reads as gone, status
    unknown: the escalation's report said `exited` without `status -9`)."""
    fs = ExitsRightAfterRead()
    child = spawner.popen(["sleep", "30"])
    info = fs.read(child.pid)
    assert info is not None
    handle = ProcessHandle(fs, info)
    if handle._pidfd is None:
        pytest.skip("no pidfds here: the pidfd check that raced the read is not made")
    fs.victim = child
    now = handle.current()
    assert now is not None and now.zombie
    assert handle.poll_exit() == ExitSeen(-signal.SIGKILL)
    assert child.wait(timeout=5) == -signal.SIGKILL
    handle.close()


def test_non_child_exit_status_from_proc(tmp_path: Path) -> None:
    """Another process's zombie shows its waitpid status in field 52: signal 9 reads as -9."""
    fs = Procfs(fake_proc(tmp_path, {900: {"state": "Z", "exit": 9, "ppid": 1}}))
    info = fs.read(900)
    assert info is not None and info.zombie and info.exit_code == 9
    assert ProcessHandle(fs, info).poll_exit() == ExitSeen(-9)


def test_reaped_process_reads_as_gone() -> None:
    """A process that exited and was reaped reads as gone: its exit is seen, status unknown."""
    p = subprocess.Popen(["sleep", "0.2"])
    fs = Procfs()
    info = fs.read(p.pid)
    assert info is not None
    handle = ProcessHandle(fs, info)
    p.wait()
    assert fs.read(p.pid) is None
    assert handle.poll_exit() == ExitSeen(None)
    assert handle.signal(signal.SIGTERM) is Delivery.GONE
    handle.close()
