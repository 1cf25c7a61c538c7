"""Benchmark plumbing: timing, medians, reporting as ratios to an in-run baseline."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import statistics
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from storage import Store, upgrade

POSTGRES_URL = os.environ.get("PAI_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def bench_database(backend: str, workdir: Path, name: str) -> tuple[str, str | None]:
    """A fresh database for one measurement: its URL, and the PostgreSQL schema to drop after."""
    if backend == "sqlite":
        return f"sqlite:///{workdir / f'{name}-{time.time_ns()}.db'}", None
    import asyncpg

    schema = f"bench_{name}_{time.time_ns()}"
    conn = await asyncpg.connect(POSTGRES_URL)
    await conn.execute(f"CREATE SCHEMA {schema}")
    await conn.close()
    return f"{POSTGRES_URL}?schema={schema}", schema


async def drop_schema(schema: str | None) -> None:
    """Drop what :func:`bench_database` made on PostgreSQL (SQLite files stay in the workdir)."""
    if schema is None:
        return
    import asyncpg

    conn = await asyncpg.connect(POSTGRES_URL)
    await conn.execute(f"DROP SCHEMA {schema} CASCADE")
    await conn.close()


async def load(
    address: str, mode: str, clients: int, seconds: float, words: int = 0
) -> dict[str, Any]:
    """Run the load generator in its own process and return what it measured."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "pai_grpc.bench._client",
        address,
        mode,
        str(clients),
        str(seconds),
        str(words),
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"load generator failed ({proc.returncode})")
    result: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    return result


@dataclass
class Result:
    """One measured figure, with the baseline it is compared against."""

    section: str
    name: str
    value: float
    unit: str
    baseline: float | None = None
    baseline_name: str = ""
    note: str = ""

    @property
    def ratio(self) -> float | None:
        """Value / baseline."""
        if not self.baseline:
            return None
        return self.value / self.baseline


@dataclass
class Report:
    """Collected results, printed as one table."""

    results: list[Result] = field(default_factory=list)

    def add(self, result: Result) -> None:
        """Record and print one result as soon as it is measured."""
        self.results.append(result)
        ratio = f"{result.ratio:6.2f}x {result.baseline_name}" if result.ratio is not None else ""
        print(
            f"  {result.section:<10} {result.name:<46} {result.value:>11.2f} "
            f"{result.unit:<9} {ratio}" + (f"  ({result.note})" if result.note else ""),
            flush=True,
        )


async def rate(fn: Callable[[], Awaitable[object]], *, seconds: float = 2.0) -> float:
    """Sequential calls of ``fn`` per second over about ``seconds``."""
    for _ in range(5):
        await fn()
    n = 0
    start = time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        await fn()
        n += 1
    return n / elapsed


async def concurrent_rate(
    fn: Callable[[int], Awaitable[object]], *, workers: int, seconds: float = 2.0
) -> float:
    """Calls of ``fn`` per second with ``workers`` concurrent callers."""
    stop = time.perf_counter() + seconds
    counts = [0] * workers

    async def worker(i: int) -> None:
        while time.perf_counter() < stop:
            await fn(i)
            counts[i] += 1

    start = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(workers)))
    return sum(counts) / (time.perf_counter() - start)


def median_ms(samples: list[float]) -> float:
    """Median of samples given in seconds, in milliseconds."""
    return statistics.median(samples) * 1000


@asynccontextmanager
async def bench_store(backend: str, workdir: Path) -> AsyncIterator[Store]:
    """A migrated, throw-away store of ``backend``."""
    if backend == "sqlite":
        store = Store.open(
            f"sqlite:///{workdir / f'bench-{uuid.uuid4().hex[:8]}.db'}", pool_size=20
        )
        await upgrade(store)
        try:
            yield store
        finally:
            await store.close()
        return
    import asyncpg

    schema = f"bench_{uuid.uuid4().hex[:12]}"
    conn = await asyncpg.connect(POSTGRES_URL)
    await conn.execute(f"CREATE SCHEMA {schema}")
    store = Store.open(POSTGRES_URL, schema=schema, pool_size=20)
    try:
        await upgrade(store)
        yield store
    finally:
        await store.close()
        await conn.execute(f"DROP SCHEMA {schema} CASCADE")
        await conn.close()


async def postgres_reachable() -> bool:
    """Whether the benchmark PostgreSQL answers."""
    import asyncpg

    try:
        conn = await asyncpg.connect(POSTGRES_URL, timeout=3)
    except Exception:
        return False
    await conn.close()
    return True
