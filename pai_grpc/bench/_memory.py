"""Server memory under sustained load: 10,000 runs on long threads, then on short ones.

The server runs as its own process (``pai-grpc serve``, embedded runner, the
offline model without delays). First, 50 threads each get 200 runs of ~1 KB
messages, so every thread's history grows to 400 messages. Its resident set
(``VmRSS`` from ``/proc/PID/status``) is read at start, after a warm-up and at
the end. The memory budgets (``[memory]`` in the config file) are set small
enough to be reached during the warm-up. Growth after it is the working set
growing with the histories (every run in flight holds its thread's context),
or a leak: the second phase tells them apart. A fresh server gets the same
10,000 runs with each client moving to a new thread every
:data:`BOUNDED_RUNS_PER_THREAD` runs, so the working set stays the same: its
RSS must stay flat after the warm-up.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from pai.v1 import parts_pb2, run_service_pb2, run_service_pb2_grpc
from pai.v1 import thread_service_pb2 as tpb
from pai.v1 import thread_service_pb2_grpc as tgrpc
from pai_grpc.bench._common import Report, Result, bench_database, drop_schema, free_port

THREADS = 50
RUNS_PER_THREAD = 200
WARM_UP_RUNS = 2_000
#: A sample between warm-up and the end, to show the trend.
MIDWAY_RUNS = 6_000
#: ~1 KB per message, in words so the offline model streams it in ~20 deltas.
MESSAGE = " ".join(f"{i:02d}" + "m" * 48 for i in range(20))
CONTEXT_CACHE_BYTES = 8 << 20
RUN_EVENT_BUFFER_BYTES = 256 << 10
#: The leak check: runs per thread before its client moves to a new one.
BOUNDED_RUNS_PER_THREAD = 20


def rss_mb(pid: int) -> float:
    """The resident set size of process ``pid`` in MiB (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


async def _ready(address: str, proc: asyncio.subprocess.Process) -> None:
    async with grpc.aio.insecure_channel(address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        deadline = time.monotonic() + 60
        while True:
            if proc.returncode is not None:
                raise RuntimeError(f"the server exited ({proc.returncode})")
            try:
                await health.Check(health_pb2.HealthCheckRequest(), timeout=1)
                return
            except grpc.aio.AioRpcError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.1)


async def _drive(
    address: str, pid: int, rotate: int | None = None
) -> tuple[dict[int, float], float]:
    """Drive every run; return RSS after warm-up, midway and at the end, and the run rate.

    ``rotate``: each client moves to a new thread after that many runs.
    """
    done = 0
    samples: dict[int, float] = {}
    part = parts_pb2.MessagePart(text=parts_pb2.TextPart(text=MESSAGE))
    async with grpc.aio.insecure_channel(address) as channel:
        threads = tgrpc.ThreadServiceStub(channel)
        runs = run_service_pb2_grpc.RunServiceStub(channel)

        async def new_thread() -> str:
            created = await threads.CreateThread(tpb.CreateThreadRequest())
            return str(created.thread.id)

        ids = [await new_thread() for _ in range(THREADS)]

        async def client(thread_id: str) -> None:
            nonlocal done
            for i in range(RUNS_PER_THREAD):
                if rotate and i and i % rotate == 0:
                    thread_id = await new_thread()
                handle = (
                    await threads.Send(tpb.SendRequest(thread_id=thread_id, parts=[part]))
                ).run
                async for _event in runs.StreamRun(
                    run_service_pb2.StreamRunRequest(run_id=handle.run_id)
                ):
                    pass
                done += 1
                if done in (WARM_UP_RUNS, MIDWAY_RUNS):
                    samples[done] = rss_mb(pid)

        start = time.perf_counter()
        await asyncio.gather(*(client(t) for t in ids))
        elapsed = time.perf_counter() - start
    samples[done] = rss_mb(pid)
    return samples, done / elapsed


async def run(report: Report, backend: str, workdir: Path) -> None:
    """Measure one backend."""
    url, schema = await bench_database(backend, workdir, "memory")
    config = workdir / f"memory-{backend}.toml"
    config.write_text(
        "[offline]\nchunk_delay = 0\n\n"
        f"[memory]\ncontext_cache_bytes = {CONTEXT_CACHE_BYTES}\n"
        f"run_event_buffer_bytes = {RUN_EVENT_BUFFER_BYTES}\n\n"
        # The load comes from one scope far faster than its default Send rate.
        "[limits]\nsends_per_second = 0\n"
    )
    env = {**os.environ, "PAI_DATABASE_URL": url, "PAI_CONFIG": str(config)}
    env.pop("ANTHROPIC_API_KEY", None)
    exe = [sys.executable, "-m", "pai_grpc.cli"]
    migrate = await asyncio.create_subprocess_exec(
        *exe,
        "migrate",
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    if await migrate.wait() != 0:
        raise RuntimeError("migrate failed")
    try:
        await _phase(report, backend, exe, env, workdir, None)
        # A fresh server: a process keeps the memory it once took, so the first
        # server could not show that short histories hold the same amount.
        await _phase(report, backend, exe, env, workdir, BOUNDED_RUNS_PER_THREAD)
    finally:
        await drop_schema(schema)


async def _phase(
    report: Report,
    backend: str,
    exe: list[str],
    env: dict[str, str],
    workdir: Path,
    rotate: int | None,
) -> None:
    """Serve, drive 10,000 runs (``rotate``: a new thread every that many), report RSS."""
    address = f"127.0.0.1:{free_port()}"
    label = "" if rotate is None else f"short histories (a new thread every {rotate} runs): "
    log = (workdir / f"memory-{backend}-{rotate}.log").open("wb")
    proc = await asyncio.create_subprocess_exec(
        *exe, "serve", "--address", address, env=env, stdout=log, stderr=log
    )
    try:
        await _ready(address, proc)
        start = rss_mb(proc.pid)
        samples, rate = await _drive(address, proc.pid, rotate)
        warm = samples[WARM_UP_RUNS]
        report.add(Result(backend, f"{label}server RSS at start", start, "MiB"))
        report.add(
            Result(
                backend,
                f"{label}server RSS after {WARM_UP_RUNS} runs (warm-up)",
                warm,
                "MiB",
                start,
                "start",
            )
        )
        for runs_done in sorted(samples)[1:]:
            report.add(
                Result(
                    backend,
                    f"{label}server RSS after {runs_done} runs",
                    samples[runs_done],
                    "MiB",
                    warm,
                    "warm-up",
                    note=f"{THREADS} clients x {RUNS_PER_THREAD} runs, {rate:.0f} runs/s"
                    if runs_done == THREADS * RUNS_PER_THREAD
                    else "",
                )
            )
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 15)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        log.close()
