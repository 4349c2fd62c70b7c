"""At a series limit, the series idle longest give their place to a new run's (not the new one dropped): a
source full of old runs still alerts on a new run's NaN; a series with an active alert keeps its place;
where nothing is idle, new series are dropped as before; a series that comes back is read on."""

from __future__ import annotations

import logging
import math

import pytest

from alertd.buffer import DROPPED_METRIC, EVICTED_METRIC, IDLE_EVICTABLE, BufferLimits, SeriesBuffer
from alertd.config import load_config
from alertd.model import Sample, SeriesKey, make_labels
from alertd.rules.evaluate import RuleSet, evaluate

NOW = 1_780_000_000.0
OLD = NOW - 10 * IDLE_EVICTABLE


def _loss(run: str, source: str = "tb") -> SeriesKey:
    return SeriesKey("train/loss", make_labels({"source": source, "run": run}))


def _rules() -> RuleSet:
    cfg = load_config(["rules/default.yaml"], {"ALERTD_TEXTLOG": "/nonexistent/*.log"})
    return RuleSet(cfg.rules)


def _full(limit: int = 3) -> SeriesBuffer:
    """A buffer whose source `tb` holds `limit` runs that logged 10 minutes ago (a, b, c: a the oldest)."""
    buf = SeriesBuffer(BufferLimits(max_series_per_source=limit))
    for i, run in enumerate("abcdefgh"[:limit]):
        buf.append([Sample(_loss(run), OLD + i, 1, 2.0)], OLD + i)
    return buf


def test_a_new_runs_nan_takes_the_place_of_the_idlest_series(caplog: pytest.LogCaptureFixture) -> None:
    rules, buf = _rules(), _full()
    state = evaluate(rules, buf, OLD + 5).state
    caplog.set_level(logging.WARNING, "alertd.buffer")
    buf.append([Sample(_loss("new"), NOW, 7, math.nan)], NOW)
    ev = evaluate(rules, buf, NOW, state)
    assert [(t.rule, t.state.value, dict(t.labels)["run"]) for t in ev.transitions] == [
        ("loss_not_finite", "firing", "new")
    ]
    assert buf.get(_loss("a")) is None and buf.get(_loss("b")) is not None  # a was idle longest
    assert buf.series_by_source() == {"tb": 3} and buf.evicted == {"tb": 1} and not buf.dropped
    counted = buf.get(SeriesKey(EVICTED_METRIC, (("source", "tb"),)))
    assert counted is not None and list(counted.values) == [1.0]
    buf.append([Sample(_loss("newer"), NOW + 1, 1, 1.0)], NOW + 1)  # the next one: b goes, not logged again
    assert buf.get(_loss("b")) is None and buf.evicted == {"tb": 2}
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "source tb: the series limit (3 for this source) is reached; the series idle longest (no sample for 60s "
        "or more, no alert active) give their place to new ones (counted as the series alertd.series.evicted)"
    ]


def test_a_series_with_an_active_alert_keeps_its_place() -> None:
    buf = _full()
    buf.pinned = lambda key: key == _loss("a")  # a's NaN alert is firing (the service says)
    buf.append([Sample(_loss("new"), NOW, 1, 1.0)], NOW)
    assert buf.get(_loss("a")) is not None and buf.get(_loss("b")) is None


def test_where_nothing_is_idle_new_series_are_dropped_as_before() -> None:
    buf = SeriesBuffer(BufferLimits(max_series_per_source=3))
    buf.append([Sample(_loss(run), NOW - 30, 1, 1.0) for run in "abc"], NOW - 30)  # 30 s ago: not idle
    buf.append([Sample(_loss("new"), NOW, 1, math.nan)], NOW)
    assert buf.get(_loss("new")) is None and buf.dropped == {"tb": 1} and not buf.evicted
    assert buf.get(SeriesKey(DROPPED_METRIC, (("source", "tb"),))) is not None
    later = NOW - 30 + IDLE_EVICTABLE + 1  # a minute after their last samples, they are idle
    buf.append([Sample(_loss("new"), later, 2, math.nan)], later)
    assert buf.get(_loss("new")) is not None and buf.evicted == {"tb": 1}


def test_the_limit_in_all_evicts_the_idlest_of_any_source() -> None:
    buf = SeriesBuffer(BufferLimits(max_series=3, max_series_per_source=10))
    buf.append([Sample(_loss("a", "mlflow"), OLD, 1, 1.0)], OLD)
    buf.append([Sample(_loss(run, "tb"), OLD + 1, 1, 1.0) for run in "bc"], OLD + 1)
    buf.append([Sample(_loss("new", "tb"), NOW, 1, 1.0)], NOW)
    assert buf.get(_loss("a", "mlflow")) is None and buf.evicted == {"mlflow": 1}
    assert buf.series_by_source() == {"tb": 3}


def test_a_series_that_comes_back_is_read_on_by_the_rules() -> None:
    rules, buf = _rules(), _full()
    state = evaluate(rules, buf, OLD + 5).state  # a's track has read its one sample
    buf.append([Sample(_loss("new"), NOW, 1, 1.0)], NOW)
    state = evaluate(rules, buf, NOW, state).state
    assert buf.get(_loss("a")) is None
    buf.append([Sample(_loss("a"), NOW + 1, 2, math.nan)], NOW + 1)  # a again (b gives its place)
    ev = evaluate(rules, buf, NOW + 1, state)
    assert [(t.rule, t.state.value, dict(t.labels)["run"]) for t in ev.transitions] == [
        ("loss_not_finite", "firing", "a")
    ]
    series = buf.get(_loss("a"))
    assert series is not None and len(series) == 1 and series.generation == 1


def test_a_replay_without_arrival_times_evicts_by_the_samples_times() -> None:
    buf = _full()
    buf.append([Sample(_loss("new"), NOW, 1, math.nan)])  # no `now`: a replay
    assert buf.get(_loss("new")) is not None and buf.evicted == {"tb": 1}
