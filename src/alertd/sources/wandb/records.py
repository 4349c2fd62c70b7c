"""The `.wandb` transaction-log framing: LevelDB log blocks behind a 7-byte W&B file header.

Layout (wandb-core `core/pkg/leveldb`, shared/reference/wandb-protocol.md §4):

- the file starts with `:W&B`, magic 0xBEE1 (little-endian) and version 0: 7 bytes;
- then 32 KiB blocks on absolute file offsets; each chunk is `crc32 u32 LE | length u16 LE | type u8 |
  payload`, the checksum being plain CRC-32/IEEE (`zlib.crc32`) over the type byte and the payload;
- a record is one FULL chunk (type 1) or FIRST (2) + MIDDLE (3)* + LAST (4); a block tail shorter than
  a chunk header, or a zeroed chunk header, is padding up to the next block.

`LogReader` tails one file: each `read()` returns the records completed since the previous call and
stops at a chunk (or a record) that is not all on disk yet, resuming there next time. A chunk with a
bad checksum, an impossible length or type, or an orphan MIDDLE/LAST is reported as a `Corruption`
and skipped to the next block, as LevelDB's own reader does; the rest of a record already reported
is dropped quietly (LevelDB's resync), and reading goes on. A record growing past `MAX_RECORD` bytes
(an endless run of MIDDLE chunks) is reported and dropped the same way, so no read or record is ever
larger than that.

Only regular files are opened (`alertd.sources.fileopen.open_regular`): a FIFO or device raises
`NotRegularFile`, as other errors of `stat` or `open` (but a missing file: no records) raise `OSError`,
for the caller to report.
"""

from __future__ import annotations

import os
import stat
import struct
import zlib
from dataclasses import dataclass
from typing import Any

from alertd import progress
from alertd.sources.fileopen import not_regular, open_regular

BLOCK_SIZE = 32 * 1024
CHUNK_HEADER = 7
FILE_HEADER = struct.pack("<4sHB", b":W&B", 0xBEE1, 0)
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
_CHUNK = struct.Struct("<IHB")
_PIECE = 8 << 20
MAX_RECORD = 64 << 20
"""Largest record accepted (bytes of its chunks' payloads); W&B's records are far smaller."""


@dataclass(frozen=True, slots=True)
class Corruption:
    """A damaged region of a file: where it starts and what was wrong."""

    offset: int
    reason: str


class LogReader:
    """Incremental reader of one `.wandb` file. `offset` is where the next unread record starts."""

    def __init__(self, path: str, offset: int = 0) -> None:
        self.path = path
        self.offset = offset
        self.bad_header = False
        self._seen_size = offset
        self._resyncing = False

    def read(self) -> tuple[list[tuple[int, bytes]], list[Corruption]]:
        """Return `(records, corruptions)` new since the last call; records are `(offset, payload)`."""
        records: list[tuple[int, bytes]] = []
        problems: list[Corruption] = []
        if self.bad_header:
            return records, problems
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return records, problems
        if not stat.S_ISREG(st.st_mode):
            raise not_regular(self.path, st.st_mode)
        piece = _PIECE
        with open_regular(self.path) as f:
            size = os.fstat(f.fileno()).st_size
            if size < self._seen_size:  # the file was replaced by a shorter one: start again
                self.offset = 0
            self._seen_size = size
            progress.sized(self.path, size)
            while self.offset < size:
                data = os.pread(f.fileno(), min(piece, size - self.offset), self.offset)
                before = self.offset
                self._parse(data, records, problems)
                if self.bad_header or self.offset >= size:
                    break
                if self.offset == before:
                    if len(data) < piece:
                        break  # the rest is not on disk yet
                    piece = min(2 * piece, MAX_RECORD + 2 * BLOCK_SIZE)  # one record larger than the piece
        return records, problems

    def _check_header(self, data: bytes, problems: list[Corruption]) -> bool:
        if len(data) < len(FILE_HEADER):
            return False
        if data[: len(FILE_HEADER)] != FILE_HEADER:
            self.bad_header = True
            problems.append(Corruption(0, "not a W&B transaction log (bad file header)"))
            return False
        self.offset = len(FILE_HEADER)
        return True

    def _parse(self, data: bytes, records: list[tuple[int, bytes]], problems: list[Corruption]) -> None:
        """Walk the chunks of `data` (file bytes from `self.offset`), advancing `self.offset`."""
        base = self.offset
        if base == 0:
            if not self._check_header(data, problems):
                return
            data = data[len(FILE_HEADER) :]
            base = len(FILE_HEADER)
        end = base + len(data)
        pos = base
        records_of = _Records(self, records, problems)
        while True:
            left = BLOCK_SIZE - pos % BLOCK_SIZE
            if left < CHUNK_HEADER or _padding(data, pos - base, end - pos):
                if pos + left > end:  # the rest of the block (too short for a chunk, or zero padding)
                    break
                pos += left
                continue
            if pos + CHUNK_HEADER > end:
                break
            i = pos - base
            crc, length, kind = _CHUNK.unpack_from(data, i)
            bad = _bad_chunk(data, i, crc, length, kind, left)
            if bad is None and pos + CHUNK_HEADER + length > end:
                break  # not all on disk yet
            if bad is not None:
                records_of.damaged(pos, bad)
                pos += left  # lengths in this block can't be trusted: go to the next one
                continue
            records_of.chunk(kind, pos, data[i + CHUNK_HEADER : i + CHUNK_HEADER + length], pos + CHUNK_HEADER + length)
            pos += CHUNK_HEADER + length
        self.offset = pos if records_of.partial_start < 0 else records_of.partial_start


