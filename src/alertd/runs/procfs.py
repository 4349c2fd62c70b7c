"""Reading process facts from /proc (Linux): no signals here, so sources and notifiers can both use it.

A process is identified by its pid AND its start time (field 22 of `/proc/<pid>/stat`, clock ticks since
boot, counted on CLOCK_BOOTTIME): a pid alone may be reused by an unrelated process once the first one is
gone. `Procfs.ticks_at` turns an epoch instant into the same unit, exactly (no whole-second boot time), so
"did this process start after that instant?" is answered to within one tick (10 ms at USER_HZ 100).

`Procfs` takes a `root` so tests can point it at a fake /proc tree; `real` says whether it is the real one.
"""

from __future__ import annotations

import math
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

_STAT_STATE, _STAT_PPID, _STAT_FLAGS, _STAT_START, _STAT_EXIT = 0, 1, 6, 19, 49
"""Indexes into the fields after `(comm)` of /proc/<pid>/stat: fields 3, 4, 9, 22 and 52 of proc(5)."""
_PF_KTHREAD = 0x00200000
ENVIRON_MAX = 1 << 20
"""Bytes of a process's environment read at most."""
_O_ACCMODE = 0o3
SCAN_MAX = 65_536
"""Processes one scan of the tree (`descendants`) looks at, at most."""
RANKS_MAX = 1024
"""Rank processes `rank_processes` returns at most."""


_INTERPRETER = re.compile(r"(python|pypy)[0-9.]*[dmu]?")
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
_VALUED = frozenset("WX")
"""Python's options whose value follows them (`-W error`, `-X dev`): never a script."""
PROGRAM_MAX = 64
"""Characters of a program's or a script's name shown at most."""


def program_name(argv: Sequence[str]) -> str:
    """What a report may say a process runs: its executable's base name, and for a Python interpreter the
    script's base name (`python3 train.py`), its module (`python3 -m torch.distributed.run`) or `-c` (never the
    code). No argument that could carry a secret: not the script's arguments, not `-c`'s code, not a path's
    directories; a title a process set for itself (setproctitle) counts only up to its first blank."""
    if not argv or not argv[0].split():
        return ""
    exe = os.path.basename(argv[0].split()[0])[:PROGRAM_MAX]
    if not _INTERPRETER.fullmatch(exe):
        return exe
    args = iter(argv[1:])
    for arg in args:
        if arg == "--":
            script = next(args, "")
            return f"{exe} {os.path.basename(script)[:PROGRAM_MAX]}".rstrip()
        if arg.startswith("--"):
            if arg == "--check-hash-based-pycs":
                next(args, None)
            continue
        if not arg.startswith("-") or arg == "-":
            return f"{exe} {os.path.basename(arg)[:PROGRAM_MAX] or arg}"
        for i, letter in enumerate(arg[1:], 1):
            rest = arg[i + 1 :]
            if letter == "c":
                return f"{exe} -c"
            if letter == "m":
                module = rest or next(args, "")
                return f"{exe} -m {module}" if _MODULE.fullmatch(module) and len(module) <= PROGRAM_MAX else f"{exe} -m"
            if letter in _VALUED:
                if not rest:
                    next(args, None)
                break
    return exe


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
    tgid: int | None = None
    """The thread group (process) id from `status`; differs from `pid` when `pid` names a thread."""
    argv: tuple[str, ...] = ()
    """The arguments one by one (`cmdline` joins them); empty for kernel threads and zombies."""

    @property
    def program(self) -> str:
        """The program without its arguments, safe to report (`program_name`)."""
        return program_name(self.argv)

    @property
    def zombie(self) -> bool:
        """True when the process has exited and waits to be reaped."""
        return self.state in ("Z", "X")


