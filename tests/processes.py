"""Service processes for tests that need real OS processes (kill -9, SIGTERM, hand-offs)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import grpc

from pai.v1 import parts_pb2, run_service_pb2, run_service_pb2_grpc
from pai.v1 import thread_service_pb2 as tpb
from pai.v1 import thread_service_pb2_grpc as tgrpc

#: How tests start the command-line entry point (the installed script's module).
EXE = [sys.executable, "-m", "pai_grpc.cli"]


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def one_run(address: str) -> int:
    """Send "hi" to a new thread of the server at ``address`` and stream the run to its end.

    Returns the status of the run's last event (a ``pai.v1.RunStatus``).
    """
    with grpc.insecure_channel(address) as channel:
        grpc.channel_ready_future(channel).result(timeout=60)
        threads = tgrpc.ThreadServiceStub(channel)
        runs = run_service_pb2_grpc.RunServiceStub(channel)
        thread = threads.CreateThread(tpb.CreateThreadRequest(), wait_for_ready=True).thread
        part = parts_pb2.MessagePart(text=parts_pb2.TextPart(text="hi"))
        run = threads.Send(tpb.SendRequest(thread_id=thread.id, parts=[part])).run
        events = list(runs.StreamRun(run_service_pb2.StreamRunRequest(run_id=run.run_id)))
        return int(events[-1].event.status.status)


class Processes:
    """`pai-grpc` server and runner processes sharing one database.

    A short lease makes recovery after kill -9 quick; ``chunk_delay`` paces the
    offline model so a run is still streaming when a test acts on it. A long
    ``lease_seconds`` makes heartbeats (every lease/3) rare, so a test can tell
    a LISTEN/NOTIFY wake-up from a heartbeat.
    """

    def __init__(
        self, tmp: Path, url: str, *, chunk_delay: float = 0.05, lease_seconds: float = 2.0
    ) -> None:
        self.tmp = tmp
        self.url = url
        self.address = f"127.0.0.1:{free_port()}"
        self.config = tmp / "pai.toml"
        self.config.write_text(
            f"[runner]\nlease_seconds = {lease_seconds}\n\n[offline]\nchunk_delay = {chunk_delay}\n"
        )
        self.env = {**os.environ, "PAI_DATABASE_URL": url, "PAI_CONFIG": str(self.config)}
        self.env.pop("ANTHROPIC_API_KEY", None)
        self.procs: list[subprocess.Popen[bytes]] = []

    def migrate(self) -> None:
        """Apply the migrations (as `pai-grpc migrate` does before a first start)."""
        done = subprocess.run([*EXE, "migrate"], env=self.env, capture_output=True, timeout=60)
        assert done.returncode == 0, done.stderr

    def start(self, *args: str, name: str) -> subprocess.Popen[bytes]:
        """Start `pai-grpc ARGS...`, logging to ``<tmp>/<name>.log``."""
        with (self.tmp / f"{name}.log").open("wb") as log:
            proc = subprocess.Popen([*EXE, *args], env=self.env, stdout=log, stderr=log)
        self.procs.append(proc)
        return proc

    def serve(self, *, name: str) -> subprocess.Popen[bytes]:
        """Start `pai-grpc serve` (API plus embedded runner) on :attr:`address`."""
        return self.start("serve", "--address", self.address, name=name)

    def log(self, name: str) -> str:
        """What process ``name`` printed so far."""
        return (self.tmp / f"{name}.log").read_text()

    def stop_all(self) -> None:
        """kill -9 every process still running."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
