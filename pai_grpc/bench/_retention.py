"""Retention benchmarks: what compaction saves, and what a sweep costs concurrent load.

- rows and stored event bytes per run (50-token and 2,000-token runs) before
  and after compaction, the run's own figures before as the baseline;
- JSON per event (today's encoding) against protobuf per event, in bytes and
  in CPU on StreamRun's read path (measured, not built: see docs/storage.md);
- single-step runs/s with 16 clients while a sweep compacts a backlog, against
  the same load with no sweep running.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import grpc
from sqlalchemy import func, select

from pai.v1 import parts_pb2, run_service_pb2, run_service_pb2_grpc, runs_pb2
from pai.v1 import thread_service_pb2 as tpb
from pai.v1 import thread_service_pb2_grpc as tgrpc
from pai_grpc._config_retention import RetentionTable
from pai_grpc.bench._common import Report, Result, bench_database, drop_schema, load
from pai_grpc.config import ConfigFile, Settings
from pai_grpc.convert import run_event_to_proto
from pai_grpc.domain import StepStreamChunk, TextDeltaChunk, new_id
from pai_grpc.models import ModelCall, ScriptedModel, last_user_text, text_step
from pai_grpc.runtime import DEFAULT_AGENT, Agent, AgentRegistry, event_from_record
from pai_grpc.server import App
from storage import (
    NOW,
    NewEvent,
    NewRun,
    NewThread,
    RetentionPolicy,
    RunUpdate,
    Store,
    WriteSet,
    upgrade,
)
from storage.tables import run_events, runs

SIZES = (50, 2000)
RUNS_PER_SIZE = 10
BACKLOG_RUNS = 60
CLIENTS = 16
SECONDS = 4.0
COMPACT_NOW = RetentionPolicy(events_after_terminal=timedelta(0), idempotency_ttl=None)


def _reply(call: ModelCall) -> list[StepStreamChunk]:
    said = last_user_text(call.messages) or ""
    if said.startswith("tokens "):
        n = int(said.split()[1])
        step = text_step("", block_id="t")
        # One delta per token, each a short word as a model streams them.
        return [step[0], *[TextDeltaChunk(id="t", text=f" tok{i}") for i in range(n)], *step[-2:]]
    return text_step("ok")


async def _app(backend: str, workdir: Path) -> tuple[App, str | None]:
    url, schema = await bench_database(backend, workdir, "retention")
    store = Store.open(url, pool_size=40)
    await upgrade(store)
    settings = Settings(
        address="127.0.0.1:0",
        database_url=url,
        runner_concurrency=64,
        sends_per_second=0,
        # The benchmark sweeps by hand.
        file=ConfigFile(retention=RetentionTable(sweep_interval=0)),
    )
    agents = AgentRegistry([Agent(name=DEFAULT_AGENT, model=ScriptedModel(_reply))])
    app = App(settings, agents, store=store)
    await app.start()
    return app, schema


async def _runs_of(app: App, tokens: int, n: int) -> list[str]:
    """``n`` runs of ``tokens`` deltas each, through Send and StreamRun to terminal."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{app.port}") as channel:
        threads = tgrpc.ThreadServiceStub(channel)
        runs = run_service_pb2_grpc.RunServiceStub(channel)

        async def one() -> str:
            thread_id = (await threads.CreateThread(tpb.CreateThreadRequest())).thread.id
            part = parts_pb2.MessagePart(text=parts_pb2.TextPart(text=f"tokens {tokens}"))
            sent = await threads.Send(tpb.SendRequest(thread_id=thread_id, parts=[part]))
            run_id: str = sent.run.run_id
            async for _ in runs.StreamRun(run_service_pb2.StreamRunRequest(run_id=run_id)):
                pass
            return run_id

        return list(await asyncio.gather(*(one() for _ in range(n))))


async def _footprint(store: Store, run_ids: list[str]) -> tuple[float, float]:
    """Event rows and stored event bytes per run."""
    size = (
        func.pg_column_size(run_events.c.event)
        if store.dialect == "postgresql"
        else func.length(run_events.c.event)
    )

    def read(conn: Any) -> tuple[int, int]:
        row = conn.execute(
            select(func.count(), func.coalesce(func.sum(size), 0)).where(
                run_events.c.run_id.in_(run_ids)
            )
        ).one()
        return int(row[0]), int(row[1])

    rows, size_ = await store.run_in_transaction(read)
    return rows / len(run_ids), size_ / len(run_ids)


