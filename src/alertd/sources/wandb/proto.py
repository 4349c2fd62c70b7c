"""A small protobuf wire decoder for the subset of W&B's `wandb_internal.Record` that alertd reads.

Field numbers (checked against wandb 0.31.0's descriptors; see shared/reference/wandb-protocol.md §4):

    Record        1 num, 2 history, 7 stats, 17 run, 18 exit            (every other field is skipped)
    HistoryRecord 1 item (repeated), 2 step {1 num}
    HistoryItem   1 key, 2 nested_key (repeated), 16 value_json,
                  typed oneof (0.31+): 3 none, 4 boolean, 5 integer (zigzag sint64), 6 number (double),
                  7 text, 8 json
    StatsRecord   2 timestamp {1 seconds, 2 nanos}, 3 item {1 key, 16 value_json}
    RunRecord     1 run_id, 2 entity, 3 project, 8 display_name, 17 start_time {1 seconds, 2 nanos}
    RunExitRecord 1 exit_code (int32 varint; negative values arrive as 64-bit two's complement), 2 runtime

Malformed bytes raise `ProtoError`, and so does a JSON value nested too deeply to decode (a
`RecursionError` is never let out). The `wandb` package is not imported: this module is the decoder.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from alertd.sources.wandb.values import parse_value_json

_DOUBLE = struct.Struct("<d")


class ProtoError(ValueError):
    """The bytes are not a well-formed protobuf message."""


@dataclass(slots=True)
class HistoryRow:
    """One `run.log()` row: flat `key -> decoded JSON value` (nested keys joined with `.`)."""

    values: dict[str, Any] = field(default_factory=dict)
    step: int | None = None


@dataclass(slots=True)
class StatsRow:
    """One system-metrics sample: bare W&B keys (`gpu.0.gpu`, `cpu`) and the time it was taken."""

    time: float | None = None
    values: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class RunInfo:
    """The run record: who the run is."""

    run_id: str = ""
    entity: str = ""
    project: str = ""
    display_name: str = ""
    start_time: float | None = None


@dataclass(slots=True)
class ExitInfo:
    """The run's exit record (absent after SIGKILL or OOM)."""

    exit_code: int = 0
    runtime: int = 0


Decoded = HistoryRow | StatsRow | RunInfo | ExitInfo | None


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise ProtoError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ProtoError("varint too long")


def _fields(buf: bytes) -> list[tuple[int, int, Any]]:
    """Split one message into `(field number, wire type, value)`: int for varint/fixed, bytes for LEN."""
    out: list[tuple[int, int, Any]] = []
    pos, end = 0, len(buf)
    while pos < end:
        tag = buf[pos]  # one- and two-byte tags inline: they are nearly all of them
        if tag < 0x80:
            pos += 1
        elif pos + 1 < end and buf[pos + 1] < 0x80:
            tag = (tag & 0x7F) | (buf[pos + 1] << 7)
            pos += 2
        else:
            tag, pos = _varint(buf, pos)
        num, wt = tag >> 3, tag & 7
        val: Any
        if wt == 2:
            if pos < end and buf[pos] < 0x80:
                n = buf[pos]
                pos += 1
            else:
                n, pos = _varint(buf, pos)
            if pos + n > end:
                raise ProtoError(f"field {num} runs past the message end")
            val, pos = buf[pos : pos + n], pos + n
        elif wt == 0:
            val, pos = _varint(buf, pos)
        elif wt == 1:
            if pos + 8 > end:
                raise ProtoError("truncated fixed64")
            val, pos = buf[pos : pos + 8], pos + 8
        elif wt == 5:
            if pos + 4 > end:
                raise ProtoError("truncated fixed32")
            val, pos = buf[pos : pos + 4], pos + 4
        else:
            raise ProtoError(f"unsupported wire type {wt} for field {num}")
        if num == 0:
            raise ProtoError("field number 0")
        out.append((num, wt, val))
    return out


def _text(val: Any) -> str:
    if not isinstance(val, bytes):
        raise ProtoError("expected a length-delimited string")
    try:
        return val.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProtoError("invalid UTF-8 in a string field") from exc


def _timestamp(buf: bytes) -> float:
    seconds = nanos = 0
    for num, wt, val in _fields(buf):
        if num == 1 and wt == 0:
            seconds = val - (1 << 64) if val >= 1 << 63 else val
        elif num == 2 and wt == 0:
            nanos = val
    return seconds + nanos / 1e9


def _history_item(buf: bytes) -> tuple[str, Any]:
    key, nested, value = "", [], None
    for num, wt, val in _fields(buf):
        if num == 1:
            key = _text(val)
        elif num == 2:
            nested.append(_text(val))
        elif num == 16:
            value = parse_value_json(_text(val))
        elif num == 4 and wt == 0:
            value = bool(val)
        elif num == 5 and wt == 0:
            value = (val >> 1) ^ -(val & 1)
        elif num == 6 and wt == 1:
            value = _DOUBLE.unpack(val)[0]
        elif num == 7:
            value = _text(val)
        elif num == 8:
            value = parse_value_json(_text(val))
    return (".".join(nested) if nested else key), value


def _history(buf: bytes) -> HistoryRow:
    row = HistoryRow()
    for num, wt, val in _fields(buf):
        if num == 1 and wt == 2:
            key, value = _history_item(val)
            row.values[key] = value
        elif num == 2 and wt == 2:
            row.step = 0
            for n, w, v in _fields(val):
                if n == 1 and w == 0:
                    row.step = v - (1 << 64) if v >= 1 << 63 else v
    return row


def _stats(buf: bytes) -> StatsRow:
    row = StatsRow()
    for num, wt, val in _fields(buf):
        if num == 2 and wt == 2:
            row.time = _timestamp(val)
        elif num == 3 and wt == 2:
            key, value = "", None
            for n, _w, v in _fields(val):
                if n == 1:
                    key = _text(v)
                elif n == 16:
                    value = parse_value_json(_text(v))
            row.values[key] = value
    return row


def _run(buf: bytes) -> RunInfo:
    info = RunInfo()
    for num, wt, val in _fields(buf):
        if num == 1 and wt == 2:
            info.run_id = _text(val)
        elif num == 2 and wt == 2:
            info.entity = _text(val)
        elif num == 3 and wt == 2:
            info.project = _text(val)
        elif num == 8 and wt == 2:
            info.display_name = _text(val)
        elif num == 17 and wt == 2:
            info.start_time = _timestamp(val)
    return info


def _exit(buf: bytes) -> ExitInfo:
    info = ExitInfo()
    for num, wt, val in _fields(buf):
        if num == 1 and wt == 0:
            info.exit_code = val - (1 << 64) if val >= 1 << 63 else val
        elif num == 2 and wt == 0:
            info.runtime = val
    return info


_DECODERS: dict[int, Callable[[bytes], Decoded]] = {2: _history, 7: _stats, 17: _run, 18: _exit}


def decode_record(buf: bytes) -> Decoded:
    """Decode one `Record`; returns None for record types alertd does not use (header, summary ...)."""
    for num, wt, val in _fields(buf):
        decoder = _DECODERS.get(num)
        if decoder is not None and wt == 2:
            try:
                return decoder(val)
            except RecursionError:  # a JSON value nested thousands deep: json gives up, the record is bad
                raise ProtoError("a value nested too deeply to decode") from None
    return None
