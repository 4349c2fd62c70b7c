"""Follow one growing text file by path, as `tail -F` does: only new bytes are read, whole lines come out.

- A last line without its terminator is not returned until it is complete. A line longer than
  `max_line` bytes is cut there (the rest of it, up to its end, is dropped and counted).
- Rotation by rename (`train.log` -> `train.log.1`, a new `train.log`): the open file is read to its
  end, its unterminated last line included (its writer has moved on), then the new file from its start
  (a long rest of the old file in pieces of `max_poll`, as any backlog).
- Rotation by copy-truncate, or any rewrite: the file shrinking below the offset read, its first
  8 KiB changing, or the byte before the offset read no longer ending a line, starts it over from
  byte 0; `Chunk.reset` says so (a CSV reader then skips the rows it has already seen).
- Invalid UTF-8 is replaced (U+FFFD), never fatal.
- With `bars=True`, a carriage return ends a line too, as a progress bar (tqdm) redraws itself with
  `\\r`: each distinct state of a bar is returned once, an identical redraw is not, and a line that a
  carriage return began (a bar's state) keeps one `\\r` in front so a parser can tell it from a log line.
- Only regular files are opened, without blocking (`alertd.sources.fileopen.open_regular`: a FIFO named
  like a log is refused with `NotRegularFile` and reported).
- A read takes at most `max_read` bytes; `read()` loops until the file is caught up or it has taken
  `max_poll` bytes (then `behind` is True and the next call goes on from there).
"""

from __future__ import annotations

import errno
import logging
import os
import re
import stat
from dataclasses import dataclass, field
from typing import BinaryIO

from alertd import progress
from alertd.sources.fileopen import NotRegularFile as NotRegularFile  # re-exported: textlog catches it
from alertd.sources.fileopen import not_regular, open_regular

log = logging.getLogger(__name__)

MAX_LINE = 64 << 10
MAX_READ = 8 << 20
MAX_POLL = 64 << 20
"""Bytes one `read()` takes at most (give or take one `MAX_READ`): a longer backlog is read on at the next call
(`behind` says so), so a poll never holds a whole multi-gigabyte log and its samples at once."""
HEAD = 8192
"""The file's first bytes are remembered to notice a rewrite that left the file at least as long as
before (a CSV header widened in place, a log truncated and written again)."""
_SEPARATORS = re.compile(r"(\r|\n)")


@dataclass(slots=True)
class Chunk:
    """What one `read()` found: complete lines, in order, and whether the file started over first."""

    lines: list[str] = field(default_factory=list)
    reset: bool = False
    retired: dict[str, object] | None = None
    """After a rotation by rename: the cursor of the old file, read to its end (to follow it under its new name)."""


