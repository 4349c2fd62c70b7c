"""The `textlog` source: tails plain-text training logs and turns their lines into samples.

- Files: `path` is a file or a glob (see `alertd.sources.globs`), matched again at every poll, so
  new logs are picked up. Each file is followed by a `LineTail` (new bytes only; partial last lines
  wait; rotation by rename and by copy-truncate followed; progress bars' `\\r` redraws read once each).
  A file rotated by rename that the glob still matches (`logs/*` and `train.log.1`) is not read again.
- Lines: see `alertd.sources.textlog.parse` for the shapes, steps, times and events.
- Samples: metric = the key as printed (or the user pattern's metric), labels `source` and `run`
  (the file's path relative to the glob's directory part); time = the line's own timestamp, else
  when it was read. An event is a sample of `log.event{event=NAME}` = 1; a fatal one also gives
  `run.crashed` = 1 and `run.finished` = 1 for the file's run (as the W&B sources report a crash).
- Bounds: at most `stream.MAX_SERIES` metric names per file (more are dropped, warned about once); lines are
  cut at 64 KiB; a FIFO or device named like a log is refused with a warning, never opened.
- Nothing matched: a file of UNMATCHED_AFTER lines or more none of which gave a value or an event is warned
  about once (its path, the lines read and the shapes looked for); `note` tells the same in the source's
  health (`/api/v1/sources`), and `unmatched()` lists every such file (a dry-run prints them).
- `cursor()` / `restore()`: per file, the byte offset, identity, the start of the file and the step
  counter, so a restarted service neither reads a line twice nor restarts its counter.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from alertd import progress
from alertd.gcpause import gc_paused
from alertd.model import Sample, encodable
from alertd.sources.config import TextLogConfig
from alertd.sources.globs import glob_base, matching_files, run_of
from alertd.sources.linetail import LineTail, NotRegularFile
from alertd.sources.textlog.parse import FileState, LineParser, event_patterns, value_patterns
from alertd.sources.textlog.stream import LogStream

log = logging.getLogger(__name__)

UNMATCHED_AFTER = 20
"""Lines a log may show without one value or event before the service warns that nothing matched."""
SHAPES = "key=value, key: value, a JSON or Python dict, `name value` pairs such as `step 10 loss 2.31`"
"""The built-in shapes, as the warning about a log that matched nothing lists them."""

_RETIRED = 1024
"""Rotated-away files remembered (by inode) so that a glob matching them does not read them again."""


class _File:
    """One followed log file: its tail and its stream of lines."""

    __slots__ = ("error", "path", "run", "saved", "stream", "tail", "warned")

    def __init__(self, path: str, run: str, source: str) -> None:
        self.path = path
        self.run = run
        self.tail = LineTail(path, bars=True)
        self.stream = LogStream(path, {"source": source, "run": run})
        self.error = ""
        self.warned = False
        self.saved: dict[str, Any] | None = None
        """Its entry of `cursor()`, made again only after a read that moved it (None: to make)."""


class TextLogSource:
    """Tails the text logs `cfg.path` names (see the module docstring)."""

    def __init__(self, cfg: TextLogConfig) -> None:
        self.name = cfg.name
        self.interval = cfg.interval
        self.pattern = cfg.path
        self.base = glob_base(cfg.path)
        self.parser = LineParser(
            builtin=cfg.builtin,
            patterns=value_patterns(cfg.patterns),
            events=event_patterns(cfg.events),
            builtin_events=cfg.builtin_events,
        )
        self._files: dict[str, _File] = {}
        self._retired: OrderedDict[tuple[int, int], dict[str, object]] = OrderedDict()
        self._restore: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._looked_for = SHAPES if cfg.builtin else ""
        if cfg.patterns:
            self._looked_for += ("; " if self._looked_for else "") + f"the source's {len(cfg.patterns)} patterns"

    def unmatched(self) -> list[tuple[str, int]]:
        """(path, lines read) of every file read so far that gave no value and no event. Without the lock (the
        API asks from the event loop while a poll may be reading): a snapshot of the files, counts as they are."""
        files = list(self._files.values())
        return [(f.path, f.stream.lines) for f in files if f.stream.lines and not f.stream.matched]

    def unmatched_text(self, path: str, lines: int) -> str:
        """What a file that matched nothing is told with."""
        what = "line" if lines == 1 else "lines"
        return f"{path}: {lines} {what} read, none matched ({self._looked_for or 'nothing is looked for'})"

    @property
    def note(self) -> str | None:
        """For the source's health: the files read that matched nothing (the first three), or None (a file
        name's bytes that are not UTF-8 written `\\xNN`, as in the `run` label)."""
        files = self.unmatched()
        if not files:
            return None
        text = "; ".join(self.unmatched_text(p, n) for p, n in files[:3])
        return encodable(text + (f"; and {len(files) - 3} more files" if len(files) > 3 else ""))

    @property
    def behind(self) -> bool:
        """Whether a file has bytes the last poll left for the next one (it read `linetail.MAX_POLL` of it): a
        dry-run polls again until it is False, the service reads on at once."""
        with self._lock:
            return any(f.tail.behind for f in self._files.values())

    async def poll(self, now: float) -> Sequence[Sample]:
        """The samples of the lines written since the previous poll (file I/O in a worker thread)."""
        return await asyncio.to_thread(self.read_new, now)

    async def aclose(self) -> None:
        """Close the files held open."""
        with self._lock:
            for f in self._files.values():
                f.tail.close()

    def read_new(self, now: float) -> list[Sample]:
        """One poll, synchronously (the cyclic collector paused: `alertd.gcpause`)."""
        with self._lock, gc_paused():
            out: list[Sample] = []
            if progress.active():  # the sizes of all the files up front: a progress bar's total
                progress.sized_files([*self._files, *matching_files(self.pattern)])
            for f in list(self._files.values()):  # known files first: a rotation is seen before its new name
                self._read(f, now, out)
            for path in matching_files(self.pattern):
                if path not in self._files:
                    self._read(self._add(path), now, out)
            return out

    # files

    def _add(self, path: str) -> _File:
        f = _File(path, run_of(path, self.base), self.name)
        saved = self._restore.pop(path, None)
        if isinstance(saved, dict):
            f.tail.restore(saved.get("tail", {}))
            f.stream.state = FileState.from_json(saved.get("parse"))
        else:
            try:
                st = os.stat(path)
                retired = self._retired.pop((st.st_dev, st.st_ino), None)
            except OSError:
                retired = None
            if retired is not None:  # the rotated-away file under its new name: already read
                f.tail.restore(retired)
        self._files[path] = f
        log.debug("tailing %s (run %s)", path, f.run)
        return f

    def _read(self, f: _File, now: float, out: list[Sample]) -> None:
        start = f.tail.offset
        try:
            chunk = f.tail.read()
        except FileNotFoundError:
            f.tail.close()
            del self._files[f.path]
            return
        except NotRegularFile:
            self._warn(f, "is not a regular file (a FIFO or a device?); not read")
            return
        except OSError as exc:
            self._warn(f, f"can't be read: {exc.strerror or exc}; retrying at the next poll")
            return
        f.error = ""
        if chunk.lines or chunk.reset or chunk.retired is not None or f.tail.offset != start:
            f.saved = None  # its position or its parse state moved
        if chunk.retired is not None:
            ident = chunk.retired.get("ident")
            if isinstance(ident, list):
                self._retired[(int(ident[0]), int(ident[1]))] = chunk.retired
                while len(self._retired) > _RETIRED:
                    self._retired.popitem(last=False)
        start = 0 if chunk.reset or chunk.retired is not None else start
        for lines in progress.batches(f.path, chunk.lines, start, f.tail.offset):
            f.stream.parse(self.parser, lines, now, out)
        if not f.warned and not f.stream.matched and f.stream.lines >= UNMATCHED_AFTER:
            f.warned = True
            log.warning("log file %s", self.unmatched_text(f.path, f.stream.lines), extra={"source": self.name})

    def _warn(self, f: _File, message: str) -> None:
        if f.error != message:
            log.warning("log file %s %s", f.path, message)
            f.error = message

    # restart

    def cursor(self) -> dict[str, Any]:
        """Per file path: the tail's cursor and the parse state. A file's entry is made again only after a read
        moved it (the service takes the cursor after every read that brought samples; the entries of the files
        that did not move are the same objects, which the state store does not write again)."""
        with self._lock:
            cur = dict(self._restore)
            for path, f in self._files.items():
                if f.saved is None:
                    f.saved = {"tail": f.tail.cursor(), "parse": f.stream.state.to_json()}
                cur[path] = f.saved
            return cur

    def restore(self, cursor: dict[str, Any]) -> None:
        """Resume from a `cursor()`: each file is checked against it when first seen again."""
        with self._lock:
            self._restore = {str(k): v for k, v in cursor.items() if isinstance(v, dict)}
