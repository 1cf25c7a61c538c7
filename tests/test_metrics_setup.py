"""The metrics pipeline from settings: the [metrics] table, flags, env, OTLP push."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry import trace
from opentelemetry.proto.collector.metrics.v1 import (
    metrics_service_pb2,
    metrics_service_pb2_grpc,
)

from pai_grpc.cli import parser
from pai_grpc.config import ConfigError, Settings
from pai_grpc.telemetry import Telemetry
from pai_grpc.telemetry._metrics import metrics_for
from pai_grpc.telemetry._setup import otlp_enabled, start_metrics
from tests.processes import EXE


def test_the_metrics_address_comes_from_the_flag_over_the_file(tmp_path: Path) -> None:
    config = tmp_path / "pai.toml"
    config.write_text('[metrics]\naddress = "127.0.0.1:9464"\notlp = false\n')
    assert Settings.from_env(config_path=str(config)).metrics_address == "127.0.0.1:9464"
    flagged = Settings.from_env(config_path=str(config), metrics_address="0.0.0.0:9000")
    assert flagged.metrics_address == "0.0.0.0:9000"
    config.write_text('[metrics]\naddress = "9464"\n')
    with pytest.raises(ConfigError, match="metrics"):
        Settings.from_env(config_path=str(config))
    ns = parser().parse_args(["runner", "--metrics-address", "127.0.0.1:1", "--log-format", "json"])
    assert (ns.metrics_address, ns.log_format) == ("127.0.0.1:1", "json")


def test_otlp_follows_the_config_then_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_METRICS_EXPORTER", raising=False)
    assert not otlp_enabled(None)
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "prometheus, otlp")
    assert otlp_enabled(None)
    assert not otlp_enabled(False)
    assert otlp_enabled("http://collector:4317")


def test_nothing_configured_records_nothing() -> None:
    export = start_metrics(address=None, otlp=False)
    assert type(export.meter_provider).__name__ == "NoOpMeterProvider"
    export.close()


class Collector(metrics_service_pb2_grpc.MetricsServiceServicer):  # type: ignore[misc]
    def __init__(self) -> None:
        self.names: set[str] = set()
        self.got = asyncio.Event()

    async def Export(self, request: Any, context: Any) -> Any:
        for rm in request.resource_metrics:
            for sm in rm.scope_metrics:
                self.names.update(m.name for m in sm.metrics)
        self.got.set()
        return metrics_service_pb2.ExportMetricsServiceResponse()


async def test_metrics_are_pushed_over_otlp_to_a_collector() -> None:
    collector = Collector()
    server = grpc.aio.server()
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(collector, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        export = await asyncio.to_thread(
            start_metrics, address=None, otlp=f"http://127.0.0.1:{port}", otlp_interval_seconds=60
        )
        metrics = metrics_for(Telemetry(trace.NoOpTracerProvider(), export.meter_provider))
        metrics.runs_started.add(1, {"agent": "a"})
        await asyncio.to_thread(export.close)  # shutting down pushes what is pending
        await asyncio.wait_for(collector.got.wait(), 10)
        assert "pai.runs.started" in collector.names
    finally:
        await server.stop(None)


@pytest.mark.slow
def test_a_busy_metrics_port_stops_the_process_with_a_message(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        env = {**os.environ, "PAI_DATABASE_URL": f"sqlite:///{tmp_path / 'pai.db'}"}
        done = subprocess.run(
            [*EXE, "runner", "--metrics-address", f"127.0.0.1:{port}"],
            env=env,
            capture_output=True,
            timeout=60,
        )
    assert done.returncode == 2, done.stderr
    assert f"cannot serve metrics on 127.0.0.1:{port}" in done.stderr.decode()
    assert b"Traceback" not in done.stderr
