"""The bulk paths (numpy runs in `tfrecord.scan`, vectorised decoding) against the record-by-record ones."""

from __future__ import annotations

from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from alertd.sources.tensorboard import tfrecord
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
