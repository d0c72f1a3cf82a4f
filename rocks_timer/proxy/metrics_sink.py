"""An OpenTelemetry metrics endpoint that accepts client metrics and drops them.

The official Python PushConsumer needs a meter provider: when the settings reply turns metrics
off, it logs an ERROR on every settings exchange (it registers gauges on a provider it never
created). So push consumers are told to export to the broker itself, where this service answers
every export with success (the Apache proxy also receives client metrics).
"""
from __future__ import annotations

try:
    from opentelemetry.proto.collector.metrics.v1 import (metrics_service_pb2,
                                                          metrics_service_pb2_grpc)
except ImportError:  # pragma: no cover - comes with the client's opentelemetry exporter
    metrics_service_pb2 = metrics_service_pb2_grpc = None

AVAILABLE = metrics_service_pb2_grpc is not None


class MetricsSink(metrics_service_pb2_grpc.MetricsServiceServicer if AVAILABLE else object):
    """Counts exports and discards their content."""

    def __init__(self) -> None:
        self.exports = 0

    async def Export(self, request, context):
        self.exports += 1
        return metrics_service_pb2.ExportMetricsServiceResponse()


def service_descriptor():
    """The MetricsService's descriptor (for the native transport's dispatch table), or None."""
    if not AVAILABLE:
        return None
    return metrics_service_pb2.DESCRIPTOR.services_by_name["MetricsService"]


def add_to_server(server) -> MetricsSink | None:
    if not AVAILABLE:
        return None
    sink = MetricsSink()
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(sink, server)
    return sink
