"""A PostgreSQL outage: honest statuses, honest health, and runs that resume on return.

The test owns a throwaway PostgreSQL cluster (initdb + pg_ctl on a free port)
so it can stop the database under a running server; the machine's own
PostgreSQL is never touched.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from pai.v1 import runs_pb2
from pai.v1 import thread_service_pb2 as tpb
from pai.v1 import thread_service_pb2_grpc as tgrpc
from pai_grpc.config import Settings
from pai_grpc.models import ScriptedModel
from pai_grpc.runtime import DEFAULT_AGENT, Agent, AgentRegistry
from pai_grpc.server import App
from pai_grpc.testing import migrated_store, serve_in_process
from tests.conftest import rich_status
from tests.processes import free_port
from tests.runtime.support import new_thread, send, transcript, wait_run


def _pg_bin() -> Path | None:
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
    return versions[-1].parent if versions else None


class Cluster:
    """A private PostgreSQL cluster in a temporary directory."""

    def __init__(self, bin_dir: Path) -> None:
        self.bin = bin_dir
        # Not under pytest's tmp_path: its parents are private to root, and initdb
        # refuses to run as root, so the cluster belongs to the postgres user.
        self.dir = Path(tempfile.mkdtemp(prefix="pai-outage-"))
        self.data = self.dir / "data"
        self.port = free_port()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres", "postgres")

    def _run(self, *args: str) -> None:
        cmd = [str(self.bin / args[0]), *args[1:]]
        if os.geteuid() == 0:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        done = subprocess.run(cmd, capture_output=True, timeout=120)
        assert done.returncode == 0, done.stderr.decode() + done.stdout.decode()

    def init(self) -> None:
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")

    def start(self) -> None:
        options = f"-p {self.port} -k {self.dir} -h 127.0.0.1 -F"
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.dir / "log"),
                  "-w", "start")  # fmt: skip

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def remove(self) -> None:
        with contextlib.suppress(AssertionError, subprocess.SubprocessError):
            self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    bin_dir = _pg_bin()
    if bin_dir is None:
        pytest.skip("no PostgreSQL server binaries (initdb, pg_ctl) on this machine")
    c = Cluster(bin_dir)
    try:
        c.init()
        c.start()
        yield c
    finally:
        c.remove()


async def _health(channel: grpc.aio.Channel) -> int:
    stub = health_pb2_grpc.HealthStub(channel)
    return int((await stub.Check(health_pb2.HealthCheckRequest(), timeout=5)).status)


async def _until_health(channel: grpc.aio.Channel, status: int) -> None:
    for _ in range(400):
        if await _health(channel) == status:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(
        f"health never became {health_pb2.HealthCheckResponse.ServingStatus.Name(status)}"
    )


@pytest.mark.postgres
@pytest.mark.slow
async def test_an_outage_is_unavailable_not_serving_and_runs_resume_on_return(
    cluster: Cluster,
) -> None:
    words = " ".join(f"w{i}" for i in range(40))
    model = ScriptedModel([words], chunk_delay=0.1)  # ~4 s of streaming
    # A long lease: the run must resume when the database returns, not when it expires.
    async with serve_in_process(cluster.url, model=model, lease_seconds=60) as srv:
        assert await _health(srv.channel) == health_pb2.HealthCheckResponse.SERVING
        thread_id = await new_thread(srv)
        handle = await send(srv, thread_id, "go")
        await wait_run(srv, handle.run_id, statuses={runs_pb2.RUN_STATUS_RUNNING})
        await asyncio.sleep(0.5)  # mid-step: some events are already durable

        await asyncio.to_thread(cluster.stop)
        loop = asyncio.get_running_loop()
        down_since = loop.time()

        # Every call answers UNAVAILABLE (retryable) with ErrorInfo, never INTERNAL.
        for call in (
            lambda: srv.threads.GetThread(tpb.GetThreadRequest(thread_id=thread_id)),
            lambda: srv.threads.CreateThread(tpb.CreateThreadRequest()),
            lambda: srv.threads.ListThreads(tpb.ListThreadsRequest()),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await call()
            code, reason, _ = rich_status(info.value)
            assert code == grpc.StatusCode.UNAVAILABLE, info.value.details()
            assert reason == "DATABASE_UNAVAILABLE"
        await _until_health(srv.channel, health_pb2.HealthCheckResponse.NOT_SERVING)
        await asyncio.sleep(1.0)  # an outage of a few seconds, with the run mid-step

        await asyncio.to_thread(cluster.start)
        await _until_health(srv.channel, health_pb2.HealthCheckResponse.SERVING)
        run = await wait_run(srv, handle.run_id, timeout=40)
        resumed_after = loop.time() - down_since
        assert run.status == runs_pb2.RUN_STATUS_COMPLETED, run
        # Resumed on the database's return, far before the 60 s lease would expire.
        assert resumed_after < 30, resumed_after
        assert await transcript(srv, thread_id) == [("user", "go"), ("assistant", words)]


@pytest.mark.postgres
@pytest.mark.slow
async def test_a_process_starting_while_the_database_is_down_waits_for_it(
    cluster: Cluster,
) -> None:
    # A replacement runner or server can start in the middle of a database
    # restart (a rollout, a failover): it must wait, not exit.
    store = await migrated_store(cluster.url)
    await store.close()
    await asyncio.to_thread(cluster.stop)
    app = App(
        Settings(address="127.0.0.1:0", database_url=cluster.url),
        AgentRegistry([Agent(name=DEFAULT_AGENT, model=ScriptedModel(["back"]))]),
    )
    starting = asyncio.create_task(app.start())
    try:
        await asyncio.sleep(1.5)
        assert not starting.done(), starting  # still waiting: neither started nor failed
        await asyncio.to_thread(cluster.start)
        port = await asyncio.wait_for(starting, 30)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            assert await _health(channel) == health_pb2.HealthCheckResponse.SERVING
            threads = tgrpc.ThreadServiceStub(channel)
            thread = (await threads.CreateThread(tpb.CreateThreadRequest())).thread
            assert thread.id
    finally:
        if not starting.done():
            starting.cancel()
        await app.stop(grace=1.0)
