"""The Record decoder on messages built with the SDK's own protobuf classes (test-only import)."""

from __future__ import annotations

import math

import pytest
from wandb.proto import wandb_internal_pb2 as pb

from alertd.sources.httpretry import parse_retry_after
from alertd.sources.wandb.proto import ExitInfo, HistoryRow, ProtoError, RunInfo, decode_record
from alertd.sources.wandb.values import flatten_row, system_metric


def test_typed_history_values_of_newer_writers() -> None:
    rec = pb.Record(num=5)
    h = rec.history
    h.step.num = 12
    h.item.add(key="i", integer=-3)
    h.item.add(nested_key=["a", "b"], number=math.nan)
    h.item.add(key="big", integer=2**40)
    h.item.add(key="flag", boolean=True)
    h.item.add(key="txt", text="hi")
    h.item.add(key="legacy", value_json="-Infinity")
    h.item.add(key="obj", json='{"x": 1.5}')
    h.item.add(key="hist", json='{"_type": "histogram", "values": [1, 2], "packedBins": {"min": 0}}')
    row = decode_record(rec.SerializeToString())
    assert isinstance(row, HistoryRow) and row.step == 12
    assert row.values["i"] == -3 and row.values["big"] == 2**40 and math.isnan(row.values["a.b"])
    assert row.values["legacy"] == -math.inf and row.values["txt"] == "hi"
    flat = dict(flatten_row(row.values))
    assert set(flat) == {"i", "big", "a.b", "legacy", "obj.x"} and flat["obj.x"] == 1.5


def test_run_and_negative_exit_code() -> None:
    rec = pb.Record()
    rec.run.run_id, rec.run.entity, rec.run.project, rec.run.display_name = "abc", "team", "proj", "n"
    rec.run.start_time.seconds = 1_700_000_000
    assert decode_record(rec.SerializeToString()) == RunInfo("abc", "team", "proj", "n", 1_700_000_000.0)
    ex = pb.Record()
    ex.exit.exit_code, ex.exit.runtime = -9, 42
    assert decode_record(ex.SerializeToString()) == ExitInfo(-9, 42)


def test_other_records_are_ignored_and_garbage_raises() -> None:
    rec = pb.Record()
    rec.summary.update.add(key="loss", value_json="1")
    assert decode_record(rec.SerializeToString()) is None
    for bad in (b"\x12\x05ab", b"\x80", b"\x0b", b"\x12\x02\xff\xfe", b"\x12\x04\x0a\x02\x0a\x01"):
        with pytest.raises(ProtoError):
            decode_record(bad)


def test_system_names_and_retry_after_forms() -> None:
    assert system_metric("gpu.3.gpu") == ("gpu.utilization", {"gpu": "3"})
    assert system_metric("gpu.0.powerWatts") == ("gpu.power", {"gpu": "0"})
    assert system_metric("gpu.0.memory") == ("system.gpu.0.memory", {})
    assert system_metric("cpu") == ("system.cpu", {})
    assert parse_retry_after("2.5", 0.0) == 2.5
    assert parse_retry_after("Thu, 01 Jan 2026 00:00:10 GMT", 1_767_225_600.0) == 10.0
    assert parse_retry_after("soon", 0.0) is None and parse_retry_after(None, 0.0) is None
