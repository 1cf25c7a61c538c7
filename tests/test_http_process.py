"""`pai-grpc serve --http-address`: the HTTP port of a real server process."""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx2 as httpx
import pytest

from tests.processes import EXE, Processes, free_port

pytestmark = pytest.mark.slow


def _until_http(proc: subprocess.Popen[bytes], port: int, log: Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"serve exited {proc.returncode}: {log.read_text()}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/console/", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.2)
    pytest.fail("the HTTP port never answered: " + log.read_text())


def test_serve_answers_connect_on_the_http_port_and_drains(tmp_path: Path) -> None:
    procs = Processes(tmp_path, f"sqlite:///{tmp_path / 'pai.db'}", chunk_delay=0)
    procs.config.write_text(procs.config.read_text() + '\n[auth.tokens]\n"tok" = "team"\n')
    procs.migrate()
    port = free_port()
    proc = procs.start(
        "serve", "--address", procs.address, "--http-address", f"127.0.0.1:{port}", name="serve"
    )
    try:
        _until_http(proc, port, tmp_path / "serve.log")
        base = f"http://127.0.0.1:{port}/pai.v1.ThreadService"
        auth = {"authorization": "Bearer tok"}
        created = httpx.post(f"{base}/CreateThread", json={}, headers=auth, timeout=10)
        assert created.status_code == 200, created.text
        refused = httpx.post(f"{base}/CreateThread", json={}, timeout=10)
        assert refused.json()["code"] == "unauthenticated"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        procs.stop_all()
    log = procs.log("serve")
    assert f"over Connect and gRPC-Web on 127.0.0.1:{port}" in log
    assert "Traceback" not in log


def test_an_unusable_http_address_exits_2(tmp_path: Path) -> None:
    procs = Processes(tmp_path, f"sqlite:///{tmp_path / 'pai.db'}")
    procs.migrate()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        done = subprocess.run(
            [*EXE, "serve", "--address", procs.address, "--http-address", address],
            env=procs.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 2, done.stderr
    assert f"cannot serve HTTP on {address}" in done.stderr
    assert "Traceback" not in done.stderr
