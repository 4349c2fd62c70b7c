"""TFRecord framing of TensorBoard event files: split a byte range into record payloads.

A record is `u64le length | u32le masked_crc32c(length bytes) | payload | u32le masked_crc32c(payload)`.

Policy, applied by `scan`:

- A record whose header or body is not complete yet is "not yet written": scanning stops at its first
  byte and the caller retries from there once the file has grown.
- A bad data CRC: the length is trustworthy (its own CRC passed), so that one record is skipped and
  reported, and scanning goes on with the next record.
- A bad length CRC: the record boundary is lost. The rest of the bytes are searched, byte by byte, for
  the next offset that holds a complete record whose length CRC *and* data CRC both pass (a false match
  needs two 32-bit CRCs to collide); reading resumes there. The skipped region is reported once, at the
  offset where it began. If no such offset is found yet, the search goes on at the next poll (the
  caller keeps `resyncing`), without a second report.
- A header made of zero bytes up to the end of the data is "not yet written" too (a preallocated or
  not-yet-visible region on network file systems), not corruption: it is waited for.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field

import google_crc32c

_CRC = google_crc32c.value
_MASK_DELTA = 0xA282EAD8
_U32 = 0xFFFFFFFF
_HEADER = struct.Struct("<QI")
_FOOTER = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_NONZERO = re.compile(rb"[^\x00]")
MAX_RECORD = 1 << 31
"""Largest accepted record payload (protobuf's own limit is 2 GiB)."""


def masked_crc32c(data: bytes) -> int:
    """The LevelDB/TFRecord masked CRC-32C of `data`."""
    c: int = _CRC(data)
    return ((((c >> 15) | (c << 17)) & _U32) + _MASK_DELTA) & _U32


def frame(payload: bytes) -> bytes:
    """One complete record holding `payload`, byte for byte as TensorBoard's RecordWriter writes it."""
    header = _U64.pack(len(payload))
    return header + _FOOTER.pack(masked_crc32c(header)) + payload + _FOOTER.pack(masked_crc32c(payload))


@dataclass(frozen=True, slots=True)
class Corruption:
    """A corrupt region found at byte `offset` (relative to the scanned data) and why."""

    offset: int
    reason: str


@dataclass(slots=True)
class ScanResult:
    """What `scan` found: the payloads, how many bytes are done with, and what was corrupt.

    `consumed` is the offset where the next scan must start; `resyncing` says that a lost record
    boundary is still being searched for there. `wanted` is the number of bytes from `consumed`
    needed to complete the record that starts there (0 when unknown).
    """

    payloads: list[bytes] = field(default_factory=list)
    consumed: int = 0
    resyncing: bool = False
    corruptions: list[Corruption] = field(default_factory=list)
    wanted: int = 0


def scan(data: bytes, resyncing: bool = False) -> ScanResult:
    """Split `data` (starting at a record boundary unless `resyncing`) into verified payloads."""
    out = ScanResult()
    payloads = out.payloads
    append = payloads.append
    crc = _CRC
    unpack_header = _U64.unpack_from
    good_headers: dict[bytes, int] = {}
    unpack_footer = _FOOTER.unpack_from
    end = len(data)
    pos = 0
    while True:
        if resyncing:
            found, pos = _resync(data, pos)
            if not found:
                out.resyncing = True
                break
            resyncing = False
        if end - pos < 12:
            break
        header = data[pos : pos + 12]
        n = good_headers.get(header, -1)
        if n < 0 and _header_ok(header):
            n = good_headers[header] = unpack_header(header)[0]
        if n < 0:
            if _NONZERO.search(data, pos) is None:
                break
            out.corruptions.append(Corruption(pos, "bad length CRC"))
            resyncing = True
            pos += 1
            continue
        stop = pos + 12 + n
        if stop + 4 > end:
            out.wanted = 16 + n
            break
        payload = data[pos + 12 : stop]
        c = crc(payload)
        if ((((c >> 15) | (c << 17)) & _U32) + _MASK_DELTA) & _U32 != unpack_footer(data, stop)[0]:
            out.corruptions.append(Corruption(pos, "bad data CRC"))
        else:
            append(payload)
        pos = stop + 4
    out.consumed = pos
    return out


def _header_ok(header: bytes) -> bool:
    """Whether a 12-byte record header's length CRC is good and its length acceptable."""
    n, hcrc = _HEADER.unpack(header)
    return bool(n <= MAX_RECORD and masked_crc32c(header[:8]) == hcrc)


def _resync(data: bytes, pos: int) -> tuple[bool, int]:
    """Find the next offset >= `pos` that starts a verified record (or may, once more bytes come).

    Returns (True, offset) for a complete record with both CRCs good, or for a header with a good
    length CRC whose body is not all there yet; (False, offset) where the search must go on later.
    """
    end = len(data)
    while end - pos >= 12:
        if data[pos] == 0 and data[pos : pos + 12] == bytes(12):
            nz = _NONZERO.search(data, pos)
            if nz is None:
                return False, max(pos, end - 11)
            pos = max(pos + 1, nz.start() - 11)
            continue
        if data[pos + 4 : pos + 8] != b"\0\0\0\0":
            q = data.find(b"\0\0\0\0", pos + 5)
            if q < 0:
                return False, max(pos, end - 11)
            pos = q - 4
            continue
        if _header_ok(data[pos : pos + 12]):
            n = _U64.unpack_from(data, pos)[0]
            stop = pos + 12 + n
            if stop + 4 > end:
                return True, pos
            if masked_crc32c(data[pos + 12 : stop]) == _FOOTER.unpack_from(data, stop)[0]:
                return True, pos
        pos += 1
    return False, pos
