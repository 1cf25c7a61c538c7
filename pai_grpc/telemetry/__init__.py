"""Telemetry: OpenTelemetry traces and metrics, a no-op unless configured.

The runtime records through the OpenTelemetry API only. A process that
exports (OTLP, Prometheus) builds a :class:`Telemetry` from SDK providers; an
unconfigured one uses :meth:`Telemetry.noop`. Providers are passed
explicitly rather than installed globally, so several apps in one process
(tests) each see their own.
"""

from __future__ import annotations

from dataclasses import dataclass

from opentelemetry import metrics, trace

from pai_grpc.telemetry import _tracing as tracing
from pai_grpc.telemetry._jsonl import JsonLinesSpanExporter
from pai_grpc.telemetry._tracing import tracer_provider_from_settings

__all__ = [
    "INSTRUMENTATION_NAME",
    "JsonLinesSpanExporter",
    "Telemetry",
    "tracer_provider_from_settings",
    "tracing",
]

#: The instrumentation scope of every tracer and meter of the service.
INSTRUMENTATION_NAME = "pai_grpc"


@dataclass(frozen=True)
class Telemetry:
    """The tracer and meter providers one process records through."""

    tracer_provider: trace.TracerProvider
    meter_provider: metrics.MeterProvider

    @classmethod
    def noop(cls) -> Telemetry:
        """Telemetry that records nothing (the default)."""
        return cls(trace.NoOpTracerProvider(), metrics.NoOpMeterProvider())

    def tracer(self) -> trace.Tracer:
        """The service's tracer."""
        return self.tracer_provider.get_tracer(INSTRUMENTATION_NAME)

    def meter(self) -> metrics.Meter:
        """The service's meter."""
        return self.meter_provider.get_meter(INSTRUMENTATION_NAME)
