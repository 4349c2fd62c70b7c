"""The `prometheus` source: PromQL instant queries (dcgm-exporter's GPU series, anything Prometheus holds)."""

from alertd.sources.prometheus.source import PrometheusSource

__all__ = ["PrometheusSource"]
