"""Process inspection through /proc (Linux) and exact signalling of one process.

A process is identified by its pid AND its start time (field 22 of `/proc/<pid>/stat`, clock ticks since
boot): a pid alone may be reused by an unrelated process once the first one is gone. `ProcessHandle`
pins that identity when the target is resolved and checks it again before every signal; where the kernel
has pidfds (Linux >= 5.3) the signal also goes through a pidfd opened on the pinned process, which closes
the last window between the check and the signal.

The start time counts clock ticks (10 ms): a pid reused within the same tick would pass the start-time
check alone. That needs the whole pid space to wrap around in 10 ms, which doesn't happen by itself, and
the pidfd (which stays readable once its process has exited) catches it where pidfds exist.

`Procfs` takes a `root` so tests can point it at a fake /proc tree; only the real /proc is ever signalled.
"""

from __future__ import annotations

import os
import select
import signal
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

_STAT_STATE, _STAT_PPID, _STAT_FLAGS, _STAT_START, _STAT_EXIT = 0, 1, 6, 19, 49
"""Indexes into the fields after `(comm)` of /proc/<pid>/stat: fields 3, 4, 9, 22 and 52 of proc(5)."""
_PF_KTHREAD = 0x00200000


@dataclass(frozen=True, slots=True)
class ProcInfo:
    """What /proc says about one process at one instant."""

    pid: int
    ppid: int
    state: str
    """One letter of proc(5): R running, S sleeping, D disk wait, Z zombie, T stopped, X dead, ..."""
    start_ticks: int
    """Start time in clock ticks after boot: with the pid, the identity of the process."""
    uid: int
    """The real user id."""
    cmdline: str
    """The arguments joined by spaces; empty for kernel threads and zombies."""
    kernel_thread: bool = False
    """True for a kernel thread (PF_KTHREAD): never a target."""
    exit_code: int | None = None
    """For a zombie, its waitpid-style status (field 52) where the kernel shows it; else None."""

    @property
    def zombie(self) -> bool:
        """True when the process has exited and waits to be reaped."""
        return self.state in ("Z", "X")


class Procfs:
    """Reads process facts from a /proc tree (`root`, the real one by default)."""

    def __init__(self, root: str | os.PathLike[str] = "/proc") -> None:
        self.root = Path(root)
        self.real = self.root.resolve() == Path("/proc")
        self._tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self._btime: float | None = None

    def read(self, pid: int) -> ProcInfo | None:
        """The facts of `pid`, or None when there is no such process (any more)."""
        base = self.root / str(pid)
        try:
            stat = (base / "stat").read_text(errors="replace")
            status = (base / "status").read_text(errors="replace")
            raw_cmd = (base / "cmdline").read_bytes()
        except (FileNotFoundError, ProcessLookupError, NotADirectoryError):
            return None
        fields = stat[stat.rindex(")") + 2 :].split()
        state = fields[_STAT_STATE]
        exit_code = int(fields[_STAT_EXIT]) if state in ("Z", "X") and len(fields) > _STAT_EXIT else None
        return ProcInfo(
            pid=pid,
            ppid=int(fields[_STAT_PPID]),
            state=state,
            start_ticks=int(fields[_STAT_START]),
            uid=_real_uid(status),
            cmdline=" ".join(a.decode(errors="replace") for a in raw_cmd.split(b"\0") if a),
            kernel_thread=bool(int(fields[_STAT_FLAGS]) & _PF_KTHREAD),
            exit_code=exit_code,
        )

    def pids(self) -> list[int]:
        """Every process id in the tree, ascending."""
        return sorted(int(p.name) for p in self.root.iterdir() if p.name.isdigit())

    def ancestors(self, pid: int) -> list[int]:
        """The parent, grandparent, ... of `pid`, up to and including pid 1 (nearest first)."""
        out: list[int] = []
        info = self.read(pid)
        while info is not None and info.ppid > 0 and info.ppid not in out:
            out.append(info.ppid)
            info = self.read(info.ppid)
        return out

    def start_epoch(self, info: ProcInfo) -> float:
        """When the process started, in epoch seconds (to within a second: boot time is whole seconds)."""
        if self._btime is None:
            for line in (self.root / "stat").read_text().splitlines():
                if line.startswith("btime "):
                    self._btime = float(line.split()[1])
                    break
            else:
                raise OSError(f"{self.root / 'stat'} has no btime line")
        return self._btime + info.start_ticks / self._tick


def _real_uid(status: str) -> int:
    for line in status.splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    raise ValueError("no Uid line in /proc/<pid>/status")


