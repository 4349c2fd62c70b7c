"""Which process writes a run's event files: verified through /proc, never taken from a file name alone.

TensorBoard event file names carry a host and a pid (`events.out.tfevents.<secs>.<host>.<pid>.<n>`).
Anyone who can create a file in a logdir can write any pid there, so a name is only a `WriterClaim`.
`WriterRegistry.check` turns a claim into a `VerifiedWriter` in one of two ways (`VerifiedWriter.how`).
Both need the cheap rules first:

1. the host in the name equals this machine's host name exactly (a full name matches only the same
   full name, a short name only the same short name);
2. the path is a regular file, not a symbolic link (`lstat`), with exactly one hard link: a link to
   another user's file is never "their" event file;
3. the pid names a live process (not a thread id, a zombie or a kernel thread) whose real uid owns the
   file (a root process only for a root-owned file; a root-owned file names only root processes);
4. the process read before and after the other checks is the same one (pid and start time).

Then, `how = "holds"` (the strong form): the process holds this very file open for writing: one of its
`/proc/<pid>/fd/*` links stat()s to the file's (st_dev, st_ino), and its `/proc/<pid>/fdinfo` flags are
O_WRONLY or O_RDWR (at most `max_fds` descriptors are looked at per process; at most `max_scans` claims
have their descriptors listed per check, newest files first).

Else `how = "owner"` (the weaker form, for writers that hold nothing between writes: TensorBoard's own
`EventFileWriter` without TensorFlow, which torch's `SummaryWriter` uses, opens and closes its file at
each flush): the process started before the file was created, and the file's inode has not changed since
its last write (ctime <= mtime: a file renamed, linked or chmod-ed after it was written is not taken by its
new name). The creation time is the file's birth time (statx STATX_BTIME through libc, where the file
system records it), else the second in the file's name plus one second of slack (the name holds whole
seconds), capped by the file's mtime (a file was created before its last write). A process that started
in the same clock tick as that instant or later is refused.

Why the owner form is safe: the process it names runs as the file's owner, so whoever could have
written that file (that uid, or root) could already signal that process: nobody gains a signal they
could not send. A pid reused later by another process of the same user is refused by the start-time
rule (the new process started after the file); another user's file naming your pid by the uid rule; a
label alone (a `pid` label of any source) never makes a claim at all. Its limits, honestly: where the
birth time is missing, the name's second (chosen by the file's creator) bounds the creation from above,
and the mtime cap is the owner's to set; and a rename within the same timestamp tick as the file's last
write leaves ctime == mtime. Both need the file's owner (or root), or a writable directory without the
sticky bit right after a write: the kill notifier's data check (below) is what refuses the data of a
file that another user placed in a run.

The writer is then pinned by (pid, start time in clock ticks) and stays the verified writer "when last
seen": later checks update `holding` (it holds the file now: an "owner" writer seen holding it becomes a
"holds" one) and `alive` (the same pid + start time exists), so a writer that closed its file is still
the run's writer while it lives, and its liveness tells a stalled run from an ended one. A run's writer
is its newest living one, "holds" before "owner". Nothing else (a `pid` label of a samples line, a name
alone) ever makes a verified writer.

The right data, too: a verified writer is the right process, but the alert that names its run may come
from a file someone else put in a shared run directory. `WriterRegistry.claims(source, run, pid)` gives
the files the last check saw; `foreign_data` (which the kill and slurm notifiers call at the moment
they act) refuses unless every event file of the run that could have produced the alert's series (the
ones named for the alert's host and pid; every one when the alert carries no pid) is, by `lstat` now, a
regular single-link file owned by the writer's uid.

Check order races, honestly: the claim is verified at a `check` (every evaluation tick), so a writer
that opens, writes a NaN and exits between two checks is never verified (`target: writer` then refuses).
Between the check and a signal, the kill notifier re-reads the pid and compares the start time, then
signals through a pidfd; see `alertd.actions.procs`.

Memory is bounded: at most `max_entries` writers (exited ones forgotten first, and any exited for
`forget_after` seconds), and a negative cache of failed claims capped likewise. Pure Python over Linux
/proc (and libc's statx through ctypes); elsewhere (no /proc) nothing is ever verified.
"""

from __future__ import annotations

import ctypes
import logging
import os
import socket
import stat
import sys
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import cast

from alertd.filekind import file_kind
from alertd.model import format_time
from alertd.runs.eventnames import is_event_file, parse_file_name
from alertd.runs.procfs import Procfs, ProcInfo

log = logging.getLogger(__name__)

