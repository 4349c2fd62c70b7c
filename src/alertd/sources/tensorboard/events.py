"""Decoding TensorBoard `Event` records into scalar samples, and parsing event file names.

Scalars come in three shapes (see shared/reference/tensorboard-format.md, section 2):
`Summary.Value.simple_value`; a rank-0 tensor with `float_val` / `double_val` / `half_val` (or
`int_val` / `int64_val`); a rank-0 tensor whose bytes are in `tensor_content` (TF2, Keras). A tensor
counts as a scalar unless the first metadata seen for its tag in the run names another plugin
(TF1 writers keep the metadata on the first value of a tag only). Histograms, images, audio, text and
every non-scalar tensor are ignored.

Speed: the authoritative decoder is protobuf's upb (`Event.FromString`). On top of it, an event whose
summary holds only fixed-width scalars teaches the decoder a *layout*: a `struct` format in which every
byte but the values is fixed (tags, metadata, field headers). Later events of the same length are read
with one `unpack_from` and taken only when all those fixed bytes match exactly, so the fast path
yields what upb would, byte for byte; anything else goes through upb.
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass
from itertools import repeat

from google.protobuf.message import DecodeError
from tensorboard.compat.proto import event_pb2, summary_pb2, types_pb2

from alertd.model import Sample, SeriesKey

_FROM_STRING = event_pb2.Event.FromString
_SAMPLE: Callable[..., Sample] = Sample
_DOUBLE = struct.Struct("<d")
_START = event_pb2.SessionLog.START
_SCALAR_CLASS = summary_pb2.DATA_CLASS_SCALAR
_MAX_LAYOUTS = 256
_LAYOUTS_PER_SIZE = 8
_CONTENT_FORMATS = {
    types_pb2.DT_FLOAT: "f",
    types_pb2.DT_DOUBLE: "d",
    types_pb2.DT_HALF: "e",
    types_pb2.DT_INT32: "i",
    types_pb2.DT_INT64: "q",
    types_pb2.DT_INT16: "h",
    types_pb2.DT_INT8: "b",
    types_pb2.DT_UINT8: "B",
}
_LAYOUT_CONTENT = {types_pb2.DT_FLOAT: ("f", 4), types_pb2.DT_DOUBLE: ("d", 8), types_pb2.DT_HALF: ("e", 2)}

_NAME = re.compile(r"tfevents\.(?P<time>\d+)(?:\.(?P<rest>.+))?$")
_HOST_PID = re.compile(r"^(?P<host>.+)\.(?P<pid>\d+)\.(?P<uid>\d+)(?P<suffix>\.?[^.\d][^.]*)?$")


def is_event_file(name: str) -> bool:
    """TensorBoard's rule: the base name contains `tfevents` (profiler placeholders excluded)."""
    return "tfevents" in name and not name.endswith(".profile-empty")


@dataclass(frozen=True, slots=True)
class EventFileName:
    """What an event file's name tells: creation second, writer host and pid (None where absent)."""

    time: int | None
    host: str | None
    pid: str | None

    @property
    def sort_key(self) -> int:
        """The creation second, for ordering the files of one run (unknown sorts first)."""
        return self.time if self.time is not None else -1


def parse_file_name(name: str) -> EventFileName:
    """Parse `events.out.tfevents.<secs>.<host>[.<pid>.<n>][suffix]` (torch, TF2, tensorboardX, TF1).

    Host names may hold dots, so pid and counter are taken from the right: the last two all-digit
    fields before an optional suffix (`.v2`, or a torch `filename_suffix`). Without them (tensorboardX,
    TF1) the rest of the name is the host.
    """
    m = _NAME.search(name)
    if m is None:
        return EventFileName(None, None, None)
    secs = int(m["time"])
    rest = m["rest"]
    if not rest:
        return EventFileName(secs, None, None)
    hp = _HOST_PID.match(rest)
    if hp is None:
        return EventFileName(secs, rest, None)
    return EventFileName(secs, hp["host"], hp["pid"])


class RunTags:
    """Per run: whether each tag is a scalar series, from the first metadata seen for it."""

    __slots__ = ("generation", "scalar")

    def __init__(self) -> None:
        self.scalar: dict[str, bool] = {}
        self.generation = 0

    def note(self, tag: str, metadata: summary_pb2.SummaryMetadata) -> None:
        """Remember the first informative metadata of `tag`."""
        if tag in self.scalar:
            return
        plugin = metadata.plugin_data.plugin_name
        data_class = metadata.data_class
        if plugin or data_class:
            self.scalar[tag] = plugin == "scalars" or data_class == _SCALAR_CLASS
            self.generation += 1


