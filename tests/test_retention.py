"""Retention through the API: StreamRun of compacted runs, key TTL, DeleteThread, the sweeper."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from sqlalchemy import func, select

from pai.v1 import parts_pb2, run_service_pb2, runs_pb2
from pai.v1 import thread_service_pb2 as tpb
from pai_grpc._config_retention import RetentionTable
from pai_grpc.config import ConfigFile, Settings
from pai_grpc.models import OfflineModel
from pai_grpc.runtime import DEFAULT_AGENT, Agent, AgentRegistry, compaction_marker_body
from pai_grpc.server import RunnerProcess
from pai_grpc.telemetry import Telemetry
from pai_grpc.testing import InProcessServer, serve_in_process
from storage import RetentionPolicy, Store, SweepReport
from storage._schema import metadata
from tests.runtime.support import NoteHooks

COMPACT_NOW = RetentionPolicy(events_after_terminal=timedelta(0), idempotency_ttl=None)
#: No sweeps of their own in servers the test sweeps by hand.
MANUAL = {"file": ConfigFile(retention=RetentionTable(sweep_interval=0))}


def words(n: int) -> str:
    return " ".join(f"w{i}" for i in range(n))


async def send(srv: InProcessServer, said: str, thread_id: str = "") -> tuple[str, str]:
    if not thread_id:
        thread_id = (await srv.threads.CreateThread(tpb.CreateThreadRequest())).thread.id
    part = parts_pb2.MessagePart(text=parts_pb2.TextPart(text=said))
    sent = await srv.threads.Send(tpb.SendRequest(thread_id=thread_id, parts=[part]))
    return thread_id, sent.run.run_id


async def sweep(srv: InProcessServer) -> SweepReport:
    """One compaction pass now, with the markers the runtime's sweeper writes."""
    return await srv.store.sweep(COMPACT_NOW, encode_marker=compaction_marker_body)


async def stream(srv: InProcessServer, run_id: str, after: int = 0) -> list[runs_pb2.RunEvent]:
    request = run_service_pb2.StreamRunRequest(run_id=run_id, after_seq=after)
    return [r.event async for r in srv.runs.StreamRun(request, timeout=30)]


def explained(original: list[runs_pb2.RunEvent], seen: list[runs_pb2.RunEvent], after: int) -> None:
    """``seen`` is a consistent account of ``original`` after seq ``after``.

    Seqs strictly increase, every original event after ``after`` is either
    received unchanged or inside a received compacted range, only deltas are
    ever compacted, and the stream ends with the terminal status.
    """
    seqs = [e.seq for e in seen]
    assert seqs == sorted(set(seqs))
    by_seq = {e.seq: e for e in seen}
    covered: set[int] = set()
    for e in seen:
        if e.WhichOneof("event") == "compacted":
            assert e.compacted.last_seq == e.seq
            assert e.compacted.first_seq <= e.seq
            covered.update(range(e.compacted.first_seq, e.compacted.last_seq + 1))
    for e in original:
        if e.seq <= after:
            continue
        if e.seq in covered:
            assert e.chunk.WhichOneof("chunk") in (
                "text_delta",
                "reasoning_delta",
                "tool_input_delta",
            )
            assert e.seq not in by_seq or by_seq[e.seq].WhichOneof("event") in (
                "compacted",
                "chunk",
            )
        else:
            assert by_seq[e.seq] == e
    assert seen[-1].status.status == runs_pb2.RUN_STATUS_COMPLETED