MAX_FDS = 4096
"""Descriptors looked at per process and check: a process with more is not searched further."""
MAX_SCANS = 256
"""Unverified claims whose descriptors are listed per check (newest files first)."""
RECHECK = 30.0
"""Seconds before an unchanged claim that failed (same file size and mtime, same process) is looked at again."""
MAX_RUN_FILES = 100_000
"""Directory entries `foreign_data` looks at in a run's directory; a larger one is refused."""
HOLDS = "holds"
"""`VerifiedWriter.how`: seen holding the file open for writing (the strong form)."""
OWNER = "owner"
"""`VerifiedWriter.how`: the file's owner, started before the file was created (the weaker form)."""
BIRTH_TIME = "birth time"
NAME_TIME = "time in its name, capped by its mtime"


@dataclass(frozen=True, slots=True)
class WriterClaim:
    """What an event file's name claims: process `pid` on `host` writes `path` (run `run` of `source`)."""

    source: str
    run: str
    path: str
    host: str
    pid: int
    stamp: int = field(default=0, compare=False)
    """How far the source has read the file (it changes when the file does): a claim settled (its process gone,
    or refused by the cheap rules) is not looked at again until its file changes."""


@dataclass(frozen=True, slots=True)
class VerifiedWriter:
    """The process that writes a run's event file, pinned by pid and start time.

    `how`: HOLDS (seen holding the file open for writing) or OWNER (its uid owns the file and it started
    before the file was created: `created`, found by `created_from`). `holding`: it held the file at the
    last check where it was alive (so `holding and not alive` means it vanished while holding the file;
    `closed_at` is set when it was seen to close it first). `alive`: the same pid with the same start time
    existed at the last check. Times are epoch seconds of the checks.
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
    how: str = HOLDS
    created: float | None = None
    created_from: str = ""

    @property
    def evidence(self) -> str:
        """How it was verified, in words (for reports): `by holds: ...` or `by owner: ...`."""
        if self.how == HOLDS:
            return f"by holds: it held {self.path} open for writing"
        created = f" at {format_time(self.created)}" if self.created is not None else ""
        return (
            f"by owner: uid {self.uid} owns {self.path}, created{created} ({self.created_from}) after the process "
            "started"
        )


@dataclass(slots=True)
class _Entry:
    writer: VerifiedWriter
    ident: tuple[int, int]


GONE = object()
"""`_precheck`'s answer for a claim whose process is gone."""


