"""Scale-out on PostgreSQL: one `pai-grpc serve` against 2 API servers + 2 runners.

Both layouts run as users run them (their own processes, one database) and
get the same load: two load-generator processes of 8 clients each, each
doing Send + StreamRun of one-step runs on the offline model with no pause
between chunks. With one process both load generators call it; with the
scaled-out layout each calls its own API server (``serve --no-runner``)
while two ``pai-grpc runner`` processes execute the runs. The figure is the
ratio of runs/s, with the summed CPU per run of the service's processes
beside it: on a machine with fewer cores than processes the ratio shows the
cost of the extra hops more than the gain of parallelism, and the CPU per
run shows what the layout costs per run whatever the machine. SQLite has
one writer per database, so it is not measured.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
from contextlib import AsyncExitStack
from pathlib import Path

from pai_grpc.bench._common import Report, Result, drop_schema, free_port, load
from pai_grpc.bench._process import CLI, cpu_seconds, served_database, serving

#: Clients per load generator; two generators run at once.
CLIENTS = 8
SECONDS = 4.0
ROUNDS = 3


async def _loaded(addresses: list[str], pids: list[int]) -> tuple[float, float]:
    """Runs/s over both load generators and the summed CPU ms per run of ``pids``."""
    before = sum(cpu_seconds(pid) for pid in pids)
    results = await asyncio.gather(
        *(load(addresses[i % len(addresses)], "runs", CLIENTS, SECONDS) for i in range(2))
    )
    cpu = sum(cpu_seconds(pid) for pid in pids) - before
    runs = sum(int(r["runs"]) + CLIENTS for r in results)  # warm-up runs ran in the window too
    return sum(float(r["rate"]) for r in results), cpu * 1000 / max(runs, 1)


async def _runner(cli: tuple[str, ...], env: dict[str, str]) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, *cli, "runner", env=env, stdout=asyncio.subprocess.DEVNULL
    )


async def run(report: Report, backend: str, workdir: Path) -> None:
    """Measure both layouts in alternating rounds (PostgreSQL only)."""
    if backend != "postgresql":
        print(f"  {backend:<10} scale-out: not measured (one writer per SQLite database)")
        return
    env, schema = await served_database(backend, workdir, "scale")
    single: list[tuple[float, float]] = []
    scaled: list[tuple[float, float]] = []
    try:
        for _ in range(ROUNDS):
            address = f"127.0.0.1:{free_port()}"
            async with serving(
                *CLI, "serve", "--address", address, env=env, address=address
            ) as pid:
                single.append(await _loaded([address], [pid]))
            async with AsyncExitStack() as stack:
                addresses = [f"127.0.0.1:{free_port()}" for _ in range(2)]
                pids = [
                    await stack.enter_async_context(
                        serving(*CLI, "serve", "--no-runner", "--address", a, env=env, address=a)
                    )
                    for a in addresses
                ]
                runners = [await _runner(CLI, env) for _ in range(2)]
                try:
                    scaled.append(await _loaded(addresses, pids + [r.pid for r in runners]))
                finally:
                    for r in runners:
                        r.terminate()
                    await asyncio.gather(*(r.wait() for r in runners))
    finally:
        await drop_schema(schema)
    one_rate = statistics.median(r for r, _ in single)
    one_cpu = statistics.median(c for _, c in single)
    report.add(
        Result(backend, f"baseline: one serve process, {2 * CLIENTS} clients", one_rate, "runs/s")
    )
    report.add(
        Result(
            backend,
            "2 serve --no-runner + 2 runners",
            statistics.median(r for r, _ in scaled),
            "runs/s",
            one_rate,
            "one process",
            note=f"{os.cpu_count()} cores shared with the load generators; target >= 1.6x",
        )
    )
    report.add(Result(backend, "baseline: CPU per run, one process", one_cpu, "ms"))
    report.add(
        Result(
            backend,
            "CPU per run, all 4 processes",
            statistics.median(c for _, c in scaled),
            "ms",
            one_cpu,
            "one process",
        )
    )


__all__ = ["run"]
