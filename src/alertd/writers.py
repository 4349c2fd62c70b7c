"""Which process writes a run's event files: verified through /proc, never taken from a file name alone.

TensorBoard event file names carry a host and a pid (`events.out.tfevents.<secs>.<host>.<pid>.<n>`).
Anyone who can create a file in a logdir can write any pid there, so a name is only a `WriterClaim`.
`WriterRegistry.check` turns a claim into a `VerifiedWriter` when, and only when, all of this holds:

1. the host in the name equals this machine's host name exactly (a full name matches only the same
   full name, a short name only the same short name);
2. the path is a regular file, not a symbolic link (`lstat`), with exactly one hard link: a link to
   another user's file is never "their" event file;
3. the pid names a live process (not a thread id, a zombie or a kernel thread) whose real uid owns the
   file;
4. that process holds this very file open for writing: one of its `/proc/<pid>/fd/*` links stat()s to
   the file's (st_dev, st_ino), and its `/proc/<pid>/fdinfo` flags are O_WRONLY or O_RDWR (at most
   `max_fds` descriptors are looked at per process);
5. the process read before and after the descriptors were listed is the same one (pid and start time).

The writer is then pinned by (pid, start time in clock ticks) and stays the verified writer "when last
seen": later checks update `holding` (it still holds the file) and `alive` (the same pid + start time
exists), so a writer that closed its file is still the run's writer while it lives, and its liveness
tells a stalled run from an ended one. Nothing else (a `pid` label of a samples line, a name alone)
ever makes a verified writer.

What it can't see: a writer that opens its file only for each write. TensorBoard's own
`EventFileWriter` without TensorFlow installed (the one torch's `SummaryWriter` uses) appends with an
open/write/close per flush, so it holds nothing between flushes and is never verified; TensorFlow's and
tensorboardX's writers keep the file open. A training process can make itself verifiable by calling
`hold(path)` on its event file (alertd's training callbacks do).

Check order races, honestly: the claim is verified at a `check` (every evaluation tick), so a writer
that opens, writes a NaN and exits between two checks is never verified (`target: writer` then refuses).
Between the check and a signal, the kill notifier re-reads the pid and compares the start time, then
signals through a pidfd; see `alertd.notify.procs`.

Memory is bounded: at most `max_entries` writers (exited ones forgotten first, and any exited for
`forget_after` seconds), and a negative cache of failed claims capped likewise. Pure Python over Linux
/proc; elsewhere (no /proc) nothing is ever verified.
"""

from __future__ import annotations

import logging
import os
import socket
import stat
import sys
import threading
from collections.abc import Iterable
from dataclasses import dataclass, replace

from alertd.procfs import Procfs, ProcInfo

log = logging.getLogger(__name__)

MAX_FDS = 4096
"""Descriptors looked at per process and check: a process with more is not searched further."""
MAX_SCANS = 256
"""Unverified claims whose descriptors are listed per check (newest files first)."""
RECHECK = 30.0
"""Seconds before an unchanged claim that failed (same file size and mtime, same process) is looked at again."""


@dataclass(frozen=True, slots=True)
class WriterClaim:
    """What an event file's name claims: process `pid` on `host` writes `path` (run `run` of `source`)."""

    source: str
    run: str
    path: str
    host: str
    pid: int


@dataclass(frozen=True, slots=True)
class VerifiedWriter:
    """A process seen holding a run's event file open for writing, pinned by pid and start time.

    `holding`: it held the file at the last check where it was alive (so `holding and not alive` means it
    vanished while holding the file; `closed_at` is set when it was seen to close it first). `alive`: the
    same pid with the same start time existed at the last check. Times are epoch seconds of the checks.
    """

    source: str
    run: str
    path: str
    host: str
    pid: int
    start_ticks: int
    uid: int
    verified_at: float
    holding: bool
    alive: bool
    closed_at: float | None = None
    gone_at: float | None = None


@dataclass(slots=True)
class _Entry:
    writer: VerifiedWriter
    ident: tuple[int, int]