class WriterRegistry:
    """Verifies writer claims against /proc and remembers the verified writers (see the module docstring).

    `check` does blocking /proc work: run it in a worker thread. `writer`, `writers` and `claims` may be
    called from any thread meanwhile. `hostname` overrides `socket.gethostname()`; `procfs` the /proc tree;
    `birth_time=False` never asks for a file's birth time (the creation time then comes from the name and
    the mtime, as on a file system that records no birth time).
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
        birth_time: bool = True,
    ) -> None:
        self.hostname = hostname or socket.gethostname()
        self.procfs = procfs or Procfs()
        self.enabled = sys.platform.startswith("linux") and self.procfs.root.is_dir()
        self.max_entries = max_entries
        self.forget_after = forget_after
        self.max_fds = max_fds
        self.max_scans = max_scans
        self.birth_time = birth_time
        self._entries: dict[tuple[str, str], _Entry] = {}
        self._claims: dict[tuple[str, str], list[WriterClaim]] = {}
        self._failed: dict[tuple[object, ...], float] = {}
        self._noted: dict[tuple[str, str], None] = {}
        self._settled: dict[tuple[str, str], tuple[int, int, bool]] = {}
        """Claims settled until their file changes, by (source, path): (pid, stamp, whether the process is gone).
        A claim the cheap rules refused (its process gone, another host's, a link...) or whose verified writer
        exited is not looked at again while its file stays as it was: an idle logdir costs what changed in it."""
        self._quiet: dict[int, tuple[WriterClaim, bool]] = {}
        """The settled claims by object (`id`; the source hands out the same object until its file changes): a
        check passes over them with one lookup each. The bool: whether the process is gone."""
        self._listed: list[WriterClaim] | None = None
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
        return max(found, key=lambda w: (w.alive, w.how == HOLDS, w.verified_at, w.path))

    def claims(self, source: str, run: str, pid: int | None = None) -> list[WriterClaim]:
        """The claims of run `run` of `source` that the last check was given (only those naming `pid`, if
        given): the event files whose names carry a host and a pid. Some may be gone since."""
        with self._lock:
            found = list(self._claims.get((source, run), ()))
        return [c for c in found if pid is None or c.pid == pid]

    def writers(self) -> list[VerifiedWriter]:
        """Every remembered writer, ordered by source, run and verification time."""
        with self._lock:
            out = [e.writer for e in self._entries.values()]
        return sorted(out, key=lambda w: (w.source, w.run, w.verified_at, w.path))

    def settled_gone(self, claim: WriterClaim) -> bool:
        """Whether the last check found the claim's process gone, and its file has not changed since (then no
        process can have taken it up: a new one would be a new pid, or a new start time on the same pid)."""
        quiet = self._quiet.get(id(claim))
        if quiet is not None and quiet[0] is claim:
            return quiet[1]
        hit = self._settled.get((claim.source, claim.path))
        return hit is not None and hit[2] and hit[0] == claim.pid and hit[1] == claim.stamp

    # -- checking (a worker thread) ------------------------------------------------------------

    def check(self, claims: Iterable[WriterClaim], now: float) -> list[str]:
        """Verify new claims, update known writers (holding, alive), forget old ones.

        Blocking (reads /proc): call it from a worker thread. Returns what changed, in words, for the
        log: writers verified, files closed or held again, writers exited or forgotten, and (once per
        file) claims that look spoofed (a pid of another uid, a link instead of a file, a pid that started
        after the file). Every claim given is remembered for `claims` until the next check.
        """
        if not isinstance(claims, list) or claims is not self._listed:  # the same list again: nothing to regroup
            claims = list(claims) if not isinstance(claims, list) else claims
            by_run: dict[tuple[str, str], list[WriterClaim]] = {}
            for c in claims:
                by_run.setdefault((c.source, c.run), []).append(c)
            with self._lock:
                self._claims = by_run
            self._listed = claims
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
            word = "again" if w.how == HOLDS else "now (verified by holds from now on)"
            changes.append(f"{_where(w)}: pid {w.pid} holds {w.path} open {word}")
            return replace(w, holding=True, closed_at=None, how=HOLDS)
        changes.append(f"{_where(w)}: pid {w.pid} closed {w.path}; still the run's writer while it lives")
        return replace(w, holding=False, closed_at=now)

    def _verify_new(
        self, claims: Iterable[WriterClaim], known: dict[tuple[str, str], _Entry], now: float, changes: list[str]
    ) -> None:
        todo: list[tuple[int, WriterClaim, os.stat_result, ProcInfo]] = []
        seen: set[tuple[str, str]] = set()
        settled, quiet = self._settled, self._quiet
        for claim in claims:
            hit_quiet = quiet.get(id(claim))
            if hit_quiet is not None and hit_quiet[0] is claim:
                continue  # settled, and its file unchanged (the same claim object)
            key = (claim.source, claim.path)
            if key in seen:
                continue
            seen.add(key)
            have = known.get(key)
            if have is not None and have.writer.alive:
                continue  # verified already; an exited writer's file is checked again once it changed
            hit = settled.get(key)
            if hit is not None and hit[0] == claim.pid and hit[1] == claim.stamp:
                continue  # nothing changed since the cheap rules refused it
            pre = self._precheck(claim, changes)
            if isinstance(pre, tuple):
                settled.pop(key, None)
                todo.append((pre[0].st_mtime_ns, claim, *pre))
            else:
                settled[key] = (claim.pid, claim.stamp, pre is GONE)
                quiet[id(claim)] = (claim, pre is GONE)
        if len(settled) > 2 * len(seen) + 1024:  # files gone: their entries go
            self._settled = {k: v for k, v in settled.items() if k in seen}
        if len(quiet) > 2 * len(seen) + 1024:
            listed = {id(c) for c in claims}
            self._quiet = {k: v for k, v in quiet.items() if k in listed}
        todo.sort(key=lambda t: t[0], reverse=True)
        scans = 0
        for _, claim, st, info in todo:
            stamp = (claim.source, claim.path, claim.pid, info.start_ticks, st.st_size, st.st_mtime_ns)
            failed_at = self._failed.get(stamp)
            if failed_at is not None and now - failed_at < RECHECK:
                continue
            ident = (st.st_dev, st.st_ino)
            holds = False
            if scans < self.max_scans:  # past the budget, only the cheap owner rule this time
                scans += 1
                holds = bool(self.procfs.holds(claim.pid, ident, writable=True, max_fds=self.max_fds))
            owner = None if holds else self._owner(claim, st, info, changes)
            after = self.procfs.read(claim.pid)
            same = after is not None and not after.zombie and after.start_ticks == info.start_ticks
            if not same or after is None or after.uid != st.st_uid or (not holds and owner is None):
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
                holding=holds,
                alive=True,
                how=HOLDS if holds else OWNER,
                created=owner[0] if owner else None,
                created_from=owner[1] if owner else "",
            )
            with self._lock:
                self._entries[(claim.source, claim.path)] = _Entry(w, ident)
            changes.append(f"{_where(w)}: pid {w.pid} verified as the writer of {w.path} ({_said(w)})")
        if len(self._failed) > 4 * self.max_entries:
            for stale in [k for k, t in self._failed.items() if now - t >= RECHECK] or list(self._failed):
                del self._failed[stale]

    def _precheck(self, claim: WriterClaim, changes: list[str]) -> tuple[os.stat_result, ProcInfo] | object | None:
        """The cheap rules (host, file kind, process, uid); the file's stat and the process when they pass, `GONE`
        when the process named is gone (or a zombie), else None."""
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
        if info is None or info.zombie:
            return GONE
        if info.kernel_thread:
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

    def _owner(
        self, claim: WriterClaim, st: os.stat_result, info: ProcInfo, changes: list[str]
    ) -> tuple[float, str] | None:
        """(creation time, how it was found) when the owner rule verifies `claim` (the uid was checked
        already); None, noting why, when it does not."""
        if st.st_ctime_ns > st.st_mtime_ns:
            self._note(
                claim,
                f"changed after its last write (its inode at {format_time(st.st_ctime_ns / 1e9)}, its data at "
                f"{format_time(st.st_mtime_ns / 1e9)}: renamed?): the pid in its name is not taken by ownership",
                changes,
            )
            return None
        created = creation_time(claim.path, st, use_birth_time=self.birth_time)
        if created is None:
            return None
        at, how = created
        if info.start_ticks >= self.procfs.ticks_at(at):
            started = self.procfs.start_epoch(info)
            self._note(
                claim,
                f"names pid {claim.pid}, which started at {format_time(started)}, not before the file was created "
                f"({format_time(at)}, its {how}): a reused pid, not its writer",
                changes,
            )
            return None
        return at, how

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


def _said(w: VerifiedWriter) -> str:
    if w.how == HOLDS:
        return "holds it open for writing"
    return f"owns it and started before it was created, by its {w.created_from}; not seen holding it"


# -- a file's creation time ----------------------------------------------------------------------------

_AT_FDCWD = -100
_AT_SYMLINK_NOFOLLOW = 0x100
_STATX_BASIC_STATS = 0x7FF
_STATX_BTIME = 0x800


class _StatxTimestamp(ctypes.Structure):
    _fields_ = (("tv_sec", ctypes.c_int64), ("tv_nsec", ctypes.c_uint32), ("_reserved", ctypes.c_int32))


class _Statx(ctypes.Structure):
    """`struct statx` of linux/stat.h (256 bytes; the fields after the device numbers are not read)."""

    _fields_ = (
        ("stx_mask", ctypes.c_uint32),
        ("stx_blksize", ctypes.c_uint32),
        ("stx_attributes", ctypes.c_uint64),
        ("stx_nlink", ctypes.c_uint32),
        ("stx_uid", ctypes.c_uint32),
        ("stx_gid", ctypes.c_uint32),
        ("stx_mode", ctypes.c_uint16),
        ("_spare0", ctypes.c_uint16),
        ("stx_ino", ctypes.c_uint64),
        ("stx_size", ctypes.c_uint64),
        ("stx_blocks", ctypes.c_uint64),
        ("stx_attributes_mask", ctypes.c_uint64),
        ("stx_atime", _StatxTimestamp),
        ("stx_btime", _StatxTimestamp),
        ("stx_ctime", _StatxTimestamp),
        ("stx_mtime", _StatxTimestamp),
        ("stx_rdev_major", ctypes.c_uint32),
        ("stx_rdev_minor", ctypes.c_uint32),
        ("stx_dev_major", ctypes.c_uint32),
        ("stx_dev_minor", ctypes.c_uint32),
        ("_spare", ctypes.c_uint64 * 14),
    )


def _libc_statx() -> Callable[..., int] | None:
    """libc's `statx` (glibc 2.28+), or None where there is none (no Linux, an old or another libc)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).statx
    except (OSError, AttributeError):
        return None
    fn.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_uint, ctypes.POINTER(_Statx))
    fn.restype = ctypes.c_int
    return cast("Callable[..., int]", fn)