async def _encoding(report: Report, backend: str, store: Store, run_id: str) -> None:
    """Today's JSON per event against protobuf per event, for one 2,000-token run."""
    records = await store.read_events(await _scope_of(store, run_id), run_id, limit=10_000)
    as_json = [json.dumps(r.event, separators=(",", ":")).encode() for r in records]
    as_proto = [run_event_to_proto(event_from_record(r)).SerializeToString() for r in records]
    t0 = time.perf_counter()
    for _ in range(3):
        for r in records:
            run_event_to_proto(event_from_record(r)).SerializeToString()
    json_path = (time.perf_counter() - t0) / (3 * len(records))
    t0 = time.perf_counter()
    for _ in range(3):
        for b in as_proto:
            runs_pb2.RunEvent.FromString(b).SerializeToString()
    proto_path = (time.perf_counter() - t0) / (3 * len(records))
    jb, pb = sum(map(len, as_json)) / len(records), sum(map(len, as_proto)) / len(records)
    report.add(Result(backend, "event encoding: JSON bytes per event", jb, "B"))
    report.add(Result(backend, "event encoding: protobuf bytes per event", pb, "B", jb, "JSON"))
    report.add(
        Result(
            backend,
            "StreamRun read path per event: JSON->domain->proto",
            json_path * 1e6,
            "us",
            note="validate + convert + serialize",
        )
    )
    report.add(
        Result(
            backend,
            "StreamRun read path per event: stored protobuf",
            proto_path * 1e6,
            "us",
            json_path * 1e6,
            "JSON path",
            note="parse + serialize",
        )
    )


async def _scope_of(store: Store, run_id: str) -> str:
    def read(conn: Any) -> str:
        return str(conn.execute(select(runs.c.scope).where(runs.c.id == run_id)).scalar_one())

    return await store.run_in_transaction(read)


async def _backlog(store: Store, template: list[dict[str, Any]], n: int) -> list[str]:
    """``n`` finished runs with ``template`` as their log, written straight to storage."""
    ids: list[str] = []
    for _ in range(n):
        thread_id, run_id = new_id("thr"), new_id("run")
        new = NewThread(id=thread_id, agent="a")
        await store.commit(WriteSet(scope="bench", thread_id=thread_id, new_thread=new))
        ids.append(run_id)
        # Never the thread's active run, so no runner claims it meanwhile.
        queued = NewRun(id=run_id, status="queued", initiator="send", operation="send")
        await store.commit(WriteSet(scope="bench", thread_id=thread_id, insert_runs=[queued]))
        await store.commit(
            WriteSet(
                scope="bench",
                thread_id=thread_id,
                events=[NewEvent(run_id, i + 1, e) for i, e in enumerate(template)],
                update_runs=[
                    RunUpdate(
                        id=run_id,
                        status="completed",
                        outcome="completed",
                        last_seq=len(template),
                        ended_at=NOW,
                    )
                ],
            )
        )
    return ids


async def run(report: Report, backend: str, workdir: Path) -> None:
    """Measure one backend."""
    app, schema = await _app(backend, workdir)
    store = app.store
    try:
        by_size = {tokens: await _runs_of(app, tokens, RUNS_PER_SIZE) for tokens in SIZES}
        if backend == "sqlite":
            await _encoding(report, backend, store, by_size[2000][0])
        long_run = by_size[2000][0]
        scope = await _scope_of(store, long_run)
        template = [r.event for r in await store.read_events(scope, long_run, limit=10_000)]
        before = {t: await _footprint(store, ids) for t, ids in by_size.items()}
        await store.sweep(COMPACT_NOW)
        for tokens, ids in by_size.items():
            rows, size = before[tokens]
            rows_after, size_after = await _footprint(store, ids)
            name = f"{tokens}-token run"
            report.add(Result(backend, f"{name}: event rows before compaction", rows, "rows"))
            report.add(
                Result(backend, f"{name}: event rows after", rows_after, "rows", rows, "before")
            )
            report.add(Result(backend, f"{name}: event bytes before compaction", size, "B"))
            report.add(
                Result(backend, f"{name}: event bytes after", size_after, "B", size, "before")
            )

        backlog = await _backlog(store, template, BACKLOG_RUNS)
        address = f"127.0.0.1:{app.port}"
        # Quiet, sweeping, quiet again: the baseline is the mean of the two quiet windows.
        quiet = [(await load(address, "runs", CLIENTS, SECONDS))["rate"]]
        rows_before = (await _footprint(store, backlog))[0]

        async def sweeping() -> None:
            policy = RetentionPolicy(events_after_terminal=timedelta(0), idempotency_ttl=None)
            while True:
                await store.sweep(policy)
                await asyncio.sleep(0)

        task = asyncio.create_task(sweeping())
        try:
            busy = (await load(address, "runs", CLIENTS, SECONDS))["rate"]
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        removed = round((rows_before - (await _footprint(store, backlog))[0]) * len(backlog))
        quiet.append((await load(address, "runs", CLIENTS, SECONDS))["rate"])
        base = sum(quiet) / 2
        report.add(
            Result(
                backend,
                f"single-step runs, {CLIENTS} clients, no sweep",
                base,
                "runs/s",
                note=f"mean of {quiet[0]:.1f} before and {quiet[1]:.1f} after",
            )
        )
        report.add(
            Result(
                backend,
                f"single-step runs, {CLIENTS} clients, sweeping",
                busy,
                "runs/s",
                base,
                "no sweep",
                note=f"{removed} backlog events removed meanwhile",
            )
        )
    finally:
        await app.stop(grace=1)
        await drop_schema(schema)
