"""The telemetry container every instrumented module records through."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from opentelemetry import metrics, trace

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
        """The service's tracer (one per container: the SDK builds a new one per call)."""
        return self._tracer

    def meter(self) -> metrics.Meter:
        """The service's meter."""
        return self.meter_provider.get_meter(INSTRUMENTATION_NAME)

    @cached_property
    def _tracer(self) -> trace.Tracer:
        return self.tracer_provider.get_tracer(INSTRUMENTATION_NAME)
