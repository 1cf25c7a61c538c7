"""The scale-out topology of deploy/compose.yaml as plain processes, under faults.

PostgreSQL (a throwaway cluster the test owns), two API servers (`serve
--no-runner`), three runners and the Node example plugin on every run's path.
Eight clients, spread over both servers, loop Send + StreamRun while the test
kills a server (its readers resume on the other one with `after_seq`), kills a
runner mid-run (its runs are recovered by the others), restarts PostgreSQL
with `-m immediate` (nothing of ours is restarted) and drains a runner with
SIGTERM. Afterwards every run is terminal exactly once, every committed message
is in its thread exactly once, and every stream is dense except for a skip
right before an `abort{reason: "recovery"}`. Runs per second before, during and
after each fault are printed and written to `topology-rates.json`.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import grpc
import pytest

from pai.v1 import run_service_pb2, run_service_pb2_grpc, runs_pb2
from pai.v1 import thread_service_pb2 as tpb
from pai.v1 import thread_service_pb2_grpc as tgrpc
from storage import Store
from tests.plugins.conftest import PLUGIN_DIR, _ensure_node_modules, _read_listening_line
from tests.processes import EXE, free_port
from tests.runtime.support import TERMINAL, text
from tests.runtime.test_outage import Cluster, _pg_bin

T = TypeVar("T")
TOKEN = "topology-load-token"
SCOPE = "load"
AUTH = (("authorization", f"Bearer {TOKEN}"),)
CLIENTS = 8
RUNNERS = 3
GRACE = 15.0  # ample: a drained runner's runs finish well within it, even on a busy machine
WINDOW = 2.5  # seconds of steady load measured before and after each fault
# Errors a client rides out by retrying (on the other server): a dead server,
# a database outage, a connection retired under the call.
RETRYABLE = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED}


@dataclass
class RunLog:
    """What one client saw of one run, across every StreamRun it needed."""

    client: int
    said: str
    run_id: str
    events: list[runs_pb2.RunEvent] = field(default_factory=list)
    finished_at: float | None = None
    resumes: int = 0


class Topology:
    """The processes of the topology, sharing one config file and database."""

    def __init__(self, tmp: Path, url: str, plugin: str) -> None:
        self.tmp = tmp
        self.config = tmp / "pai.toml"
        self.config.write_text(
            f"""
[auth]
tokens = {{ "{TOKEN}" = "{SCOPE}" }}

[runner]
lease_seconds = 2
grace_seconds = {GRACE}

[limits]
sends_per_second = 0

[offline]
chunk_delay = 0.02

[agents.assistant]
model = "offline"

[[agents.assistant.lifecycle]]
kind = "plugin"
address = "{plugin}"
timeout_ms = 10000

