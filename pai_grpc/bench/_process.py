"""Runs as users run them: `pai-grpc serve` in its own process, the load in another.

The server is the real command (offline model with no pause between chunks,
``[limits] sends_per_second = 0`` so the scope limit does not cap the rate).
Every figure is printed beside the same figure for a bare grpc.aio server
process answering the same message pattern (one unary Send, then a server
stream with as many messages as the run's StreamRun carries; or, for runs
sent with SendAndStream, one server stream of the handle and those
messages), measured with the same load generator in alternating rounds
(medians of each). Server CPU per run is the serve
process's user+system CPU time (``/proc/PID/stat``) over the runs it served.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from pai_grpc.bench._common import Report, Result, bench_database, drop_schema, free_port, load

CLIENTS = 16
SECONDS = 3.0
#: Alternating served/bare measurement rounds; each figure is the median.
ROUNDS = 3
#: Words sent for the long stream: the offline model echoes one delta per word.
STREAM_WORDS = 2_000
TTFC_RUNS = 60


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` (all its threads), in seconds."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    # Fields after the parenthesised command name; utime and stime are the 14th and 15th.
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _wait_serving(address: str, proc: asyncio.subprocess.Process) -> None:
    deadline = time.monotonic() + 60
    async with grpc.aio.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while True:
            if proc.returncode is not None:
                raise RuntimeError(f"server exited ({proc.returncode}) before serving")
            try:
                await stub.Check(health_pb2.HealthCheckRequest(), timeout=1)
                return
            except grpc.aio.AioRpcError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.1)


@asynccontextmanager
async def serving(
    *args: str, env: dict[str, str] | None = None, address: str
) -> AsyncIterator[int]:
    """Start ``python ARGS...``, wait until ``address`` answers health checks; yield its pid."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, *args, env=env, stdout=asyncio.subprocess.DEVNULL
    )
    try:
        await _wait_serving(address, proc)
        yield proc.pid
    finally:
        if proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                proc.kill()
                await proc.wait()


#: How the benchmarks start the command: quiet, from this interpreter.
CLI = ("-m", "pai_grpc.cli", "--log-level", "WARNING")


async def served_database(
    backend: str, workdir: Path, name: str, extra_env: Mapping[str, str] | None = None
) -> tuple[dict[str, str], str | None]:
    """A fresh, migrated database and the environment `pai-grpc` runs on it with.

    The config is the served benchmarks' own: the offline model with no pause
    between chunks, and no Send rate limit (it would cap the rate measured).
    ``extra_env`` joins the environment, the migration's too (another
    version's ``PYTHONPATH``, see :mod:`pai_grpc.bench.compare`). Returns the
    environment and the PostgreSQL schema to drop afterwards.
    """
    url, schema = await bench_database(backend, workdir, name)
    config = workdir / f"{name}-{backend}.toml"
    config.write_text("[limits]\nsends_per_second = 0\n\n[offline]\nchunk_delay = 0\n")
    env = {**os.environ, **(extra_env or {}), "PAI_DATABASE_URL": url, "PAI_CONFIG": str(config)}
    env.pop("ANTHROPIC_API_KEY", None)
    done = await asyncio.create_subprocess_exec(sys.executable, *CLI, "migrate", env=env)
    if await done.wait() != 0:
        await drop_schema(schema)
        raise RuntimeError("pai-grpc migrate failed")
    return env, schema


async def measure(address: str, pid: int, seconds: float) -> dict[str, float]:
    """Runs/s and CPU per run (16 clients), first-delta p50 (one client), one long stream.

    Runs and first deltas are read twice: sent with Send and then read with
    StreamRun (two calls), and with SendAndStream (one call).
    """
    out: dict[str, float] = {}
    for suffix in ("", "-one"):
        ttfc = await load(address, "ttfc" + suffix, 1, TTFC_RUNS)
        before = cpu_seconds(pid)
        runs = await load(address, "runs" + suffix, CLIENTS, seconds)
        cpu = cpu_seconds(pid) - before
        out["rate" + suffix] = runs["rate"]
        # The warm-up runs of each client count too: they ran inside the CPU window.
        out["cpu_ms" + suffix] = cpu * 1000 / (runs["runs"] + CLIENTS)
        out["ttfc_ms" + suffix] = statistics.median(ttfc["ttfc"]) * 1000
        out["messages" + suffix] = ttfc["messages"]
    out["stream"] = (await load(address, "stream", 1, 3, STREAM_WORDS))["rate"]
    return out


async def _print_upkeep(url: str) -> None:
    """Say what stops the database's vacuum: its dead rows pile up over the rounds."""
    from storage import Store

    store = Store.open(url)
    try:
        for problem in await store.upkeep_problems():
            print(f"  note: {problem}; the rounds share one database", flush=True)
    finally:
        await store.close()


