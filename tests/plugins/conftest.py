"""Plugin test fixtures: the Node.js example plugin as a real `node` process."""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

PLUGIN_DIR = Path(__file__).resolve().parent.parent.parent / "examples" / "node-plugin"
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
CALL_TIMEOUT_S = 10.0


def _ensure_node_modules() -> None:
    """`npm ci` once when node_modules is missing; fail clearly when that is impossible."""
    if shutil.which("node") is None:
        pytest.fail("`node` is not on PATH: the Node plugin tests need Node.js 20+ and npm")
    installed = PLUGIN_DIR / "node_modules" / "@grpc"
    if all((installed / dep / "package.json").is_file() for dep in ("grpc-js", "proto-loader")):
        return
    npm = shutil.which("npm")
    if npm is None:
        pytest.fail(f"`npm` is not on PATH and {PLUGIN_DIR / 'node_modules'} is missing")
    try:
        done = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund"],
            cwd=PLUGIN_DIR,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"`npm ci` in {PLUGIN_DIR} did not finish within 300 s")
    if done.returncode != 0:
        pytest.fail(
            f"`npm ci` in {PLUGIN_DIR} failed (exit {done.returncode}):\n"
            f"{done.stdout}\n{done.stderr}"
        )


def _read_listening_line(proc: subprocess.Popen[bytes], stderr: IO[bytes]) -> str:
    """Read the single `LISTENING host:port` line, failing with the plugin's stderr."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    buffer = b""
    deadline = time.monotonic() + START_TIMEOUT_S
    while b"\n" not in buffer:
        remaining = deadline - time.monotonic()
        ready, _, _ = select.select([fd], [], [], max(remaining, 0))
        data = os.read(fd, 4096) if ready else b""
        if not data:
            stderr.seek(0)
            why = "exited" if ready else f"printed nothing within {START_TIMEOUT_S} s"
            pytest.fail(
                f"the Node plugin {why} before LISTENING (exit {proc.poll()}); stdout "
                f"{buffer!r}; stderr:\n{stderr.read().decode(errors='replace')}"
            )
        buffer += data
    line, _, rest = buffer.partition(b"\n")
    assert rest == b"", f"the plugin wrote more than one line to stdout: {rest!r}"
    word, _, address = line.decode().partition(" ")
    assert word == "LISTENING", line
    assert address.startswith("127.0.0.1:"), address
    assert int(address.rpartition(":")[2]) > 0, address
    return address


@pytest.fixture(scope="session")
def plugin_address() -> Iterator[str]:
    """Run `node plugin.js` once for the session; SIGTERM it (gracefully) at teardown."""
    _ensure_node_modules()
    with tempfile.TemporaryFile() as stderr:
        proc = subprocess.Popen(
            ["node", "plugin.js", "--address", "127.0.0.1:0"],
            cwd=PLUGIN_DIR,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=stderr,
        )
        assert proc.stdout is not None
        try:
            yield _read_listening_line(proc, stderr)
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            try:
                code: int | None = proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                code = None
            trailing = proc.stdout.read()
            proc.stdout.close()
        stderr.seek(0)
        logs = stderr.read().decode(errors="replace")
    assert code == 0, f"the plugin did not stop gracefully on SIGTERM (exit {code}):\n{logs}"
    assert trailing == b"", f"the plugin wrote to stdout after LISTENING: {trailing!r}"
