"""The `tensorboard` source: tails every event file under a logdir, incrementally by byte offset.

- Discovery, polled (`read_new`): a directory is listed again only when its mtime changed (and once more
  on the poll after, for file systems with coarse timestamps), plus every directory every
  `_FULL_RESCAN_POLLS` polls; known files are `stat`-ed each poll and only their new bytes are read.
- Discovery, notified (`read_changed`): only the paths that file-system notifications reported are
  looked at: a known file's new bytes, a known directory listed again, a new directory or event file
  added. The cost follows the change, not the number of files; the logdir itself reported is a full poll.
- Labels: `source` (the configured name), `run` (the directory of the file relative to the logdir, with
  `/`, `.` for the logdir itself; bytes that are not UTF-8 written `\\xNN`: `alertd.model.encodable`),
  `host` and `pid` where the file name carries them. The metric is the tag; time is the event's `wall_time`;
  step is the event's step.
- Framing, corruption and truncated tails: see `alertd.sources.tensorboard.tfrecord`. Each corrupt record or region
  is logged once (file and byte offset) and counted in `corrupt_records`.
- A `SessionLog.START` event is recorded in `restarts` as (run, step, wall_time) and logged at info.
- A file whose size drops below the consumed offset, or whose inode changes, was replaced: it is read
  again from its start (with a warning). A file that cannot be read (permissions, I/O error) is warned
  about once and retried each poll; nothing is skipped.
- Order within a poll: run by run; within a run, files by the time in their name, then by name.
- `cursor()` / `restore()` carry the consumed byte offset of each file (path relative to the logdir) so
  that a restarted service resumes without reading anything twice.
- A logdir that does not exist yet gives empty polls and one info line until it appears.
- A poll reads at most `_MAX_POLL_READ` bytes of one file; `behind` says whether a file has more, for a
  caller that wants everything now (a dry-run polls again until it is False). Sizes and bytes read are
  reported to `alertd.progress` (a dry-run's progress bar; nothing listens in the service).
"""

from __future__ import annotations

import asyncio
import logging
import os
import stat
import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from alertd import progress
from alertd.columns import ColumnList
from alertd.gcpause import gc_paused
from alertd.model import Sample, SeriesKey, encodable, make_labels
from alertd.runs.writers import WriterClaim
from alertd.sources.config import TensorBoardConfig
from alertd.sources.fileopen import NotRegularFile, not_regular, open_regular
from alertd.sources.tensorboard.events import EventDecoder, RunTags, is_event_file, parse_file_name
from alertd.sources.tensorboard.tfrecord import Corruption, masked_crc32c, scan

log = logging.getLogger(__name__)

_FULL_RESCAN_POLLS = 60
_MAX_READ = 64 << 20
"""Bytes read from a file at once (a record longer than this is read whole: at most `MAX_RECORD`)."""
_PROGRESS_READ = 4 << 20
"""Bytes read at once while a progress bar is drawn (`alertd.progress.active()`): one update per 4 MiB decoded."""
_MAX_POLL_READ = 256 << 20
"""Bytes read from one file in one poll; a longer backlog is read on at the next poll."""
_HEAD = 4096
"""The file's first bytes, checked (as a CRC) before each read: a file rewritten in place starts over."""
_Saved = tuple[int, int, int]
"""A file's saved position: (offset, length of its remembered head, CRC of that head)."""


@dataclass(slots=True)
class _Dir:
    path: str
    mtime_ns: int = -1
    relist: bool = True


