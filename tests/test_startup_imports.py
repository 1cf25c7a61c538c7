"""A serving process loads only what its configuration uses.

TLS (cryptography), JSON Schema validation (jsonschema), the HTTP/Connect
stack (connectrpc), the OpenTelemetry SDK and, on SQLite, SQLAlchemy's
asyncio extension together cost a serving process about 27 MiB of resident
memory. ``pai-grpc serve`` with none of them configured must run a whole run
without loading any of them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.processes import free_port

#: Loaded on first use only.
LAZY = (
    "cryptography",
    "jsonschema",
    "connectrpc",
    "opentelemetry.sdk",
    # PostgreSQL only: SQLAlchemy's asyncio extension (and the ORM it loads).
    "sqlalchemy.ext.asyncio",
    "sqlalchemy.orm",
)

SERVE_ONE_RUN = """
import json, os, signal, sys, threading
from pai_grpc import cli
from tests.processes import one_run

address, lazy = sys.argv[1], sys.argv[2].split(",")
outcome = {}

def client():
    try:
        outcome["last"] = one_run(address)
    finally:
        os.kill(os.getpid(), signal.SIGTERM)

threading.Thread(target=client, daemon=True).start()
code = cli.main(["serve", "--address", address])
loaded = sorted({m for m in sys.modules for name in lazy if m == name or m.startswith(name + ".")})
print(json.dumps({"code": code, "loaded": loaded, **outcome}))
"""


def test_a_plain_serve_never_loads_tls_schemas_http_or_the_telemetry_sdk(tmp_path: Path) -> None:
    env = dict(os.environ)
    env.pop("ANTHROPIC_API_KEY", None)
    for variable in ("OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER", "PAI_CONFIG"):
        env.pop(variable, None)
    env["PAI_DATABASE_URL"] = f"sqlite:///{tmp_path / 'serve.db'}"
    migrated = subprocess.run(
        [sys.executable, "-m", "pai_grpc.cli", "migrate"], env=env, capture_output=True, text=True
    )
    assert migrated.returncode == 0, migrated.stderr
    done = subprocess.run(
        [sys.executable, "-c", SERVE_ONE_RUN, f"127.0.0.1:{free_port()}", ",".join(LAZY)],
        env=env,
        cwd=Path(__file__).resolve().parents[1],  # the client comes from tests.processes
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcome["code"] == 0
    assert outcome["last"] == 4  # RUN_STATUS_COMPLETED: the run went all the way through
    assert outcome["loaded"] == []
