"""The `tensorboard` source: tails every event file under a logdir, incrementally by byte offset.

- Discovery: a directory is listed again only when its mtime changed (and once more on the poll after,
  for file systems with coarse timestamps), plus every directory every `_FULL_RESCAN_POLLS` polls; known
  files are `stat`-ed each poll and only their new bytes are read.
- Labels: `source` (the configured name), `run` (the directory of the file relative to the logdir, with
  `/`, `.` for the logdir itself), `host` and `pid` where the file name carries them. The metric is the
  tag; time is the event's `wall_time`; step is the event's step.
- Framing, corruption and truncated tails: see `alertd.sources.tfrecord`. Each corrupt record or region
  is logged once (file and byte offset) and counted in `corrupt_records`.
- A `SessionLog.START` event is recorded in `restarts` as (run, step, wall_time) and logged at info.
- A file whose size drops below the consumed offset, or whose inode changes, was replaced: it is read
  again from its start (with a warning). A file that cannot be read (permissions, I/O error) is warned
  about once and retried each poll; nothing is skipped.
- Order within a poll: run by run; within a run, files by the time in their name, then by name.
- `cursor()` / `restore()` carry the consumed byte offset of each file (path relative to the logdir) so
  that a restarted service resumes without reading anything twice.
- A logdir that does not exist yet gives empty polls and one info line until it appears.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from alertd.model import Sample, SeriesKey, make_labels
from alertd.sources.config import TensorBoardConfig
from alertd.sources.gcpause import gc_paused
from alertd.sources.tbevents import EventDecoder, RunTags, is_event_file, parse_file_name
from alertd.sources.tfrecord import scan
from alertd.writers import WriterClaim

log = logging.getLogger(__name__)

_FULL_RESCAN_POLLS = 60
_MAX_READ = 64 << 20


@dataclass(slots=True)
class _Dir:
    path: str
    mtime_ns: int = -1
    relist: bool = True


class _Tail:
    """One event file: where reading stopped, and how its records become samples."""

    __slots__ = (
        "decoder",
        "error",
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
        "wanted",
    )

    def __init__(self, path: str, rel: str, run: str, source: str, tags: RunTags, offset: int) -> None:
        self.path = path
        self.rel = rel
        self.run = run
        self.name = os.path.basename(path)
        parsed = parse_file_name(self.name)
        self.order = (run, parsed.sort_key, self.name)
        fields = {"source": source, "run": run, "host": parsed.host or "", "pid": parsed.pid or ""}
        self.labels = make_labels(fields)
        self.keys: dict[str, SeriesKey] = {}
        self.decoder = EventDecoder(tags, self.key_for)
        self.offset = offset
        self.resyncing = False
        self.wanted = 0
        self.ident: tuple[int, int] | None = None
        self.error = ""

    def key_for(self, tag: str) -> SeriesKey:
        """The series of `tag` in this file (built once per tag)."""
        key = self.keys.get(tag)
        if key is None:
            key = self.keys[tag] = SeriesKey(tag, self.labels)
        return key

    def read(self, st: os.stat_result, out: list[Sample], starts: list[tuple[int, float]]) -> int:
        """Read the bytes added since the last call; return the number of corrupt records seen."""
        ident = (st.st_dev, st.st_ino)
        if (self.ident is not None and ident != self.ident) or st.st_size < self.offset:
            log.warning("event file %s was replaced or truncated; reading it again from the start", self.path)
            self.offset, self.resyncing, self.wanted = 0, False, 0
        self.ident = ident
        corrupt = 0
        with open(self.path, "rb") as f:
            while st.st_size > self.offset:
                f.seek(self.offset)
                data = f.read(max(min(st.st_size - self.offset, _MAX_READ), self.wanted))
                res = scan(data, self.resyncing)
                for c in res.corruptions:
                    corrupt += 1
                    log.warning(
                        "corrupt record in %s at byte %d (%s); skipped",
                        self.path,
                        self.offset + c.offset,
                        c.reason,
                    )
                corrupt += self._decode(res.payloads, out, starts, self.offset + res.consumed)
                self.offset += res.consumed
                self.resyncing, self.wanted = res.resyncing, res.wanted
                if res.consumed == 0 and not len(data) < res.wanted <= st.st_size - self.offset:
                    break  # an incomplete record, or a region still being searched: wait for more bytes
        return corrupt

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


class TensorBoardSource:
    """Tails the event files under `cfg.logdir` (see the module docstring for the semantics)."""

    def __init__(self, cfg: TensorBoardConfig) -> None:
        self.name = cfg.name
        self.interval = cfg.interval
        self.logdir = cfg.logdir
        self._root = os.path.abspath(cfg.logdir)
        self.corrupt_records = 0
        self.restarts: list[tuple[str, int, float]] = []
        self._dirs: dict[str, _Dir] = {}
        self._dir_ids: dict[tuple[int, int], str] = {}
        self._tails: dict[str, _Tail] = {}
        self._ordered: list[_Tail] = []
        self._runs: dict[str, RunTags] = {}
        self._restore: dict[str, int] = {}
        self._polls = 0
        self._unsorted = False
        self._waiting = False
        self._lock = threading.Lock()

    async def poll(self, now: float) -> Sequence[Sample]:
        """The samples written since the previous poll (file reads run in a worker thread)."""
        return await asyncio.to_thread(self.read_new)

    async def aclose(self) -> None:
        """Nothing to release: files are opened only while they are read."""

    def read_new(self) -> list[Sample]:
        """One full poll, synchronously: find new runs and files, then read every file's new bytes."""
        with self._lock:
            out: list[Sample] = []
            if not self._discover():
                return out
            for tail in list(self._ordered):
                starts: list[tuple[int, float]] = []
                try:
                    st = os.stat(tail.path)
                    if st.st_size != tail.offset or (st.st_dev, st.st_ino) != tail.ident:
                        self.corrupt_records += tail.read(st, out, starts)
                except FileNotFoundError:
                    self._drop(tail)
                except OSError as e:  # unreadable for now (permissions, I/O error): retried next poll
                    if tail.error != str(e):
                        log.warning("cannot read event file %s: %s; retrying at the next poll", tail.path, e)
                    tail.error = str(e)
                else:
                    tail.error = ""
                for step, wall in starts:
                    self.restarts.append((tail.run, step, wall))
                    log.info("run %s: SessionLog.START at step %d (%s)", tail.run, step, tail.name)
            return out

    def writer_claims(self) -> list[WriterClaim]:
        """What the names of the tailed event files claim: (path, run, host, pid) where a name has both.

        Only claims: `alertd.writers.WriterRegistry` verifies them against /proc before any use.
        """
        with self._lock:
            out = []
            for tail in self._tails.values():
                parsed = parse_file_name(tail.name)
                if parsed.host and parsed.pid and parsed.pid.isdigit():
                    out.append(WriterClaim(self.name, tail.run, tail.path, parsed.host, int(parsed.pid)))
            return out

    def cursor(self) -> dict[str, int]:
        """Byte offset consumed in each known event file, by path relative to the logdir (`/`)."""
        with self._lock:
            cur = dict(self._restore)
            cur.update((rel, tail.offset) for rel, tail in self._tails.items())
            return cur

    def restore(self, cursor: dict[str, int]) -> None:
        """Resume from a `cursor()`: files named there are read from their saved offset."""
        with self._lock:
            self._restore = {str(k): int(v) for k, v in cursor.items()}
            for rel, tail in self._tails.items():
                if rel in self._restore:
                    tail.offset = self._restore.pop(rel)
                    tail.resyncing, tail.wanted = False, 0

    # discovery

    def _discover(self) -> bool:
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
        full = self._polls % _FULL_RESCAN_POLLS == 0
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
        if self._unsorted:
            self._ordered = sorted(self._tails.values(), key=lambda t: t.order)
            self._unsorted = False
        return True

    def _add_dir(self, path: str, st: os.stat_result) -> bool:
        ident = (st.st_dev, st.st_ino)
        if ident in self._dir_ids and self._dir_ids[ident] in self._dirs:
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
            if self._add_dir(entry.path, st):
                sub = self._dirs[entry.path]
                sub.mtime_ns = st.st_mtime_ns
                self._list(sub)

    def _add_file(self, path: str) -> None:
        rel = os.path.relpath(path, self._root).replace(os.sep, "/")
        if rel in self._tails:
            return
        run = os.path.dirname(rel) or "."
        tags = self._runs.setdefault(run, RunTags())
        tail = _Tail(path, rel, run, self.name, tags, self._restore.pop(rel, 0))
        self._tails[rel] = tail
        self._unsorted = True
        log.debug("tailing %s (run %s)", path, run)

    def _drop(self, tail: _Tail) -> None:
        log.info("event file %s is gone; no longer tailed", tail.path)
        self._tails.pop(tail.rel, None)
        self._ordered = [t for t in self._ordered if t is not tail]

    def _forget_dir(self, path: str) -> None:
        prefix = path + os.sep
        for p in [p for p in self._dirs if p == path or p.startswith(prefix)]:
            del self._dirs[p]
