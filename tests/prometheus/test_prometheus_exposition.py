"""What `/metrics` shows Prometheus, read back with prometheus_client's own parser: `ALERTS` and
`ALERTS_FOR_STATE` as Prometheus fills them, and the newest values of the series `export:` names
(sanitised names, NaN and infinities, the cap, collisions, hostile label values), over a real Service
served on 127.0.0.1."""

from __future__ import annotations

import math
import time
from pathlib import Path

import pytest
from api_helpers import serving
from prometheus_client.parser import text_string_to_metric_families

from alertd.api.prom import go_float
from alertd.config import load_config
from alertd.errors import ConfigError
from alertd.model import Sample, SeriesKey, make_labels
from alertd.service import Service

pytestmark = pytest.mark.anyio

RULES = """\
rules:
  - {name: loss_nan, metric: train/loss, condition: nonfinite, severity: critical, labels: {team: ml}}
  - {name: loss_high, metric: "*loss", condition: "> 100", for: 1h}
"""
HOSTILE = 'exp "1"\nline two \\ and a \\n'
"""A label value with quotes, a newline, backslashes and a literal backslash-n."""

Samples = dict[str, list[tuple[dict[str, str], float]]]


def service_with(tmp_path: Path, extra: str = "") -> Service:
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES + extra)
    return Service([str(rules)], state=tmp_path / "state")


