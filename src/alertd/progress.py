"""Progress of a long read on a terminal (`alertd dry-run`): files and bytes read, rate, ETA.

Three parts:

- The hook the readers call, process-wide: `sized(path, size)` where a reader learns the size of a
  file it is about to read, `reached(path, pos)` once the bytes up to `pos` are samples (`batches`
  reports it for lines or records turned into samples slice by slice), `received(nbytes, rows)` for an
  API's answers. Each is a no-op unless an observer is installed with
  `observing(...)`; the service never installs one, so its readers pay one global lookup per read.
- `read_line` and `eval_line`: one line of text from counters and the elapsed time (time is an
  argument; nothing here reads a clock), cut to the terminal's width.
- `Progress`: the observer `alertd dry-run` installs when stderr is a terminal. It redraws its line
  in place (`\\r`, then erase to the end of the line) at most every `interval` seconds, draws the final
  state of each phase once, and erases the line for good at `close()`. Lines that must be printed in
  between (warnings) go through `message()`, which erases the bar first.

Sizes are decimal (1 MB = 10**6 bytes); a file counts as read once its reader has reached its size.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol, TextIO, TypeVar

T = TypeVar("T")
ERASE = "\x1b[K"
"""Erase from the cursor to the end of the line (ANSI: every terminal alertd's users run)."""


class Observer(Protocol):
    """What the readers report to; see the module docstring."""

    def sized(self, path: str, size: int) -> None: ...

    def reached(self, path: str, pos: int) -> None: ...

    def received(self, nbytes: int, rows: int) -> None: ...


_observer: Observer | None = None


def active() -> bool:
    """Whether an observer listens (a reader may then do the extra `stat`s that tell the total up front)."""
    return _observer is not None


def sized(path: str, size: int) -> None:
    """The file `path` holds `size` bytes (its reader is about to read them)."""
    obs = _observer
    if obs is not None:
        obs.sized(path, size)


def reached(path: str, pos: int) -> None:
    """The reader of `path` has read its bytes up to `pos`."""
    obs = _observer
    if obs is not None:
        obs.reached(path, pos)


def received(nbytes: int, rows: int = 0) -> None:
    """An API answered `nbytes` bytes, or `rows` rows (history rows, metric points) were taken from answers."""
    obs = _observer
    if obs is not None:
        obs.received(nbytes, rows)


def sized_files(paths: Iterable[str]) -> None:
    """`sized` for each of `paths` that can be `stat`-ed (a reader about to read them all, when `active()`)."""
    obs = _observer
    if obs is None:
        return
    for path in paths:
        try:
            size = os.stat(path).st_size
        except OSError:
            continue
        obs.sized(path, size)


def batches(path: str, items: Sequence[T], start: int, end: int, size: int = 4096) -> Iterator[Sequence[T]]:
    """`items` (lines, records: what bytes `start` to `end` of `path` held) in slices of `size`; after each
    slice is consumed, the byte it reaches is reported (in proportion: where the time goes is in turning
    the bytes into samples, after the read). Without an observer: `items` whole, nothing reported."""
    if _observer is None:
        yield items
        return
    n = len(items)
    for i in range(0, n, size):
        yield items[i : i + size]
        reached(path, start + (end - start) * min(i + size, n) // n)
    if not n:
        reached(path, end)


@contextmanager
def observing(observer: Observer | None) -> Iterator[None]:
    """Report every read to `observer` (None: to nobody) until the block ends."""
    global _observer
    before, _observer = _observer, observer
    try:
        yield
    finally:
        _observer = before


# formatting (pure)


@dataclass(frozen=True, slots=True)
class Reading:
    """What one source has read so far. `total` is None where it can't be known up front (the APIs, an
    MLflow store's runs found while reading): then no total, share or ETA is shown."""

    label: str
    files: int
    files_done: int
    done: int
    total: int | None
    rows: int = 0


def read_line(r: Reading, elapsed: float, width: int = 0) -> str:
    """`tb (tensorboard): 3/12 files, 120.5/800.0 MB (15%), 45.2 MB/s, ETA 0:15`, or without a total
    `wb (wandb): 1,234 rows, 3.2 MB, 1.1 MB/s`; cut to `width` - 1 characters (0: not cut)."""
    rate = r.done / elapsed if elapsed > 0 else 0.0
    parts: list[str] = []
    if r.total is not None:
        parts.append(f"{r.files_done}/{r.files} files")
        unit, scale = _unit(max(r.total, r.done))
        parts.append(f"{r.done / scale:.1f}/{r.total / scale:.1f} {unit} ({_percent(r.done, r.total)})")
        parts.append(f"{rate / 1e6:.1f} MB/s")
        parts.append(f"ETA {_eta(r.total - r.done, rate)}")
    else:
        if r.files:
            parts.append(f"{r.files:,} files")
        if r.rows:
            parts.append(f"{r.rows:,} rows")
        unit, scale = _unit(r.done)
        parts.append(f"{r.done / scale:.1f} {unit}")
        parts.append(f"{rate / 1e6:.1f} MB/s")
    return _fit(f"{printable(r.label)}: " + ", ".join(parts), width)


def eval_line(done: int, total: int, elapsed: float, width: int = 0) -> str:
    """`evaluating: 1,200,000/3,400,000 samples (35%), 250,000 samples/s, ETA 0:09`; cut as `read_line`."""
    rate = done / elapsed if elapsed > 0 else 0.0
    text = (
        f"evaluating: {done:,}/{total:,} samples ({_percent(done, total)}), {rate:,.0f} samples/s, "
        f"ETA {_eta(total - done, rate)}"
    )
    return _fit(text, width)


def printable(text: str) -> str:
    """`text` with every character a terminal would act on (escape sequences, control characters)
    replaced by `?`: a source's name comes from a rules file."""
    return "".join(c if c.isprintable() else "?" for c in text)


def _unit(n: int) -> tuple[str, float]:
    if n >= 10**9:
        return "GB", 1e9
    if n >= 10**6:
        return "MB", 1e6
    return "kB", 1e3


def _percent(done: int, total: int) -> str:
    return f"{min(100, done * 100 // total) if total > 0 else 100}%"


def _eta(left: int, rate: float) -> str:
    """Time left as M:SS or H:MM:SS; `?` before anything was read."""
    if left <= 0:
        return "0:00"
    if rate <= 0:
        return "?"
    seconds = min(round(left / rate), 100 * 3600 - 1)
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def _fit(text: str, width: int) -> str:
    """The line cut so that it never reaches the last column (a terminal would wrap it, and `\\r` then
    redraws only the second row)."""
    return text if width <= 1 else text[: width - 1]


# the observer alertd dry-run shows


class Progress:
    """One progress line on `stream` (a terminal): a reading phase per source, then an evaluating phase.

    Thread-safe: readers report from worker threads, the command from its own.
    """

    def __init__(
        self,
        stream: TextIO,
        *,
        clock: Callable[[], float] = time.monotonic,
        interval: float = 0.1,
        width: Callable[[], int] | None = None,
    ) -> None:
        self.stream = stream
        self.clock = clock
        self.interval = interval
        self._width = width or (lambda: _terminal_width(stream))
        self._lock = threading.RLock()
        self._label = ""
        self._sized_total = True
        self._files: dict[str, list[int]] = {}
        """path -> [size (-1: not told), position reached]"""
        self._received = 0
        self._rows = 0
        self._eval: tuple[int, int] | None = None
        self._start = clock()
        self._last_draw = float("-inf")
        self._shown = False
        self.frames = 0
        """Lines drawn so far."""

    @classmethod
    def for_terminal(cls, stream: TextIO) -> Progress | None:
        """A Progress on `stream` when it is a terminal that can redraw a line (TERM is not `dumb`); else None."""
        try:
            tty = stream.isatty()
        except (AttributeError, ValueError, OSError):
            return None
        if not tty or os.environ.get("TERM") == "dumb":
            return None
        return cls(stream)

    # phases

    def reading(self, label: str, *, total_known: bool) -> None:
        """A source is read from now on; `total_known`: its reader tells the sizes of its files before it
        reads them (the file sources), so a total and an ETA can be shown."""
        with self._lock:
            self._label, self._sized_total = label, total_known
            self._files, self._received, self._rows, self._eval = {}, 0, 0, None
            self._start, self._last_draw = self.clock(), float("-inf")

    def evaluated(self, done: int, total: int) -> None:
        """The replay has fed `done` of its `total` samples (the first call starts the phase)."""
        with self._lock:
            if self._eval is None:
                self._start, self._last_draw = self.clock(), float("-inf")
            self._eval = (done, total)
            self._draw(False)

    def finish_phase(self) -> None:
        """Draw the phase's last state (even when the last frame is less than `interval` old)."""
        with self._lock:
            self._draw(True)

    # Observer

    def sized(self, path: str, size: int) -> None:
        with self._lock:
            entry = self._files.setdefault(path, [-1, 0])
            entry[0] = size
            self._draw(False)

    def reached(self, path: str, pos: int) -> None:
        with self._lock:
            entry = self._files.setdefault(path, [-1, 0])
            entry[1] = max(entry[1], pos)
            self._draw(False)

    def received(self, nbytes: int, rows: int) -> None:
        with self._lock:
            self._received += nbytes
            self._rows += rows
            self._draw(False)

    # the line

    def snapshot(self) -> Reading:
        """The reading phase's counters now."""
        with self._lock:
            files = self._files.values()
            done = sum(min(pos, size) if size >= 0 else pos for size, pos in files) + self._received
            total = sum(max(size, 0) for size, _ in files) if self._sized_total and not self._received else None
            finished = sum(1 for size, pos in files if 0 <= size <= pos)
            return Reading(self._label, len(self._files), finished, done, total, self._rows)

    def line(self) -> str:
        """The line as it would be drawn now."""
        with self._lock:
            elapsed = self.clock() - self._start
            width = self._width()
            if self._eval is not None:
                return eval_line(*self._eval, elapsed, width)
            return read_line(self.snapshot(), elapsed, width)

    def _draw(self, force: bool) -> None:
        now = self.clock()
        if not force and now - self._last_draw < self.interval:
            return
        self._last_draw = now
        self._write("\r" + self.line() + ERASE)
        self._shown = True
        self.frames += 1

    def clear(self) -> None:
        """Erase the line (before something else is written to the same terminal)."""
        with self._lock:
            if self._shown:
                self._write("\r" + ERASE)
                self._shown = False

    def message(self, text: str) -> None:
        """Print `text` as a line of its own; the bar is drawn again at its next update."""
        with self._lock:
            self.clear()
            self._write(text + "\n")

    def close(self) -> None:
        """Erase the line for good."""
        self.clear()

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # the terminal went away: progress is not worth failing for
            pass


class MessageHandler(logging.Handler):
    """Log records (the readers' warnings) printed through `Progress.message`, as `logging.lastResort`
    would print them without it: the message alone, from WARNING up."""

    def __init__(self, progress: Progress) -> None:
        super().__init__(logging.WARNING)
        self.progress = progress

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.progress.message(self.format(record))
        except Exception:  # a handler never raises into the code that logged
            self.handleError(record)


def _terminal_width(stream: TextIO) -> int:
    try:
        columns = os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, ValueError, OSError):
        return 80
    return columns or 80  # a pseudo-terminal nobody sized says 0