class LineTail:
    """One file followed by path. Not thread-safe: the owning source serialises calls."""

    def __init__(
        self,
        path: str,
        *,
        bars: bool = False,
        max_line: int = MAX_LINE,
        max_read: int | None = None,
        max_poll: int | None = None,
    ) -> None:
        self.path = path
        self.splitter = LineSplitter(bars=bars, max_line=max_line)
        self.max_read = MAX_READ if max_read is None else max_read
        self.max_poll = MAX_POLL if max_poll is None else max_poll
        self.behind = False
        """True when the last `read()` stopped at `max_poll` bytes with more of the file to read."""
        self.offset = 0
        self.ident: tuple[int, int] | None = None
        self.head = b""
        self._file: BinaryIO | None = None
        self._size = -1
        self._mtime = -1

    # lifecycle

    def close(self) -> None:
        """Release the open file (a later `read()` opens it again)."""
        if self._file is not None:
            self._file.close()
            self._file = None

    def cursor(self) -> dict[str, object]:
        """Where reading stands, as JSON-able data."""
        ident = list(self.ident) if self.ident else None
        return {"offset": self.offset, "ident": ident, "head": self.head.hex()}

    def restore(self, cursor: dict[str, object]) -> None:
        """Resume from a `cursor()`: checked against the file at the next read (a different file starts over)."""
        self.close()
        ident = cursor.get("ident")
        self.ident = (int(ident[0]), int(ident[1])) if isinstance(ident, list) and len(ident) == 2 else None
        self.offset = int(cursor.get("offset", 0))  # type: ignore[call-overload]
        self.head = bytes.fromhex(str(cursor.get("head", "")))
        self.splitter.reset()
        self._size, self._mtime = -1, -1

    # reading

    def read(self) -> Chunk:
        """The complete lines written since the last call (of at most about `max_poll` bytes: `behind`).

        Raises FileNotFoundError when there is no file (and none open), NotRegularFile for a FIFO or
        device, and OSError when it can't be read; the caller retries at its next poll.
        """
        chunk = Chunk()
        self.behind = False
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            if self._file is None:
                raise
            st = None
        if st is not None and not stat.S_ISREG(st.st_mode):
            self.close()
            raise not_regular(self.path, st.st_mode)
        budget = self.max_poll
        if self._file is not None and (st is None or (st.st_dev, st.st_ino) != self.ident):
            left = self._drain(chunk, budget)  # rotated by rename (or deleted): finish the old file
            if left is None:  # its rest at the next call
                self.behind = True
                return chunk
            budget = left
            chunk.retired = self.cursor()
            if st is None:
                return chunk
            self.ident, self.offset, self.head = None, 0, b""
            self.splitter.reset()
        assert st is not None
        if self._file is None:
            self._open(chunk)
        if st.st_size == self._size and st.st_mtime_ns == self._mtime:
            return chunk
        if st.st_size < self.offset or not self._head_matches():
            log.info("%s was truncated or rewritten; reading it from the start", self.path)
            self.offset, self.head = 0, b""
            self.splitter.reset()
            chunk.reset = True
        progress.sized(self.path, st.st_size)
        while self.offset < st.st_size:
            if budget <= 0:  # the rest at the next call
                self.behind = True
                self._size = -1
                return chunk
            data = os.pread(self._fd_or_raise(), min(st.st_size - self.offset, self.max_read), self.offset)
            if not data:
                break
            if not self._head_done():
                self._remember_head(data)
            consumed = self.splitter.split(data, chunk.lines, final=False)
            self.offset += consumed
            budget -= consumed
            if consumed == 0:
                break
        self._size, self._mtime = st.st_size, st.st_mtime_ns
        return chunk

    @property
    def cut_lines(self) -> int:
        """Lines cut at `max_line` so far."""
        return self.splitter.cut_lines

    def _fd_or_raise(self) -> int:
        if self._file is None:
            raise OSError(errno.EBADF, "file not open", self.path)
        return self._file.fileno()

    def _open(self, chunk: Chunk) -> None:
        file = open_regular(self.path)
        fst = os.fstat(file.fileno())
        ident = (fst.st_dev, fst.st_ino)
        if self.ident is not None and ident != self.ident:
            log.info("%s is another file than the one read before; reading it from the start", self.path)
            self.offset, self.head = 0, b""
            chunk.reset = True
        self._file, self.ident = file, ident
        self._size, self._mtime = -1, -1

    def _drain(self, chunk: Chunk, budget: int) -> int | None:
        """Read the open (rotated) file on to its end, at most `budget` bytes of it: the budget left when it is done
        (and closed), None when the rest waits for the next call."""
        fd = self._fd_or_raise()
        size = max(self.max_read, self.splitter.max_line)  # a full read without a line's end is a line to cut
        try:
            while True:
                if budget <= 0:
                    return None
                data = os.pread(fd, size, self.offset)
                if not data:
                    break
                consumed = self.splitter.split(data, chunk.lines, final=len(data) < size)
                self.offset += consumed
                budget -= consumed
        except BaseException:
            self.close()
            raise
        self.close()
        log.info("%s was rotated; now reading the new file", self.path)
        return budget

    def _head_matches(self) -> bool:
        if self.offset == 0:
            return True
        fd = self._fd_or_raise()
        if self.head and os.pread(fd, len(self.head), 0) != self.head:
            return False
        # the last byte read ended a line: if it no longer does, the file was rewritten under us
        return self.splitter.inside_cut_line or os.pread(fd, 1, self.offset - 1) in (b"\n", b"\r")

    def _head_done(self) -> bool:
        return len(self.head) >= HEAD

    def _remember_head(self, data: bytes) -> None:
        if self.offset <= len(self.head):
            self.head = (self.head + data[len(self.head) - self.offset :])[:HEAD]


