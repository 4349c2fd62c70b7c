"""Exact signalling of one process, and the rules on which processes alertd may signal at all.

A process is identified by its pid AND its start time (`alertd.runs.procfs`, which this module re-exports):
a pid alone may be reused by an unrelated process once the first one is gone. `ProcessHandle` pins that
identity when the target is resolved and checks it again before every signal; where the kernel has
pidfds (Linux >= 5.3) the signal also goes through a pidfd opened on the pinned process, which closes
the last window between the check and the signal.

The start time counts clock ticks (10 ms): a pid reused within the same tick would pass the start-time
check alone. That needs the whole pid space to wrap around in 10 ms, which doesn't happen by itself, and
the pidfd (which stays readable once its process has exited) catches it where pidfds exist.

Only the real /proc is ever signalled: a handle on a fake tree (tests) raises instead.
"""

from __future__ import annotations

import os
import select
import signal
from collections.abc import Collection
from dataclasses import dataclass
from enum import Enum

from alertd.runs.procfs import Procfs, ProcInfo

__all__ = ["Delivery", "ExitSeen", "ProcInfo", "ProcessHandle", "Procfs", "refusal"]


def refusal(
    procfs: Procfs,
    pid: int,
    info: ProcInfo | None,
    *,
    allow_other_users: bool,
    ancestors: Collection[int] | None = None,
) -> str | None:
    """Why `pid` must not be signalled, or None when it may be.

    Never pid 0 or 1, alertd itself or any of its ancestors, a kernel thread, a thread id (only whole
    processes), a process that is gone or a zombie, nor (unless `allow_other_users`) a process whose real
    uid is not alertd's. `ancestors` (alertd's, from `procfs.ancestors(os.getpid())`) saves reading them
    again when many pids are judged at once. The reasons name pids and uids, never a command line.
    """
    me = os.getpid()
    if pid <= 1:
        return f"pid {pid} is init or the kernel: never signalled"
    if pid == me:
        return f"pid {pid} is alertd itself"
    if pid in (procfs.ancestors(me) if ancestors is None else ancestors):
        return f"pid {pid} is an ancestor of alertd (pid {me})"
    if info is None:
        return f"no process with pid {pid} on this machine"
    if info.kernel_thread:
        return f"pid {pid} is a kernel thread"
    if info.tgid is not None and info.tgid != pid:
        return f"pid {pid} is a thread of process {info.tgid}, not a process"
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
        while True:
            exited_before = self._pidfd_exited()
            now = self.procfs.read(self.pid)
            if not self._same(now):
                return None
            assert now is not None
            if now.zombie:
                return now
            if exited_before:
                return None  # ours had exited before the read, yet a live process holds the pid: reused in one tick
            if not self._pidfd_exited():
                return now  # running before and after the read: the read was of ours
            # ours exited around the read (it showed the state of a process still on its way out): read again,
            # now with its exit known before the read

    def _pidfd_exited(self) -> bool:
        if self._pidfd is None:
            return False
        p = select.poll()
        p.register(self._pidfd, select.POLLIN)
        return bool(p.poll(0))

    def signal(self, sig: signal.Signals, main_thread: bool = False) -> Delivery:
        """Send `sig` if, and only if, the pid still names the pinned process and it is not a zombie. With
        `main_thread`, to its main thread only (`tgkill`; its thread id is the pid): a signal directed at the
        process may land in any thread that does not block it, one of a library's (a collective's I/O thread,
        whose blocking calls it interrupts); DENIED where `tgkill` can't be had."""
        if not self.procfs.real:
            raise RuntimeError(f"won't signal pid {self.pid} found in a fake /proc ({self.procfs.root})")
        now = self.current()
        if now is None:
            return Delivery.GONE
        if now.zombie:
            return Delivery.EXITED
        try:
            if main_thread:
                if not _tgkill(self.pid, self.pid, int(sig)):
                    return Delivery.DENIED
            elif self._pidfd is not None:
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


_TGKILL_SYSCALLS = {"x86_64": 234, "aarch64": 131, "ppc64le": 250, "s390x": 241, "riscv64": 131}
"""`tgkill`'s system call number where glibc has no `tgkill()` (before 2.30)."""


def _tgkill(tgid: int, tid: int, sig: int) -> bool:
    """`tgkill(tgid, tid, sig)`: the signal to one thread; False when it can't be called here. Raises
    ProcessLookupError / PermissionError as `os.kill` does."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return False
    call = getattr(libc, "tgkill", None)
    if call is not None:
        result = call(ctypes.c_int(tgid), ctypes.c_int(tid), ctypes.c_int(sig))
    else:
        number = _TGKILL_SYSCALLS.get(os.uname().machine)
        if number is None:
            return False
        result = libc.syscall(ctypes.c_long(number), ctypes.c_int(tgid), ctypes.c_int(tid), ctypes.c_int(sig))
    if result != 0:
        errno = ctypes.get_errno()
        if errno == 3:  # ESRCH
            raise ProcessLookupError(errno, os.strerror(errno))
        if errno == 1:  # EPERM
            raise PermissionError(errno, os.strerror(errno))
        return False
    return True
