"""Event decoding (all scalar encodings, the layout fast path against upb) and event file names."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2

from alertd.model import Sample, SeriesKey
from alertd.sources.tensorboard.events import EventDecoder, RunTags, is_event_file, parse_file_name


def _decode(payloads: list[bytes]) -> tuple[list[Sample], list[tuple[int, float]], int]:
    out: list[Sample] = []
    starts: list[tuple[int, float]] = []
    bad = EventDecoder(RunTags(), SeriesKey).decode_all(payloads, out, starts)
    return out, starts, bad


@pytest.mark.parametrize(
    ("name", "want"),
    [
        ("events.out.tfevents.1796225793.vm.14421.0", (1796225793, "vm", "14421")),
        (
            "events.out.tfevents.1796225793.gpu-3.cluster.local.77.12",
            (1796225793, "gpu-3.cluster.local", "77"),
        ),
        ("events.out.tfevents.1700000000.host.123.4.v2", (1700000000, "host", "123")),
        ("events.out.tfevents.1700000000.host.123.0_rank1", (1700000000, "host", "123")),
        ("events.out.tfevents.1700000000.my-box", (1700000000, "my-box", None)),
        ("events.out.tfevents.1700000000.node7.example.org", (1700000000, "node7.example.org", None)),
        ("events.out.tfevents.1700000000", (1700000000, None, None)),
        ("weird.tfevents", (None, None, None)),
    ],
)
def test_file_name_fields(name: str, want: tuple[int | None, str | None, str | None]) -> None:
    got = parse_file_name(name)
    assert (got.time, got.host, got.pid) == want


def test_event_file_rule() -> None:
    assert is_event_file("events.out.tfevents.1700000000.h.1.0")
    assert not is_event_file("events.out.tfevents.1700000000.h.profile-empty")
    assert not is_event_file("checkpoint")


@pytest.mark.parametrize("encoding", ["simple", "float_val", "double_val", "content4", "content8", "half"])
def test_every_encoding_keeps_nan_and_inf(kit: SimpleNamespace, encoding: str) -> None:
    values = [0.25, -1.5, math.nan, math.inf, -math.inf, 3.0]
    events = [kit.scalar_event(i, {"loss": v}, encoding=encoding) for i, v in enumerate(values)]
    out, _, bad = _decode([e.SerializeToString() for e in events])
    assert bad == 0
    assert [s.step for s in out] == list(range(6))
    assert [s.time for s in out] == [1_700_000_000.0 + i for i in range(6)]
    got = [s.value for s in out]
    assert got[:2] == [0.25, -1.5] and math.isnan(got[2]) and got[3:] == [math.inf, -math.inf, 3.0]
    assert {s.series.metric for s in out} == {"loss"}


def test_non_scalar_summaries_are_ignored() -> None:
    text = summary_pb2.Summary.Value(
        tag="notes", tensor=tensor_pb2.TensorProto(dtype=types_pb2.DT_STRING, string_val=[b"hi"])
    )
    text.metadata.plugin_data.plugin_name = "text"
    histo = summary_pb2.Summary.Value(tag="w", histo=summary_pb2.HistogramProto(min=0, max=1, num=3))
    image = summary_pb2.Summary.Value(tag="img", image=summary_pb2.Summary.Image(height=1, width=1))
    vector = summary_pb2.Summary.Value(
        tag="vec",
        tensor=tensor_pb2.TensorProto(
            dtype=types_pb2.DT_FLOAT,
            float_val=[1.0, 2.0],
            tensor_shape=tensor_shape_pb2.TensorShapeProto(dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=2)]),
        ),
    )
    keep = summary_pb2.Summary.Value(tag="loss", simple_value=0.5)
    ev = event_pb2.Event(step=3, wall_time=5.0, summary=summary_pb2.Summary(value=[text, histo, image, vector, keep]))
    out, _, _ = _decode([ev.SerializeToString()])
    assert [(s.series.metric, s.value) for s in out] == [("loss", 0.5)]


def test_metadata_only_on_the_first_event_of_a_tag_still_decides() -> None:
    first = summary_pb2.Summary.Value(tag="t", tensor=tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, float_val=[1.0]))
    first.metadata.plugin_data.plugin_name = "custom_plugin"
    later = summary_pb2.Summary.Value(tag="t", tensor=tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, float_val=[2.0]))
    evs = [event_pb2.Event(step=i, summary=summary_pb2.Summary(value=[v])) for i, v in enumerate([first, later])]
    out, _, _ = _decode([e.SerializeToString() for e in evs])
    assert out == []


def test_session_start_and_file_version_events() -> None:
    evs = [
        event_pb2.Event(wall_time=1.0, file_version="brain.Event:2"),
        event_pb2.Event(step=40, wall_time=2.0, session_log=event_pb2.SessionLog(status=event_pb2.SessionLog.START)),
    ]
    out, starts, bad = _decode([e.SerializeToString() for e in evs])
    assert out == [] and starts == [(40, 2.0)] and bad == 0


def test_undecodable_payload_is_counted_not_raised() -> None:
    out, _, bad = _decode(
        [
            b"\xff\xff\xff",
            event_pb2.Event(
                step=1,
                summary=summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag="a", simple_value=1.0)]),
            ).SerializeToString(),
        ]
    )
    assert bad == 1 and [s.value for s in out] == [1.0]


_value = st.floats(width=32)
_tag = st.sampled_from(["a", "b", "loss", "lossy", "train/x", "train/y", "zz/q"])
_enc = st.sampled_from(["simple", "float_val", "double_val", "content4", "content8", "half"])
_event = st.tuples(
    st.integers(min_value=-5, max_value=3_000_000),
    st.floats(min_value=0, max_value=2e9),
    st.lists(st.tuples(_tag, _value, _enc), min_size=1, max_size=4),
)


@settings(max_examples=60, deadline=None)
@given(events=st.lists(_event, min_size=1, max_size=30))
def test_fast_path_yields_what_upb_yields(kit: SimpleNamespace, events: list[tuple]) -> None:  # type: ignore[type-arg]
    payloads = []
    want = []
    for step, wall, values in events:
        vals = [kit.scalar_value(tag, v, enc) for tag, v, enc in values]
        summary = summary_pb2.Summary(value=vals)
        payloads.append(event_pb2.Event(step=step, wall_time=wall, summary=summary).SerializeToString())
        want += [(tag, step, wall, kit.stored(v, enc)) for tag, v, enc in values]
    # twice: the second pass runs on the layouts learnt in the first
    out, _, bad = _decode(payloads + payloads)
    assert bad == 0
    got = [(s.series.metric, s.step, s.time, s.value) for s in out]
    assert len(got) == 2 * len(want)
    for g, w in zip(got, want + want, strict=True):
        assert g[:3] == w[:3]
        assert g[3] == w[3] or (math.isnan(g[3]) and math.isnan(w[3]))
