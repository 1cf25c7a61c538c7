"""Retention benchmarks: what compaction saves, and what a sweep costs concurrent load.

- rows and stored event bytes per run (50-token and 2,000-token runs) before
  and after compaction, the run's own figures before as the baseline;
- the same runs' events stored in binary (serialized ``pai.v1.RunEvent`` and
  its kind, as written since revision 0008) against the same events as JSON
  (the encoding of rows written before it), sized as the backend stores them;
- CPU per event of StreamRun reading a 2,000-token run from the log, stored in
  binary against a copy of it stored as JSON (client and server in this
  process, alternating rounds);
- single-step runs/s with 16 clients while a sweep compacts a backlog, against
  the same load with no sweep running.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Sequence
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

import grpc
from sqlalchemy import func, insert, select, text

from pai.v1 import parts_pb2, run_service_pb2, run_service_pb2_grpc
from pai.v1 import thread_service_pb2 as tpb
from pai.v1 import thread_service_pb2_grpc as tgrpc
from pai_grpc._config_retention import RetentionTable
from pai_grpc.bench._common import Report, Result, bench_database, drop_schema, load
from pai_grpc.config import ConfigFile, Settings
from pai_grpc.domain import StepStreamChunk, TextDeltaChunk, new_id
from pai_grpc.models import ModelCall, ScriptedModel, last_user_text, text_step
from pai_grpc.runtime import (
    DEFAULT_AGENT,
    Agent,
    AgentRegistry,
    compaction_marker_body,
    event_from_record,
)
from pai_grpc.server import App
from storage import (
    NOW,
    EventRecord,
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
#: Alternating rounds of streaming the binary run and its JSON copy.
STREAM_ROUNDS = 5
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
    """Event rows and stored event bytes (body and kind) per run."""
    size_of = func.pg_column_size if store.dialect == "postgresql" else func.length
    size = func.coalesce(size_of(run_events.c.body), 0) + func.coalesce(
        size_of(run_events.c.kind), 0
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


def _as_json(record: EventRecord) -> dict[str, Any]:
    """An event as rows written before binary events (revision 0008) stored it."""
    out: dict[str, Any] = event_from_record(record).payload.model_dump(
        mode="json", exclude_none=True
    )
    return out


async def _json_footprint(store: Store, run_ids: list[str]) -> float:
    """Bytes per run of the same events stored as JSON (JSONB on PostgreSQL)."""
    total = 0
    for run_id in run_ids:
        records = await store.read_events(await _scope_of(store, run_id), run_id, limit=10_000)
        # SQLAlchemy's JSON serializer: json.dumps with its default separators.
        texts = [json.dumps(_as_json(r)) for r in records]
        if store.dialect == "postgresql":
            total += await store.run_in_transaction(partial(_jsonb_size, texts))
        else:
            total += sum(len(t.encode()) for t in texts)
    return total / len(run_ids)


def _jsonb_size(texts: list[str], conn: Any) -> int:
    """Bytes PostgreSQL stores for these JSON texts as JSONB values."""
    sized = text("SELECT sum(pg_column_size(CAST(x AS jsonb))) FROM unnest(CAST(:a AS text[])) x")
    return int(conn.execute(sized, {"a": texts}).scalar_one())


async def _json_copy(store: Store, run_id: str) -> str:
    """A finished copy of ``run_id`` whose log is JSON rows, as before revision 0008."""
    scope = await _scope_of(store, run_id)
    records = await store.read_events(scope, run_id, limit=10_000)
    thread_id, copy = await _detached_run(store, scope, DEFAULT_AGENT)
    rows = [
        {"run_id": copy, "seq": r.seq, "event": _as_json(r), "created_at": r.created_at}
        for r in records
    ]
    await store.run_in_transaction(lambda c: c.execute(insert(run_events), rows))
    await store.commit(_completed(scope, thread_id, copy, records[-1].seq))
    return copy


async def _detached_run(store: Store, scope: str, agent: str) -> tuple[str, str]:
    """A new thread and a queued run in it (thread id, run id).

    The run is never the thread's active run, so no runner claims it meanwhile.
    """
    thread_id, run_id = new_id("thr"), new_id("run")
    new = NewThread(id=thread_id, agent=agent)
    await store.commit(WriteSet(scope=scope, thread_id=thread_id, new_thread=new))
    queued = NewRun(id=run_id, status="queued", initiator="send", operation="send")
    await store.commit(WriteSet(scope=scope, thread_id=thread_id, insert_runs=[queued]))
    return thread_id, run_id


def _completed(
    scope: str, thread_id: str, run_id: str, last_seq: int, events: Sequence[NewEvent] = ()
) -> WriteSet:
    """The write that ends ``run_id`` as completed at ``last_seq`` (with ``events``, if any)."""
    update = RunUpdate(
        id=run_id, status="completed", outcome="completed", last_seq=last_seq, ended_at=NOW
    )
    return WriteSet(scope=scope, thread_id=thread_id, events=list(events), update_runs=[update])


async def _stream_cpu(report: Report, backend: str, app: App, run_id: str) -> None:
    """CPU per event of StreamRun from the log: binary rows against the same run as JSON."""
    legacy = await _json_copy(app.store, run_id)
    spent = {run_id: 0.0, legacy: 0.0}
    events = {run_id: 0, legacy: 0}
    async with grpc.aio.insecure_channel(f"127.0.0.1:{app.port}") as channel:
        stub = run_service_pb2_grpc.RunServiceStub(channel)

        async def one(target: str) -> None:
            t0 = time.process_time()
            request = run_service_pb2.StreamRunRequest(run_id=target)
            async for _ in stub.StreamRun(request):
                events[target] += 1
            spent[target] += time.process_time() - t0

        await one(run_id)  # warm both paths up (statements, connections) first
        await one(legacy)
        spent = {run_id: 0.0, legacy: 0.0}
        events = {run_id: 0, legacy: 0}
        for _ in range(STREAM_ROUNDS):
            await one(legacy)
            await one(run_id)
    json_us = spent[legacy] / events[legacy] * 1e6
    binary_us = spent[run_id] / events[run_id] * 1e6
    report.add(
        Result(
            backend,
            "StreamRun CPU per event: JSON rows",
            json_us,
            "us",
            note="validate, convert, encode per read (rows before 0008)",
        )
    )
    report.add(
        Result(
            backend,
            "StreamRun CPU per event: binary rows",
            binary_us,
            "us",
            json_us,
            "JSON rows",
            note="stored bytes sent as is; client and server in one process",
        )
    )


async def _scope_of(store: Store, run_id: str) -> str:
    def read(conn: Any) -> str:
        return str(conn.execute(select(runs.c.scope).where(runs.c.id == run_id)).scalar_one())

    return await store.run_in_transaction(read)


async def _backlog(store: Store, template: list[EventRecord], n: int) -> list[str]:
    """``n`` finished runs with ``template`` as their log, written straight to storage."""
    ids: list[str] = []
    for _ in range(n):
        thread_id, run_id = await _detached_run(store, "bench", "a")
        ids.append(run_id)
        events = [
            NewEvent(run_id, e.seq, e.body, e.kind, e.created_at)
            for e in template
            if e.body is not None and e.kind is not None
        ]
        await store.commit(_completed("bench", thread_id, run_id, template[-1].seq, events))
    return ids


async def run(report: Report, backend: str, workdir: Path) -> None:
    """Measure one backend."""
    app, schema = await _app(backend, workdir)
    store = app.store
    try:
        by_size = {tokens: await _runs_of(app, tokens, RUNS_PER_SIZE) for tokens in SIZES}
        long_run = by_size[2000][0]
        await _stream_cpu(report, backend, app, long_run)
        scope = await _scope_of(store, long_run)
        template = await store.read_events(scope, long_run, limit=10_000)
        before = {t: await _footprint(store, ids) for t, ids in by_size.items()}
        as_json = {t: await _json_footprint(store, ids) for t, ids in by_size.items()}
        await store.sweep(COMPACT_NOW, encode_marker=compaction_marker_body)
        for tokens, ids in by_size.items():
            rows, size = before[tokens]
            rows_after, size_after = await _footprint(store, ids)
            name = f"{tokens}-token run"
            report.add(Result(backend, f"{name}: event bytes as JSON", as_json[tokens], "B"))
            report.add(
                Result(backend, f"{name}: event bytes binary", size, "B", as_json[tokens], "JSON")
            )
            report.add(Result(backend, f"{name}: event rows before compaction", rows, "rows"))
            report.add(
                Result(backend, f"{name}: event rows after", rows_after, "rows", rows, "before")
            )
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
                await store.sweep(policy, encode_marker=compaction_marker_body)
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