class _Tail:
    """One event file: where reading stopped, and how its records become samples."""

    __slots__ = (
        "behind",
        "claim",
        "damage_at",
        "damage_logged",
        "damage_reason",
        "decoder",
        "error",
        "head_crc",
        "head_len",
        "ident",
        "keys",
        "labels",
        "name",
        "offset",
        "order",
        "path",
        "rel",
        "resyncing",
        "run",
        "sig",
        "wanted",
    )

    def __init__(self, path: str, rel: str, run: str, source: str, tags: RunTags, saved: _Saved) -> None:
        self.path = path
        self.rel = rel
        self.run = run
        self.name = os.path.basename(path)
        parsed = parse_file_name(self.name)
        self.order = (run, parsed.sort_key, self.name)
        fields = {"source": source, "run": run, "host": parsed.host or "", "pid": parsed.pid or ""}
        self.labels = make_labels(fields)
        self.claim: WriterClaim | None = None
        """What the name claims (a host and a pid), its `stamp` the bytes read so far; None without both."""
        if parsed.host and parsed.pid and parsed.pid.isdigit():
            self.claim = WriterClaim(source, run, path, parsed.host, int(parsed.pid))
        self.keys: dict[str, SeriesKey] = {}
        self.decoder = EventDecoder(tags, self.key_for)
        self.ident: tuple[int, int] | None = None
        self.sig: tuple[int, int, int, int] | None = None
        self.error = ""
        self.offset = 0
        self.head_len = 0
        self.head_crc = 0
        self.resyncing = False
        self.wanted = 0
        self.damage_at = -1
        self.damage_reason = ""
        self.damage_logged = False
        self.behind = False
        """The last read stopped at the per-poll budget: the file has more bytes."""
        self.restore(saved)

    def restore(self, saved: _Saved) -> None:
        """Continue from a saved (offset, head length, head CRC)."""
        self.offset, self.head_len, self.head_crc = saved
        self.resyncing, self.wanted, self.damage_at, self.sig = False, 0, -1, None

    def saved(self) -> list[int]:
        """What `cursor()` keeps of this file: [offset, head length, head CRC]."""
        return [self.offset, self.head_len, self.head_crc]

    def key_for(self, tag: str) -> SeriesKey:
        """The series of `tag` in this file (built once per tag)."""
        key = self.keys.get(tag)
        if key is None:
            key = self.keys[tag] = SeriesKey(tag, self.labels)
        return key

    def read(self, out: list[Sample], starts: list[tuple[int, float]]) -> int:
        """Read the bytes added since the last call; return the number of damaged regions and records seen.

        Samples are appended to `out` chunk by chunk, each chunk together with the offset moving past
        it, so an exception leaves `out` and the offset in step (the rest is read again next time).
        """
        corrupt = 0
        with open_regular(self.path) as f:
            fd = f.fileno()
            st = os.fstat(fd)
            progress.sized(self.path, st.st_size)
            ident = (st.st_dev, st.st_ino)
            if self.ident is not None and ident != self.ident:
                self._restart("was replaced by another file")
            elif st.st_size < self.offset:
                self._restart("was truncated")
            elif self.head_len and _head_crc(fd, self.head_len) != self.head_crc:
                self._restart("was rewritten (its first bytes changed)")
            self.ident = ident
            caught_up = True
            self.behind = False
            budget = _MAX_POLL_READ
            piece = _PROGRESS_READ if progress.active() else _MAX_READ
            while st.st_size > self.offset:
                if budget <= 0:
                    caught_up = False  # the rest at the next poll
                    self.behind = True
                    break
                data = os.pread(fd, min(st.st_size - self.offset, max(piece, self.wanted)), self.offset)
                if not data:
                    break
                budget -= len(data)
                res = scan(data, self.resyncing)
                corrupt += self._damage(res.corruptions)
                samples: list[Sample] = ColumnList()
                new_starts: list[tuple[int, float]] = []
                corrupt += self._decode(res.payloads, samples, new_starts, self.offset + res.consumed)
                out += samples
                starts += new_starts
                self.offset += res.consumed
                progress.reached(self.path, self.offset)
                self.resyncing, self.wanted = res.resyncing, res.wanted
                if self.head_len < min(self.offset, _HEAD):
                    self.head_len = min(self.offset, _HEAD)
                    self.head_crc = _head_crc(fd, self.head_len)
                if res.exhausted:
                    caught_up = False  # the search for the next record goes on at the next poll
                    break
                if res.consumed == 0 and not len(data) < res.wanted <= st.st_size - self.offset:
                    break  # an incomplete record, or a region still being searched: wait for more bytes
        if self.damage_at >= 0 and not self.damage_logged:
            corrupt += 1
            self.damage_logged = True
            log.warning(
                "corrupt record in %s at byte %d (%s); skipped %d bytes so far, no intact record after it yet",
                self.path,
                self.damage_at,
                self.damage_reason,
                self.offset - self.damage_at,
            )
        self.sig = (st.st_size, st.st_mtime_ns, *ident) if caught_up else None
        return corrupt

    def _restart(self, why: str) -> None:
        log.warning("event file %s %s; reading it again from the start", self.path, why)
        self.restore((0, 0, 0))

    def _damage(self, corruptions: list[Corruption]) -> int:
        """Log each damaged region once (where, why, bytes skipped); return how many were new."""
        new = 0
        for c in corruptions:
            if not c.continued or self.damage_at < 0:
                self.damage_at = self.offset + c.offset
                self.damage_reason = c.reason or "damaged data"
                self.damage_logged = False
            if c.skipped is None:
                continue
            skipped = self.offset + c.offset + c.skipped - self.damage_at
            if not self.damage_logged:
                new += 1
                log.warning(
                    "corrupt record in %s at byte %d (%s); skipped %d bytes",
                    self.path,
                    self.damage_at,
                    self.damage_reason,
                    skipped,
                )
            else:
                log.info(
                    "event file %s: an intact record again at byte %d, after %d damaged bytes",
                    self.path,
                    self.damage_at + skipped,
                    skipped,
                )
            self.damage_at = -1
        return new

    def _decode(self, payloads: list[bytes], out: list[Sample], starts: list[tuple[int, float]], stop: int) -> int:
        with gc_paused():
            bad = self.decoder.decode_all(payloads, out, starts)
        if bad:
            log.warning(
                "%d undecodable record(s) in %s between bytes %d and %d; skipped",
                bad,
                self.path,
                self.offset,
                stop,
            )
        return bad


