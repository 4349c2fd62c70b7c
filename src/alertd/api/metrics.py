"""`GET /metrics`: a Prometheus collector that reads the running service at scrape time.

Besides alertd's own metrics it shows what Prometheus would record for alertd's alerts had it evaluated
the rules itself (`rules/alerting.go`): `ALERTS{alertname, alertstate, <labels>}` 1 for each pending and
firing alert and `ALERTS_FOR_STATE{alertname, <labels>}` its active-since time (epoch seconds); and, with
`export:` in the rules file, the newest value of each buffered series whose metric it names, a gauge named
after the metric (`train/loss{run="exp1"}` -> `train_loss{run="exp1"}`; with `timestamps`, the time of its newest
sample as `<name>_timestamp_seconds`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from functools import lru_cache
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from alertd.api.view import AlertsView, ServiceView
from alertd.model import am_labels
from alertd.promnames import metric_name, prom_labels
from alertd.rules.rule import compile_metric_patterns

RESERVED_PREFIXES = ("alertd_", "ALERTS")
"""Exported series may not take these names (alertd's own metrics and the alerts')."""
EXPORT_HELP = "The newest value of an alertd series (export: in the rules file)."
TIMESTAMP_SUFFIX = "_timestamp_seconds"
TIMESTAMP_HELP = "When the newest sample of an exported alertd series was taken, epoch seconds (export: timestamps)."


class ServiceCollector(Collector):
    """Reads the service at scrape time (no metric objects kept in step with it)."""

    def __init__(self, service: ServiceView) -> None:
        self.service = service

    def describe(self) -> list[Metric]:
        """Nothing to describe ahead (so registering never scrapes)."""
        return []

    def collect(self) -> Iterator[Metric]:
        """Every alertd metric, read now."""
        yield from self._sources()
        engine = self.service.engine
        evals = GaugeMetricFamily("alertd_evaluation_seconds", "Duration of the last rule evaluation.")
        evals.add_metric([], engine.eval_seconds)
        series = GaugeMetricFamily("alertd_buffer_series", "Series held in the buffer.")
        series.add_metric([], len(engine.buffer))
        samples = GaugeMetricFamily("alertd_buffer_samples", "Samples held in the buffer.")
        samples.add_metric([], engine.buffer.sample_count())
        yield from (evals, series, samples)
        yield from self._limits(engine.buffer)
        yield from self._alerts()
        yield self._notifications()
        yield from self._prometheus_alerts()
        yield from self._exported()

    def _limits(self, buffer: Any) -> Iterator[Metric]:
        per_source = GaugeMetricFamily("alertd_series", "Series held in the buffer, per source.", labels=["source"])
        for source, n in sorted(buffer.series_by_source().items()):
            per_source.add_metric([source], n)
        dropped = CounterMetricFamily(
            "alertd_series_dropped", "Samples of new series dropped at the series limits.", labels=["source"]
        )
        for source, n in sorted(buffer.dropped.items()):
            dropped.add_metric([source], n)
        evicted = CounterMetricFamily(
            "alertd_series_evicted",
            "Idle series that gave their place to new ones at the series limits.",
            labels=["source"],
        )
        for source, n in sorted(buffer.evicted.items()):
            evicted.add_metric([source], n)
        retimed = CounterMetricFamily(
            "alertd_samples_retimed", "Samples whose own time was unusable, kept at their arrival time."
        )
        retimed.add_metric([], buffer.retimed)
        yield from (per_source, dropped, evicted, retimed)

    def _sources(self) -> Iterator[Metric]:
        ingested = CounterMetricFamily("alertd_samples_ingested", "Samples read per source.", labels=["source"])
        errors = CounterMetricFamily("alertd_source_errors", "Failed polls per source.", labels=["source"])
        up = GaugeMetricFamily(
            "alertd_source_up", "1 when the last poll of the source worked and it is not disabled.", labels=["source"]
        )
        disabled = GaugeMetricFamily(
            "alertd_source_disabled",
            "1 when the source reads nothing by design (nvml without a driver); its up is 0.",
            labels=["source"],
        )
        lag = GaugeMetricFamily(
            "alertd_source_lag_seconds", "Poll time minus the newest sample's time.", labels=["source"]
        )
        reads = CounterMetricFamily(
            "alertd_source_reads", "Reads started per source: polls and notification wake-ups.", labels=["source"]
        )
        for name, health in sorted(self.service.health.items()):
            reads.add_metric([name], health.polls)
            ingested.add_metric([name], health.samples)
            errors.add_metric([name], health.errors)
            state, _ = source_state(health, self.service.sources.get(name))
            up.add_metric([name], 1.0 if state == "up" else 0.0)
            disabled.add_metric([name], 1.0 if state == "disabled" else 0.0)
            if health.lag is not None:
                lag.add_metric([name], health.lag)
        yield from (ingested, errors, up, disabled, lag, reads)

    def _alerts(self) -> Iterator[Metric]:
        engine = self.service.engine
        counts = alert_counts(self.service)
        alerts = GaugeMetricFamily("alertd_alerts", "Alerts per rule and state.", labels=["state", "rule"])
        rule_errors = GaugeMetricFamily(
            "alertd_rule_errors", "1 when the rule's last evaluation failed.", labels=["rule"]
        )
        for rule in engine.ruleset.rules:
            for state in ("pending", "firing"):
                alerts.add_metric([state, rule.name], counts.get((rule.name, state), 0))
            rule_errors.add_metric([rule.name], 1.0 if rule.name in engine.rule_errors else 0.0)
        yield from (alerts, rule_errors)

    def _prometheus_alerts(self) -> Iterator[Metric]:
        """`ALERTS` and `ALERTS_FOR_STATE` as Prometheus names and fills them."""
        engine = self.service.engine
        alerts = GaugeMetricFamily("ALERTS", "Pending and firing alerts (1 each), as Prometheus records them.")
        for_state = GaugeMetricFamily(
            "ALERTS_FOR_STATE", "The time each pending or firing alert became active, in epoch seconds."
        )
        names: dict[str, str] = {}
        seen: set[tuple[tuple[str, str], ...]] = set()
        for a in engine.state.alerts(engine.ruleset.rules):
            labels = prom_labels(am_labels(a.rule, a.labels, a.severity), names)
            labels["alertname"] = a.rule
            key = tuple(sorted(labels.items()))
            if key in seen:  # two alerts whose labels differ only in characters Prometheus has no room for
                continue
            seen.add(key)
            since = float(math.floor(a.active_at)) if math.isfinite(a.active_at) else a.active_at  # Go's Unix()
            for_state.add_sample("ALERTS_FOR_STATE", labels, since)
            alerts.add_sample("ALERTS", {**labels, "alertstate": a.state.value}, 1.0)
        yield from (alerts, for_state)

    def _exported(self) -> Iterator[Metric]:
        """The newest value of each buffered series that `export.metrics` names, at most `export.max_series`."""
        export = self.service.config.export
        exported = GaugeMetricFamily("alertd_export_series", "Series shown at this scrape by `export:`.")
        dropped = GaugeMetricFamily(
            "alertd_export_dropped_series",
            "Series `export:` named but this scrape left out: over max_series (limit), the same name and labels "
            "as one shown (collision), or a name of alertd's own (reserved).",
            labels=["reason"],
        )
        families: dict[str, Metric] = {}
        counts, shown = {"limit": 0, "collision": 0, "reserved": 0}, 0
        if export.metrics:
            buffer = self.service.engine.buffer
            counts, shown = _export(buffer, tuple(export.metrics), export.max_series, families, export.timestamps)
        exported.add_metric([], shown)
        for reason, n in counts.items():
            dropped.add_metric([reason], n)
        yield from (exported, dropped)
        yield from families.values()

    def _notifications(self) -> Metric:
        out = CounterMetricFamily(
            "alertd_notifications", "Delivery outcomes per receiver.", labels=["receiver", "outcome"]
        )
        dispatcher = self.service.dispatcher
        if dispatcher is not None:
            for outcome, per in sorted(dispatcher.counters.snapshot().items()):
                for receiver, n in sorted(per.items()):
                    out.add_metric([receiver, outcome], n)
        return out


@lru_cache(maxsize=16)
def _patterns(patterns: tuple[str, ...]) -> tuple[frozenset[str], Any]:
    return compile_metric_patterns(patterns)


def _export(
    buffer: Any, patterns: tuple[str, ...], limit: int, families: dict[str, Metric], timestamps: bool = False
) -> tuple[dict[str, int], int]:
    """Fill `families` (by name) with the newest value of each series of `buffer` whose metric matches
    `patterns`, the first `limit` of them in the buffer's order (oldest series first: the same ones from one
    scrape to the next); the counts of those left out, by reason, and the number shown. One pass; per metric
    name, one match. With `timestamps`, each series also shows the time of its newest sample as
    `<name>_timestamp_seconds`."""
    names, glob = _patterns(patterns)
    counts = {"limit": 0, "collision": 0, "reserved": 0}
    by_metric: dict[str, str | None] = {}  # metric -> its exported name; None: not exported
    label_names: dict[str, str] = {}
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    shown = 0
    for s in buffer:
        metric = s.key.metric
        name = by_metric.get(metric, "")
        if name == "":
            name = None
            if metric in names or (glob is not None and glob.fullmatch(metric)):
                name = metric_name(metric)
            by_metric[metric] = name
        if name is None or len(s.times) <= s.start:
            continue
        if name.startswith(RESERVED_PREFIXES):
            counts["reserved"] += 1
            continue
        if shown >= limit:
            counts["limit"] += 1
            continue
        labels = prom_labels(s.key.labels, label_names)
        key = (name, tuple(sorted(labels.items())))
        if key in seen:
            counts["collision"] += 1
            continue
        seen.add(key)
        family = families.get(name)
        if family is None:
            family = families[name] = Metric(name, EXPORT_HELP, "gauge")
        family.add_sample(name, labels, s.values[-1])
        if timestamps:
            stamp = name + TIMESTAMP_SUFFIX
            family = families.get(stamp)
            if family is None:
                family = families[stamp] = Metric(stamp, TIMESTAMP_HELP, "gauge")
            family.add_sample(stamp, labels, s.times[-1])
        shown += 1
    return counts, shown


def source_up(health: Any) -> bool:
    """Whether a source's last poll worked and its data is within its limits (False before its first poll)."""
    return health.last_poll is not None and health.failures == 0 and not getattr(health, "cut", None)


def source_state(health: Any, source: Any) -> tuple[str, str | None]:
    """A source's state for people and Prometheus, and a note: `disabled` (the source's own reason: NVML
    without a driver), `up` (its last poll worked), `down` (it failed, or its data went over a limit: the
    cut, `SourceHealth.cut`), `unknown` (no poll yet). The note is
    the disabled reason, or what the source has to say (a text log none of whose lines matched)."""
    note = getattr(source, "note", None)
    disabled = getattr(source, "disabled", None)
    if isinstance(disabled, str) and disabled:
        return "disabled", disabled
    note = note if isinstance(note, str) else None
    if health is None or (health.last_poll is None and not health.failures):
        return "unknown", note
    return ("up" if source_up(health) else "down"), note


def alert_counts(service: AlertsView) -> dict[tuple[str, str], int]:
    """(rule, state) -> number of pending or firing alerts."""
    counts: dict[tuple[str, str], int] = {}
    for a in service.engine.state.alerts(service.engine.ruleset.rules):
        key = (a.rule, a.state.value)
        counts[key] = counts.get(key, 0) + 1
    return counts
