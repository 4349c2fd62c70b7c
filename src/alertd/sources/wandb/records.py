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
        partial: list[bytes] = []
        partial_start = -1
        crc32 = zlib.crc32
        while True:
            left = BLOCK_SIZE - pos % BLOCK_SIZE
            if left < CHUNK_HEADER:
                if pos + left > end:
                    break
                pos += left
                continue
            if pos + CHUNK_HEADER > end:
                break
            i = pos - base
            crc, length, kind = _CHUNK.unpack_from(data, i)
            if kind == 0 and length == 0 and crc == 0:  # zero padding to the block end
                if pos + left > end:
                    break
                pos += left
                continue
            bad = None
            if kind not in (FULL, FIRST, MIDDLE, LAST):
                bad = f"unknown chunk type {kind}"
            elif CHUNK_HEADER + length > left:
                bad = f"chunk length {length} runs past its block"
            elif pos + CHUNK_HEADER + length > end:
                break  # not all on disk yet
            elif crc32(data[i + 6 : i + CHUNK_HEADER + length]) != crc:
                bad = "checksum mismatch"
            if bad is not None:
                problems.append(Corruption(pos, bad))
                self._resyncing = True
                partial, partial_start = [], -1
                pos += left  # lengths in this block can't be trusted: go to the next one
                continue
            payload = data[i + CHUNK_HEADER : i + CHUNK_HEADER + length]
            chunk_at = pos
            pos += CHUNK_HEADER + length
            if kind in (FULL, FIRST) and partial_start >= 0:
                problems.append(Corruption(partial_start, "record without its last chunk"))
                partial, partial_start = [], -1
            if kind in (FULL, FIRST):
                self._resyncing = False
            if kind == FULL:
                records.append((chunk_at, payload))
            elif kind == FIRST:
                partial, partial_start = [payload], chunk_at
            elif partial_start < 0:
                if not self._resyncing:  # the tail of a record already reported damaged is dropped quietly
                    problems.append(Corruption(chunk_at, "chunk continues a record that never started"))
            elif kind == MIDDLE:
                partial.append(payload)
                if pos - partial_start > MAX_RECORD:
                    problems.append(Corruption(partial_start, f"record longer than {MAX_RECORD} bytes"))
                    self._resyncing = True  # its further chunks are dropped quietly
                    partial, partial_start = [], -1
            else:
                records.append((partial_start, b"".join([*partial, payload])))
                partial, partial_start = [], -1
        self.offset = pos if partial_start < 0 else partial_start