def _padding(data: bytes, i: int, available: int) -> bool:
    """Whether a chunk header at `i` is zero padding to its block's end."""
    return available >= CHUNK_HEADER and _CHUNK.unpack_from(data, i) == (0, 0, 0)


def _bad_chunk(data: bytes, i: int, crc: int, length: int, kind: int, left: int) -> str | None:
    """What is wrong with the chunk at `i` (`left` bytes to its block's end), or None; a chunk not all on disk
    yet is not wrong (its checksum is looked at once it is)."""
    if kind not in (FULL, FIRST, MIDDLE, LAST):
        return f"unknown chunk type {kind}"
    if CHUNK_HEADER + length > left:
        return f"chunk length {length} runs past its block"
    if i + CHUNK_HEADER + length <= len(data) and zlib.crc32(data[i + 6 : i + CHUNK_HEADER + length]) != crc:
        return "checksum mismatch"
    return None


class _Records:
    """Chunks put back together into records, as they come; what is damaged goes to `problems`."""

    def __init__(self, log: Any, records: list[tuple[int, bytes]], problems: list[Corruption]) -> None:
        self._log = log  # the reader: its `_resyncing` outlives one parse
        self._records = records
        self._problems = problems
        self._partial: list[bytes] = []
        self.partial_start = -1

    def damaged(self, pos: int, why: str) -> None:
        """A damaged chunk at `pos`: the record under way is dropped, and what follows until a record starts."""
        self._problems.append(Corruption(pos, why))
        self._log._resyncing = True
        self._partial, self.partial_start = [], -1

    def chunk(self, kind: int, at: int, payload: bytes, next_pos: int) -> None:
        """One sound chunk at `at` (the next begins at `next_pos`)."""
        if kind in (FULL, FIRST):
            if self.partial_start >= 0:
                self._problems.append(Corruption(self.partial_start, "record without its last chunk"))
                self._partial, self.partial_start = [], -1
            self._log._resyncing = False
        if kind == FULL:
            self._records.append((at, payload))
        elif kind == FIRST:
            self._partial, self.partial_start = [payload], at
        elif self.partial_start < 0:
            if not self._log._resyncing:  # the tail of a record already reported damaged is dropped quietly
                self._problems.append(Corruption(at, "chunk continues a record that never started"))
        elif kind == MIDDLE:
            self._partial.append(payload)
            if next_pos - self.partial_start > MAX_RECORD:
                self._problems.append(Corruption(self.partial_start, f"record longer than {MAX_RECORD} bytes"))
                self._log._resyncing = True  # its further chunks are dropped quietly
                self._partial, self.partial_start = [], -1
        else:
            self._records.append((self.partial_start, b"".join([*self._partial, payload])))
            self._partial, self.partial_start = [], -1
