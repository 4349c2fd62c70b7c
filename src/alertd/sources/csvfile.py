"""The `csv` source: tails CSV metric files, as Lightning's (and LitGPT's) `CSVLogger` writes them.

    sources:
      - {name: pl, type: csv, path: "lightning_logs/*/metrics.csv", interval: 5s}

`path` is a file or a glob (`*`, `?`, `[...]`, `**`); the glob is evaluated again at every poll, so
new files are picked up. Each file is followed by path with `LineTail`.

Rows
- The first row of a file is its header: the column names. Every other row is a data row; each
  non-empty cell of it is a sample of the metric named by its column. An empty cell is "no value",
  never zero. Values are floats, `nan`, `NaN`, `inf`, `-inf` and `Infinity` included; a cell that is
  not a number is skipped, counted in `bad_cells` and logged once per file and column.
- The `step_column` cell (default `step`), where present and an integer (`12` or `12.0`), is the
  sample's step; that column is never a metric.
- At most `max_columns` metric columns (default 10,000: a real run logs tens to hundreds of metrics) are
  read from a file; a header wider than that (a storm of 40,000 columns) has its further columns left
  unread, which the source's health says at every poll that reads rows of that file (`take_cuts`), while
  the file's other columns and the other files are read on.
- Time is the poll's `now` (Lightning writes no time column), unless the file has a `time`,
  `timestamp` or `_timestamp` column (in that order of preference) holding epoch seconds (a finite
  value from 1e9 on, i.e. after September 2001); those columns are never metrics, and a cell that is
  not epoch seconds falls back to `now` (logged once per file and column).
- Cells are parsed with the `csv` module (excel dialect): quoted fields, commas and doubled quotes
  inside them, and quoted fields that span lines (up to 16 lines and 64 KiB: a quote still open
  then was never closed, so its line is read as a row by itself and the lines after it as rows
  again). A blank line is not a row. A cell beyond the header's width is ignored (logged once per
  file). A line longer than 1 MiB is cut by LineTail; its row is dropped (counted in `dropped_rows`).

Labels
- `source`: the configured name.
- `run`: the file's directory relative to the glob's base (its leading directories without a
  wildcard), with `/`: `lightning_logs/*/metrics.csv` reads `lightning_logs/version_0/metrics.csv` as
  run `version_0`, and `runs/**/metrics.csv` reads `runs/a/b/metrics.csv` as `a/b`. A file directly
  in the base directory (a plain path such as `out/metrics.csv`, or `logs/*.csv`) is named by its
  file name without `.csv`: `metrics`, `exp1`. Two CSV files in one run directory share the label.

Rewrites
Lightning rewrites `metrics.csv` in place (same inode: truncate, a wider header, every old row, then
the new ones) when a metric first appears. Per file the source counts the data rows it has consumed
(`rows`). When the file starts over (`LineTail` reports a reset; or, checked here, its first line is
no longer the stored header or the byte before the read offset is no longer a line end, which catches
a rewrite that left the file as long as before and its first 256 bytes unchanged), reading restarts at
byte 0: the header is read again and data rows are counted from 1 (`pos`); a row is emitted only when
`pos > rows`. This holds across polls, so a rewrite seen half-written (truncated, then partly written)
skips exactly the rows consumed overall, re-emits none, and loses none once it is complete. A writer
that replaces the file by rename (a temporary file renamed over it) is handled alike: the old file is
read to its end, then the new one from its header, rows consumed skipped.

Whether the content after a restart is still the same file is decided by two rows, each compared by
its non-empty cells (numbers compared as numbers, so `5` and `5.0` are equal, as a rewrite may format
them): its first data row must equal the first row consumed, and its row number `rows` must equal the
last row consumed. A different first row means another file took the path (a new run, even one with
fewer rows than consumed): it is read from its first row, with a warning. A different last row means
the same thing found later: the file is read again from its start, every row emitted. A new run whose
first row is identical to the old one's, and that stops before the old row count, is taken for a
rewrite in progress: its rows are skipped until it passes that count.

A file renamed away or deleted is read to its end, then dropped (with an info line); its row count
is kept (bounded), so a file put back at that path is checked as above rather than read twice, and a
file renamed to a name the glob matches is read on from where it was. A file that can't be read
(permissions, I/O error, a FIFO in its place) is warned about once and retried at every poll.

`cursor()` / `restore()` carry, per file path, `LineTail`'s cursor, the header, `rows`, `pos`, the
two row fingerprints and an unfinished multi-line row: a restarted service neither reads a row twice
nor loses one. File reads run in a worker thread.
"""