class LineSplitter:
    """Bytes -> whole lines: terminators, overlong lines, invalid UTF-8 and progress bars (see above).

    Shared by `LineTail` (a file) and `alertd exec` (a child's output stream). `split` returns how many
    bytes of `data` its complete lines took; the caller keeps the rest for the next call.
    """

    def __init__(self, *, bars: bool = False, max_line: int = MAX_LINE) -> None:
        self.bars = bars
        self.max_line = max_line
        self.cut_lines = 0
        self._skipping = False
        self._last_bar = ""
        self._after_cr = False

    def reset(self) -> None:
        """The stream starts over (a file truncated or replaced)."""
        self._skipping, self._last_bar, self._after_cr = False, "", False

    @property
    def inside_cut_line(self) -> bool:
        """True while the rest of an overlong line is being dropped."""
        return self._skipping

    def split(self, data: bytes, out: list[str], final: bool) -> int:
        """Append the complete lines of `data` to `out`; return how many bytes they took.

        `final`: the writer is gone, so a last unterminated line is complete too.
        """
        terminators = b"\r\n" if self.bars else b"\n"
        end = max(data.rfind(sep) for sep in terminators) + 1 if not final else len(data)
        if end == 0:
            if self._skipping:  # still inside an overlong line
                return len(data)
            if len(data) >= self.max_line:  # an overlong line: keep its start, drop the rest up to its end
                self._emit(data[: self.max_line].decode("utf-8", "replace"), out, bar=False)
                self.cut_lines += 1
                self._skipping = True
                return len(data)
            return 0
        text = data[:end].decode("utf-8", "replace")
        if "\r" not in text and not self._after_cr:
            self._plain_lines(text, out)
        else:
            self._each_line(text, out)
        return end

    def _each_line(self, text: str, out: list[str]) -> None:
        """`split`'s loop over the complete lines of `text`, one at a time."""
        if self.bars and "\r" in text:
            parts = _SEPARATORS.split(text)
            segments, seps = parts[0::2], parts[1::2]
        else:
            segments, seps = text.split("\n"), []
        if not segments[-1]:
            segments.pop()  # what follows the last terminator: nothing
        for i, line in enumerate(segments):
            if self._skipping:
                self._skipping = False
            elif line:
                if len(line) > self.max_line:
                    line = line[: self.max_line]
                    self.cut_lines += 1
                self._emit(line, out, self._after_cr)
            self._after_cr = i < len(seps) and seps[i] == "\r"

    def _plain_lines(self, text: str, out: list[str]) -> None:
        """`split`'s loop for complete lines with no carriage return (the everyday case), list-wise: the same
        lines, cuts and state as line by line (tests/textlog/test_linetail.py holds the two to each other)."""
        segments = text.split("\n")
        if not segments[-1]:
            segments.pop()
        if self._skipping and segments:  # the end of an overlong line
            self._skipping = False
            del segments[0]
        if not segments:
            return
        if max(map(len, segments)) > self.max_line:
            cut = self.max_line
            self.cut_lines += sum(len(s) > cut for s in segments)
            segments = [s[:cut] if len(s) > cut else s for s in segments]
        if self.bars:  # a line of white space only is no line; a log line ends a bar's run of redraws
            kept = [s for s in segments if s and not s.isspace()]
            if kept:
                self._last_bar = ""
        else:
            kept = [s for s in segments if s]
        out.extend(kept)

    def _emit(self, line: str, out: list[str], bar: bool) -> None:
        text = line.rstrip("\r")
        if self.bars:
            state = text.strip()
            if not state:
                return
            if bar and state == self._last_bar:  # the same bar state drawn again
                return
            self._last_bar = state if bar else ""
            if bar:
                text = "\r" + text
        out.append(text)
