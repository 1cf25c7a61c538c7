"""Log lines: plain text, or JSON objects one per line with run and trace context.

A JSON line carries ``time``, ``level``, ``logger``, ``message`` and, where
known, ``run_id`` / ``thread_id`` (the run the logging task executes, see
:data:`pai_grpc.telemetry._metrics.current_run`) and ``trace_id`` /
``span_id`` (the current OpenTelemetry span). The service never logs tokens,
message text or tool inputs and outputs at INFO or above; this module only
shapes what is logged.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, Literal

from opentelemetry import trace

from pai_grpc.telemetry._metrics import current_run

__all__ = ["LOG_FORMATS", "JsonFormatter", "setup_logging"]

LOG_FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object per record, with the run and trace the record belongs to."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line of JSON."""
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        run = current_run.get()
        if run is not None:
            line["run_id"] = run.run_id
            line["thread_id"] = run.thread_id
        context = trace.get_current_span().get_span_context()
        if context.is_valid:
            line["trace_id"] = format(context.trace_id, "032x")
            line["span_id"] = format(context.span_id, "016x")
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, ensure_ascii=False, default=str)


def setup_logging(level: str, fmt: Literal["text", "json"] | str = "text") -> None:
    """Configure the root logger on stderr in ``fmt`` (``text`` or ``json``)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(getattr(logging, level.upper(), logging.INFO))
