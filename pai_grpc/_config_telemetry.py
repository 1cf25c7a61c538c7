"""The ``[telemetry]`` table of the config file: where traces go.

Every key left out of the file falls back to the standard OpenTelemetry
environment variable named in its description, then to the default, so a
deployment configured the OpenTelemetry way (``OTEL_SERVICE_NAME``,
``OTEL_TRACES_EXPORTER``, ``OTEL_EXPORTER_OTLP_ENDPOINT``,
``OTEL_TRACES_SAMPLER``...) needs no table at all.
"""

from __future__ import annotations

from typing import Literal, TypeAlias

from pydantic import Field

from pai_grpc._config_table import Table

TracesExporter: TypeAlias = Literal["none", "otlp", "console", "jsonl"]
SamplerName: TypeAlias = Literal[
    "always_on",
    "always_off",
    "traceidratio",
    "parentbased_always_on",
    "parentbased_always_off",
    "parentbased_traceidratio",
]


class TelemetryTable(Table):
    """Traces: the service name, the exporter and the sampler."""

    # The same closed, strict table as the config file's others (that module
    # imports this one, so it cannot share their base class).

    service_name: str = Field(
        "pai-grpc",
        min_length=1,
        description="The `service.name` of every span (else `OTEL_SERVICE_NAME`).",
    )
    traces_exporter: TracesExporter = Field(
        "none",
        description="Where spans go (else `OTEL_TRACES_EXPORTER`): `none`, `otlp` (gRPC, "
        "batched), `console` (stdout), or `jsonl` (one JSON span a line in `traces_file`, "
        "written at once: for debugging and tests).",
    )
    otlp_endpoint: str = Field(
        "",
        description="The OTLP/gRPC collector, e.g. `http://collector:4317` (else "
        "`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` / `OTEL_EXPORTER_OTLP_ENDPOINT`, "
        "default `http://localhost:4317`).",
    )
    sampler: SamplerName = Field(
        "parentbased_always_on",
        description="Which traces are recorded (else `OTEL_TRACES_SAMPLER`); the parent-based "
        "ones follow the caller's sampling decision.",
    )
    sampler_arg: float | None = Field(
        None,
        ge=0,
        le=1,
        description="The ratio of the `traceidratio` samplers (else `OTEL_TRACES_SAMPLER_ARG`, "
        "default 1.0).",
    )
    traces_file: str = Field(
        "pai-traces.jsonl", description="The file the `jsonl` exporter appends to."
    )
