"""Decoding TensorBoard `Event` records into scalar samples (event file names: `alertd.runs.eventnames`).

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

Bulk: `decode_all` takes each run of at least `_BULK_MIN` payloads of one length as a numpy matrix (one
row a payload). Once its first payloads are decoded as above and one of them is read by a layout whose
values are float32 or float64, a row whose bytes equal that payload's everywhere but in its wall time,
its step (a varint of as many bytes, at most 9) and its values is that same event with other numbers:
those rows are decoded column by column; any other row goes through the per-payload path, in order.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import islice, repeat

from google.protobuf.message import DecodeError
from tensorboard.compat.proto import event_pb2, summary_pb2, types_pb2

from alertd._np import np
from alertd.columns import ColumnList
from alertd.model import Sample, SeriesKey
from alertd.runs.eventnames import EventFileName as EventFileName  # re-exported: names are parsed there
from alertd.runs.eventnames import is_event_file as is_event_file
from alertd.runs.eventnames import parse_file_name as parse_file_name

_FROM_STRING = event_pb2.Event.FromString
_SAMPLE: Callable[..., Sample] = Sample
_TUPLE_NEW = tuple.__new__
"""`tuple.__new__(Sample, (series, time, step, value))` is what `Sample(...)` does, without the Python-level
`__new__` of a named tuple (for the bulk path: a million samples)."""
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
_BULK_MIN = 16
"""Payloads of one length in a row that `decode_all` decodes as a matrix."""
_BULK_TRIES = 4
"""Payloads of a run decoded one by one, at most, before one shows the layout the rest is read by."""
_BULK_CODES = {"f": "<f4", "d": "<f8"}


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
    slots: tuple[tuple[int, str], ...]
    """Each value's offset in the summary and its struct code."""


