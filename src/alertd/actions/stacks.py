"""The stacks action: what each process of a stalled run is doing, attached to the alert (issue "Distributed runs",
hangs diagnosed with their stacks).

For each alert that newly fires (once per firing), the run's processes on this host are found and proven exactly
as `kill`'s targets are (`alertd.actions.targets.ProcessTargets`: alertd exec's child, or the run's verified
writer, with the alert's `pid` label checked against it), then their ranks: under `target: child` the child's
descendants with RANK in their environment and the child's uid (the child itself when none has), under `target:
writer` the processes of the writer's torchrun job (its parent's children with RANK, the same TORCHELASTIC_RUN_ID
and uid). Each must pass `procs.refusal` (never alertd, its ancestors, another user's process...).

Each process is captured at most once at a time per run (a second firing meanwhile is reported as such), in a
worker thread, and never stopped beyond a moment:
1. alertd's callbacks' hook (`alertd.integrations.stacks`), where the process holds its stacks file open and
   catches the signal (/proc/<pid>/status `SigCgt`): the signal, then up to `wait` for the file to grow; the
   new bytes are read through /proc/<pid>/fd (the very file the process holds);
2. else `py-spy dump --pid N` (it pauses the process while it reads its memory: a moment), bounded in time and
   output; it needs ptrace, and the report says so plainly when it is refused;
3. else the report says why no stack could be taken.

The report (`StacksReport`): `summary()`, a size-capped line per process with its main thread's innermost frames
(the notification: "rank 2 in sleep ...; rank 0 in all_reduce ..."), and `as_json()`, the whole dump per process,
at most `max_bytes` in all, which lands on the run's actions (the run page, `GET /api/v1/runs`). Under alertd exec
(`target: child`) the report also carries the child's last output lines that look like a collective's watchdog, its
flight recorder or a process group's timeout (`collective_lines`, from `ChildRun.collective_lines`): all of them in
`as_json()`, the last `COLLECTIVE_SHOWN` (cut) in `summary()`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import shutil
import signal
import socket
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import cast

from alertd.actions.base import Firings, Refused, Reports
from alertd.actions.config import KillConfig, StacksConfig
from alertd.actions.procs import Delivery, ProcessHandle, Procfs, ProcInfo, refusal
from alertd.actions.targets import ChildLookup, ClaimsLookup, ProcessTargets, WriterLookup
from alertd.errors import NotifyError
from alertd.integrations.stacks import STACKS_FILE, stacks_signal
from alertd.model import Notification, Transition
from alertd.subproc import run_program

log = logging.getLogger(__name__)

POLL = 0.02
"""Seconds between two looks at a stacks file while waiting for it to grow."""
SETTLE = 0.1
"""A stacks file that has not grown for this long is taken as written."""
FRAMES_SHOWN = 3
"""Innermost frames of each process's main thread in the summary."""
COLLECTIVE_SHOWN = 3
"""The newest collective lines (watchdog, flight recorder) in the summary..."""
COLLECTIVE_CHARS = 200
"""... each cut to this many characters."""
MAX_FDS = 4096
"""Open files of a process looked through for its stacks file."""
CLOSE_WAIT = 5.0
"""Seconds `aclose` waits for running captures."""

_FH_THREAD = re.compile(r"^(Current thread|Thread) (0x[0-9a-f]+)")
_FH_FRAME = re.compile(r'^\s+File "(.*)", line (\d+|\?\?\?) in (.*)$')
_SPY_THREAD = re.compile(r'^Thread (\S+)(?: \((\w+)\))?(?: "(.*)")?')
_SPY_FRAME = re.compile(r"^\s{4}(\S.*?) \((.*?)(?::(\d+))?\)$")


@dataclass(frozen=True, slots=True)
class ProcStack:
    """One process's stacks: how they were taken (`faulthandler`, `py-spy`, or `none` with `error` saying why)."""

    pid: int
    rank: str | None
    method: str
    dump: str = ""
    error: str = ""
    truncated: bool = False
    frames: tuple[str, ...] = ()
    """The main thread's innermost frames, innermost first (`all_reduce (distributed_c10d.py:2806)`)."""

    def as_json(self) -> dict[str, object]:
        return {
            "pid": self.pid,
            "rank": self.rank,
            "method": self.method,
            "error": self.error or None,
            "truncated": self.truncated,
            "frames": list(self.frames),
            "dump": self.dump,
        }


