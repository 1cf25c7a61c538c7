"""Telemetry: OpenTelemetry traces and metrics, a no-op unless configured.

The runtime records through the OpenTelemetry API only. A process that
exports (OTLP, Prometheus) builds a :class:`Telemetry` from SDK providers; an
unconfigured one uses :meth:`Telemetry.noop`. Providers are passed
explicitly rather than installed globally, so several apps in one process
(tests) each see their own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pai_grpc.telemetry import _tracing as tracing
from pai_grpc.telemetry._core import INSTRUMENTATION_NAME, Telemetry
from pai_grpc.telemetry._logs import LOG_FORMATS, setup_logging
from pai_grpc.telemetry._metrics import (
    PROMETHEUS_NAMES,
    Metrics,
    RunLabels,
    bounded_reason,
    current_run,
    metrics_for,
)
from pai_grpc.telemetry._setup import meter_provider, start_metrics
from pai_grpc.telemetry._tracing import tracer_provider_from_settings

if TYPE_CHECKING:
    from pai_grpc.telemetry._jsonl import JsonLinesSpanExporter

__all__ = [
    "INSTRUMENTATION_NAME",
    "LOG_FORMATS",
    "PROMETHEUS_NAMES",
    "JsonLinesSpanExporter",
    "Metrics",
    "RunLabels",
    "Telemetry",
    "bounded_reason",
    "current_run",
    "meter_provider",
    "metrics_for",
    "setup_logging",
    "start_metrics",
    "tracer_provider_from_settings",
    "tracing",
]


def __getattr__(name: str) -> Any:
    # The span exporter subclasses the OpenTelemetry SDK, which a process with
    # traces off never loads: imported on first use.
    if name == "JsonLinesSpanExporter":
        from pai_grpc.telemetry._jsonl import JsonLinesSpanExporter

        return JsonLinesSpanExporter
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