@dataclass(frozen=True, slots=True)
class _Plan:
    """How the rows of a bulk run are read: the byte ranges that must equal the model payload's (start,
    as a numpy void dtype, and those bytes), where the wall time is (-1: none), the step varint (start,
    bytes) and the values (offset, numpy dtype)."""

    fixed: tuple[tuple[int, np.dtype[np.void], np.void], ...]
    wall: int
    step: tuple[int, int]
    values: tuple[tuple[int, str], ...]
    keys: tuple[SeriesKey, ...]


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
        n = len(payloads)
        if n < _BULK_MIN:
            return self._decode(payloads, out, starts)
        lengths = np.fromiter(map(len, payloads), np.int64, n)
        bounds = np.concatenate(([0], np.flatnonzero(lengths[1:] != lengths[:-1]) + 1, [n]))
        bad = 0
        done = 0
        for i in np.flatnonzero(np.diff(bounds) >= _BULK_MIN).tolist():
            a, b = int(bounds[i]), int(bounds[i + 1])
            if done < a:
                bad += self._decode(islice(payloads, done, a), out, starts)
            bad += self._decode_run(payloads, a, b, out, starts)
            done = b
        if done < n:
            bad += self._decode(islice(payloads, done, n), out, starts)
        return bad

    def _decode_run(
        self, payloads: list[bytes], a: int, b: int, out: list[Sample], starts: list[tuple[int, float]]
    ) -> int:
        """Decode payloads[a:b], all of one length: the first few one by one, the rest as a matrix."""
        bad = 0
        plan = None
        tries = 0
        while a < b and plan is None and tries < _BULK_TRIES:
            model = payloads[a]
            bad += self._decode((model,), out, starts)
            a += 1
            tries += 1
            plan = self._plan(model)
        if plan is None or b - a < _BULK_MIN:
            return bad + self._decode(islice(payloads, a, b), out, starts)
        generation = self._tags.generation
        size = len(model)
        joined = b"".join(payloads if b - a == len(payloads) else payloads[a:b])
        rows = np.frombuffer(joined, np.uint8).reshape(b - a, size)
        misfits = np.zeros(b - a, np.bool_)
        for offset, dtype, want in plan.fixed:
            misfits |= np.ndarray((b - a,), dtype, joined, offset, (size,)) != want
        start, width = plan.step
        for k in range(width):
            column = rows[:, start + k]
            misfits |= (column < 0x80) if k < width - 1 else (column >= 0x80)
        others = np.flatnonzero(misfits).tolist()
        if len(others) * 8 > b - a:
            return bad + self._decode(islice(payloads, a, b), out, starts)
        done = 0
        for r in others:
            if done < r:
                self._emit(rows[done:r], plan, out)
            bad += self._decode((payloads[a + r],), out, starts)
            done = r + 1
            if self._tags.generation != generation:  # what counts as a scalar changed: plan again
                return bad + self._decode_run(payloads, a + done, b, out, starts)
        if done < b - a:
            self._emit(rows[done:], plan, out)
        return bad

    def _plan(self, p: bytes) -> _Plan | None:
        """How to read payloads shaped like `p` (an event with a summary only) as a matrix, or None."""
        n = len(p)
        i = 0
        wall = -1
        if n > 9 and p[0] == 0x09:
            wall, i = 1, 9
        step = (i, 0)
        if i + 2 < n and p[i] == 0x10:
            k = i + 1
            while k < n and p[k] >= 0x80:
                k += 1
            if k - i > 9:  # a 10-byte varint: a negative step, read one by one
                return None
            step = (i + 1, k + 1 - (i + 1))
            i = k + 1
        if not (i + 1 < n and p[i] == 0x2A):
            return None
        try:
            size, j = _varint(p, i + 1)
        except (IndexError, ValueError):
            return None
        if j + size != n:
            return None
        for lay in self._layouts.get(size, ()):
            if lay.unpack(p, j)[::2] == lay.skeleton and lay.generation == self._tags.generation:
                break
        else:
            return None
        if any(code not in _BULK_CODES for _, code in lay.slots):
            return None
        variable = [(step[0], step[0] + step[1])]
        if wall >= 0:
            variable.append((wall, wall + 8))
        values = []
        for offset, code in lay.slots:
            variable.append((j + offset, j + offset + struct.calcsize(code)))
            values.append((j + offset, _BULK_CODES[code]))
        fixed = []
        cursor = 0
        for a, b in [*sorted(variable), (n, n)]:
            if cursor < a:
                dtype = np.dtype(f"V{a - cursor}")
                fixed.append((cursor, dtype, np.frombuffer(p, dtype, 1, cursor)[0]))
            cursor = max(cursor, b)
        return _Plan(tuple(fixed), wall, step, tuple(values), lay.keys)

    @staticmethod
    def _emit(rows: np.ndarray, plan: _Plan, out: list[Sample]) -> None:
        """Append the samples of `rows` (payloads that fit `plan`), row by row and value by value. A signalling
        NaN among the values is a value like any other (kept as NaN, as the payload-by-payload decoder keeps it):
        numpy's "invalid value in cast" about it is no warning here."""
        with np.errstate(invalid="ignore"):
            EventDecoder._emit_rows(rows, plan, out)

    @staticmethod
    def _emit_rows(rows: np.ndarray, plan: _Plan, out: list[Sample]) -> None:
        k, size = rows.shape
        buf = rows.data
        wall_arr = np.ndarray((k,), "<f8", buf, plan.wall, (size,)).astype(np.float64) if plan.wall >= 0 else None
        walls = wall_arr.tolist() if wall_arr is not None else [0.0] * k
        start, width = plan.step
        steps_arr = np.zeros(k, np.uint64)
        for b in range(width):
            steps_arr |= (rows[:, start + b] & 0x7F).astype(np.uint64) << np.uint64(7 * b)
        step_arr = steps_arr.astype(np.int64)
        steps = step_arr.tolist()
        m, base = len(plan.keys), len(out)
        columns = [np.ndarray((k,), dtype, buf, offset, (size,)).astype(np.float64) for offset, dtype in plan.values]
        if m == 1:
            out.extend(map(_TUPLE_NEW, repeat(Sample), zip(repeat(plan.keys[0]), walls, steps, columns[0].tolist())))
        else:
            out += repeat(None, k * m)  # type: ignore[arg-type]  # each slot is filled below
            for c, values in enumerate(columns):
                keyed = zip(repeat(plan.keys[c]), walls, steps, values.tolist())
                out[base + c :: m] = list(map(_TUPLE_NEW, repeat(Sample), keyed))
        if isinstance(out, ColumnList):  # a replay's: the rows' columns, as they are (row r, key c: r * m + c)
            ids = np.tile(np.array([id(key) for key in plan.keys], np.uint64), k)
            times = np.repeat(wall_arr if wall_arr is not None else np.zeros(k), m)
            values = columns[0] if m == 1 else np.stack(columns, axis=1).reshape(-1)
            out.note(base, ids, times, np.repeat(step_arr, m), values)

    def _decode(self, payloads: Iterable[bytes], out: list[Sample], starts: list[tuple[int, float]]) -> int:
        """`decode_all`, payload by payload (upb, or a layout learnt from it)."""
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
        offsets = tuple((pos - j, code) for pos, code, _ in slots)
        layout = _Layout(st.unpack_from, tuple(skeleton), keys, self._tags.generation, offsets)
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