def _head_crc(fd: int, n: int) -> int:
    """CRC-32C of the first `n` bytes of the open file (0 bytes there when it is shorter)."""
    return masked_crc32c(os.pread(fd, n, 0))


class TensorBoardSource:
    """Tails the event files under `cfg.logdir` (see the module docstring for the semantics)."""

    def __init__(self, cfg: TensorBoardConfig) -> None:
        self.name = cfg.name
        self.interval = cfg.interval
        self.logdir = cfg.logdir
        self._root = os.path.abspath(cfg.logdir)
        self.root_run = "."
        """The run label of the event files right in the logdir (set before the first read: a dry-run names it after
        the logdir's directory, `root_run_name`)."""
        self.corrupt_records = 0
        self.restarts: list[tuple[str, int, float]] = []
        self._dirs: dict[str, _Dir] = {}
        self._dir_ids: dict[tuple[int, int], str] = {}
        self._tails: dict[str, _Tail] = {}
        self._behind: set[_Tail] = set()
        """The files whose last read stopped at the per-poll budget (some may have been read up since)."""
        self._ordered: list[_Tail] = []
        self._runs: dict[str, RunTags] = {}
        self._restore: dict[str, _Saved] = {}
        self._polls = 0
        self._unsorted = False
        self._waiting = False
        self.generation = 0
        """Counts the files found and lost: the writer claims change only with it."""
        self._claims: tuple[tuple[int, int], list[WriterClaim]] = ((-1, -1), [])
        self._claims_version = 0
        """Counts the claims whose file was read further (their `stamp` changed)."""
        self._positions: dict[str, list[int]] = {}
        """Each tailed file's `saved()` as of its last read."""
        self._cursor: dict[str, list[int]] | None = None
        self._fresh: list[_Tail] = []
        """Files found since a `read_changed` began (it reads them)."""
        self._lock = threading.Lock()

    async def poll(self, now: float) -> Sequence[Sample]:
        """The samples written since the previous poll (file reads run in a worker thread)."""
        return await asyncio.to_thread(self.read_new)

    async def aclose(self) -> None:
        """Nothing to release: files are opened only while they are read."""

    async def poll_changed(self, now: float, paths: frozenset[str]) -> Sequence[Sample]:
        """The samples written since they were last read to `paths`, the files and directories that
        file-system notifications reported (see `read_changed`)."""
        return await asyncio.to_thread(self.read_changed, paths)

    def read_new(self) -> list[Sample]:
        """One full poll, synchronously: find new runs and files, then read every file's new bytes."""
        with self._lock:
            return self._read_all()

    def read_changed(self, paths: frozenset[str]) -> list[Sample]:
        """Read only what `paths` name: event files (their new bytes), directories (listed again for new
        runs and files, which are read). The cost follows the change, not the number of files; a change
        to the logdir itself (it appeared, or was replaced) is a full poll."""
        with self._lock:
            if self._waiting or self._root not in self._dirs or self._root in paths:
                return self._read_all(relist=self._root in paths)
            self._fresh = []
            touched: list[_Tail] = []
            prefix = self._root + os.sep
            for path in paths:
                if not path.startswith(prefix):
                    continue
                tail = self._tails.get(path[len(prefix) :].replace(os.sep, "/"))
                if tail is not None:
                    touched.append(tail)
                elif path in self._dirs:
                    self._relist(path)
                elif os.path.dirname(path) in self._dirs:
                    self._found(path)
                else:  # inside directories never reported (made before their watch was in place)
                    self._relist(self._known_ancestor(path))
            touched += self._fresh
            self._fresh = []
            self._sort()
            out: list[Sample] = ColumnList()
            self._read_tails(sorted(set(touched), key=lambda t: t.order), out)
            return out

    def _read_all(self, relist: bool = False) -> list[Sample]:
        """A full poll (the lock held): find new runs and files, then read every file's new bytes. With
        `relist`, every directory is listed whatever its mtime says (the logdir was replaced: the new
        one's mtime, of the clock's coarse grain, may be the old one's)."""
        out: list[Sample] = ColumnList()  # with the columns of the rows decoded a column at a time (a replay's)
        if self._discover(relist):
            self._fresh = []
            self._read_tails(self._ordered, out)
        return out

    def _sort(self) -> None:
        if self._unsorted:
            self._ordered = sorted(self._tails.values(), key=lambda t: t.order)
            self._unsorted = False

    @property
    def behind(self) -> bool:
        """Whether a file has bytes the last poll left for the next one (it read `_MAX_POLL_READ` of it). Asked
        after every poll: a look at the files last read to be behind, not at every file (10,000 runs)."""
        with self._lock:
            self._behind = {t for t in self._behind if t.behind and self._tails.get(t.rel) is t}
            return bool(self._behind)

    def _read_tails(self, tails: Sequence[_Tail], out: list[Sample]) -> None:
        if progress.active():  # the sizes of all the files up front: a progress bar's total
            progress.sized_files([tail.path for tail in tails])
        for tail in list(tails):
            starts: list[tuple[int, float]] = []
            self._read_file(tail, out, starts)
            saved = tail.saved()
            if tail.rel in self._positions and saved != self._positions[tail.rel]:
                self._positions[tail.rel] = saved
                self._cursor = None
                if tail.claim is not None and tail.claim.stamp != tail.offset:  # the file changed: its claim too
                    tail.claim = replace(tail.claim, stamp=tail.offset)
                    self._claims_version += 1
            for step, wall in starts:
                self.restarts.append((tail.run, step, wall))
                log.info("run %s: SessionLog.START at step %d (%s)", tail.run, step, tail.name)

    def _relist(self, path: str) -> None:
        """A known directory changed: list it again (new files and directories), or forget it if it is gone."""
        try:
            st = os.stat(path)
        except OSError:
            self._forget_dir(path)
            return
        d = self._dirs[path]
        d.mtime_ns = st.st_mtime_ns
        self._list(d)

    def _known_ancestor(self, path: str) -> str:
        """The nearest directory above `path` that is known (the logdir at the furthest)."""
        parent = os.path.dirname(path)
        while parent not in self._dirs and len(parent) > len(self._root):
            parent = os.path.dirname(parent)
        return parent if parent in self._dirs else self._root

    def _found(self, path: str) -> None:
        """A new entry in a known directory: an event file, or a directory to list."""
        if is_event_file(os.path.basename(path)):
            self._add_file(path)
            return
        try:
            st = os.stat(path)
        except OSError:
            return
        if stat.S_ISDIR(st.st_mode):
            self._enter(path, st)

    def _enter(self, path: str, st: os.stat_result) -> None:
        """A directory not listed yet: remember it and list it (once, whatever links lead to it)."""
        if self._add_dir(path, st):
            d = self._dirs[path]
            d.mtime_ns = st.st_mtime_ns
            self._list(d)

    def _read_file(self, tail: _Tail, out: list[Sample], starts: list[tuple[int, float]]) -> None:
        """Read one file's new bytes; whatever goes wrong with it is logged (once) and stays with it."""
        tail.behind = False  # until a read says otherwise: a file that fails is not waited for
        try:
            self._read_tail(tail, out, starts)
        finally:
            if tail.behind:
                self._behind.add(tail)

    def _read_tail(self, tail: _Tail, out: list[Sample], starts: list[tuple[int, float]]) -> None:
        try:
            st = os.stat(tail.path)
            if not stat.S_ISREG(st.st_mode):
                raise not_regular(tail.path, st.st_mode)
            if (st.st_size, st.st_mtime_ns, st.st_dev, st.st_ino) != tail.sig:
                self.corrupt_records += tail.read(out, starts)
        except FileNotFoundError:
            self._drop(tail)
            return
        except NotRegularFile as e:  # a FIFO, socket or device named like an event file: never opened
            self._fail(tail, f"skipped {e}: not read")
            return
        except OSError as e:  # unreadable for now (permissions, I/O error): retried next poll
            self._fail(tail, f"cannot read event file {tail.path}: {e}; retrying at the next poll")
            return
        except Exception as e:  # anything else stays with this file: the other files are read
            tail.sig = None
            self._fail(
                tail,
                f"error reading event file {tail.path} at byte {tail.offset}: {type(e).__name__}: {e}; "
                "retrying at the next poll",
            )
            return
        if tail.error:
            log.info("event file %s is readable again", tail.path)
            tail.error = ""

    @staticmethod
    def _fail(tail: _Tail, message: str) -> None:
        if tail.error != message:
            log.warning("%s", message)
            tail.error = message

    def writer_claims(self) -> list[WriterClaim]:
        """What the names of the tailed event files claim: (path, run, host, pid) where a name has both, with the
        bytes read of the file so far (`stamp`: the claim of a file that changed is a new one).

        Only claims: `alertd.runs.writers.WriterRegistry` verifies them against /proc before any use. The
        list is made again only when files came or went (`generation`) or one was read further; do not change it.
        """
        with self._lock:
            version = (self.generation, self._claims_version)
            if self._claims[0] != version:
                self._claims = (version, [t.claim for t in self._tails.values() if t.claim is not None])
            return self._claims[1]

    def cursor(self) -> dict[str, list[int]]:
        """Per known event file, by path relative to the logdir (`/`): [byte offset consumed, length of
        the file's head remembered, CRC-32C of that head]. Made again only when a file's position
        changed since the last call (do not change it)."""
        with self._lock:
            if self._cursor is None:  # a copy (C speed: no Python per file): a later read changes no cursor taken
                cur = {rel: list(saved) for rel, saved in self._restore.items()} if self._restore else {}
                cur.update(self._positions)
                self._cursor = cur
            return self._cursor

    def restore(self, cursor: dict[str, Any]) -> None:
        """Resume from a `cursor()`: files named there are read from their saved offset (a file whose
        head no longer matches is read from its start). An older cursor's bare offsets are accepted."""
        with self._lock:
            self._restore = {}
            for rel, value in cursor.items():
                saved = _saved(value)
                if saved is not None:
                    self._restore[str(rel)] = saved
            for rel, tail in self._tails.items():
                if rel in self._restore:
                    tail.restore(self._restore.pop(rel))
                    self._positions[rel] = tail.saved()
            self._cursor = None

    # discovery

    def _discover(self, relist: bool = False) -> bool:
        try:
            root_st = os.stat(self._root)
        except OSError:
            if not self._waiting:
                log.info("logdir %s does not exist yet; waiting for it", self.logdir)
                self._waiting = True
            return False
        if self._waiting:
            log.info("logdir %s appeared", self.logdir)
            self._waiting = False
        if self._root not in self._dirs:
            self._add_dir(self._root, root_st)
        full = relist or self._polls % _FULL_RESCAN_POLLS == 0
        self._polls += 1
        for d in list(self._dirs.values()):
            if d.path not in self._dirs:
                continue
            try:
                st = os.stat(d.path)
            except OSError:
                self._forget_dir(d.path)
                continue
            changed = st.st_mtime_ns != d.mtime_ns
            if changed or d.relist or full:
                d.relist = changed
                d.mtime_ns = st.st_mtime_ns
                self._list(d)
        self._sort()
        return True

    def _add_dir(self, path: str, st: os.stat_result) -> bool:
        ident = (st.st_dev, st.st_ino)
        known = self._dir_ids.get(ident)
        if known is not None and known in self._dirs and known != path:
            try:
                again = os.stat(known)
            except OSError:
                again = None
            if again is not None and (again.st_dev, again.st_ino) == ident:
                return False  # the same directory under another name (a symbolic link): listed once
            self._forget_dir(known)  # a directory gone, whose inode number a new one got
        elif known == path and path in self._dirs:
            return False
        self._dir_ids[ident] = path
        self._dirs[path] = _Dir(path)
        return True

    def _list(self, d: _Dir) -> None:
        try:
            entries = list(os.scandir(d.path))
        except OSError:
            return
        for entry in entries:
            try:
                is_dir = entry.is_dir()
            except OSError:  # a broken entry: an event file among them is warned about when read
                is_dir = False
            if not is_dir:
                if is_event_file(entry.name):
                    self._add_file(entry.path)
                continue
            if entry.path in self._dirs:
                continue
            try:
                st = entry.stat()
            except OSError:
                continue
            self._enter(entry.path, st)

    def _add_file(self, path: str) -> None:
        rel = os.path.relpath(path, self._root).replace(os.sep, "/")
        if rel in self._tails:
            return
        run = encodable(os.path.dirname(rel) or self.root_run)  # the run label (invalid bytes as \xNN), and
        tags = self._runs.setdefault(run, RunTags())  # the writer claims' run; `rel` keeps the bytes, for the cursor
        tail = _Tail(path, rel, run, self.name, tags, self._restore.pop(rel, (0, 0, 0)))
        self._tails[rel] = tail
        self._positions[rel] = tail.saved()
        self._cursor = None
        self.generation += 1
        self._fresh.append(tail)
        self._unsorted = True
        log.debug("tailing %s (run %s)", path, run)

    def _drop(self, tail: _Tail) -> None:
        log.info("event file %s is gone; no longer tailed", tail.path)
        self._tails.pop(tail.rel, None)
        self._positions.pop(tail.rel, None)
        self._cursor = None
        self.generation += 1
        self._ordered = [t for t in self._ordered if t is not tail]

    def _forget_dir(self, path: str) -> None:
        prefix = path + os.sep
        for p in [p for p in self._dirs if p == path or p.startswith(prefix)]:
            del self._dirs[p]


def _saved(value: Any) -> _Saved | None:
    """A cursor entry: an offset (older cursors) or [offset, head length, head CRC]; None if neither."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return (value, 0, 0) if value >= 0 else None
    if isinstance(value, list | tuple) and len(value) == 3 and all(type(v) is int and v >= 0 for v in value):
        return (value[0], value[1], value[2])
    return None