def _medians(rounds: list[dict[str, float]]) -> dict[str, float]:
    return {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}


async def run(report: Report, backend: str, workdir: Path) -> None:
    """Measure `pai-grpc serve` on ``backend`` against a bare server, in alternating rounds.

    Both servers run side by side; each round measures the served figures and
    then the bare ones, and every figure is the median over :data:`ROUNDS`
    (the machine's load changes from one second to the next).
    """
    env, schema = await served_database(backend, workdir, "serve")
    await _print_upkeep(env["PAI_DATABASE_URL"])
    served_rounds: list[dict[str, float]] = []
    bare_rounds: list[dict[str, float]] = []
    try:
        address = f"127.0.0.1:{free_port()}"
        async with serving(*CLI, "serve", "--address", address, env=env, address=address) as pid:
            # The bare stream carries as many messages as a run does for the same words.
            extra = int((await load(address, "ttfc", 1, 1))["messages"]) - 1
            bare_address = f"127.0.0.1:{free_port()}"
            port = bare_address.rsplit(":", 1)[1]
            bare_args = ("-m", "pai_grpc.bench._bare", port, str(extra))
            async with serving(*bare_args, address=bare_address) as bare_pid:
                for _ in range(ROUNDS):
                    served_rounds.append(await measure(address, pid, SECONDS))
                    bare_rounds.append(await measure(bare_address, bare_pid, SECONDS))
    finally:
        await drop_schema(schema)
    served, bare = _medians(served_rounds), _medians(bare_rounds)
    section = f"{backend}/srv"
    pattern = f"bare 1+{extra + 1}"
    report.add(
        Result(section, f"baseline: bare pattern, {CLIENTS} clients", bare["rate"], "runs/s")
    )
    for suffix, calls, bare_name in (
        ("", "Send + StreamRun", pattern),
        ("-one", "SendAndStream", "bare 1-call"),
    ):
        report.add(
            Result(
                section,
                f"single-step runs, {CLIENTS} clients ({calls})",
                served["rate" + suffix],
                "runs/s",
                bare["rate" + suffix],
                bare_name,
                note=_joined(
                    _against_two_calls(served["rate" + suffix], bare["rate"], suffix),
                    _spread(served_rounds, bare_rounds, "rate" + suffix, "{:.0f}"),
                ),
            )
        )
        report.add(
            Result(
                section,
                f"server CPU per run ({calls})",
                served["cpu_ms" + suffix],
                "ms",
                bare["cpu_ms" + suffix],
                bare_name,
                note=_joined(
                    f"bare: {bare['cpu_ms' + suffix]:.2f} ms",
                    _spread(served_rounds, bare_rounds, "cpu_ms" + suffix, "{:.2f}"),
                ),
            )
        )
        first, bare_first = served["ttfc_ms" + suffix], bare["ttfc_ms" + suffix]
        report.add(
            Result(
                section,
                f"first text delta (p50, one client, {calls})",
                first,
                "ms",
                bare_first,
                bare_name,
                note=f"bare: {bare_first:.2f} ms, +{first - bare_first:.2f} ms"
                + (
                    f"; +{first - bare['ttfc_ms']:.2f} ms over bare Send + StreamRun"
                    if suffix
                    else ""
                )
                + "; "
                + _spread(served_rounds, bare_rounds, "ttfc_ms" + suffix, "{:.2f}"),
            )
        )
    report.add(
        Result(
            section,
            f"one stream of {STREAM_WORDS} text deltas",
            served["stream"],
            "deltas/s",
            bare["stream"],
            "bare stream",
            note=f"bare: {bare['stream']:.0f} msgs/s",
        )
    )


def _spread(
    served: list[dict[str, float]], bare: list[dict[str, float]], key: str, form: str
) -> str:
    """The range of ``key`` over the rounds, served and bare: how far one round can be trusted.

    On a shared machine one round of the same code can read far from the
    next; a median whose rounds disagree this much says so here.
    """

    def span(rounds: list[dict[str, float]]) -> str:
        values = [r[key] for r in rounds]
        return f"{form.format(min(values))}-{form.format(max(values))}"

    return f"rounds {span(served)}, bare {span(bare)}"


def _joined(*notes: str) -> str:
    return "; ".join(n for n in notes if n)


def _against_two_calls(value: float, bare_two_calls: float, suffix: str) -> str:
    """For a one-call figure: its ratio to the bare two-call pattern (the issue's baseline)."""
    return f"{value / bare_two_calls:.2f}x bare Send + StreamRun" if suffix else ""
