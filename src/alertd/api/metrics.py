"""`GET /metrics`: a Prometheus collector that reads the running service at scrape time."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector


class ServiceCollector(Collector):
    """Reads the service at scrape time (no metric objects kept in step with it)."""

    def __init__(self, service: Any) -> None:
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

    def _limits(self, buffer: Any) -> Iterator[Metric]:
        per_source = GaugeMetricFamily("alertd_series", "Series held in the buffer, per source.", labels=["source"])
        for source, n in sorted(buffer.series_by_source().items()):
            per_source.add_metric([source], n)
        dropped = CounterMetricFamily(
            "alertd_series_dropped", "Samples of new series dropped at the series limits.", labels=["source"]
        )
        for source, n in sorted(buffer.dropped.items()):
            dropped.add_metric([source], n)
        retimed = CounterMetricFamily(
            "alertd_samples_retimed", "Samples whose own time was unusable, kept at their arrival time."
        )
        retimed.add_metric([], buffer.retimed)
        yield from (per_source, dropped, retimed)

    def _sources(self) -> Iterator[Metric]:
        ingested = CounterMetricFamily("alertd_samples_ingested", "Samples read per source.", labels=["source"])
        errors = CounterMetricFamily("alertd_source_errors", "Failed polls per source.", labels=["source"])
        up = GaugeMetricFamily("alertd_source_up", "1 when the last poll of the source worked.", labels=["source"])
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
            up.add_metric([name], 1.0 if source_up(health) else 0.0)
            if health.lag is not None:
                lag.add_metric([name], health.lag)
        yield from (ingested, errors, up, lag, reads)

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


def source_up(health: Any) -> bool:
    """Whether a source's last poll worked (False before its first poll)."""
    return health.last_poll is not None and health.failures == 0


def alert_counts(service: Any) -> dict[tuple[str, str], int]:
    """(rule, state) -> number of pending or firing alerts."""
    counts: dict[tuple[str, str], int] = {}
    for a in service.engine.state.alerts(service.engine.ruleset.rules):
        key = (a.rule, a.state.value)
        counts[key] = counts.get(key, 0) + 1
    return counts
