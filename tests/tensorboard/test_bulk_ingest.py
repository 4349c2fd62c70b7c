"""The bulk paths (numpy runs in `tfrecord.scan`, vectorised decoding) against the record-by-record ones."""

from __future__ import annotations

import math
import struct
from types import SimpleNamespace
from typing import Any
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st
from tensorboard.compat.proto import event_pb2, summary_pb2

from alertd.columns import ColumnList, Columns
from alertd.model import Sample, SeriesKey
from alertd.sources.tensorboard import events as events_module
from alertd.sources.tensorboard import tfrecord
from alertd.sources.tensorboard.events import EventDecoder, RunTags
from alertd.sources.tensorboard.tfrecord import ScanResult, frame, scan

_NO_RUNS = 1 << 62


def _scan_one_by_one(data: bytes, resyncing: bool = False, checks: int = tfrecord.RESYNC_CHECKS) -> ScanResult:
    with mock.patch.object(tfrecord, "_RUN_MIN", _NO_RUNS):
        return scan(data, resyncing, checks)


def _same(a: ScanResult, b: ScanResult) -> None:
    assert [bytes(p) for p in a.payloads] == [bytes(p) for p in b.payloads]
    assert (a.consumed, a.resyncing, a.corruptions, a.wanted, a.exhausted) == (
        b.consumed,
        b.resyncing,
        b.corruptions,
        b.wanted,
        b.exhausted,
    )


# payloads of a few lengths, so that runs of equal headers form (and end) at random
_payload = st.sampled_from([b"", b"a", b"ok", b"four", b"\x00" * 5, b"x\x00y\x00" * 3]) | st.binary(max_size=40)
_records = st.lists(st.tuples(_payload, st.integers(min_value=1, max_value=40)), max_size=12).map(
    lambda runs: [p for p, n in runs for _ in range(n)]
)
_edit = st.tuples(st.sampled_from(["flip", "delete", "insert", "zero"]), st.floats(0, 1), st.integers(0, 255))


def _damaged(payloads: list[bytes], edits: list[tuple[str, float, int]], cut: float) -> bytes:
    data = bytearray(b"".join(frame(p) for p in payloads))
    for kind, where, byte in edits:
        if not data:
            break
        i = min(int(where * len(data)), len(data) - 1)
        if kind == "flip":
            data[i] ^= byte or 1
        elif kind == "delete":
            del data[i : i + 1 + byte % 7]
        elif kind == "insert":
            data[i:i] = bytes([byte]) * (1 + byte % 5)
        else:
            data[i : i + 12] = bytes(12)
    return bytes(data[: int(len(data) * cut)] if cut < 1 else data)