class WriterRegistry:
    """Verifies writer claims against /proc and remembers the verified writers (see the module docstring).

    `check` does blocking /proc work: run it in a worker thread. `writer` and `writers` may be called
    from any thread meanwhile. `hostname` overrides `socket.gethostname()`; `procfs` the /proc tree.
    """

    def __init__(
        self,
        hostname: str | None = None,
        procfs: Procfs | None = None,
        *,
        max_entries: int = 1024,
        forget_after: float = 3600.0,
        max_fds: int = MAX_FDS,
        max_scans: int = MAX_SCANS,
    ) -> None:
        self.hostname = hostname or socket.gethostname()
        self.procfs = procfs or Procfs()
        self.enabled = sys.platform.startswith("linux") and self.procfs.root.is_dir()
        self.max_entries = max_entries
        self.forget_after = forget_after
        self.max_fds = max_fds
        self.max_scans = max_scans
        self._entries: dict[tuple[str, str], _Entry] = {}
        self._failed: dict[tuple[object, ...], float] = {}
        self._noted: dict[tuple[str, str], None] = {}
        self._lock = threading.Lock()
        self._checking = threading.Lock()

    # -- lookups (any thread) ------------------------------------------------------------------

    def writer(self, source: str, run: str) -> VerifiedWriter | None:
        """The run's verified writer: the newest living one, else the newest that exited; None if none.

        This is the only thing that authorizes the kill notifier's `target: writer`.
        """
        with self._lock:
            found = [e.writer for e in self._entries.values() if e.writer.source == source and e.writer.run == run]
        if not found:
            return None
        return max(found, key=lambda w: (w.alive, w.verified_at, w.path))

    def writers(self) -> list[VerifiedWriter]:
        """Every remembered writer, ordered by source, run and verification time."""
        with self._lock:
            out = [e.writer for e in self._entries.values()]
        return sorted(out, key=lambda w: (w.source, w.run, w.verified_at, w.path))

    # -- checking (a worker thread) ------------------------------------------------------------

    def check(self, claims: Iterable[WriterClaim], now: float) -> list[str]:
        """Verify new claims, update known writers (holding, alive), forget old ones.

        Blocking (reads /proc): call it from a worker thread. Returns what changed, in words, for the
        log: writers verified, files closed or held again, writers exited or forgotten, and (once per
        file) claims that look spoofed (a pid of another uid, a link instead of a file).
        """
        if not self.enabled:
            return []
        with self._checking:
            changes: list[str] = []
            with self._lock:
                known = dict(self._entries)
            for key, entry in known.items():
                updated = self._update(entry, now, changes)
                if updated is not entry.writer:
                    with self._lock:
                        if key in self._entries:
                            self._entries[key] = _Entry(updated, entry.ident)
            self._verify_new(claims, known, now, changes)
            self._forget(now, changes)
            return changes

    def _update(self, entry: _Entry, now: float, changes: list[str]) -> VerifiedWriter:
        w = entry.writer
        if not w.alive:
            return w
        info = self.procfs.read(w.pid)
        if info is None or info.zombie or info.start_ticks != w.start_ticks:
            changes.append(f"{_where(w)}: writer pid {w.pid} of {w.path} has exited")
            return replace(w, alive=False, gone_at=now)
        holds = self.procfs.holds(w.pid, entry.ident, writable=True, max_fds=self.max_fds)
        again = self.procfs.read(w.pid)
        if again is None or again.zombie or again.start_ticks != w.start_ticks:
            changes.append(f"{_where(w)}: writer pid {w.pid} of {w.path} has exited")
            return replace(w, alive=False, gone_at=now)
        if holds is None or holds == w.holding:
            return w
        if holds:
            changes.append(f"{_where(w)}: pid {w.pid} holds {w.path} open again")
            return replace(w, holding=True, closed_at=None)
        changes.append(f"{_where(w)}: pid {w.pid} closed {w.path}; still the run's writer while it lives")
        return replace(w, holding=False, closed_at=now)

    def _verify_new(
        self, claims: Iterable[WriterClaim], known: dict[tuple[str, str], _Entry], now: float, changes: list[str]
    ) -> None:
        todo: list[tuple[int, WriterClaim, os.stat_result, ProcInfo]] = []
        seen: set[tuple[str, str]] = set()
        for claim in claims:
            key = (claim.source, claim.path)
            if key in seen:
                continue
            seen.add(key)
            have = known.get(key)
            if have is not None and have.writer.alive:
                continue  # verified already; an exited writer's file is checked again (a new process may hold it)
            pre = self._precheck(claim, changes)
            if pre is not None:
                todo.append((pre[0].st_mtime_ns, claim, *pre))
        todo.sort(key=lambda t: t[0], reverse=True)
        scans = 0
        for _, claim, st, info in todo:
            stamp = (claim.source, claim.path, claim.pid, info.start_ticks, st.st_size, st.st_mtime_ns)
            failed_at = self._failed.get(stamp)
            if failed_at is not None and now - failed_at < RECHECK:
                continue
            if scans >= self.max_scans:
                break
            scans += 1
            ident = (st.st_dev, st.st_ino)
            holds = self.procfs.holds(claim.pid, ident, writable=True, max_fds=self.max_fds)
            after = self.procfs.read(claim.pid)
            same = after is not None and not after.zombie and after.start_ticks == info.start_ticks
            if not holds or not same or after is None or after.uid != st.st_uid:
                self._failed[stamp] = now
                continue
            self._failed.pop(stamp, None)
            w = VerifiedWriter(
                source=claim.source,
                run=claim.run,
                path=claim.path,
                host=claim.host,
                pid=claim.pid,
                start_ticks=after.start_ticks,
                uid=after.uid,
                verified_at=now,
                holding=True,
                alive=True,
            )
            with self._lock:
                self._entries[(claim.source, claim.path)] = _Entry(w, ident)
            changes.append(f"{_where(w)}: pid {w.pid} verified as the writer of {w.path} (holds it open for writing)")
        if len(self._failed) > 4 * self.max_entries:
            for stale in [k for k, t in self._failed.items() if now - t >= RECHECK] or list(self._failed):
                del self._failed[stale]

    def _precheck(self, claim: WriterClaim, changes: list[str]) -> tuple[os.stat_result, ProcInfo] | None:
        """The cheap rules (host, file kind, process, uid); the file's stat and the process when they pass."""
        if claim.host != self.hostname or claim.pid <= 1:
            return None
        try:
            st = os.lstat(claim.path)
        except OSError:
            return None
        if not stat.S_ISREG(st.st_mode):
            self._note(claim, "is not a regular file (a symbolic link?): its writer is never verified", changes)
            return None
        if st.st_nlink != 1:
            self._note(claim, f"has {st.st_nlink} hard links: its writer is never verified", changes)
            return None
        info = self.procfs.read(claim.pid)
        if info is None or info.zombie or info.kernel_thread:
            return None
        if info.tgid is not None and info.tgid != claim.pid:
            self._note(claim, f"names pid {claim.pid}, a thread of process {info.tgid}: not its writer", changes)
            return None
        if info.uid != st.st_uid:
            self._note(
                claim,
                f"belongs to uid {st.st_uid} but names pid {claim.pid} of uid {info.uid}: not its writer",
                changes,
            )
            return None
        return st, info

    def _note(self, claim: WriterClaim, what: str, changes: list[str]) -> None:
        key = (claim.path, what)
        if key in self._noted:
            return
        self._noted[key] = None
        while len(self._noted) > self.max_entries:
            del self._noted[next(iter(self._noted))]
        changes.append(f"event file {claim.path} {what}")

    def _forget(self, now: float, changes: list[str]) -> None:
        with self._lock:
            drop = [
                k
                for k, e in self._entries.items()
                if e.writer.gone_at is not None and now - e.writer.gone_at >= self.forget_after
            ]
            excess = len(self._entries) - len(drop) - self.max_entries
            if excess > 0:
                rest = sorted(
                    (k for k in self._entries if k not in drop),
                    key=lambda k: (self._entries[k].writer.alive, self._entries[k].writer.verified_at),
                )
                drop += rest[:excess]
            for k in drop:
                w = self._entries.pop(k).writer
                changes.append(f"{_where(w)}: forgot writer pid {w.pid} of {w.path}")


def _where(w: VerifiedWriter) -> str:
    return f"run {w.run!r} (source {w.source!r})"


def hold(path: str | os.PathLike[str]) -> int:
    """Keep `path` (this process's own event file) open for writing, so alertd can verify its writer.

    Opens it with O_WRONLY | O_APPEND | O_CLOEXEC and writes nothing; returns the descriptor (close it
    when training ends, or let the process exit). For writers that open the file only while they write
    (TensorBoard's EventFileWriter without TensorFlow, which torch uses).
    """
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW)
