"""The buffer's bounds: series limits (in all, per source) and sample times no rule can use."""

from __future__ import annotations

import json
import logging
import math
import subprocess
import sys
from pathlib import Path

import pytest

from alertd.buffer import DROPPED_METRIC, BufferLimits, SeriesBuffer
from alertd.clock import FakeClock
from alertd.config import load_config
from alertd.model import AlertState, Sample, SeriesKey, make_labels
from alertd.rules.evaluate import RuleSet, evaluate
from alertd.service import Service
from alertd.testing.tbwriter import ScalarWriter

NOW = 1_780_000_000.0


def _key(metric: str, source: str, **labels: str) -> SeriesKey:
    return SeriesKey(metric, make_labels({"source": source, **labels}))


def test_a_million_label_sets_are_cut_at_the_limits_counted_and_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    buf = SeriesBuffer(BufferLimits(max_series=50_000, max_series_per_source=20_000))
    keep = _key("loss", "logs", id="0")
    buf.append([Sample(keep, NOW, 0, 1.0)], NOW)
    caplog.set_level(logging.WARNING, "alertd.buffer")
    flood = [Sample(_key("loss", "logs", id=str(i)), NOW + 1, 1, 1.0) for i in range(1, 1_000_001)]
    buf.append(flood, NOW + 1)
    buf.append([Sample(keep, NOW + 2, 2, 2.0)], NOW + 2)  # a series held already keeps updating

    assert buf.series_by_source() == {"logs": 20_000}
    assert buf.dropped == {"logs": 1_000_000 - 19_999}
    kept = buf.get(keep)
    assert kept is not None and list(kept.values[kept.start :]) == [1.0, 2.0]
    dropped = buf.get(SeriesKey(DROPPED_METRIC, (("source", "logs"),)))
    assert dropped is not None and dropped.values[-1] == 1_000_000 - 19_999
    warnings = [r.getMessage() for r in caplog.records if "series limit" in r.getMessage()]
    assert warnings == [
        "source logs: the series limit (20000 for this source) is reached; samples of new series are dropped "
        "(counted in /metrics as alertd_series_dropped_total and as the series alertd.series.dropped)"
    ]


def test_the_global_limit_and_a_sources_own_limit() -> None:
    buf = SeriesBuffer(BufferLimits(max_series=30, max_series_per_source=20, source_max_series={"gpu": 5}))
    buf.append([Sample(_key("util", "gpu", gpu=str(i)), NOW, None, 1.0) for i in range(10)], NOW)
    buf.append([Sample(_key("loss", "a", id=str(i)), NOW, 1, 1.0) for i in range(25)], NOW)
    buf.append([Sample(_key("loss", "b", id=str(i)), NOW, 1, 1.0) for i in range(25)], NOW)
    assert buf.series_by_source() == {"gpu": 5, "a": 20, "b": 5}  # b stopped by the 30 in all
    assert buf.dropped == {"gpu": 5, "a": 5, "b": 20}


def test_the_default_rule_alerts_on_dropped_series(tmp_path: Path) -> None:
    cfg = load_config(["rules/default.yaml"], {"ALERTD_TEXTLOG": str(tmp_path / "*.log")})
    buf = SeriesBuffer(BufferLimits(max_series_per_source=10))
    buf.append([Sample(_key("loss", "logs", id=str(i)), NOW, 1, 1.0) for i in range(11)], NOW)
    ev = evaluate(RuleSet(cfg.rules), buf, NOW)
    assert [(t.rule, t.state.value, t.value) for t in ev.transitions] == [("series_limit_reached", "firing", 1.0)]


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, 1e13, 1e300])
def test_a_nan_at_an_unusable_time_is_alerted_and_later_evaluations_work(bad: float) -> None:
    cfg = load_config(["rules/default.yaml"], {"ALERTD_TEXTLOG": "/nonexistent/*.log"})
    rules, buf = RuleSet(cfg.rules), SeriesBuffer(cfg.buffer)
    key = _key("train/loss", "tb", run="r")
    buf.append([Sample(key, NOW - 10, 1, 1.0), Sample(key, bad, 2, math.nan)], NOW)
    ev = evaluate(rules, buf, NOW)
    assert [(t.rule, t.state.value, t.time) for t in ev.transitions] == [("loss_not_finite", "firing", NOW)]
    buf.append([Sample(key, NOW + 1, 3, 1.0)], NOW + 1)
    ev = evaluate(rules, buf, NOW + 1, ev.state)
    assert not ev.errors
    assert [(t.rule, t.state.value) for t in ev.transitions] == [("loss_not_finite", "resolved")]
    assert buf.retimed == 1


RULES = """
sources: [{{name: s, type: samples, path: "{path}"}}]
notifiers: {{console: {{type: log}}}}
rules:
  - {{name: cold, metric: util, condition: "< 40", for: 1m}}
  - {{name: quiet, metric: util, condition: {{absent: 2m}}}}
"""


def test_a_sample_time_far_ahead_of_the_clock_does_not_hold_for_or_absent_back(tmp_path: Path) -> None:
    (tmp_path / "rules.yaml").write_text(RULES.format(path=tmp_path / "s.jsonl"))
    clock = FakeClock(NOW)
    service = Service([str(tmp_path / "rules.yaml")], clock=clock, state=tmp_path / "state")
    service.open()
    util = _key("util", "s", gpu="0")
    service.ingest([Sample(util, NOW + 86_400, None, 10.0)], NOW)  # a writer's clock a day ahead
    service.evaluate(NOW + 60)
    states = {a.rule: a.state for a in service.engine.state.alerts(service.engine.ruleset.rules)}
    assert states == {"cold": AlertState.FIRING}  # for: 1m on the arrival clock, not a day later
    service.evaluate(NOW + 120)
    states = {a.rule: a.state for a in service.engine.state.alerts(service.engine.ruleset.rules)}
    assert states == {"cold": AlertState.FIRING, "quiet": AlertState.FIRING}  # absent 2m after it arrived
    service.close()


def test_a_dry_run_of_event_files_with_nan_and_millisecond_wall_times_alerts_the_nan(tmp_path: Path) -> None:
    for run, bad in (("nan_time", math.nan), ("ms_time", NOW * 1000)):
        w = ScalarWriter(str(tmp_path / "logs" / run))
        w.add_scalar("train/loss", 2.0, 1, wall_time=NOW)
        w.add_scalar("train/loss", math.nan, 2, wall_time=bad)
        w.add_scalar("train/loss", 1.9, 3, wall_time=NOW + 20)
        w.close()
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "alertd",
            "dry-run",
            "--rules",
            "rules/default.yaml",
            "--source",
            f"tensorboard:{tmp_path / 'logs'}",
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={"ALERTD_TEXTLOG": str(tmp_path / "none/*.log"), "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stderr
    lines = [json.loads(x) for x in out.stdout.splitlines() if x.startswith("{")]
    firing = sorted(
        (x["labels"]["run"], x["step"]) for x in lines if x["rule"] == "loss_not_finite" and x["state"] == "firing"
    )
    assert firing == [("ms_time", 2), ("nan_time", 2)]
    assert "is unusable" in out.stderr