class Procfs:
    """Reads process facts from a /proc tree (`root`, the real one by default)."""

    def __init__(self, root: str | os.PathLike[str] = "/proc") -> None:
        self.root = Path(root)
        self.real = self.root.resolve() == Path("/proc")
        self.tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
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
        argv = tuple(a.decode(errors="replace") for a in raw_cmd.split(b"\0") if a)
        return ProcInfo(
            pid=pid,
            ppid=int(fields[_STAT_PPID]),
            state=state,
            start_ticks=int(fields[_STAT_START]),
            uid=_real_uid(status),
            cmdline=" ".join(argv),
            kernel_thread=bool(int(fields[_STAT_FLAGS]) & _PF_KTHREAD),
            exit_code=exit_code,
            tgid=_status_int(status, "Tgid:"),
            argv=argv,
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

    def descendants(self, pid: int, *, limit: int = SCAN_MAX) -> list[int]:
        """The processes below `pid` (children, grandchildren, ...), parents before their children, from one scan
        of at most `limit` processes (their `stat` only)."""
        children: dict[int, list[int]] = {}
        try:
            entries = os.scandir(self.root)
        except OSError:
            return []
        with entries:
            for n, entry in enumerate(entries):
                if n >= limit:
                    break
                if not entry.name.isdigit():
                    continue
                try:
                    stat = (self.root / entry.name / "stat").read_text(errors="replace")
                    ppid = int(stat[stat.rindex(")") + 2 :].split()[_STAT_PPID])
                except (OSError, ValueError, IndexError):
                    continue
                children.setdefault(ppid, []).append(int(entry.name))
        out: list[int] = []
        queue = sorted(children.get(pid, []))
        seen = {pid}
        while queue:
            p = queue.pop(0)
            if p in seen:
                continue
            seen.add(p)
            out.append(p)
            queue.extend(sorted(children.get(p, [])))
        return out

    def rank_processes(self, pid: int, uid: int, *, limit: int = RANKS_MAX) -> dict[str, int]:
        """The ranks among the processes below `pid` that run as `uid`: rank (`RANK` in the environment it started
        with, as torchrun sets it) -> pid, the topmost process of each rank (a DataLoader worker inherits its
        rank's environment and is not the rank), at most `limit`."""
        ranks: dict[str, int] = {}
        for p in self.descendants(pid):
            if len(ranks) >= limit:
                break
            info = self.read(p)
            if info is None or info.uid != uid or info.zombie or info.kernel_thread:
                continue
            env = self.environ(p, info.start_ticks, max_bytes=ENVIRON_MAX)
            value = (env or {}).get("RANK", "").strip()
            if value.isdigit() and str(int(value)) not in ranks:
                ranks[str(int(value))] = p
        return ranks

    def boot_epoch(self) -> float:
        """The epoch instant of boot, as process start times count it.

        On the real /proc: now minus CLOCK_BOOTTIME (exact; follows the wall clock as it is now). On a fake
        tree: its `stat` file's whole-second `btime` line.
        """
        if self.real and hasattr(time, "CLOCK_BOOTTIME"):
            return time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)
        if self._btime is None:
            for line in (self.root / "stat").read_text().splitlines():
                if line.startswith("btime "):
                    self._btime = float(line.split()[1])
                    break
            else:
                raise OSError(f"{self.root / 'stat'} has no btime line")
        return self._btime

    def start_epoch(self, info: ProcInfo) -> float:
        """When the process started, in epoch seconds (to one clock tick on the real /proc)."""
        return self.boot_epoch() + info.start_ticks / self.tick

    def ticks_at(self, epoch: float) -> int:
        """The clock tick after boot that holds the instant `epoch`: a process with a larger
        `start_ticks` started after `epoch` (with an equal one, within the same tick)."""
        return math.floor((epoch - self.boot_epoch()) * self.tick)

    def holds(self, pid: int, ident: tuple[int, int], *, writable: bool, max_fds: int) -> bool | None:
        """Whether `pid` has the file `ident` (st_dev, st_ino) open; with `writable`, open for writing.

        Looks at no more than `max_fds` of its descriptors (`/proc/<pid>/fd/*` links, stat()ed, which
        follows them to the open file, deleted or not). None when they can't be listed (the process is gone,
        or is another user's and alertd is not privileged).
        """
        fd_dir = self.root / str(pid) / "fd"
        try:
            with os.scandir(fd_dir) as it:
                for n, entry in enumerate(it):
                    if n >= max_fds:
                        return False
                    try:
                        st = os.stat(entry.path)
                    except OSError:  # closed meanwhile, or a socket/anon inode that won't stat
                        continue
                    if (st.st_dev, st.st_ino) != ident:
                        continue
                    if not writable or self._fd_writable(pid, entry.name):
                        return True
        except (FileNotFoundError, ProcessLookupError, NotADirectoryError, PermissionError):
            return None
        return False

    def environ(self, pid: int, start_ticks: int, *, max_bytes: int = ENVIRON_MAX) -> dict[str, str] | None:
        """The environment `pid` started with (`/proc/<pid>/environ`, at most `max_bytes` read), only while
        `pid` is still the process that started at `start_ticks` (checked before and after the read).

        None when it is gone or reused, or when alertd may not read it (another user's process).
        """
        before = self.read(pid)
        if before is None or before.start_ticks != start_ticks or before.zombie:
            return None
        try:
            with open(self.root / str(pid) / "environ", "rb") as f:
                raw = f.read(max_bytes)
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            return None
        after = self.read(pid)
        if after is None or after.start_ticks != start_ticks:
            return None
        if len(raw) >= max_bytes:  # cut: the last entry may be partial, so it is not taken
            raw = raw[: raw.rfind(b"\0") + 1]
        env: dict[str, str] = {}
        for item in raw.split(b"\0"):
            key, eq, value = item.partition(b"=")
            if eq and key:
                env[key.decode(errors="replace")] = value.decode(errors="replace")
        return env

    def _fd_writable(self, pid: int, fd: str) -> bool:
        try:
            text = (self.root / str(pid) / "fdinfo" / fd).read_text()
        except OSError:
            return False
        for line in text.splitlines():
            if line.startswith("flags:"):
                return int(line.split()[1], 8) & _O_ACCMODE in (os.O_WRONLY, os.O_RDWR)
        return False


def _status_int(status: str, key: str) -> int | None:
    for line in status.splitlines():
        if line.startswith(key):
            return int(line.split()[1])
    return None


def _real_uid(status: str) -> int:
    uid = _status_int(status, "Uid:")
    if uid is None:
        raise ValueError("no Uid line in /proc/<pid>/status")
    return uid
