"""Helpers for the tensorboard source tests: real event files written by TensorBoard's own writer."""

from __future__ import annotations

import math
import os
import struct
from collections.abc import Iterable
from pathlib import Path
from types import SimpleNamespace

import pytest
from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, types_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from alertd.model import Sample
from alertd.sources.config import TensorBoardConfig
from alertd.sources.tensorboard import TensorBoardSource

ENCODINGS = ("simple", "float_val", "double_val", "content4", "content8")


def half(value: float) -> float:
    """`value` rounded to IEEE half precision (out of range: infinity)."""
    try:
        return float(struct.unpack("<e", struct.pack("<e", value))[0])
    except OverflowError:
        return math.copysign(math.inf, value)


def stored(value: float, encoding: str) -> float:
    """The value a reader gets back for `value` written in `encoding`."""
    if encoding in ("simple", "float_val", "content4"):
        return float(struct.unpack("<f", struct.pack("<f", value))[0]) if math.isfinite(value) else value
    if encoding == "half":
        return half(value)
    return value


def scalar_value(tag: str, value: float, encoding: str = "simple") -> summary_pb2.Summary.Value:
    """One scalar Summary.Value in the given on-disk shape, with the metadata real writers add."""
    if encoding == "simple":
        return summary_pb2.Summary.Value(tag=tag, simple_value=value)
    if encoding == "float_val":
        tensor = tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, float_val=[value])
    elif encoding == "double_val":
        tensor = tensor_pb2.TensorProto(dtype=types_pb2.DT_DOUBLE, double_val=[value])
    elif encoding == "content4":
        tensor = tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, tensor_content=struct.pack("<f", value))
    elif encoding == "content8":
        tensor = tensor_pb2.TensorProto(dtype=types_pb2.DT_DOUBLE, tensor_content=struct.pack("<d", value))
    elif encoding == "half":
        bits = struct.unpack("<H", struct.pack("<e", half(value)))[0]
        tensor = tensor_pb2.TensorProto(dtype=types_pb2.DT_HALF, half_val=[bits])
    else:
        raise ValueError(encoding)
    v = summary_pb2.Summary.Value(tag=tag, tensor=tensor)
    v.metadata.plugin_data.plugin_name = "scalars"
    return v


def scalar_event(
    step: int, values: dict[str, float], wall: float | None = None, encoding: str = "simple"
) -> event_pb2.Event:
    """An event carrying `values` (tag -> value) at `step`."""
    return event_pb2.Event(
        wall_time=1_700_000_000.0 + step if wall is None else wall,
        step=step,
        summary=summary_pb2.Summary(value=[scalar_value(t, v, encoding) for t, v in values.items()]),
    )


def session_start(step: int, wall: float) -> event_pb2.Event:
    """A SessionLog.START event, as torch writes for `purge_step`."""
    return event_pb2.Event(
        step=step, wall_time=wall, session_log=event_pb2.SessionLog(status=event_pb2.SessionLog.START)
    )


def write_events(logdir: str | Path, events: Iterable[event_pb2.Event], suffix: str = "") -> Path:
    """Write `events` with TensorBoard's EventFileWriter into a new file under `logdir`; return it."""
    before = set(os.listdir(logdir)) if os.path.isdir(logdir) else set()
    writer = EventFileWriter(str(logdir), max_queue_size=100, filename_suffix=suffix)
    for ev in events:
        writer.add_event(ev)
    writer.close()
    (name,) = set(os.listdir(logdir)) - before
    return Path(logdir) / name


def split_records(data: bytes) -> list[bytes]:
    """The complete records in `data`, each with its framing (independent of the code under test)."""
    out = []
    pos = 0
    while pos + 12 <= len(data):
        (n,) = struct.unpack_from("<Q", data, pos)
        if pos + 16 + n > len(data):
            break
        out.append(data[pos : pos + 16 + n])
        pos += 16 + n
    return out


def make_source(logdir: str | Path, name: str = "tb") -> TensorBoardSource:
    """A source over `logdir`."""
    return TensorBoardSource(TensorBoardConfig(name=name, type="tensorboard", logdir=str(logdir)))


def view(samples: Iterable[Sample]) -> list[tuple[str, str | None, int | None, float]]:
    """(metric, run, step, value) of each sample, in order."""
    return [(s.series.metric, s.series.label("run"), s.step, s.value) for s in samples]


@pytest.fixture(scope="session")
def kit() -> SimpleNamespace:
    """The helpers above, for the test modules."""
    return SimpleNamespace(
        ENCODINGS=ENCODINGS,
        stored=stored,
        scalar_value=scalar_value,
        scalar_event=scalar_event,
        session_start=session_start,
        write_events=write_events,
        split_records=split_records,
        make_source=make_source,
        view=view,
    )