_statx = _libc_statx()


def birth_time(path: str, st: os.stat_result) -> float | None:
    """The birth time of `path` (epoch seconds) where the file system records it, else None.

    Python 3.11 has no `os.statx`: libc's is called through ctypes, without following a symbolic link.
    None too when the file at `path` is no longer the one `st` (an lstat of it) describes.
    """
    if _statx is None:
        return None
    buf = _Statx()
    mask = _STATX_BASIC_STATS | _STATX_BTIME
    if _statx(_AT_FDCWD, os.fsencode(path), _AT_SYMLINK_NOFOLLOW, mask, ctypes.byref(buf)) != 0:
        return None
    if (os.makedev(buf.stx_dev_major, buf.stx_dev_minor), buf.stx_ino) != (st.st_dev, st.st_ino):
        return None
    if not buf.stx_mask & _STATX_BTIME or buf.stx_btime.tv_sec <= 0:
        return None
    return float(buf.stx_btime.tv_sec + buf.stx_btime.tv_nsec / 1e9)


def creation_time(path: str, st: os.stat_result, *, use_birth_time: bool = True) -> tuple[float, str] | None:
    """When the event file `path` (`st`: its lstat) was created, and how that is known.

    The birth time (BIRTH_TIME) where the file system gives it; else (NAME_TIME) the second in the file's
    name plus one (the name holds whole seconds: the file was created within that second), capped by the
    mtime (a file is created before its last write). None when neither is known.
    """
    if use_birth_time:
        born = birth_time(path, st)
        if born is not None:
            return born, BIRTH_TIME
    secs = parse_file_name(os.path.basename(path)).time
    if secs is None:
        return None
    return min(secs + 1.0, st.st_mtime), NAME_TIME