@dataclass(frozen=True, slots=True)
class StacksReport:
    """What the stacks notifier captured (or why it could not) for one firing alert."""

    notifier: str
    fingerprint: str
    rule: str
    target: str
    host: str
    run: str = ""
    pid: int | None = None
    """The proven process the ranks were found from (the child, the writer)."""
    processes: tuple[ProcStack, ...] = ()
    refused: str | None = None
    note: str = ""
    stamp: str = ""
    summary_chars: int = 3000
    took: float = 0.0
    collective_lines: tuple[str, ...] | None = None
    """alertd exec's child's last output lines from a collective's watchdog or flight recorder (None: not taken, as
    under `target: writer`)."""

    @property
    def action(self) -> str:
        return "stacks"

    @property
    def signals(self) -> tuple[()]:
        return ()

    def summary(self) -> str:
        """Per process its main thread's innermost frames, at most `summary_chars` characters."""
        head = f"stacks {self.notifier} for {self.rule}"
        if self.run:
            head += f" (run {self.run})"
        if self.refused is not None:
            who = f" pid {self.pid}" if self.pid is not None else ""
            text = f"{head}: REFUSED{who} on {self.host}: {self.refused}"
        else:
            parts = []
            for p in sorted(self.processes, key=_rank_order):
                who = f"rank {p.rank} (pid {p.pid})" if p.rank is not None else f"pid {p.pid}"
                if p.method == "none":
                    parts.append(f"{who}: no stack: {p.error}")
                elif p.frames:
                    parts.append(f"{who} in {' < '.join(p.frames)} [{p.method}]")
                else:
                    parts.append(f"{who}: no frame of its main thread [{p.method}]")
            n = len(self.processes)
            text = f"{head}: {n} process{'es' if n != 1 else ''} on {self.host}: " + "; ".join(parts)
        if self.note:
            text += f"; {self.note}"
        tail = self._collective_tail()
        if len(text) + len(tail) > self.summary_chars:  # the stacks are cut first, the collective lines keep a place
            room = max(self.summary_chars - len(tail), self.summary_chars // 2)
            if len(text) > room:
                text = text[: room - 1] + "…"
        text += tail
        if len(text) > self.summary_chars:
            text = text[: self.summary_chars - 1] + "…"
        return text

    def _collective_tail(self) -> str:
        lines = (self.collective_lines or ())[-COLLECTIVE_SHOWN:]
        if not lines or self.refused is not None:
            return ""
        cut = [line if len(line) <= COLLECTIVE_CHARS else line[: COLLECTIVE_CHARS - 1] + "…" for line in lines]
        n = len(self.collective_lines or ())
        head = f"last {len(lines)} of {n}" if n > len(lines) else f"{n}"
        return f"; collective log line{'s' if n != 1 else ''} ({head}): " + " | ".join(cut)

    def as_json(self) -> dict[str, object]:
        """The whole dump per process (the run's actions entry: the run page, `GET /api/v1/runs`)."""
        return {
            "target": self.target,
            "host": self.host,
            "pid": self.pid,
            "took": round(self.took, 3),
            "processes": [p.as_json() for p in sorted(self.processes, key=_rank_order)],
        } | ({} if self.collective_lines is None else {"collective_lines": list(self.collective_lines)})


def _rank_order(p: ProcStack) -> tuple[int, int]:
    return (int(p.rank) if p.rank is not None and p.rank.isdigit() else 1 << 30, p.pid)


class StacksNotifier:
    """Captures the stacks of the alert's run's processes (see the module docstring for what is trusted).

    `writers`, `claims`, `child`: as `KillNotifier`'s; `report` receives every `StacksReport`; `collective_lines`:
    alertd exec's child's last watchdog / flight recorder lines (`ChildRun.collective_lines`), taken into the
    reports under `target: child`."""

    def __init__(
        self,
        name: str,
        cfg: StacksConfig,
        *,
        report: Callable[[StacksReport], Awaitable[None]] | None = None,
        writers: WriterLookup | None = None,
        claims: ClaimsLookup | None = None,
        child: ChildLookup | None = None,
        collective_lines: Callable[[], list[str]] | None = None,
        hostname: str | None = None,
        proc_root: str | os.PathLike[str] = "/proc",
    ) -> None:
        self.name = name
        self.cfg = cfg
        self.hostname = hostname or socket.gethostname()
        self.procfs = Procfs(proc_root)
        self._reports: Reports[StacksReport] = Reports(f"stacks {name}", log, report)
        self.history = self._reports.history
        kill = KillConfig(type="kill", target=cfg.target, allow_other_users=cfg.allow_other_users)
        self._targets = ProcessTargets(kill, self.procfs, self.hostname, writers=writers, claims=claims, child=child)
        self._collective = collective_lines if cfg.target == "child" else None
        self._acted = Firings()
        self._busy: dict[str, float] = {}
        """The runs (their key) being captured now, and since when."""
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False

    async def send(self, notification: Notification) -> None:
        """Capture the stacks for each alert of `notification` that newly fires (in the background)."""
        if self._closed:
            raise NotifyError(f"stacks notifier {self.name} is closed", recoverable=False)
        for alert in self._acted.fresh(notification, log, f"stacks {self.name}"):
            self._acted.add(alert.firing_id)
            labels = dict(alert.labels)
            run = labels.get("run")
            key = f"{labels.get('source', '')}\0{run}" if run is not None else f"alert\0{alert.fingerprint}"
            base = StacksReport(
                self.name,
                alert.fingerprint,
                alert.rule,
                self.cfg.target,
                self.hostname,
                run=labels.get("run", ""),
                stamp=f"{alert.firing_id[1]:.6f}",
                summary_chars=self.cfg.summary_chars,
            )
            since = self._busy.get(key)
            if since is not None:
                busy = f"a capture of this run is already under way ({time.monotonic() - since:.1f} s): not taken twice"
                await self._reports.emit(replace(base, refused=busy))
                continue
            self._busy[key] = time.monotonic()
            task = asyncio.create_task(self._capture(base, alert, key), name=f"stacks-{self.name}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def wait_idle(self) -> None:
        """Wait until every running capture has reported (tests, orderly shutdown)."""
        while pending := [t for t in self._tasks if not t.done()]:
            await asyncio.wait(pending)

    async def aclose(self) -> None:
        self._closed = True
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=CLOSE_WAIT)
        for task in list(self._tasks):
            task.cancel()

    # -- one capture -----------------------------------------------------------------------------------------

    async def _capture(self, base: StacksReport, alert: Transition, key: str) -> None:
        t0 = time.monotonic()
        try:
            try:
                root, procs = await asyncio.to_thread(self._processes, alert)
            except Refused as r:
                await self._reports.emit(replace(base, pid=r.pid, refused=r.reason))
                return
            each = max(1024, self.cfg.max_bytes // max(1, len(procs)))
            found = await asyncio.gather(*(self._one(info, rank, each) for info, rank in procs))
            note = ""
            if len(procs) >= self.cfg.max_processes:
                note = f"only the first {self.cfg.max_processes} processes (max_processes)"
            report = replace(base, pid=root.pid, processes=tuple(found), note=note, took=time.monotonic() - t0)
            if self._collective is not None:
                report = replace(report, collective_lines=tuple(self._collective()))
            await self._reports.emit(report)
        except Exception as e:  # a bug or an unreadable /proc: reported, never retried
            log.exception("stacks %s: internal error on %s", self.name, alert.rule)
            await self._reports.emit(replace(base, refused=f"internal error: {e}"))
        finally:
            self._busy.pop(key, None)

    def _processes(self, alert: Transition) -> tuple[ProcInfo, list[tuple[ProcInfo, str | None]]]:
        """The proven root process and the processes to capture, each with its rank (blocking /proc reads)."""
        targets, refusals = self._targets.resolve(alert)
        if not targets:
            pid, reason, _ = refusals[0] if refusals else (None, "no process found", "")
            raise Refused(reason, pid)
        root, _ = targets[0]
        env = self.procfs.environ(root.pid, root.start_ticks) or {}
        if self.cfg.target == "child":
            ranks = self._ranks(lambda info: root.pid in self.procfs.ancestors(info.pid), root, None)
        elif "RANK" in env:
            job = env.get("TORCHELASTIC_RUN_ID")
            ranks = self._ranks(lambda info: info.ppid == root.ppid, root, job)
        else:
            ranks = []
        if not ranks:
            return root, [(root, env.get("RANK"))]
        return root, ranks[: self.cfg.max_processes]

    def _ranks(
        self, member: Callable[[ProcInfo], bool], root: ProcInfo, job: str | None
    ) -> list[tuple[ProcInfo, str | None]]:
        ancestors = self.procfs.ancestors(os.getpid())
        out: list[tuple[ProcInfo, str | None]] = []
        for pid in self.procfs.pids():
            info = self.procfs.read(pid)
            if info is None or info.uid != root.uid or not member(info):
                continue
            if refusal(self.procfs, pid, info, allow_other_users=self.cfg.allow_other_users, ancestors=ancestors):
                continue
            env = self.procfs.environ(pid, info.start_ticks)
            if env is None or "RANK" not in env:
                continue
            if job is not None and env.get("TORCHELASTIC_RUN_ID") != job:
                continue
            out.append((info, env["RANK"]))
        out.sort(key=lambda pr: (int(pr[1]) if pr[1] and pr[1].isdigit() else 1 << 30, pr[0].pid))
        return out

    async def _one(self, info: ProcInfo, rank: str | None, cap: int) -> ProcStack:
        """py-spy first (the kernel stops and resumes the process: nothing runs inside it), else the callbacks'
        signal hook: a signal once aborted a Gloo rank waiting in all_reduce ("terminate called without an active
        exception"), so it is the fallback where py-spy is off or may not attach."""
        spied = await self._py_spy(info, rank, cap)
        if spied.method != "none":
            return spied
        hooked = await asyncio.to_thread(self._hook, info, rank, cap)
        if hooked is not None and hooked.method != "none":
            return hooked
        if hooked is not None:
            return replace(spied, error=f"{spied.error}; {hooked.error}")
        return spied

    def _hook(self, info: ProcInfo, rank: str | None, cap: int) -> ProcStack | None:
        """Through alertd's callbacks' hook; None when the process has none."""
        if not self.procfs.real:
            return None
        fd = self._stacks_fd(info.pid)
        sig = stacks_signal()
        if fd is None or not self._catches(info.pid, sig):
            return None
        where = f"/proc/{info.pid}/fd/{fd}"
        try:
            before = os.stat(where).st_size
        except OSError as e:
            return ProcStack(info.pid, rank, "none", error=f"its stacks file can't be read: {e.strerror}")
        handle = ProcessHandle(self.procfs, info)
        try:
            delivery = handle.signal(cast(signal.Signals, sig), main_thread=True)  # never a library's thread
        finally:
            handle.close()
        if delivery is not Delivery.SENT:
            return ProcStack(info.pid, rank, "none", error=f"the signal could not be sent ({delivery.value})")
        deadline = time.monotonic() + self.cfg.wait
        size, changed = before, time.monotonic()
        while time.monotonic() < deadline:
            time.sleep(POLL)
            try:
                now = os.stat(where).st_size
            except OSError:
                break
            if now != size:
                size, changed = now, time.monotonic()
            elif size > before and time.monotonic() - changed >= SETTLE:
                break
        if size <= before:
            return ProcStack(
                info.pid, rank, "none", error=f"its stacks file did not grow within {self.cfg.wait:g}s of the signal"
            )
        try:
            with open(where, "rb") as f:
                f.seek(before)
                raw = f.read(min(size - before, cap))
        except OSError as e:
            return ProcStack(info.pid, rank, "none", error=f"its stacks file can't be read: {e.strerror}")
        text = raw.decode(errors="replace")
        return ProcStack(
            info.pid, rank, "faulthandler", text, truncated=size - before > cap, frames=_faulthandler_frames(text)
        )

    def _stacks_fd(self, pid: int) -> str | None:
        base = self.procfs.root / str(pid) / "fd"
        try:
            fds = os.listdir(base)
        except OSError:
            return None
        for fd in fds[:MAX_FDS]:
            try:
                target = os.readlink(base / fd)
            except OSError:
                continue
            if target.startswith("/") and STACKS_FILE.fullmatch(os.path.basename(target)):
                return fd
        return None

    def _catches(self, pid: int, sig: int) -> bool:
        try:
            status = (self.procfs.root / str(pid) / "status").read_text()
        except OSError:
            return False
        m = re.search(r"^SigCgt:\s*([0-9a-fA-F]+)$", status, re.M)
        return m is not None and bool(int(m.group(1), 16) >> (sig - 1) & 1)

    async def _py_spy(self, info: ProcInfo, rank: str | None, cap: int) -> ProcStack:
        none = ProcStack(info.pid, rank, "none")
        if not self.cfg.py_spy:
            return replace(none, error="no alertd stacks hook (alertd's callbacks), and py_spy is off")
        exe = _program(self.cfg.py_spy)
        if exe is None:
            return replace(none, error=f"no alertd stacks hook, and {self.cfg.py_spy!r} is not installed")
        if not self.procfs.real:
            return replace(none, error="a fake /proc: py-spy not run")
        try:
            done = await run_program(
                [exe, "dump", "--pid", str(info.pid)], timeout=self.cfg.py_spy_timeout, max_stdout=cap
            )
        except OSError as e:
            return replace(none, error=f"py-spy could not be started: {e.strerror or e}")
        out = done.stdout.decode(errors="replace")
        if done.timed_out:
            return replace(none, error=f"py-spy dump of pid {info.pid} took over {self.cfg.py_spy_timeout:g}s")
        if done.returncode != 0 or not out.strip():
            err = (done.stderr.decode(errors="replace").strip() or out.strip())[-500:]
            return replace(none, error=_py_spy_error(info.pid, err))
        return ProcStack(info.pid, rank, "py-spy", out, truncated=done.stdout_cut, frames=_py_spy_frames(out))


def _program(name: str) -> str | None:
    if "/" in name:
        return name if os.access(name, os.X_OK) else None
    found = shutil.which(name)
    if found is None:  # installed beside alertd (`pip install alertd[stacks]` in a venv not on PATH)
        here = Path(sys.executable).with_name(name)
        found = str(here) if os.access(here, os.X_OK) else None
    return found


def _py_spy_error(pid: int, err: str) -> str:
    low = err.lower()
    if "permission denied" in low or "operation not permitted" in low or "ptrace" in low:
        try:
            scope = Path("/proc/sys/kernel/yama/ptrace_scope").read_text().strip()
            why = f"ptrace_scope {scope}"
        except OSError:
            why = "ptrace refused"
        return (
            f"py-spy can't attach to pid {pid}: permission denied ({why}: run alertd as root or give it "
            f"CAP_SYS_PTRACE): {err[-200:]}"
        )
    return f"py-spy dump of pid {pid} failed: {err}"


def _faulthandler_frames(text: str) -> tuple[str, ...]:
    """The innermost frames of the main thread (the one whose outermost frame is `<module>`, else the first)."""
    threads: list[list[str]] = []
    for line in text.splitlines():
        if _FH_THREAD.match(line):
            threads.append([])
        elif (m := _FH_FRAME.match(line)) and threads:
            threads[-1].append(f"{m.group(3)} ({os.path.basename(m.group(1))}:{m.group(2)})")
    return _main_frames(threads, lambda frames: bool(frames) and frames[-1].startswith("<module> "))


def _py_spy_frames(text: str) -> tuple[str, ...]:
    threads: list[list[str]] = []
    main = -1
    for line in text.splitlines():
        if m := _SPY_THREAD.match(line):
            threads.append([])
            if m.group(3) == "MainThread":
                main = len(threads) - 1
        elif (f := _SPY_FRAME.match(line)) and threads:
            where = os.path.basename(f.group(2)) + (f":{f.group(3)}" if f.group(3) else "")
            threads[-1].append(f"{f.group(1)} ({where})")
    if main >= 0:
        return tuple(threads[main][:FRAMES_SHOWN])
    return _main_frames(threads, lambda frames: bool(frames) and frames[-1].startswith("<module> "))


def _main_frames(threads: list[list[str]], is_main: Callable[[list[str]], bool]) -> tuple[str, ...]:
    chosen = next((t for t in threads if is_main(t)), threads[0] if threads else [])
    return tuple(chosen[:FRAMES_SHOWN])


__all__ = ["ProcStack", "StacksNotifier", "StacksReport"]
