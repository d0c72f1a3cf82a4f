"""Metrics and dashboard of a running broker (docs/METRICS.md): ``/metrics`` in Prometheus text
under RocketMQ 5's names, and a live dashboard page with no network at run time."""
from rocks_timer.metrics.collector import BrokerCollector, default_labels
from rocks_timer.metrics.server import MetricsServer, dashboard_document

__all__ = ["BrokerCollector", "MetricsServer", "dashboard_document", "default_labels"]