from __future__ import annotations

import asyncio
import csv
import hashlib
import logging
import math
import os
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import Any

from alertd import progress
from alertd.gcpause import gc_paused
from alertd.model import Sample, SeriesKey, make_labels
from alertd.sources.config import CsvConfig
from alertd.sources.globs import MAX_FILES, glob_base, matching_files, run_of
from alertd.sources.limits import Cuts
from alertd.sources.linetail import HEAD, LineTail

log = logging.getLogger(__name__)

TIME_COLUMNS = ("time", "timestamp", "_timestamp")
"""Columns that hold a row's time in epoch seconds, in order of preference; never metrics."""
MIN_EPOCH = 1e9
"""The smallest time-column value taken for epoch seconds (2001-09-09)."""
MAX_LINE = 1 << 20
"""Longest line read whole; a longer one is cut by LineTail and its row dropped here."""
MAX_PENDING = 64 << 10
"""Longest record whose quoted field spans lines (bytes)."""
MAX_PENDING_LINES = 16
"""Most lines one record may span. Past either limit the quote is taken as never closed: its line is
read as a row by itself and the lines after it are read again as rows."""
MAX_SAVED = MAX_FILES
"""Files whose state is kept while they are not tailed (gone, or restored but not matched yet)."""
_RESTARTS = 3
"""Re-reads from byte 0 within one poll of one file (a restart found while reading)."""


def parse_step(cell: str) -> int | None:
    """The step in a cell (`12`, `12.0`, ` 12 `), or None when it is not an integer."""
    try:
        return int(cell)
    except ValueError:
        pass
    try:
        value = float(cell)
    except ValueError:
        return None
    return int(value) if value.is_integer() else None


def _normal(cell: str) -> str:
    try:
        return repr(float(cell))
    except ValueError:
        return cell.strip()


def row_fingerprint(header: Sequence[str], row: Sequence[str]) -> str:
    """A short digest of a row's non-empty cells by column, numbers compared as numbers.

    A rewrite with a wider header leaves it unchanged (the new columns are empty in old rows).
    """
    cells = sorted((name, _normal(cell)) for name, cell in zip(header, row, strict=False) if cell.strip())
    text = "\x1e".join(f"{name}\x1f{value}" for name, value in cells)
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