def tensor_scalar(t: object) -> float | None:
    """The value of a rank-0 numeric TensorProto, or None when it is not one."""
    shape = t.tensor_shape  # type: ignore[attr-defined]
    if len(shape.dim) or shape.unknown_rank:
        return None
    dtype = t.dtype  # type: ignore[attr-defined]
    for values in (t.float_val, t.double_val, t.int_val, t.int64_val):  # type: ignore[attr-defined]
        if values:
            return float(values[0]) if len(values) == 1 else None
    if t.half_val:  # type: ignore[attr-defined]
        bits = t.half_val[0]  # type: ignore[attr-defined]
        if dtype == types_pb2.DT_BFLOAT16:
            return float(struct.unpack("<f", struct.pack("<I", (bits & 0xFFFF) << 16))[0])
        return float(struct.unpack("<e", struct.pack("<H", bits & 0xFFFF))[0])
    content = t.tensor_content  # type: ignore[attr-defined]
    if not content:
        return None
    if dtype == types_pb2.DT_BFLOAT16 and len(content) == 2:
        return float(struct.unpack("<f", b"\0\0" + content)[0])
    fmt = _CONTENT_FORMATS.get(dtype)
    if fmt is None and dtype == types_pb2.DT_INVALID:
        fmt = {4: "f", 8: "d"}.get(len(content))
    if fmt is None or struct.calcsize("<" + fmt) != len(content):
        return None
    return float(struct.unpack("<" + fmt, content)[0])


@dataclass(frozen=True, slots=True)
class _Layout:
    unpack: Callable[[bytes, int], tuple[object, ...]]
    skeleton: tuple[bytes, ...]
    keys: tuple[SeriesKey, ...]
    generation: int


class EventDecoder:
    """Turns the payloads of one event file into samples; remembers layouts for speed."""

    __slots__ = ("_key_for", "_layouts", "_tags")

    def __init__(self, tags: RunTags, key_for: Callable[[str], SeriesKey]) -> None:
        self._tags = tags
        self._key_for = key_for
        self._layouts: dict[int, list[_Layout]] = {}

    def decode_all(self, payloads: list[bytes], out: list[Sample], starts: list[tuple[int, float]]) -> int:
        """Append the scalars of each event payload to `out`, and (step, wall_time) of each
        SessionLog.START to `starts`; return how many payloads could not be decoded (skipped: malformed
        protobuf, values that don't fit, nesting too deep). Other errors propagate to the source, which
        keeps them to the file."""
        bad = 0
        layouts = self._layouts
        tags = self._tags
        extend = out.extend
        unpack_double = _DOUBLE.unpack_from
        for p in payloads:
            try:
                n = len(p)
                i = 0
                wall = 0.0
                step = 0
                if n > 9 and p[0] == 0x09:
                    wall = unpack_double(p, 1)[0]
                    i = 9
                if i + 2 < n and p[i] == 0x10:
                    b1 = p[i + 1]
                    b2 = p[i + 2]
                    if b1 < 0x80:
                        step = b1
                        i += 2
                    elif b2 < 0x80:
                        step = (b1 & 0x7F) | (b2 << 7)
                        i += 3
                    else:
                        step, i = _varint(p, i + 1)
                        if step >= 1 << 63:
                            step -= 1 << 64
                j = -1
                size = 0
                if i + 1 < n and p[i] == 0x2A:
                    if p[i + 1] < 0x80:
                        size, j = p[i + 1], i + 2
                    else:
                        size, j = _varint(p, i + 1)
                    if j + size == n:
                        for lay in layouts.get(size, ()):
                            vals = lay.unpack(p, j)
                            if vals[::2] == lay.skeleton and lay.generation == tags.generation:
                                k = len(lay.keys)
                                extend(map(_SAMPLE, lay.keys, repeat(wall, k), repeat(step, k), vals[1::2]))
                                break
                        else:
                            self._slow(p, out, starts, j, size)
                        continue
                    j = -1
                self._slow(p, out, starts, j, size)
            except (DecodeError, IndexError, ValueError, RecursionError, struct.error):
                bad += 1
        return bad

    def _slow(self, p: bytes, out: list[Sample], starts: list[tuple[int, float]], j: int, size: int) -> None:
        ev = _FROM_STRING(p)
        what = ev.WhichOneof("what")
        if what == "session_log" and ev.session_log.status == _START:
            starts.append((ev.step, ev.wall_time))
        if what != "summary":
            return
        wall, step = ev.wall_time, ev.step
        found: list[tuple[SeriesKey, float]] = []
        only_scalars = True
        for v in ev.summary.value:
            got = self._value(v)
            if got is None:
                only_scalars = False
                continue
            found.append(got)
            out.append(Sample(got[0], wall, step, got[1]))
        if only_scalars and found and j >= 0:
            self._learn(p, j, size, found)

    def _value(self, v: summary_pb2.Summary.Value) -> tuple[SeriesKey, float] | None:
        tag = v.tag or v.node_name
        if v.HasField("metadata"):
            self._tags.note(tag, v.metadata)
        kind = v.WhichOneof("value")
        if kind == "simple_value":
            return self._key_for(tag), v.simple_value
        if kind == "tensor" and self._tags.scalar.get(tag, True):
            value = tensor_scalar(v.tensor)
            if value is not None:
                return self._key_for(tag), value
        return None

    def _learn(self, p: bytes, j: int, size: int, found: list[tuple[SeriesKey, float]]) -> None:
        """Derive the fixed layout of this summary, if every value sits at a fixed-width place."""
        slots = _scalar_slots(p, j, j + size)
        if slots is None or len(slots) != len(found):
            return
        fmt = ["<"]
        skeleton = []
        cursor = j
        for pos, code, width in slots:
            fmt.append(f"{pos - cursor}s{code}")
            skeleton.append(p[cursor:pos])
            cursor = pos + width
        fmt.append(f"{j + size - cursor}s")
        skeleton.append(p[cursor : j + size])
        st = struct.Struct("".join(fmt))
        if st.size != size:
            return
        values = st.unpack_from(p, j)[1::2]
        for (_, want), got in zip(found, values, strict=True):
            if not (want == got or (math.isnan(want) and math.isnan(got))):
                return
        if len(self._layouts) >= _MAX_LAYOUTS:
            self._layouts.clear()
        keys = tuple(k for k, _ in found)
        layout = _Layout(st.unpack_from, tuple(skeleton), keys, self._tags.generation)
        same_size = [lay for lay in self._layouts.get(size, ()) if lay.generation == layout.generation]
        self._layouts[size] = [layout, *same_size[: _LAYOUTS_PER_SIZE - 1]]


