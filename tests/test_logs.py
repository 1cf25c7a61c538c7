"""JSON log lines: fields, and the run and trace they belong to."""

from __future__ import annotations

import io
import json
import logging
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider

from pai_grpc.telemetry import Telemetry
from pai_grpc.telemetry._logs import JsonFormatter
from pai_grpc.telemetry._metrics import RunLabels, current_run, metrics_for


def log_line(logger: logging.Logger, out: io.StringIO, message: str, *args: object) -> Any:
    logger.warning(message, *args)
    return json.loads(out.getvalue().splitlines()[-1])


def test_json_lines_carry_the_run_and_the_current_span() -> None:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("pai_grpc.test_logs")
    logger.addHandler(handler)
    logger.propagate = False
    tracer_provider = TracerProvider()
    telemetry = Telemetry(tracer_provider, MeterProvider())
    try:
        bare = log_line(logger, out, "outside %s", "runs")
        assert bare.keys() == {"time", "level", "logger", "message"}
        assert (bare["level"], bare["logger"], bare["message"]) == (
            "WARNING",
            "pai_grpc.test_logs",
            "outside runs",
        )
        token = current_run.set(RunLabels("run_1", "thr_1", "a", metrics_for(telemetry)))
        try:
            with telemetry.tracer().start_as_current_span("step") as span:
                inside = log_line(logger, out, "inside")
        finally:
            current_run.reset(token)
        context = span.get_span_context()
        assert inside["run_id"] == "run_1"
        assert inside["thread_id"] == "thr_1"
        assert inside["trace_id"] == format(context.trace_id, "032x")
        assert inside["span_id"] == format(context.span_id, "016x")
        try:
            raise ValueError("boom")
        except ValueError:
            logger.exception("failed")
        failed = json.loads(out.getvalue().splitlines()[-1])
        assert "ValueError: boom" in failed["exception"]
        assert "run_id" not in failed
    finally:
        logger.removeHandler(handler)
        tracer_provider.shutdown()