def families(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Every family of a Prometheus text page: name -> [(labels, value)]."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        out.setdefault(family.name, []).extend((dict(s.labels), s.value) for s in family.samples)
    return out


def key(metric: str, **labels: str) -> SeriesKey:
    return SeriesKey(metric, make_labels(labels))


async def test_alerts_and_their_active_time_as_prometheus_records_them(tmp_path: Path) -> None:
    service = service_with(tmp_path)
    async with serving(service) as client:
        t = time.time() - 0.5
        service.ingest(
            [
                Sample(key("train/loss", run=HOSTILE, source="tb", **{"gpu.uuid": "GPU-1"}), t, 7, math.nan),
                Sample(key("eval/loss", run="exp2", source="tb"), t, 7, 250.0),
            ],
            t + 0.5,
        )
        r = await client.get("/metrics")
        assert r.status_code == 200
        got = families(r.text)
    nan_labels = {
        "alertname": "loss_nan",
        "severity": "critical",
        "team": "ml",
        "metric": "train/loss",
        "run": HOSTILE,
        "source": "tb",
        "gpu_uuid": "GPU-1",  # `gpu.uuid`: Prometheus has no room for the dot
    }
    high_labels = {
        "alertname": "loss_high",
        "severity": "warning",
        "metric": "eval/loss",
        "run": "exp2",
        "source": "tb",
    }
    assert sorted(got["ALERTS"], key=str) == sorted(
        [({**nan_labels, "alertstate": "firing"}, 1.0), ({**high_labels, "alertstate": "pending"}, 1.0)], key=str
    )
    since = float(math.floor(t))  # Prometheus: float64(ActiveAt.Unix())
    assert sorted(got["ALERTS_FOR_STATE"], key=str) == sorted([(nan_labels, since), (high_labels, since)], key=str)
    # the hostile value is escaped on the page, not cut or passed through raw
    assert 'run="exp \\"1\\"\\nline two \\\\ and a \\\\n"' in r.text


async def test_export_shows_the_newest_value_of_each_named_series(tmp_path: Path) -> None:
    service = service_with(tmp_path, 'export: {metrics: ["*loss", "gpu.*", "1st/*"]}\n')
    async with serving(service) as client:
        t = time.time()
        series: Samples = {
            "train/loss": [({"run": "a"}, 0.5), ({"run": "a"}, math.nan), ({"run": "b"}, 1.0), ({"run": "b"}, 0.25)],
            "eval/loss": [({"run": "a"}, math.inf)],
            "val loss": [({"run": "a"}, -math.inf)],
            "gpu.util": [({"gpu.uuid": "GPU-1", "host": HOSTILE}, 97.0)],
            "1st/acc": [({"__name__": "x", "run": "a"}, 0.5)],
            "train/lr": [({"run": "a"}, 3e-4)],  # not named: not exported
        }
        samples = [
            Sample(key(m, **labels), t + i, i, v) for m, rows in series.items() for i, (labels, v) in enumerate(rows)
        ]
        service.ingest(samples, t + 10)
        got = families((await client.get("/metrics")).text)
    loss = dict((x["run"], v) for x, v in got["train_loss"])
    assert math.isnan(loss["a"]) and loss["b"] == 0.25  # the newest sample; NaN as NaN
    assert got["eval_loss"] == [({"run": "a"}, math.inf)]
    assert got["val_loss"] == [({"run": "a"}, -math.inf)]
    assert got["gpu_util"] == [({"gpu_uuid": "GPU-1", "host": HOSTILE}, 97.0)]
    assert got["_1st_acc"] == [({"_name__": "x", "run": "a"}, 0.5)]  # no digit first; `__` is Prometheus' own
    assert "train_lr" not in got
    assert got["alertd_export_series"] == [({}, 6.0)]
    assert {x["reason"]: v for x, v in got["alertd_export_dropped_series"]} == {
        "limit": 0,
        "collision": 0,
        "reserved": 0,
    }


async def test_export_timestamps_show_when_each_series_last_wrote(tmp_path: Path) -> None:
    service = service_with(tmp_path, "export: {metrics: [train/step_time], timestamps: true}\n")
    async with serving(service) as client:
        t = time.time()
        samples = [
            Sample(key("train/step_time", run="j", rank=str(rank)), t - age, 7, 0.1)
            for rank, age in ((0, 0.0), (1, 300.0))
        ]
        service.ingest(samples, t)
        got = families((await client.get("/metrics")).text)
    assert sorted(got["train_step_time_timestamp_seconds"], key=str) == sorted(
        [({"run": "j", "rank": "0"}, t), ({"run": "j", "rank": "1"}, t - 300.0)], key=str
    )
    assert len(got["train_step_time"]) == 2 and got["alertd_export_series"] == [({}, 2.0)]


async def test_nothing_is_exported_without_export(tmp_path: Path) -> None:
    service = service_with(tmp_path)
    async with serving(service) as client:
        service.ingest([Sample(key("train/loss", run="a"), time.time(), 1, 0.5)], time.time())
        got = families((await client.get("/metrics")).text)
    assert "train_loss" not in got
    assert got["alertd_export_series"] == [({}, 0.0)]
    assert {n for n in got if not n.startswith("alertd_")} == {"ALERTS", "ALERTS_FOR_STATE"}


async def test_export_keeps_to_max_series_and_counts_what_it_leaves_out(tmp_path: Path) -> None:
    service = service_with(tmp_path, 'export: {metrics: ["*loss", "alertd.*", "ALERTS*"], max_series: 3}\n')
    async with serving(service) as client:
        t = time.time()
        keys = [
            key("train/loss", run="a"),
            key("train.loss", run="a"),  # the same name and labels once sanitised: a collision
            key("train/loss", **{"gpu.uuid": "g"}),
            key("train/loss", gpu_uuid="g"),  # collides with the one before
            key("alertd.loss"),  # would be alertd_loss: alertd's own names are reserved
            key("ALERTS_loss"),
            key("eval/loss", run="a"),
            key("eval/loss", run="b"),  # over the cap from here on
            key("eval/loss", run="c"),
        ]
        service.ingest([Sample(k, t, 1, float(i)) for i, k in enumerate(keys)], t)
        r = await client.get("/metrics")
        got = families(r.text)
        again = families((await client.get("/metrics")).text)
    assert got["train_loss"] == [({"run": "a"}, 0.0), ({"gpu_uuid": "g"}, 2.0)]  # the first of each, buffer order
    assert got["eval_loss"] == [({"run": "a"}, 6.0)]
    assert got["alertd_export_series"] == [({}, 3.0)]
    assert {x["reason"]: v for x, v in got["alertd_export_dropped_series"]} == {
        "limit": 2,
        "collision": 2,
        "reserved": 2,
    }
    assert again == got  # the same series from one scrape to the next
    assert r.text.count("# TYPE ALERTS gauge") == 1 and "alertd_loss" not in r.text


async def test_a_scrape_of_100k_buffered_series_stays_cheap(tmp_path: Path) -> None:
    extra = (
        'export: {metrics: ["*loss"]}\n'  # max_series: 10000, the default
        "buffer: {max_series: 200000, max_series_per_source: 200000, max_samples: 2}\n"
    )
    service = service_with(tmp_path, extra)
    async with serving(service, start=False) as client:
        t = time.time()
        n = 100_000
        service.engine.buffer.append(
            [Sample(key("train/loss" if i % 2 else "gpu.util", run=f"r{i}", source="tb"), t, 1, 0.5) for i in range(n)],
            t,
        )
        await client.get("/metrics")  # the first request pays for what is set up once
        started = time.perf_counter()
        r = await client.get("/metrics")
        took = time.perf_counter() - started
        got = families(r.text)
    assert len(got["train_loss"]) == 10_000 and "gpu_util" not in got
    assert {x["reason"]: v for x, v in got["alertd_export_dropped_series"]}["limit"] == n // 2 - 10_000
    assert took < 2.0, f"a scrape took {took:.2f}s"


@pytest.mark.parametrize(
    ("export", "message"),
    [
        (
            "[a]",
            'export: expected a mapping such as {metrics: ["*loss", "gpu.*"], max_series: 10000, timestamps: false}',
        ),
        (
            "{metrics: 5}",
            'export.metrics: expected a metric name or glob, or a list of them such as ["*loss", "gpu.*"], got 5',
        ),
        ("{metrics: ['']}", "export.metrics[0]: String should have at least 1 character"),
        ("{metrics: ['*loss'], max_series: 0}", "export.max_series: Input should be greater than or equal to 1"),
        ("{metrics: ['*loss'], max_series: many}", "export.max_series: Input should be a valid integer"),
        (
            "{metric: ['*loss']}",
            "export.metric: unknown key 'metric'; did you mean 'metrics'? "
            "(the keys here: max_series, metrics, timestamps)",
        ),
    ],
)
def test_a_bad_export_is_a_clear_error(tmp_path: Path, export: str, message: str) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text(f"export: {export}\nrules: []\n")
    with pytest.raises(ConfigError) as info:
        load_config([str(path)], {})
    (problem,) = [str(p) for p in info.value.problems]
    assert problem.startswith(f"{path}:1: {message}"), problem


def test_export_defaults_to_nothing_and_a_single_glob_is_a_list(tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text("rules: []\n")
    assert load_config([str(path)], {}).export.metrics == []
    path.write_text("export: {metrics: '*loss'}\nrules: []\n")
    export = load_config([str(path)], {}).export
    assert (export.metrics, export.max_series) == (["*loss"], 10_000)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1.0, "1e+00"),
        (0.5, "5e-01"),
        (250.0, "2.5e+02"),
        (100.0, "1e+02"),
        (1e-07, "1e-07"),
        (0.1 + 0.2, "3.0000000000000004e-01"),
        (-0.0, "-0e+00"),
        (5e-324, "5e-324"),
        (1e300, "1e+300"),
        (math.nan, "NaN"),
        (math.inf, "+Inf"),
        (-math.inf, "-Inf"),
    ],
)
def test_an_alert_value_is_written_as_prometheus_writes_it(value: float, text: str) -> None:
    # `GET /api/v1/alerts`' `value`: Go's strconv.FormatFloat(v, 'e', -1, 64), as Prometheus' API writes it
    assert go_float(value) == text