def test_intact_runs_are_read_whole() -> None:
    payloads = [b"event %d" % (i % 10) for i in range(5000)] + [b"longer event"] * 3 + [b"z"] * 20
    data = b"".join(frame(p) for p in payloads)
    res = scan(data)
    assert res.payloads == payloads and res.consumed == len(data) and not res.corruptions
    for cut in (len(data) - 1, len(data) - 30, len(data) // 2 + 3):
        _same(scan(data[:cut]), _scan_one_by_one(data[:cut]))


@settings(max_examples=300, deadline=None)
@given(
    payloads=_records,
    edits=st.lists(_edit, max_size=4),
    cut=st.sampled_from([1.0, 1.0, 0.999, 0.7, 0.31]),
    resyncing=st.booleans(),
    checks=st.sampled_from([tfrecord.RESYNC_CHECKS, 3]),
)
def test_scan_with_runs_is_scan_record_by_record(
    payloads: list[bytes], edits: list[tuple[str, float, int]], cut: float, resyncing: bool, checks: int
) -> None:
    data = _damaged(payloads, edits, cut)
    _same(scan(data, resyncing, checks), _scan_one_by_one(data, resyncing, checks))
    if not edits and cut == 1.0 and not resyncing:
        assert scan(data).payloads == payloads


def test_a_bad_data_crc_inside_a_run_is_found() -> None:
    payloads = [b"same size %03d" % i for i in range(300)]
    data = bytearray(b"".join(frame(p) for p in payloads))
    stride = len(frame(payloads[0]))
    data[stride * 200 + 14] ^= 0x40
    res = scan(bytes(data))
    assert res.payloads == payloads[:200] + payloads[201:]
    assert [(c.offset, c.reason) for c in res.corruptions] == [(stride * 200, "bad data CRC")]
    _same(res, _scan_one_by_one(bytes(data)))


def _decode(payloads: list[bytes], bulk: bool) -> tuple[list[tuple[Any, ...]], list[tuple[int, float]], int]:
    """What the decoder makes of `payloads`; into a `ColumnList` (as the source reads): its columns are those of
    its samples."""
    out: list[Sample] = ColumnList()
    starts: list[tuple[int, float]] = []
    with mock.patch.object(events_module, "_BULK_MIN", 1 if bulk else _NO_RUNS):
        bad = EventDecoder(RunTags(), SeriesKey).decode_all(payloads, out, starts)
    assert all(type(s) is Sample for s in out)
    assert isinstance(out, ColumnList)
    _same_columns(out.columns(), Columns.of(list(out)))
    # NaN-proof: each value by its bits (a NaN's sign and payload included)
    flat = [(s.series, s.time, type(s.step), s.step, struct.pack("<d", s.value)) for s in out]
    return flat, starts, bad


def _same_columns(got: Columns | None, want: Columns | None) -> None:
    assert (got is None) == (want is None)
    if got is not None and want is not None:
        assert len(got) == len(want) and got.steps is not None and want.steps is not None
        for a, b in ((got.ids, want.ids), (got.times, want.times), (got.steps, want.steps), (got.values, want.values)):
            assert a.tobytes() == b.tobytes()  # bit for bit: a NaN's sign and payload too


_row = st.tuples(
    st.integers(min_value=-3, max_value=1 << 40),  # steps of 1 to 10 varint bytes
    st.floats(min_value=0, max_value=2e9) | st.just(0.0),
    st.lists(st.floats(width=32) | st.sampled_from([math.nan, -math.nan, math.inf]), min_size=4, max_size=4),
)
_template = st.tuples(
    st.lists(st.sampled_from(["a", "b", "loss", "lr", "x/y"]), min_size=1, max_size=4, unique=True),
    st.sampled_from(["simple", "float_val", "double_val", "content4", "content8", "half"]),
    st.booleans(),  # metadata on every value (TF2) or none (torch's simple_value)
)


@settings(max_examples=200, deadline=None)
@given(
    blocks=st.lists(st.tuples(_template, st.lists(_row, min_size=1, max_size=40)), min_size=1, max_size=5),
    damage=st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1), st.integers(1, 255)), max_size=6),
    extras=st.lists(st.sampled_from(["start", "version", "garbage"]), max_size=3),
)
def test_bulk_decode_is_decode_payload_by_payload(
    kit: SimpleNamespace, blocks: list[Any], damage: list[tuple[float, float, int]], extras: list[str]
) -> None:
    payloads = []
    for (tags, encoding, metadata), rows in blocks:
        for step, wall, values in rows:
            vals = [kit.scalar_value(t, v, encoding) for t, v in zip(tags, values, strict=False)]
            if not metadata:
                for v in vals:
                    v.ClearField("metadata")
            ev = event_pb2.Event(step=step, wall_time=wall, summary=summary_pb2.Summary(value=vals))
            payloads.append(ev.SerializeToString())
    for extra in extras:
        if extra == "start":
            payloads.insert(len(payloads) // 2, kit.session_start(7, 3.5).SerializeToString())
        elif extra == "version":
            payloads.insert(0, event_pb2.Event(wall_time=1.0, file_version="brain.Event:2").SerializeToString())
        else:
            payloads.insert(len(payloads) // 3, b"\xff\xff\xff")
    for where, at, xor in damage:  # a damaged byte in some payload: other tags, other fields, undecodable
        i = min(int(where * len(payloads)), len(payloads) - 1)
        p = bytearray(payloads[i])
        if p:
            p[min(int(at * len(p)), len(p) - 1)] ^= xor
            payloads[i] = bytes(p)
    assert _decode(payloads, bulk=True) == _decode(payloads, bulk=False)


def test_bulk_decode_reads_runs_as_matrices(kit: SimpleNamespace) -> None:
    events = [kit.scalar_event(i, {"loss": i / 7, "lr": -i * 1e-3}, encoding="content8") for i in range(2000)]
    payloads = [e.SerializeToString() for e in events]
    one_by_one: list[int] = []
    original = EventDecoder._decode

    def counted(self: EventDecoder, chunk: Any, out: list[Sample], starts: list[tuple[int, float]]) -> int:
        chunk = list(chunk)
        one_by_one.append(len(chunk))
        return original(self, chunk, out, starts)

    out: list[Sample] = ColumnList()
    with mock.patch.object(EventDecoder, "_decode", counted):
        assert EventDecoder(RunTags(), SeriesKey).decode_all(payloads, out, []) == 0
    # the length changes at steps 128 and 16384 only: a few payloads one by one, the rest in bulk
    assert sum(one_by_one) < 10
    assert len(out) == 4000
    # the rows decoded as matrices come with their columns: those of the others only are taken apart
    assert isinstance(out, ColumnList)
    taken_apart: list[int] = []
    with mock.patch.object(Columns, "of", lambda samples, times=None: taken_apart.append(len(samples))):
        out.columns()
    assert sum(taken_apart) < 20
    assert [(s.series.metric, s.step, s.value) for s in out[-2:]] == [("loss", 1999, 1999 / 7), ("lr", 1999, -1.999)]


def test_a_step_of_another_varint_length_in_a_run_is_decoded_alone(kit: SimpleNamespace) -> None:
    payloads = [kit.scalar_event(200 + i, {"loss": 0.5}).SerializeToString() for i in range(40)]
    at = payloads[0].index(b"\x10") + 1  # the step: two varint bytes
    odd = bytearray(payloads[20])
    odd[at] &= 0x7F  # a one-byte step, followed by a byte no event field starts with
    payloads[20] = bytes(odd)
    got = _decode(payloads, bulk=True)
    assert got == _decode(payloads, bulk=False)
    assert got[2] == 1 and len(got[0]) == 39


def test_metadata_met_inside_a_run_changes_what_follows(kit: SimpleNamespace) -> None:
    def event(step: int, plugin: str, pad: int) -> bytes:
        t = kit.scalar_value("t", step / 2, "float_val")
        t.ClearField("metadata")
        if plugin:
            t.metadata.plugin_data.plugin_name = plugin
        p = summary_pb2.Summary.Value(tag="p" * pad, simple_value=1.0)
        return event_pb2.Event(step=step, wall_time=1.0, summary=summary_pb2.Summary(value=[t, p])).SerializeToString()

    plain = [event(300 + i, "", 30) for i in range(40)]
    for pad in range(1, 30):  # the same length as the others, with metadata naming another plugin for "t"
        other = event(320, "custom", pad)
        if len(other) == len(plain[0]):
            break
    assert len(other) == len(plain[0])
    payloads = [*plain[:20], other, *plain[21:]]
    got = _decode(payloads, bulk=True)
    assert got == _decode(payloads, bulk=False)
    metrics = [s[0].metric for s in got[0]]
    assert metrics.count("t") == 20 and metrics[-1] == "p" * 30  # "t" is not a scalar after step 320
