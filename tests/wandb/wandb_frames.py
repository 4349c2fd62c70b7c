"""A writer of the `.wandb` framing (LevelDB log blocks + W&B header), as wandb-core's writer does it.

Used to re-frame records taken from SDK-written files (for damage tests and the benchmark).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable

BLOCK = 32768
HEADER = struct.pack("<4sHB", b":W&B", 0xBEE1, 0)


def frame(payloads: Iterable[bytes]) -> bytes:
    """The file bytes holding `payloads` as records, split into FULL / FIRST, MIDDLE, LAST chunks."""
    out = bytearray(HEADER)
    for payload in payloads:
        rest, first = payload, True
        while True:
            left = BLOCK - len(out) % BLOCK
            if left < 7:
                out += b"\0" * left
                left = BLOCK
            n = min(len(rest), left - 7)
            last = n == len(rest)
            kind = (1 if last else 2) if first else (4 if last else 3)
            data, rest = rest[:n], rest[n:]
            out += struct.pack("<IHB", zlib.crc32(bytes([kind]) + data), n, kind) + data
            first = False
            if last:
                break
    return bytes(out)


def payloads_of(data: bytes) -> list[bytes]:
    """The record payloads of a well-formed file (a plain reader independent of alertd's)."""
    out, pos, partial = [], 7, b""
    while pos + 7 <= len(data):
        left = BLOCK - pos % BLOCK
        if left < 7:
            pos += left
            continue
        _crc, n, kind = struct.unpack_from("<IHB", data, pos)
        if kind == 0:
            pos += left
            continue
        partial += data[pos + 7 : pos + 7 + n]
        pos += 7 + n
        if kind in (1, 4):
            out.append(partial)
            partial = b""
    return out