class _OneLine:
    """An iterator over one line that notes whether the csv reader asked for more (an open quote)."""

    __slots__ = ("calls", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.calls = 0

    def __iter__(self) -> _OneLine:
        return self

    def __next__(self) -> str:
        self.calls += 1
        if self.calls > 1:
            raise StopIteration
        return self.text


def split_row(text: str, whole: bool = False) -> list[str] | None:
    """The cells of one CSV record, or None when a quoted field is still open at its end.

    `whole`: the text is all there is (a quote never closed ends at its end).
    """
    if '"' not in text:
        return text.split(",") if text else []
    lines = _OneLine(text)
    try:
        row = next(csv.reader(lines))
    except StopIteration:
        return []
    except csv.Error:  # a NUL byte, say: no better reading than the commas
        return None if lines.calls > 1 and not whole else text.split(",")
    return None if lines.calls > 1 and not whole else row


class _File:
    """One CSV file: its tail, its header, and how many data rows of it were consumed."""

    def __init__(self, path: str, run: str, source: str, max_columns: int = 10_000) -> None:
        self.path = path
        self.max_columns = max_columns
        self.over: str | None = None
        """Why columns of the header are not read (over `max_columns`), or None."""
        self.run = run
        self.labels = make_labels({"source": source, "run": run})
        self.tail = LineTail(path, bars=False, max_line=MAX_LINE)
        self.header: list[str] | None = None
        self.header_text: str | None = None
        self.rows = 0
        """Data rows consumed (emitted) of this file's content."""
        self.pos = 0
        """Data rows read since the file last started over; `pos < rows` while skipping."""
        self.first: str | None = None
        self.last: str | None = None
        self.last_row: tuple[list[str], list[str]] | None = None
        self.pending: str | None = None
        self.error = ""
        self.warned: set[str] = set()
        self.keys: dict[str, SeriesKey] = {}
        self.step_index: int | None = None
        self.time_indices: list[int] = []
        self.metric_columns: list[tuple[int, SeriesKey]] = []
        self.width = 0

    # state

    def restart(self) -> None:
        """The file starts over: its next non-blank row is a header, and data rows count from 1."""
        self.header, self.header_text, self.pos, self.pending = None, None, 0, None

    def forget(self) -> None:
        """Another file: nothing of it was consumed."""
        self.rows, self.first, self.last, self.last_row = 0, None, None, None
        self.warned.clear()

    def last_fingerprint(self) -> str | None:
        """The fingerprint of the last row consumed (computed when asked: rows are many)."""
        if self.last_row is not None:
            self.last, self.last_row = row_fingerprint(*self.last_row), None
        return self.last

    def set_header(self, row: list[str], text: str, step_column: str) -> None:
        """Columns from a header row: the step, the time columns and the metrics."""
        names = [cell.strip() for cell in row]
        if names:
            names[0] = names[0].lstrip("\ufeff").strip()
        self.header, self.header_text, self.width = names, text, len(names)
        self.step_index = names.index(step_column) if step_column in names else None
        self.time_indices = [i for column in TIME_COLUMNS for i, name in enumerate(names) if name == column]
        self.metric_columns, self.over = [], None
        for i, name in enumerate(names):
            if name and i != self.step_index and name not in TIME_COLUMNS:
                if len(self.metric_columns) >= self.max_columns:
                    wide = sum(1 for j, n in enumerate(names) if n and j != self.step_index and n not in TIME_COLUMNS)
                    self.over = (
                        f"{self.path}: the header has {wide} metric columns, over max_columns "
                        f"({self.max_columns}): the columns from {name!r} on are not read"
                    )
                    break
                key = self.keys.get(name)
                if key is None:
                    key = self.keys[name] = SeriesKey(name, self.labels)
                self.metric_columns.append((i, key))
        if len(self.keys) > 4 * len(names) + 64:  # many header changes: keep only the current columns
            self.keys = {key.metric: key for _, key in self.metric_columns}

    def state(self) -> dict[str, Any]:
        """This file's cursor entry (JSON-able)."""
        return {
            "tail": self.tail.cursor(),
            "header": self.header_text,
            "rows": self.rows,
            "pos": self.pos,
            "first": self.first,
            "last": self.last_fingerprint(),
            "pending": self.pending,
        }

    def load(self, state: dict[str, Any], step_column: str) -> None:
        """Take up a `state()` (a `tail` of None: the file is read again from byte 0, rows skipped)."""
        self.rows = max(0, int(state.get("rows", 0)))
        self.first = _str_or_none(state.get("first"))
        self.last, self.last_row = _str_or_none(state.get("last")), None
        tail = state.get("tail")
        self.tail.close()  # LineTail.restore() keeps an open file: a cursor of another file would drain it
        if not isinstance(tail, dict):
            self.tail.restore({"offset": 0, "ident": None, "head": ""})
            self.restart()
            return
        self.tail.restore(tail)
        self.pos = min(max(0, int(state.get("pos", self.rows))), self.rows)
        self.pending = _str_or_none(state.get("pending"))
        header = _str_or_none(state.get("header"))
        self.header, self.header_text = None, None
        if header is not None:
            row = split_row(header)
            if row:
                self.set_header(row, header, step_column)


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


class CsvSource:
    """Tails the CSV files that `cfg.path` matches (see the module docstring for the semantics)."""

    def __init__(self, cfg: CsvConfig) -> None:
        self.name = cfg.name
        self.interval = cfg.interval
        self.pattern = cfg.path
        self.step_column = cfg.step_column
        self.max_columns = cfg.max_columns
        self.cuts = Cuts()
        self.base = glob_base(cfg.path)
        self.bad_cells = 0
        self.dropped_rows = 0
        self._files: dict[str, _File] = {}
        self._saved: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._retired: OrderedDict[tuple[int, int], dict[str, Any]] = OrderedDict()
        self._lock = threading.Lock()
        self._warned_many = False

    async def poll(self, now: float) -> Sequence[Sample]:
        """The rows written since the previous poll, as samples (file reads run in a worker thread)."""
        return await asyncio.to_thread(self.read_new, now)

    def take_cuts(self) -> list[str]:
        """What the polls since the last call left out at a limit (`alertd.sources.limits`)."""
        return self.cuts.take()

    async def aclose(self) -> None:
        """Close the open files."""
        with self._lock:
            for f in self._files.values():
                f.tail.close()

    @property
    def behind(self) -> bool:
        """Whether a file has bytes the last poll left for the next one (it read `linetail.MAX_POLL` of it): a
        dry-run polls again until it is False, the service reads on at once."""
        with self._lock:
            return any(f.tail.behind for f in self._files.values())

    def read_new(self, now: float) -> list[Sample]:
        """One poll, synchronously: match the glob again, then read every file's new rows."""
        with self._lock, gc_paused():
            paths = matching_files(self.pattern)
            if len(paths) >= MAX_FILES and not self._warned_many:
                log.warning(
                    "csv source %s: %r matches over %d files; the rest are ignored", self.name, self.pattern, MAX_FILES
                )
                self._warned_many = True
            out: list[Sample] = []
            if progress.active():  # the sizes of all the files up front: a progress bar's total
                progress.sized_files([*self._files, *paths])
            for path in sorted(self._files):  # known files first: a rotation is seen before its new name
                self._read_file(self._files[path], now, out)
            for path in paths:
                if path not in self._files:
                    self._read_file(self._add(path), now, out)
            return out

    def cursor(self) -> dict[str, Any]:
        """Per file path: where reading stands (JSON-able)."""
        with self._lock:
            files = dict(self._saved)
            files.update((path, f.state()) for path, f in self._files.items())
            return {"files": files}

    def restore(self, cursor: dict[str, Any]) -> None:
        """Resume from a `cursor()`: files named there go on from where they were left."""
        files = cursor.get("files") if isinstance(cursor, dict) else None
        if not isinstance(files, dict):
            return
        with self._lock:
            for path, state in files.items():
                if not isinstance(state, dict):
                    continue
                f = self._files.get(str(path))
                if f is None:
                    self._save(str(path), state)
                    continue
                try:
                    f.load(state, self.step_column)
                except (TypeError, ValueError) as exc:
                    log.warning(
                        "csv source %s: cursor of %s not usable (%s); reading it from the start", self.name, path, exc
                    )

    # files

    def _add(self, path: str) -> _File:
        directory = run_of(os.path.dirname(path) or ".", self.base)
        if directory == ".":
            name = os.path.basename(path)
            directory = name[:-4] if name.lower().endswith(".csv") else name
        f = _File(path, directory, self.name, self.max_columns)
        saved = self._saved.pop(path, None)
        if saved is None:
            try:
                st = os.stat(path)
                saved = self._retired.pop((st.st_dev, st.st_ino), None)
            except OSError:
                saved = None
        if saved is not None:
            try:
                f.load(saved, self.step_column)
            except (TypeError, ValueError) as exc:
                log.warning(
                    "csv source %s: cursor of %s not usable (%s); reading it from the start", self.name, path, exc
                )
                f = _File(path, directory, self.name, self.max_columns)
        self._files[path] = f
        log.debug("csv source %s: tailing %s (run %s)", self.name, path, directory)
        return f

    def _retire(self, f: _File, tail: dict[str, object]) -> None:
        """Keep the state of a file rotated away by rename: under its new name it is read on, not again."""
        ident = tail.get("ident")
        if isinstance(ident, list) and len(ident) == 2:
            state = f.state()
            state["tail"] = tail
            self._retired[(int(ident[0]), int(ident[1]))] = state
            while len(self._retired) > MAX_SAVED:
                self._retired.popitem(last=False)

    def _drop(self, f: _File) -> None:
        log.info("csv source %s: %s is gone; no longer tailed", self.name, f.path)
        f.tail.close()
        del self._files[f.path]
        state = f.state()
        state["tail"] = None
        self._save(f.path, state)

    def _save(self, path: str, state: dict[str, Any]) -> None:
        self._saved[path] = state
        self._saved.move_to_end(path)
        while len(self._saved) > MAX_SAVED:
            self._saved.popitem(last=False)

    def _read_file(self, f: _File, now: float, out: list[Sample]) -> None:
        for _ in range(_RESTARTS):
            before, offset = f.tail.ident, f.tail.offset
            try:
                chunk = f.tail.read()
            except FileNotFoundError:
                self._drop(f)
                return
            except OSError as exc:
                if f.error != str(exc):
                    log.warning("csv source %s: cannot read %s: %s; retrying at the next poll", self.name, f.path, exc)
                f.error = str(exc)
                return
            if f.error:
                log.info("csv source %s: %s is readable again", self.name, f.path)
                f.error = ""
            lines = chunk.lines
            if chunk.retired is not None:  # rotated by rename, or deleted: the old file was read to its end
                replaced = f.tail.ident != before
                start = self._new_file_start(f, lines) if replaced else len(lines)
                self._consume(f, lines[:start], now, out)
                self._retire(f, chunk.retired)
                if not replaced:
                    return
                f.restart()  # another file took the path: it starts at its header
                lines = lines[start:]
            elif chunk.reset:
                f.restart()
            elif lines and self._rewritten_in_place(f, offset):
                log.info("csv source %s: %s was rewritten in place; reading it again from the start", self.name, f.path)
                self._start_over(f)
                continue
            first = 0 if chunk.reset or chunk.retired is not None else offset
            if all(self._consume(f, part, now, out) for part in progress.batches(f.path, lines, first, f.tail.offset)):
                return
            self._start_over(f)
        log.warning("csv source %s: %s keeps changing while read; trying again at the next poll", self.name, f.path)

    def _start_over(self, f: _File) -> None:
        """Read the file again from byte 0 at once (rows already consumed are skipped)."""
        ident = list(f.tail.ident) if f.tail.ident else None
        f.tail.restore({"offset": 0, "ident": ident, "head": ""})
        f.restart()

    def _new_file_start(self, f: _File, lines: list[str]) -> int:
        """Where, in the lines of a rotation, the new file's lines begin (its header line).

        LineTail returns the old file's last lines and then the new file's; the new file's first line
        is at the start of `tail.head` (its first bytes).
        """
        head = f.tail.head
        newline = head.find(b"\n")
        if newline >= 0:
            first = head[:newline].decode("utf-8", "replace").rstrip("\r")
            match = [i for i, line in enumerate(lines) if line == first]
        elif len(head) >= HEAD:  # a first line longer than the head: match its start
            prefix = head.decode("utf-8", "replace").rstrip("\ufffd")  # not a character cut in two
            match = [i for i, line in enumerate(lines) if line.startswith(prefix)]
        else:
            match = []
        return match[-1] if match else len(lines)  # no match: the new file has no complete line yet

    def _rewritten_in_place(self, f: _File, offset: int) -> bool:
        """Whether the file was rewritten although LineTail saw no reset: the header line or the line
        boundary at the old offset changed (a rewrite that kept the length and the first 256 bytes)."""
        if f.header_text is None:
            return False
        first_line = f.header_text.split("\n", 1)[0]  # a quoted name may span lines
        want = first_line.encode("utf-8")
        if len(want) + 2 >= MAX_LINE:
            return False
        try:
            with open(f.path, "rb") as fh:
                head = fh.read(len(want) + 2)
                if offset > 0 and f.tail.cut_lines == 0:
                    fh.seek(offset - 1)
                    if fh.read(1) != b"\n":
                        return True
        except OSError:
            return False
        newline = head.find(b"\n")
        if newline < 0:
            return True
        return head[:newline].decode("utf-8", "replace").rstrip("\r") != first_line

    # rows

    def _consume(self, f: _File, lines: Iterable[str], now: float, out: list[Sample], alone: bool = False) -> bool:
        """Turn lines into samples; False when the file must be read again from its start.

        `alone`: `lines` is one line whose unclosed quote ends at its end.
        """
        cut = f.tail.cut_lines
        for line in lines:
            text = line if f.pending is None else f"{f.pending}\n{line}"
            row = split_row(text, whole=alone)
            f.pending = None
            if row is None:
                if len(text) <= MAX_PENDING and text.count("\n") < MAX_PENDING_LINES:
                    f.pending = text
                    continue
                # a quote never closed: its line is a row by itself, the lines after it are read again
                self._warn_once(f, "\x00quote", "%s: a quoted field is not closed; its line is read alone")
                first, _, rest = text.partition("\n")
                if not self._consume(f, [first], now, out, alone=True) or not self._consume(
                    f, rest.split("\n"), now, out
                ):
                    return False
                continue
            if not row:
                continue
            if f.header is None:
                f.set_header(row, text, self.step_column)
                continue
            f.pos += 1
            if f.pos <= f.rows:
                check = self._check_skipped(f, row)
                if check is None:
                    continue
                if not check:
                    return False
            f.rows = f.pos
            if f.rows == 1:
                f.first = row_fingerprint(f.header, row)
            f.last_row = (f.header, row)
            if cut and len(line.encode("utf-8")) >= MAX_LINE:
                self._warn_once(f, "\x00cut", "%s: a line longer than %d bytes was cut; its row is dropped", MAX_LINE)
                self.dropped_rows += 1
                continue
            self._emit(f, row, now, out)
        return True

    def _check_skipped(self, f: _File, row: list[str]) -> bool | None:
        """A row already consumed, read again after a restart: None to skip it, True when it shows
        another file took the path (read it as new, from this first row), False to read the file again."""
        assert f.header is not None
        if f.pos == 1 and f.first is not None and row_fingerprint(f.header, row) != f.first:
            log.warning(
                "csv source %s: %s now holds another file (its first row differs); reading it as new",
                self.name,
                f.path,
            )
            f.forget()
            return True
        if f.pos == f.rows and f.pos > 1:
            last = f.last_fingerprint()
            if last is not None and row_fingerprint(f.header, row) != last:
                log.warning(
                    "csv source %s: %s now holds another file (row %d differs); reading it again from the start",
                    self.name,
                    f.path,
                    f.pos,
                )
                f.forget()
                return False
        return None

    def _emit(self, f: _File, row: list[str], now: float, out: list[Sample]) -> None:
        header = f.header
        assert header is not None
        n = len(row)
        if n > f.width and any(cell.strip() for cell in row[f.width :]):
            self._warn_once(f, "\x00wide", "%s: a row has more cells than the header; the extra cells are ignored")
        step = None
        if f.step_index is not None and f.step_index < n and row[f.step_index].strip():
            step = parse_step(row[f.step_index])
            if step is None:
                self._bad(f, header[f.step_index], row[f.step_index], "not an integer step")
        t = now
        for i in f.time_indices:
            if i < n and row[i].strip():
                try:
                    value = float(row[i])
                except ValueError:
                    value = math.nan
                if math.isfinite(value) and value >= MIN_EPOCH:
                    t = value
                    break
                self._bad(f, header[i], row[i], "not epoch seconds")
        if f.over is not None:
            self.cuts.add(f"csv source {self.name}: {f.over}")
        append, new = out.append, tuple.__new__
        for i, key in f.metric_columns:
            if i >= n:
                break
            cell = row[i]
            if not cell:
                continue
            try:
                value = float(cell)
            except ValueError:
                if cell.strip():
                    self._bad(f, key.metric, cell, "not a number")
                continue
            append(new(Sample, (key, t, step, value)))  # Sample(...) without its keyword-handling __new__

    def _bad(self, f: _File, column: str, cell: str, what: str) -> None:
        self.bad_cells += 1
        self._warn_once(f, column, "%s: column %r: %r is %s; skipped (logged once per column)", column, cell[:40], what)

    def _warn_once(self, f: _File, key: str, msg: str, *args: object) -> None:
        if key in f.warned or len(f.warned) > 1000:
            return
        f.warned.add(key)
        log.warning("csv source %s: " + msg, self.name, f.path, *args)
