"""TFRecord framing of TensorBoard event files: split a byte range into record payloads.

A record is `u64le length | u32le masked_crc32c(length bytes) | payload | u32le masked_crc32c(payload)`.

Policy, applied by `scan`:

- A record whose header or body is not complete yet is "not yet written": scanning stops at its first
  byte and the caller retries from there once the file has grown (`wanted` says how many bytes the
  record needs). A header made of zero bytes up to the end of the data is "not yet written" too (a
  preallocated or not-yet-visible region on network file systems), not damage: it is waited for.
- Damage: a bad length CRC; a length over `MAX_RECORD` (no reader allocates or reads more than that
  for one record); a bad data CRC (the length may be the damaged part: bytes deleted inside a record
  make its length run into the next one); or a length, CRC-valid, that runs past the end of the data
  while a complete intact record starts inside that span (a forged or damaged length: no writer puts a
  whole record inside one it has not finished). In each case the record boundary is lost, and the
  bytes from the damaged record's second byte on are searched, offset by offset, for the next place
  where a complete record starts whose length CRC *and* data CRC both pass (a false match needs two
  32-bit CRCs to collide); reading resumes there, so the next intact record is never lost.
- Each damaged region is returned once as a `Corruption`: where it began, why, and how many bytes
  were skipped. If the search reaches the end of the data first, the region is returned open
  (`skipped` None) with `resyncing` set; the caller passes `resyncing=True` to the next scan, which
  goes on searching and returns the rest of that region as `continued`.
- Bounded work: the search checks at most `RESYNC_CHECKS` candidate offsets per scan (an offset is a
  candidate only where the length's high bytes allow a length up to `MAX_RECORD`); when they are spent
  the scan returns with `exhausted` set and the search goes on at the next call.

Speed: writers mostly write runs of records of one length (the same tags, steps of as many varint
bytes), and such records have the same 12 header bytes. After a record, when the next records (and the
one `_RUN_MIN - 1` further on) start with that record's header, `_run` takes the whole run at once with
numpy: the headers compared as columns, the payloads cut in one call, their CRCs computed by
google_crc32c (one C call each: it has no batch API) and compared with the footers as an array. It
accepts exactly the records that the record-by-record loop would (a header already verified, a complete
record, a matching data CRC) and hands the first record it does not accept back to that loop.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field

import google_crc32c

from alertd._np import np

_CRC = google_crc32c.value
_MASK_DELTA = 0xA282EAD8
_U32 = 0xFFFFFFFF
_HEADER = struct.Struct("<QI")
_FOOTER = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_NONZERO = re.compile(rb"[^\x00]")
_ZERO_HEADER = bytes(12)
MAX_RECORD = 64 << 20
"""Largest record payload accepted (64 MiB; TensorBoard's own records are events of a few bytes to a
few MiB). A longer length is damage: it is never allocated or read."""
RESYNC_CHECKS = 1 << 18
"""Candidate offsets checked (two CRCs each at most) per scan while searching for the next record."""
_RUN_MIN = 8
"""Records of one header in a row from which `_run` takes over (below, the per-record loop is quicker)."""
_RUN_CHUNK = 1 << 16
"""Records compared at once by `_run` (bounds the work wasted where a run ends early)."""
_HEADER_DTYPE = np.dtype([("length", "<u8"), ("crc", "<u4")])
# A candidate record start: length bytes 3..7 small enough for a length up to MAX_RECORD.
_CANDIDATE = re.compile(rb"(?s).{3}[\x00-" + re.escape(bytes([MAX_RECORD >> 24])) + rb"]\x00{4}")


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
    """A damaged region: where it began (relative to the scanned data), why, and the bytes skipped.

    `skipped` is None while the region is still open (no intact record found after it yet).
    `continued`: the region began before the scanned data (the scan was called with `resyncing`);
    `offset` is then 0, `reason` empty and `skipped` counts only the bytes of this scan.
    """

    offset: int
    reason: str
    skipped: int | None = None
    continued: bool = False


@dataclass(slots=True)
class ScanResult:
    """What `scan` found: the payloads, how many bytes are done with, and what was damaged.

    `consumed` is the offset where the next scan must start; `resyncing` says that a lost record
    boundary is still being searched for there. `wanted` is the number of bytes from `consumed`
    needed to complete the record that starts there (0 when unknown). `exhausted`: the search used
    up its checks before the end of the data (call again, at the next poll).
    """

    payloads: list[bytes] = field(default_factory=list)
    consumed: int = 0
    resyncing: bool = False
    corruptions: list[Corruption] = field(default_factory=list)
    wanted: int = 0
    exhausted: bool = False


class _Budget:
    __slots__ = ("left",)

    def __init__(self, left: int) -> None:
        self.left = left


def scan(data: bytes, resyncing: bool = False, checks: int = RESYNC_CHECKS) -> ScanResult:
    """Split `data` (starting at a record boundary unless `resyncing`) into verified payloads."""
    out = ScanResult()
    append = out.payloads.append
    corruptions = out.corruptions
    crc = _CRC
    unpack_header = _HEADER.unpack_from
    unpack_footer = _FOOTER.unpack_from
    good_headers: dict[bytes, int] = {}
    budget = _Budget(checks)
    end = len(data)
    pos = 0
    region = 0 if resyncing else -1  # where the damaged region being skipped began
    reason = ""
    continued = resyncing
    while True:
        if region >= 0:
            found, pos = _resync(data, pos, budget, complete=False)
            if not found:
                corruptions.append(Corruption(region, reason, None, continued))
                out.resyncing = True
                out.exhausted = budget.left <= 0
                break
            corruptions.append(Corruption(region, reason, pos - region, continued))
            region, continued = -1, False
        if end - pos < 12:
            break
        header = data[pos : pos + 12]
        n = good_headers.get(header, -1)
        if n < 0:
            n, hcrc = unpack_header(header)
            if masked_crc32c(header[:8]) != hcrc:
                if header == _ZERO_HEADER and _NONZERO.search(data, pos) is None:
                    break  # zeros up to the end: not written yet
                region, reason = pos, "bad length CRC"
                pos += 1
                continue
            if n > MAX_RECORD:
                region, reason = pos, f"length {n} over the {MAX_RECORD}-byte limit"
                pos += 1
                continue
            good_headers[header] = n
        stop = pos + 12 + n
        if stop + 4 > end:
            if n > 0 and _resync(data, pos + 1, budget, complete=True)[0]:
                region, reason = pos, f"length {n} runs past an intact record"
                pos += 1
                continue
            out.wanted = 16 + n
            break
        c = crc(data[pos + 12 : stop])
        if ((((c >> 15) | (c << 17)) & _U32) + _MASK_DELTA) & _U32 != unpack_footer(data, stop)[0]:
            region, reason = pos, "bad data CRC"
            pos += 1
            continue
        append(data[pos + 12 : stop])
        pos = stop + 4
        stride = n + 16
        if n and data.startswith(header, pos) and data.startswith(header, pos + (_RUN_MIN - 1) * stride):
            pos = _run(data, pos, header, n, out.payloads)
    out.consumed = pos
    return out


def _run(data: bytes, pos: int, header: bytes, n: int, payloads: list[bytes]) -> int:
    """Append the payloads of the intact records from `pos` on whose header is `header` (a verified one,
    of length `n`); return the offset of the first record not taken."""
    stride = n + 16
    length, hcrc = _HEADER.unpack(header)
    value = _CRC
    chunk = _RUN_CHUNK
    while True:
        rows = min((len(data) - pos) // stride, chunk)
        if rows <= 0:
            return pos
        heads = np.ndarray((rows,), _HEADER_DTYPE, data, pos, (stride,))
        same = (heads["length"] == length) & (heads["crc"] == hcrc)
        k = rows if same.all() else int(same.argmin())
        if k == 0:
            return pos
        got = np.ndarray((k,), f"V{n}", data, pos + 12, (stride,)).tolist()
        crcs = np.fromiter(map(value, got), np.uint32, k)
        masked = ((crcs >> 15) | (crcs << 17)) + np.uint32(_MASK_DELTA)
        good = masked == np.ndarray((k,), "<u4", data, pos + 12 + n, (stride,))
        if not good.all():
            k = int(good.argmin())
            del got[k:]
            payloads += got
            return pos + k * stride
        payloads += got
        pos += k * stride
        if k < rows:
            return pos
        chunk = rows


def _resync(data: bytes, pos: int, budget: _Budget, complete: bool) -> tuple[bool, int]:
    """Find the next offset >= `pos` that starts a verified record (or may, once more bytes come).

    Returns (True, offset) for a complete record with both CRCs good, or (unless `complete`) for a
    header with a good length CRC whose body is not all there yet; (False, offset) where the search
    must go on later (the end of the data, or the budget spent).
    """
    end = len(data)
    search = _CANDIDATE.search
    while True:
        m = search(data, pos)
        if m is None:
            return False, max(pos, end - 11)
        pos = m.start()
        if end - pos < 12:
            return False, pos
        if data[pos : pos + 12] == _ZERO_HEADER:  # a run of zeros: jump to its last 11 bytes
            nz = _NONZERO.search(data, pos)
            if nz is None:
                return False, max(pos, end - 11)
            pos = max(pos + 1, nz.start() - 11)
            continue
        if budget.left <= 0:
            return False, pos
        budget.left -= 1
        n, hcrc = _HEADER.unpack_from(data, pos)
        if n <= MAX_RECORD and masked_crc32c(data[pos : pos + 8]) == hcrc:
            stop = pos + 12 + n
            if stop + 4 > end:
                if not complete:
                    return True, pos
            elif masked_crc32c(data[pos + 12 : stop]) == _FOOTER.unpack_from(data, stop)[0]:
                return True, pos
        pos += 1