def _varint(p: bytes, i: int) -> tuple[int, int]:
    """Decode a base-128 varint at `i`; return (value, index after it)."""
    result = 0
    shift = 0
    while True:
        b = p[i]
        i += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, i
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _fields(p: bytes, a: int, b: int) -> list[tuple[int, int, int, int]] | None:
    """The fields of the message in p[a:b] as (number, wire type, start, end); None if malformed."""
    out = []
    i = a
    try:
        while i < b:
            key, i = _varint(p, i)
            number, wire = key >> 3, key & 7
            if wire == 0:
                _, k = _varint(p, i)
            elif wire == 1:
                k = i + 8
            elif wire == 5:
                k = i + 4
            elif wire == 2:
                length, i = _varint(p, i)
                k = i + length
            else:
                return None
            if k > b:
                return None
            out.append((number, wire, i, k))
            i = k
    except (IndexError, ValueError):
        return None
    return out


def _scalar_slots(p: bytes, a: int, b: int) -> list[tuple[int, str, int]] | None:
    """Where each value of the Summary in p[a:b] sits: (offset, struct code, width), or None."""
    top = _fields(p, a, b)
    if top is None:
        return None
    slots = []
    for number, wire, s, e in top:
        if number != 1 or wire != 2:
            return None
        slot = _value_slot(p, s, e)
        if slot is None:
            return None
        slots.append(slot)
    return slots


def _value_slot(p: bytes, a: int, b: int) -> tuple[int, str, int] | None:
    fields = _fields(p, a, b)
    if fields is None:
        return None
    slot = None
    for number, wire, s, e in fields:
        if number == 2 and wire == 5 and slot is None:
            slot = (s, "f", 4)
        elif number == 8 and wire == 2 and slot is None:
            slot = _tensor_slot(p, s, e)
            if slot is None:
                return None
        elif number not in (1, 7, 9):
            return None
    return slot


def _tensor_slot(p: bytes, a: int, b: int) -> tuple[int, str, int] | None:
    fields = _fields(p, a, b)
    if fields is None:
        return None
    dtype = 0
    slot = None
    for number, wire, s, e in fields:
        if number == 1 and wire == 0:
            dtype = _varint(p, s)[0]
        elif number == 2 and wire == 2 and s == e:
            continue
        elif slot is None and (number, wire, e - s) in ((5, 2, 4), (5, 5, 4)):
            slot = (s, "f", 4)
        elif slot is None and (number, wire, e - s) in ((6, 2, 8), (6, 1, 8)):
            slot = (s, "d", 8)
        elif slot is None and number == 4 and wire == 2:
            slot = (s, "content", e - s)
        else:
            return None
    if slot is None:
        return None
    if slot[1] == "content":
        code_width = _LAYOUT_CONTENT.get(dtype)
        if code_width is None or code_width[1] != slot[2]:
            return None
        return (slot[0], code_width[0], code_width[1])
    want = types_pb2.DT_FLOAT if slot[1] == "f" else types_pb2.DT_DOUBLE
    return slot if dtype == want else None