def refusal(procfs: Procfs, pid: int, info: ProcInfo | None, *, allow_other_users: bool) -> str | None:
    """Why `pid` must not be signalled, or None when it may be.

    Never pid 0 or 1, alertd itself or any of its ancestors, a kernel thread, a process that is gone or
    a zombie, nor (unless `allow_other_users`) a process whose real uid is not alertd's.
    """
    me = os.getpid()
    if pid <= 1:
        return f"pid {pid} is init or the kernel: never signalled"
    if pid == me:
        return f"pid {pid} is alertd itself"
    if pid in procfs.ancestors(me):
        return f"pid {pid} is an ancestor of alertd (pid {me})"
    if info is None:
        return f"no process with pid {pid} on this machine"
    if info.kernel_thread:
        return f"pid {pid} is a kernel thread"
    if info.zombie:
        return f"pid {pid} has already exited (zombie)"
    if not allow_other_users and info.uid != os.getuid():
        return (
            f"pid {pid} belongs to uid {info.uid}, alertd runs as uid {os.getuid()} "
            "(set allow_other_users: true to allow this)"
        )
    return None


class Delivery(Enum):
    """What happened to one signal."""

    SENT = "sent"
    GONE = "gone"
    """The pinned process is gone (its pid is absent or now names a process with another start time)."""
    EXITED = "exited"
    """The pinned process has exited and is a zombie: nothing to signal."""
    DENIED = "denied"
    """The kernel would not let alertd signal it (another user's process, alertd not root)."""


@dataclass(frozen=True, slots=True)
class ExitSeen:
    """The pinned process has ended. `status` as subprocess's returncode (-N: killed by signal N)."""

    status: int | None


class ProcessHandle:
    """One process pinned by pid and start time. Signals reach that process or nobody."""

    def __init__(self, procfs: Procfs, info: ProcInfo) -> None:
        self.procfs = procfs
        self.pid = info.pid
        self.start_ticks = info.start_ticks
        self.child = info.ppid == os.getpid()
        self._pidfd: int | None = None
        if procfs.real and hasattr(os, "pidfd_open"):
            try:
                fd = os.pidfd_open(info.pid)
            except OSError:  # gone already, or no pidfds (old kernel, seccomp): os.kill after the check
                fd = None
            if fd is not None and self._same(self.procfs.read(info.pid)):
                self._pidfd = fd  # opened on the pinned process: the check passed after the open
            elif fd is not None:
                os.close(fd)

    def _same(self, now: ProcInfo | None) -> bool:
        return now is not None and now.start_ticks == self.start_ticks

    def current(self) -> ProcInfo | None:
        """The pinned process as /proc shows it now; None when gone or its pid was reused."""
        now = self.procfs.read(self.pid)
        if not self._same(now):
            return None
        assert now is not None
        if not now.zombie and self._pidfd_exited():
            return None  # ours has exited, yet a live process holds the pid: reused within one tick
        return now

    def _pidfd_exited(self) -> bool:
        if self._pidfd is None:
            return False
        p = select.poll()
        p.register(self._pidfd, select.POLLIN)
        return bool(p.poll(0))

    def signal(self, sig: signal.Signals) -> Delivery:
        """Send `sig` if, and only if, the pid still names the pinned process and it is not a zombie."""
        if not self.procfs.real:
            raise RuntimeError(f"won't signal pid {self.pid} found in a fake /proc ({self.procfs.root})")
        now = self.current()
        if now is None:
            return Delivery.GONE
        if now.zombie:
            return Delivery.EXITED
        try:
            if self._pidfd is not None:
                signal.pidfd_send_signal(self._pidfd, sig)
            else:
                os.kill(self.pid, sig)
        except ProcessLookupError:
            return Delivery.GONE
        except PermissionError:
            return Delivery.DENIED
        return Delivery.SENT

    def poll_exit(self) -> ExitSeen | None:
        """None while the pinned process runs; its exit (status where known) once it has ended.

        Our own child's status is read with `waitid(WNOWAIT)`, which leaves the zombie for its owner
        (a `subprocess.Popen`, say) to reap. Another process's zombie shows its status in /proc.
        """
        now = self.current()
        if now is None:
            return ExitSeen(None)
        if not now.zombie:
            return None
        if self.child:
            try:
                res = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                res = None
            if res is not None:
                code = res.si_status if res.si_code == os.CLD_EXITED else -res.si_status
                return ExitSeen(code)
        return ExitSeen(None if now.exit_code is None else os.waitstatus_to_exitcode(now.exit_code))

    def close(self) -> None:
        """Release the pidfd, if one was opened."""
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None