[agents.assistant.contract]
ui_data = {{ "node-stats" = {{ type = "object", required = ["chunks"] }} }}
"""
        )
        self.env = {**os.environ, "PAI_DATABASE_URL": url, "PAI_CONFIG": str(self.config)}
        self.env.pop("ANTHROPIC_API_KEY", None)
        self.addresses = [f"127.0.0.1:{free_port()}" for _ in range(2)]
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def run(self, *args: str) -> None:
        done = subprocess.run([*EXE, *args], env=self.env, capture_output=True, timeout=120)
        assert done.returncode == 0, done.stderr.decode()

    def start(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        with (self.tmp / f"{name}.log").open("ab") as log:
            proc = subprocess.Popen([*EXE, *args], env=self.env, stdout=log, stderr=log)
        self.procs[name] = proc
        return proc

    def serve(self, n: int) -> subprocess.Popen[bytes]:
        return self.start(f"server-{n}", "serve", "--no-runner", "--address", self.addresses[n])

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in self.tmp.glob("*.log"))

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.fixture
def node_plugin() -> Iterator[str]:
    """The Node example plugin as its own process (redacts `secret`, adds `node-stats`)."""
    _ensure_node_modules()
    with tempfile.TemporaryFile() as stderr:
        proc = subprocess.Popen(
            ["node", "plugin.js", "--address", "127.0.0.1:0"],
            cwd=PLUGIN_DIR,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=stderr,
        )
        try:
            yield _read_listening_line(proc, stderr)
        finally:
            proc.kill()
            proc.wait()
            assert proc.stdout is not None
            proc.stdout.close()


def _footprint(pid: int) -> dict[str, float]:
    """Resident memory (MiB) and CPU seconds so far of a live process, from /proc."""
    status = Path(f"/proc/{pid}/status").read_text()
    rss_kb = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))
    # utime and stime, fields 14 and 15, counted after the parenthesised command name.
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    ticks = int(fields[11]) + int(fields[12])
    return {
        "rss_mib": round(rss_kb / 1024, 1),
        "cpu_seconds": round(ticks / os.sysconf("SC_CLK_TCK"), 2),
    }


def _rate(done: list[float], start: float, end: float) -> float:
    return round(sum(start <= t < end for t in done) / max(end - start, 1e-9), 2)


def _recovery_abort(event: runs_pb2.RunEvent) -> bool:
    return (
        event.WhichOneof("event") == "chunk"
        and event.chunk.WhichOneof("chunk") == "abort"
        and event.chunk.abort.reason == "recovery"
    )


@pytest.mark.postgres
@pytest.mark.slow
@pytest.mark.timeout(240)
async def test_scale_out_topology_survives_server_runner_and_database_faults(
    tmp_path: Path, node_plugin: str
) -> None:
    bin_dir = _pg_bin()
    if bin_dir is None:
        pytest.skip("no PostgreSQL server binaries (initdb, pg_ctl) on this machine")
    cluster = Cluster(bin_dir)
    topo = Topology(tmp_path, cluster.url, node_plugin)
    try:
        cluster.init()
        cluster.start()
        topo.run("migrate")
        for n in range(2):
            topo.serve(n)
        for n in range(RUNNERS):
            topo.start(f"runner-{n}", "runner")
        await _scenario(topo, cluster, tmp_path)
    finally:
        topo.stop_all()
        cluster.remove()


async def _scenario(topo: Topology, cluster: Cluster, tmp: Path) -> None:
    loop = asyncio.get_running_loop()
    channels = [grpc.aio.insecure_channel(a) for a in topo.addresses]
    threads = [tgrpc.ThreadServiceStub(c) for c in channels]
    runs = [run_service_pb2_grpc.RunServiceStub(c) for c in channels]
    logs: list[RunLog] = []
    thread_of: dict[int, str] = {}
    stop = asyncio.Event()
    warm = asyncio.Event()  # runs flow through every client: the steady state begins

    async def ready(n: int) -> None:
        deadline = loop.time() + 60
        while True:
            try:
                await threads[n].ListThreads(tpb.ListThreadsRequest(), metadata=AUTH, timeout=2)
                return
            except grpc.aio.AioRpcError:
                assert loop.time() < deadline, topo.logs()
                await asyncio.sleep(0.1)

    async def retrying(server: list[int], call: Callable[[int], Awaitable[T]]) -> T:
        deadline = loop.time() + 60
        while True:
            try:
                return await call(server[0])
            except grpc.aio.AioRpcError as e:
                if e.code() not in RETRYABLE or loop.time() > deadline:
                    raise
                server[0] ^= 1  # the other server
                await asyncio.sleep(0.1)

    async def client(n: int) -> None:
        server = [n % 2]
        created = await retrying(
            server,
            lambda s: threads[s].CreateThread(
                tpb.CreateThreadRequest(request_id=f"c{n}-thread"), metadata=AUTH, timeout=10
            ),
        )
        thread_of[n] = created.thread.id
        i = 0
        while not stop.is_set():
            said = f"c{n}-m{i} the secret is " + " ".join(f"w{k}" for k in range(12))
            request = tpb.SendRequest(
                thread_id=created.thread.id, parts=[text(said)], request_id=f"c{n}-m{i}"
            )
            sent = await retrying(
                server, lambda s, r=request: threads[s].Send(r, metadata=AUTH, timeout=10)
            )
            log = RunLog(n, said, sent.run.run_id)
            logs.append(log)
            while log.finished_at is None:
                after = log.events[-1].seq if log.events else 0
                try:
                    async for response in runs[server[0]].StreamRun(
                        run_service_pb2.StreamRunRequest(run_id=log.run_id, after_seq=after),
                        metadata=AUTH,
                        timeout=60,
                    ):
                        log.events.append(response.event)
                        if (
                            response.event.WhichOneof("event") == "status"
                            and response.event.status.status in TERMINAL
                        ):
                            log.finished_at = loop.time()
                            if i >= 1 and len(logs) >= 2 * CLIENTS:
                                warm.set()
                    assert log.finished_at is not None, f"{log.run_id} ended before terminal"
                except grpc.aio.AioRpcError as e:
                    if e.code() not in RETRYABLE:
                        raise
                    log.resumes += 1
                    server[0] ^= 1  # resume on the other server after the last seq
                    await asyncio.sleep(0.1)
            i += 1

    async def in_flight_owners() -> dict[str, int]:
        """Run id -> pid of the runner holding it, for runs not finished yet."""
        store = Store.open(cluster.url)
        try:
            owners = {}
            for log in [x for x in logs if x.finished_at is None]:
                record = await store.get_run(SCOPE, log.run_id)
                if record is not None and record.lease_owner and record.status == "running":
                    owners[log.run_id] = int(record.lease_owner.split(":")[1])
            return owners
        finally:
            await store.close()

    async def busiest_runner() -> tuple[str, set[str]]:
        pids = {p.pid: name for name, p in topo.procs.items() if name.startswith("runner")}
        for _ in range(200):
            owners = await in_flight_owners()
            held: dict[str, set[str]] = {}
            for run_id, pid in owners.items():
                if pid in pids and topo.procs[pids[pid]].poll() is None:
                    held.setdefault(pids[pid], set()).add(run_id)
            if held:
                name = max(held, key=lambda k: len(held[k]))
                return name, held[name]
            await asyncio.sleep(0.05)
        raise AssertionError("no runner held a run under load")

    async def settle(pending: set[str]) -> None:
        deadline = loop.time() + 60
        while True:
            finished = {x.run_id for x in logs if x.finished_at is not None}
            if pending <= finished:
                return
            assert loop.time() < deadline, (pending - finished, topo.logs())
            await asyncio.sleep(0.05)

    rates: list[dict[str, Any]] = []

    async def fault(name: str, act: Callable[[], Awaitable[set[str]]]) -> None:
        began = loop.time()
        pending = {x.run_id for x in logs if x.finished_at is None}
        pending |= await act()
        await settle(pending)
        recovered = loop.time()
        await asyncio.sleep(WINDOW)
        done = [x.finished_at for x in logs if x.finished_at is not None]
        row = {
            "fault": name,
            "before": _rate(done, began - WINDOW, began),
            "during": _rate(done, began, recovered),
            "during_seconds": round(recovered - began, 2),
            "after": _rate(done, recovered, recovered + WINDOW),
        }
        rates.append(row)
        print(f"runs/s {row}")

    resumed_before_kill = 0

    async def kill_server() -> set[str]:
        nonlocal resumed_before_kill
        resumed_before_kill = sum(x.resumes for x in logs)
        victim = topo.procs["server-0"]
        victim.send_signal(signal.SIGKILL)
        await asyncio.to_thread(victim.wait)
        topo.serve(0)  # back on the same address: clients spread over both again
        await ready(0)
        return set()

    killed: set[str] = set()

    async def kill_runner() -> set[str]:
        for _ in range(100):
            name, _ = await busiest_runner()
            # Frozen, the runner cannot finish a run between the check and the kill.
            victim = topo.procs[name]
            victim.send_signal(signal.SIGSTOP)
            held = {r for r, pid in (await in_flight_owners()).items() if pid == victim.pid}
            if held:
                break
            victim.send_signal(signal.SIGCONT)
        else:
            raise AssertionError("no runner was caught holding a run")
        victim.send_signal(signal.SIGKILL)
        await asyncio.to_thread(topo.procs.pop(name).wait)
        killed.update(held)
        return held

    async def restart_database() -> set[str]:
        await asyncio.to_thread(cluster.stop)  # pg_ctl stop -m immediate
        await asyncio.sleep(1.0)
        await asyncio.to_thread(cluster.start)
        return set()

    drained: set[str] = set()
    drain_code: list[int] = []

    async def drain_runner() -> set[str]:
        name, held = await busiest_runner()
        topo.procs[name].send_signal(signal.SIGTERM)
        drain_code.append(await asyncio.to_thread(topo.procs[name].wait, GRACE + 30))
        drained.update(held)
        return held

    try:
        await asyncio.gather(ready(0), ready(1))
        clients = [asyncio.create_task(client(n)) for n in range(CLIENTS)]
        started = loop.time()
        await asyncio.wait_for(warm.wait(), 60)
        await asyncio.sleep(WINDOW)
        await fault("kill -9 server", kill_server)
        resumed_by_kill = sum(x.resumes for x in logs) - resumed_before_kill
        await fault("kill -9 runner", kill_runner)
        topo.start("runner-3", "runner")  # the replacement a Deployment would start
        await fault("restart PostgreSQL", restart_database)
        for name, proc in topo.procs.items():
            assert proc.poll() is None, f"{name} exited after the database restart\n{topo.logs()}"
        await fault("SIGTERM runner", drain_runner)
        stop.set()
        await asyncio.wait_for(asyncio.gather(*clients), 90)
        total = loop.time() - started
        # Sizing figures for deploy/kubernetes: memory and CPU of the processes that
        # lived through the whole test (the second server and the first runners still alive).
        footprint = {
            name: _footprint(proc.pid)
            for name, proc in topo.procs.items()
            if name in ("server-1", "runner-0", "runner-1", "runner-2") and proc.poll() is None
        }
        summary = {
            "runs": len(logs),
            "events_per_run": round(sum(len(x.events) for x in logs) / len(logs), 1),
            "seconds": round(total, 1),
            "faults": rates,
            "processes": footprint,
        }
        (tmp / "topology-rates.json").write_text(json.dumps(summary, indent=2))
        print(f"topology: {json.dumps(summary)}; written to {tmp}/topology-rates.json")

        # Every run terminal exactly once, and completed (recovered or drained, never lost).
        for log in logs:
            terminal = [
                e.status.status
                for e in log.events
                if e.WhichOneof("event") == "status" and e.status.status in TERMINAL
            ]
            assert terminal == [runs_pb2.RUN_STATUS_COMPLETED], (log.run_id, terminal)
            # Dense, except for a skip right before a recovery abort.
            # (A run lost before its first event starts at its recovery abort.)
            prev = 0
            for event in log.events:
                assert event.seq > prev, (log.run_id, prev, event.seq)
                if event.seq != prev + 1:
                    assert _recovery_abort(event), (log.run_id, prev, event)
                prev = event.seq

        # Every committed message exactly once, in order, through the plugin.
        for n, thread_id in thread_of.items():
            mine = [x for x in logs if x.client == n]
            page = await threads[1].ListMessages(
                tpb.ListMessagesRequest(thread_id=thread_id, page_size=1000), metadata=AUTH
            )
            got = [(m.role, "".join(p.text.text for p in m.parts)) for m in page.messages]
            expected = []
            for x in mine:
                redacted = x.said.replace("secret", "[node-redacted]")
                expected += [(2, x.said), (3, redacted)]
            assert [(r, t.rpartition("You said: ")[2] if r == 3 else t) for r, t in got] == (
                expected
            ), f"client {n}"

        # Each fault did what it claims.
        assert resumed_by_kill > 0, "no reader resumed on the other server"
        # Runs the killed runner held (frozen, so still running) were recovered by
        # another runner: a new attempt, announced by a recovery abort.
        assert killed
        for x in logs:
            if x.run_id in killed:
                request = run_service_pb2.GetRunRequest(run_id=x.run_id)
                run = (await runs[0].GetRun(request, metadata=AUTH)).run
                assert run.attempts >= 2, run
                assert any(_recovery_abort(e) for e in x.events), x.run_id
        assert drain_code == [0], topo.logs()
        for run_id in drained:
            request = run_service_pb2.GetRunRequest(run_id=run_id)
            run = (await runs[0].GetRun(request, metadata=AUTH)).run
            assert run.attempts == 1, run  # finished within the grace, not handed back
    finally:
        stop.set()
        for c in channels:
            await c.close()
