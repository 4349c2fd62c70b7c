"""Record framing: masked CRC-32C vectors, frames identical to TensorBoard's, truncation, corruption."""

from __future__ import annotations

import io
from types import SimpleNamespace

from tensorboard.compat.proto import event_pb2
from tensorboard.summary.writer.record_writer import RecordWriter

from alertd.sources.tensorboard.tfrecord import frame, masked_crc32c, scan


def test_masked_crc_matches_the_reference_vectors() -> None:
    assert masked_crc32c(bytes.fromhex("1800000000000000")) == 0x224B7FA3
    payload = bytes.fromhex("0900008038 99d6d741 1a0d".replace(" ", "")) + b"brain.Event:2"
    assert masked_crc32c(payload) == 0xAB364B12
    assert masked_crc32c(b"\x1a\x11CRC test, one two") == 0x5794D08A
    assert masked_crc32c(bytes(8)) == 0x07980329


def test_frame_is_byte_for_byte_what_tensorboard_record_writer_writes() -> None:
    for payload in (
        b"",
        b"x",
        event_pb2.Event(wall_time=1.0, file_version="brain.Event:2").SerializeToString(),
    ):
        buf = io.BytesIO()
        RecordWriter(buf).write(payload)
        assert frame(payload) == buf.getvalue()


def _three() -> tuple[list[bytes], bytes]:
    payloads = [b"first", b"second record", b"3"]
    return payloads, b"".join(frame(p) for p in payloads)


def test_scan_returns_payloads_and_stops_before_an_incomplete_record() -> None:
    payloads, data = _three()
    res = scan(data)
    assert res.payloads == payloads and res.consumed == len(data) and not res.corruptions
    first = len(frame(payloads[0]))
    for cut in range(first, first + len(frame(payloads[1]))):
        res = scan(data[:cut])
        assert res.payloads == payloads[:1]
        assert res.consumed == first
        assert not res.corruptions and not res.resyncing


def test_bad_data_crc_skips_only_that_record() -> None:
    payloads, data = _three()
    bad = bytearray(data)
    bad[len(frame(payloads[0])) + 12] ^= 0x01  # first payload byte of record 2
    res = scan(bytes(bad))
    assert res.payloads == [payloads[0], payloads[2]]
    assert [(c.offset, c.reason) for c in res.corruptions] == [(len(frame(payloads[0])), "bad data CRC")]


def test_bad_length_crc_resyncs_at_the_next_valid_record() -> None:
    payloads, data = _three()
    bad = bytearray(data)
    at = len(frame(payloads[0]))
    bad[at + 9] ^= 0xFF  # inside the length CRC of record 2
    res = scan(bytes(bad))
    assert res.payloads == [payloads[0], payloads[2]]
    assert [(c.offset, c.reason) for c in res.corruptions] == [(at, "bad length CRC")]
    assert not res.resyncing and res.consumed == len(data)


def test_resync_goes_on_at_the_next_scan_without_a_second_report() -> None:
    good = frame(b"ok")
    garbage = b"\x07garbage that is not a record at all" * 3
    res = scan(good + garbage)
    assert res.payloads == [b"ok"] and len(res.corruptions) == 1 and res.resyncing
    rest = (good + garbage)[res.consumed :] + frame(b"later")
    again = scan(rest, resyncing=True)
    assert again.payloads == [b"later"] and not again.resyncing
    # the region goes on from the previous scan: reported as its continuation, with the bytes skipped here
    assert [(c.continued, c.skipped) for c in again.corruptions] == [(True, len(rest) - len(frame(b"later")))]


def test_a_zero_filled_tail_is_waited_for_not_reported() -> None:
    data = frame(b"ok") + bytes(40)
    res = scan(data)
    assert res.payloads == [b"ok"] and res.corruptions == [] and res.consumed == len(frame(b"ok"))


def test_scan_empty_and_header_only() -> None:
    assert scan(b"").payloads == []
    res = scan(frame(b"abc")[:12])
    assert res.consumed == 0 and res.wanted == 16 + 3


def test_kit_split_records_agrees(kit: SimpleNamespace) -> None:
    payloads, data = _three()
    assert kit.split_records(data) == [frame(p) for p in payloads]
