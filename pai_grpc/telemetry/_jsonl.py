"""A span exporter writing one JSON object a line to a file (debugging and tests)."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from pathlib import Path

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult


class JsonLinesSpanExporter(SpanExporter):
    """Appends each finished span as one line of JSON (``ReadableSpan.to_json``).

    Lines are written whole and flushed at once, so several processes may
    append to one file and a reader sees every span a killed process ended.
    """

    def __init__(self, path: str | Path) -> None:
        self._path = Path(path)
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Append the spans."""
        lines = "".join(
            json.dumps(json.loads(span.to_json(indent=None)), separators=(",", ":")) + "\n"
            for span in spans
        )
        try:
            with self._lock, self._path.open("a", encoding="utf-8") as f:
                f.write(lines)
        except OSError:
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        """Nothing is held open between exports."""

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Every export is already on disk."""
        return True
