"""The ``[metrics]`` table of the config file: where the service's metrics go.

Kept out of :mod:`pai_grpc._config_file` (which imports this module) so that
module stays small; the table is closed and strict like every other one.
"""

from __future__ import annotations

from pydantic import Field, field_validator

from pai_grpc._config_table import Table, check_host_port


class MetricsTable(Table):
    """Metrics: a Prometheus endpoint and/or OTLP export (both off by default)."""

    address: str | None = Field(
        None,
        description="`HOST:PORT` where a Prometheus endpoint serves `/metrics` (flag "
        "`--metrics-address`; off when unset). Port 0 picks a free one.",
    )
    otlp: bool | str | None = Field(
        None,
        description="Export metrics over OTLP/gRPC: `true` to the endpoint in "
        "`OTEL_EXPORTER_OTLP_ENDPOINT` (default `http://localhost:4317`), a string to that "
        "endpoint, `false` never. Unset: on when `OTEL_METRICS_EXPORTER` names `otlp`.",
    )
    otlp_interval_seconds: float = Field(
        60.0, gt=0, description="How often metrics are pushed over OTLP."
    )

    @field_validator("address")
    @classmethod
    def _host_port(cls, value: str | None) -> str | None:
        return check_host_port(value)


__all__ = ["MetricsTable"]
