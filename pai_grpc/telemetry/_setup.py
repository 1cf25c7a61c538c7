"""The metrics pipeline of a serve or runner process, from its settings.

Prometheus: ``--metrics-address`` (or ``[metrics] address``) serves
``/metrics`` from a registry of its own, so nothing else registered in the
process's global registry leaks into the scrape. OTLP: ``[metrics] otlp`` or
``OTEL_METRICS_EXPORTER=otlp`` pushes periodically to
``OTEL_EXPORTER_OTLP_ENDPOINT`` (or the endpoint given). Neither: the meter
provider is the API's no-op one and recording costs nothing.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from threading import Thread
from typing import TYPE_CHECKING, Any

from opentelemetry import metrics

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    # The SDK is imported where a pipeline is built: with metrics off (the
    # default) a serving process never loads it.
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import MetricReader
    from opentelemetry.sdk.resources import Resource

__all__ = ["MetricsExport", "otlp_enabled", "parse_host_port", "start_metrics"]

log = logging.getLogger("pai_grpc.telemetry")


def parse_host_port(address: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:9464`` for IPv6) as a host and a port."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"expected HOST:PORT, got {address!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


def otlp_enabled(setting: bool | str | None) -> bool:
    """Whether metrics go over OTLP: the config's choice, else ``OTEL_METRICS_EXPORTER``."""
    if setting is None:
        names = os.environ.get("OTEL_METRICS_EXPORTER", "")
        return "otlp" in {n.strip().lower() for n in names.split(",")}
    return setting is not False


@dataclass
class MetricsExport:
    """A process's meter provider and the endpoints serving or pushing it."""

    meter_provider: metrics.MeterProvider
    #: The bound Prometheus ``(host, port)``, when one serves.
    prometheus: tuple[str, int] | None = None
    _server: WSGIServer | None = None
    _thread: Thread | None = None
    _readers: list[MetricReader] = field(default_factory=list)

    def close(self) -> None:
        """Stop the HTTP endpoint and flush the last metrics out."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        shutdown = getattr(self.meter_provider, "shutdown", None)
        if shutdown is not None:  # the SDK's provider (the API's no-op one has none)
            shutdown()


def start_metrics(
    *,
    address: str | None,
    otlp: bool | str | None = None,
    otlp_interval_seconds: float = 60.0,
    service_name: str = "pai-grpc",
) -> MetricsExport:
    """Build the meter provider and start its Prometheus endpoint, if any is configured."""
    readers: list[MetricReader] = []
    server: Any = None
    thread: Thread | None = None
    bound: tuple[str, int] | None = None
    if address:
        import prometheus_client
        from opentelemetry.exporter.prometheus import PrometheusMetricReader

        host, port = parse_host_port(address)
        registry = prometheus_client.CollectorRegistry()
        readers.append(PrometheusMetricReader(registry=registry))
        server, thread = prometheus_client.start_http_server(port, addr=host, registry=registry)
        bound = (host, int(server.server_port))
        log.info("metrics on http://%s:%d/metrics", host, bound[1])
    if otlp_enabled(otlp):
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

        # Without an endpoint the exporter reads OTEL_EXPORTER_OTLP_(METRICS_)ENDPOINT.
        exporter = OTLPMetricExporter(endpoint=otlp if isinstance(otlp, str) else None)
        readers.append(
            PeriodicExportingMetricReader(
                exporter, export_interval_millis=otlp_interval_seconds * 1000
            )
        )
    if not readers:
        return MetricsExport(metrics.NoOpMeterProvider())
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource

    # OTEL_SERVICE_NAME, when set, names the service instead.
    named = {} if os.environ.get("OTEL_SERVICE_NAME") else {SERVICE_NAME: service_name}
    provider = meter_provider(readers, resource=Resource.create(named))
    return MetricsExport(provider, bound, server, thread, readers)


def meter_provider(
    readers: Sequence[MetricReader], *, resource: Resource | None = None
) -> MeterProvider:
    """The SDK meter provider the service exports through.

    Exemplars are off unless ``OTEL_METRICS_EXEMPLAR_FILTER`` asks for them:
    the trace-based default samples one on every measurement made inside a
    span (nearly all of ours), which costs more than the measurement itself,
    and the Prometheus text format does not carry them.
    """
    from opentelemetry.sdk.metrics import AlwaysOffExemplarFilter, MeterProvider

    chosen = None if os.environ.get("OTEL_METRICS_EXEMPLAR_FILTER") else AlwaysOffExemplarFilter()
    return MeterProvider(metric_readers=readers, resource=resource, exemplar_filter=chosen)