async def test_stream_of_a_compacted_run_from_zero_and_from_inside_a_stretch(
    database_url: str,
) -> None:
    async with serve_in_process(database_url, **MANUAL) as srv:
        _, run_id = await send(srv, words(40))
        original = await stream(srv, run_id)
        deltas = [e.seq for e in original if e.chunk.WhichOneof("chunk") == "text_delta"]
        assert len(deltas) >= 40
        report = await sweep(srv)
        assert report.compacted_runs == 1
        assert report.removed_events == len(deltas)

        compacted = await stream(srv, run_id)
        explained(original, compacted, 0)
        marks = [e for e in compacted if e.WhichOneof("event") == "compacted"]
        assert [(m.compacted.first_seq, m.compacted.last_seq) for m in marks] == [
            (deltas[0], deltas[-1])
        ]
        assert marks[0].compacted.removed_events == len(deltas)
        # The committed message still holds the whole text the deltas spelled out.
        text = "".join(e.chunk.text_delta.text for e in original if e.HasField("chunk"))
        [message] = [e.message for e in compacted if e.WhichOneof("event") == "message"]
        assert "".join(p.text.text for p in message.parts) == text

        middle = deltas[len(deltas) // 2]
        resumed = await stream(srv, run_id, after=middle)
        assert resumed[0].WhichOneof("event") == "compacted"
        assert resumed[0].compacted.first_seq <= middle < resumed[0].seq
        explained(original, resumed, middle)
        # From the very end: nothing more, no error.
        assert await stream(srv, run_id, after=original[-1].seq) == []


async def test_compaction_keeps_every_hook_call_event(database_url: str) -> None:
    model = OfflineModel(chunk_delay=0)
    agents = AgentRegistry([Agent(name=DEFAULT_AGENT, model=model, lifecycle=NoteHooks())])
    async with serve_in_process(database_url, agents=agents, **MANUAL) as srv:
        _, run_id = await send(srv, words(20))
        original = await stream(srv, run_id)
        hooks = [e for e in original if e.WhichOneof("event") == "hook_call"]
        assert [(e.hook_call.phase, e.hook_call.hook) for e in hooks] == [
            ("prepare_model_step", "note"),
            ("after_step", "note"),
        ]
        report = await sweep(srv)
        assert report.compacted_runs == 1
        compacted = await stream(srv, run_id)
        explained(original, compacted, 0)
        assert [e for e in compacted if e.WhichOneof("event") == "hook_call"] == hooks


async def test_a_reader_mid_stream_across_a_compaction_sees_a_consistent_sequence(
    sqlite_url: str,
) -> None:
    async with serve_in_process(sqlite_url, **MANUAL) as srv:
        # Several pages of the log and far more than the transport buffers while the
        # reader pauses, so the server reads the later pages after the sweep.
        _, run_id = await send(srv, words(3000))
        original = await stream(srv, run_id)
        # From the log, not the events the run that just ended keeps in memory.
        srv.app.runtime.services.broker.drop_ended_events()
        request = run_service_pb2.StreamRunRequest(run_id=run_id)
        call = srv.runs.StreamRun(request, timeout=30)
        seen = [(await call.read()).event]
        assert (await sweep(srv)).compacted_runs == 1
        while (response := await call.read()) is not grpc.aio.EOF:
            seen.append(response.event)
        explained(original, seen, 0)
        # It did cross: deltas received before the compaction, then its marker.
        kinds = [e.WhichOneof("event") for e in seen]
        assert "compacted" in kinds
        assert seen[kinds.index("compacted") - 1].chunk.HasField("text_delta")
        # Resuming from any seq it received is still consistent.
        for cursor in (seen[1].seq, seen[len(seen) // 2].seq):
            explained(original, await stream(srv, run_id, after=cursor), cursor)


async def test_a_request_id_is_a_new_request_after_its_ttl(sqlite_url: str) -> None:
    short = {"file": ConfigFile(retention=RetentionTable(idempotency_ttl=0.3, sweep_interval=0))}
    async with serve_in_process(sqlite_url, **short) as srv:
        request = tpb.CreateThreadRequest(request_id="create-1")
        first = (await srv.threads.CreateThread(request)).thread.id
        assert (await srv.threads.CreateThread(request)).thread.id == first  # a replay
        await asyncio.sleep(0.5)
        second = (await srv.threads.CreateThread(request)).thread.id
        assert second != first
        assert (await srv.threads.CreateThread(request)).thread.id == second


async def row_counts(store: Store) -> dict[str, int]:
    def read(conn: Any) -> dict[str, int]:
        return {
            t.name: int(conn.execute(select(func.count()).select_from(t)).scalar_one())
            for t in metadata.sorted_tables
        }

    return await store.run_in_transaction(read)


async def test_delete_thread_removes_every_row_it_wrote(database_url: str) -> None:
    async with serve_in_process(database_url, **MANUAL) as srv:
        before = await row_counts(srv.store)
        created = await srv.threads.CreateThread(tpb.CreateThreadRequest(request_id="c-1"))
        thread_id = created.thread.id
        part = parts_pb2.MessagePart(text=parts_pb2.TextPart(text="hello there"))
        for i in range(2):
            sent = await srv.threads.Send(
                tpb.SendRequest(thread_id=thread_id, parts=[part], request_id=f"s-{i}")
            )
            await stream(srv, sent.run.run_id)
        full = await row_counts(srv.store)
        for table in ("threads", "messages", "runs", "run_events", "idempotency_keys"):
            assert full[table] > before[table], table
        await srv.threads.DeleteThread(tpb.DeleteThreadRequest(thread_id=thread_id))
        assert await row_counts(srv.store) == before


def removed_rows(reader: InMemoryMetricReader, kind: str) -> int:
    data = reader.get_metrics_data()
    return sum(
        int(p.value)
        for rm in (data.resource_metrics if data else [])
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name == "pai.retention.removed"
        for p in m.data.data_points
        if p.attributes.get("kind") == kind
    )


async def test_the_embedded_runner_sweeps_on_its_own(sqlite_url: str) -> None:
    table = RetentionTable(events_after_terminal=0, sweep_interval=0.1)
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    telemetry = Telemetry(trace.NoOpTracerProvider(), provider)
    try:
        async with serve_in_process(
            sqlite_url, file=ConfigFile(retention=table), telemetry=telemetry
        ) as srv:
            _, run_id = await send(srv, words(5))
            original = await stream(srv, run_id)
            deltas = sum(e.chunk.HasField("text_delta") for e in original)
            for _ in range(200):
                compacted = await stream(srv, run_id)
                if removed_rows(reader, "events") == deltas:
                    break
                await asyncio.sleep(0.05)
            else:
                pytest.fail("the embedded runner never compacted the finished run")
            explained(original, compacted, 0)
            assert any(e.WhichOneof("event") == "compacted" for e in compacted)
    finally:
        provider.shutdown()


async def test_a_runner_process_sweeps_too(sqlite_url: str) -> None:
    async with serve_in_process(sqlite_url, **MANUAL) as srv:
        _, run_id = await send(srv, words(5))
        original = await stream(srv, run_id)
        table = RetentionTable(events_after_terminal=0, sweep_interval=0.1)
        settings = Settings(database_url=sqlite_url, file=ConfigFile(retention=table))
        agents = AgentRegistry([Agent(name=DEFAULT_AGENT, model=OfflineModel(chunk_delay=0))])
        runner = RunnerProcess(settings, agents)
        await runner.start()
        try:
            for _ in range(200):
                compacted = await stream(srv, run_id)
                if any(e.WhichOneof("event") == "compacted" for e in compacted):
                    break
                await asyncio.sleep(0.05)
            else:
                pytest.fail("the runner process never compacted the finished run")
        finally:
            await runner.stop(grace=1)
        explained(original, compacted, 0)


@pytest.mark.slow
async def test_the_sweep_command_runs_one_pass_and_says_what_it_did(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'sweep.db'}"
    async with serve_in_process(url, **MANUAL) as srv:
        _, run_id = await send(srv, words(10))
        deltas = sum(e.chunk.HasField("text_delta") for e in await stream(srv, run_id))
    config = tmp_path / "pai.toml"
    config.write_text("[retention]\nevents_after_terminal = 0\n")
    env = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"}
    cmd = [sys.executable, "-m", "pai_grpc.cli", "sweep", "--database-url", url]
    done = subprocess.run(
        [*cmd, "--config", str(config)], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert f"compacted 1 run(s) ({deltas} event(s) removed)" in done.stdout
    again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert again.returncode == 0, again.stderr
    assert "compacted 0 run(s)" in again.stdout