# -- the alert's data: the writer's own files? ----------------------------------------------------------


def foreign_data(
    writer: VerifiedWriter,
    claims: Iterable[WriterClaim],
    host: str | None,
    pid: str | None,
    *,
    max_files: int = MAX_RUN_FILES,
) -> str | None:
    """Why an alert on `writer`'s run (its `host` and `pid` labels) may not come from the writer's own files;
    None when it can only have.

    The files that could have produced the alert's series: the event files of the run (the `claims` the
    last check saw, and what the run's directory holds now) named for `host` and `pid` where the alert
    carries them, every one where it carries no pid (a rule may have dropped it; a tensorboardX name has
    none). Each must be, by `lstat` now, a regular file with one link owned by the writer's uid; a claimed
    file that is gone refuses too (whose data it held can't be told). Blocking: call it in a worker thread.
    """
    run_dir = os.path.dirname(writer.path)

    def could(name: str) -> bool:
        if pid is None:
            return True
        parsed = parse_file_name(name)
        return parsed.pid == pid and (host is None or parsed.host == host)

    paths: dict[str, None] = {}
    for c in claims:
        if (c.source, c.run) == (writer.source, writer.run) and could(os.path.basename(c.path)):
            paths[c.path] = None
    try:
        with os.scandir(run_dir) as entries:
            for n, entry in enumerate(entries):
                if n >= max_files:
                    return f"the run's directory {run_dir} holds more than {max_files} entries: not searched"
                if is_event_file(entry.name) and could(entry.name):
                    paths[os.path.join(run_dir, entry.name)] = None
    except OSError as e:
        return f"the run's directory {run_dir} can't be listed ({e.strerror}): whose data this is can't be told"
    whose = f"the verified writer's (pid {writer.pid}, uid {writer.uid})"
    for path in paths:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return f"event file {path} of the run is gone: whose data it held can't be told"
        except OSError as e:
            return f"event file {path} of the run can't be looked at ({e.strerror})"
        if not stat.S_ISREG(st.st_mode):
            return f"event file {path} of the run is {file_kind(st.st_mode)}, not a regular file"
        if st.st_nlink != 1:
            return f"event file {path} of the run has {st.st_nlink} hard links: it may be another file's"
        if st.st_uid != writer.uid:
            return (
                f"event file {path} of the run belongs to uid {st.st_uid}, not to uid {writer.uid}: the alert's "
                f"data may come from it, and it is not {whose}"
            )
    return None


def hold(path: str | os.PathLike[str]) -> int:
    """Keep `path` (this process's own event file) open for writing, so alertd can verify its writer.

    Opens it with O_WRONLY | O_APPEND | O_CLOEXEC and writes nothing; returns the descriptor (close it
    when training ends, or let the process exit). For writers that open the file only while they write
    (TensorBoard's EventFileWriter without TensorFlow, which torch uses).
    """
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW)
