"""The data never names its source (issue 27 item 9a): a `source` label that a line or an answer brings is
kept as `exported_source`, and the source's own name is `source`, so no data can pass for the TensorBoard
source whose verified writer the kill notifier may stop. A replay of recorded samples keeps them as
recorded."""

from __future__ import annotations

import json
from pathlib import Path

from alertd.model import Sample
from alertd.sources.config import SamplesConfig
from alertd.sources.prometheus.answer import samples_of
from alertd.sources.samples import SamplesSource, parse_sample, read_samples


def line(labels: dict[str, str]) -> str:
    """A samples line: a NaN loss with `labels`."""
    return json.dumps({"metric": "loss", "labels": labels, "time": 1700000000, "step": 5, "value": "NaN"}) + "\n"


def test_the_live_samples_source_names_itself(tmp_path: Path) -> None:
    """A line's `source` (and an `exported_source` it brings too) is kept under another name, where it
    differs from the source's own."""
    path = tmp_path / "s.jsonl"
    path.write_text(
        line({"source": "tb", "run": "victim", "pid": "4242"})
        + line({"run": "r1"})
        + line({"source": "tb", "exported_source": "x", "run": "r2"})
        + line({"source": "mine", "run": "r3"})
    )
    source = SamplesSource(SamplesConfig.model_validate({"name": "mine", "type": "samples", "path": str(path)}))
    got = [dict(s.series.labels) for s in source.read_new()]
    assert got == [
        {"source": "mine", "exported_source": "tb", "run": "victim", "pid": "4242"},
        {"source": "mine", "run": "r1"},
        {"source": "mine", "exported_source": "x", "exported_exported_source": "tb", "run": "r2"},
        {"source": "mine", "run": "r3"},  # its own name: nothing to keep
    ]


def test_a_replay_keeps_the_recorded_sources(tmp_path: Path) -> None:
    """`read_samples` (the dry-run's reader) replays recorded labels; the name fills in a missing source."""
    path = tmp_path / "recorded.jsonl"
    path.write_text(line({"source": "tb", "run": "a"}) + line({"run": "b"}))
    got = [dict(s.series.labels) for s in read_samples(str(path), "samples") if isinstance(s, Sample)]
    assert got == [{"source": "tb", "run": "a"}, {"source": "samples", "run": "b"}]
    assert dict(parse_sample(line({"source": "tb"})).series.labels) == {"source": "tb"}  # no name: as it is


def test_a_prometheus_answer_does_not_name_the_source() -> None:
    """A series of a PromQL answer labelled `source` (any exporter may set it) keeps it as `exported_source`."""
    body = json.dumps(
        {
            "status": "success",
            "data": {
                "resultType": "vector",
                "result": [{"metric": {"__name__": "loss", "source": "tb", "run": "victim"}, "value": [1, "NaN"]}],
            },
        }
    ).encode()
    (sample,) = samples_of(body, source="prom", metric=None, labels={}, max_series=10)
    assert dict(sample.series.labels) == {"source": "prom", "exported_source": "tb", "run": "victim"}
