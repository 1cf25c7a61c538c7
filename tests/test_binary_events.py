"""Run events stored in binary (revision 0008), through the API on both backends.

The log holds each event as the serialized ``pai.v1.RunEvent`` the runtime
encoded once; StreamRun sends those bytes as they are. Rows logged as JSON
before the revision stay as they were: they stream and compact as before.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import grpc
from sqlalchemy import insert, select, update

from pai.v1 import parts_pb2, run_service_pb2, runs_pb2
from pai.v1 import thread_service_pb2 as tpb
from pai_grpc._config_retention import RetentionTable
from pai_grpc.config import ConfigFile
from pai_grpc.domain import (
    ChunkEvent,
    FinishChunk,
    FinishStepChunk,
    RunEventPayload,
    StartChunk,
    StartStepChunk,
    StatusEvent,
    TextDeltaChunk,
    TextEndChunk,
    TextStartChunk,
    Usage,
    new_id,
)
from pai_grpc.models import ScriptedModel
from pai_grpc.runtime import (
    DEFAULT_AGENT,
    Agent,
    AgentRegistry,
    compaction_marker_body,
    event_from_record,
)
from pai_grpc.server import DEV_SCOPE
from pai_grpc.server._decode import _guard_handler
from pai_grpc.testing import InProcessServer, serve_in_process
from storage import (
    NOW,
    NewRun,
    NewThread,
    RetentionPolicy,
    RunUpdate,
    Store,
    SweepReport,
    WriteSet,
    current_revision,
    head_revision,
    upgrade,
)
from storage.tables import run_events
from tests.runtime.support import NoteHooks

#: No sweeps of their own: the tests sweep by hand.
MANUAL = {"file": ConfigFile(retention=RetentionTable(sweep_interval=0))}
COMPACT_NOW = RetentionPolicy(events_after_terminal=timedelta(0), idempotency_ttl=None)
DELTAS = ("text_delta", "reasoning_delta", "tool_input_delta")


def agents(said: str) -> AgentRegistry:
    return AgentRegistry(
        [Agent(name=DEFAULT_AGENT, model=ScriptedModel([said]), lifecycle=NoteHooks())]
    )


async def send(srv: InProcessServer, said: str) -> str:
    thread_id = (await srv.threads.CreateThread(tpb.CreateThreadRequest())).thread.id
    part = parts_pb2.MessagePart(text=parts_pb2.TextPart(text=said))
    sent = await srv.threads.Send(tpb.SendRequest(thread_id=thread_id, parts=[part]))
    return str(sent.run.run_id)


async def stream(srv: InProcessServer, run_id: str, after: int = 0) -> list[runs_pb2.RunEvent]:
    request = run_service_pb2.StreamRunRequest(run_id=run_id, after_seq=after)
    return [r.event async for r in srv.runs.StreamRun(request, timeout=30)]


async def raw_stream(srv: InProcessServer, run_id: str) -> list[bytes]:
    """StreamRun's responses exactly as they arrive on the wire."""
    call = srv.channel.unary_stream(
        "/pai.v1.RunService/StreamRun",
        request_serializer=run_service_pb2.StreamRunRequest.SerializeToString,
        response_deserializer=lambda data: data,
    )
    return [r async for r in call(run_service_pb2.StreamRunRequest(run_id=run_id), timeout=30)]


async def sweep(store: Store) -> SweepReport:
    return await store.sweep(COMPACT_NOW, encode_marker=compaction_marker_body)


async def rows(store: Store, run_id: str) -> list[Any]:
    """``(seq, event, body, kind)`` of the run's log rows, as stored."""
    columns = [run_events.c.seq, run_events.c.event, run_events.c.body, run_events.c.kind]
    stmt = select(*columns).where(run_events.c.run_id == run_id).order_by(run_events.c.seq)
    return await store.run_in_transaction(lambda c: c.execute(stmt).all())


def kind_of(event: runs_pb2.RunEvent) -> str:
    """The kind a log row records for an event: the arm, or the chunk type."""
    arm = str(event.WhichOneof("event"))
    if arm == "chunk":
        return str(event.chunk.WhichOneof("chunk")).replace("_", "-")
    return arm


def logged_before(payload: RunEventPayload) -> dict[str, Any]:
    """An event payload as code before revision 0008 logged it (strict JSON)."""
    out: dict[str, Any] = payload.model_dump(mode="json", exclude_none=True)
    return out


def varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


async def legacy_run(store: Store, events: list[tuple[datetime, dict[str, Any]]]) -> str:
    """A finished run whose log rows are JSON, written as code before revision 0008 did."""
    thread_id, run_id = new_id("thr"), new_id("run")
    new = NewThread(id=thread_id, agent=DEFAULT_AGENT)
    await store.commit(WriteSet(scope=DEV_SCOPE, thread_id=thread_id, new_thread=new))
    # Queued behind nothing, never the thread's active run: no runner claims it.
    queued = NewRun(id=run_id, status="queued", initiator="send", operation="send")
    await store.commit(WriteSet(scope=DEV_SCOPE, thread_id=thread_id, insert_runs=[queued]))
    # Only the columns revision 0007 has.
    values = [
        {"run_id": run_id, "seq": seq, "event": event, "created_at": time}
        for seq, (time, event) in enumerate(events, 1)
    ]
    await store.run_in_transaction(lambda c: c.execute(insert(run_events), values))
    done = RunUpdate(
        id=run_id, status="completed", outcome="completed", last_seq=len(events), ended_at=NOW
    )
    await store.commit(WriteSet(scope=DEV_SCOPE, thread_id=thread_id, update_runs=[done]))
    return run_id


async def test_a_runs_events_stream_as_before_and_are_stored_in_binary(
    database_url: str,
) -> None:
    async with serve_in_process(database_url, agents=agents("one two three"), **MANUAL) as srv:
        run_id = await send(srv, "go")
        live = await stream(srv, run_id)
        logged = await stream(srv, run_id)
        # Live (from the execution's channel) and from the log: the same messages.
        assert logged == live
        kinds = [kind_of(e) for e in logged]
        assert {"status", "message", "hook_call", "text-delta", "start-step"} <= set(kinds)
        assert logged[-1].status.status == runs_pb2.RUN_STATUS_COMPLETED
        # Each row: the streamed event's bytes and its kind, and no JSON.
        stored = await rows(srv.store, run_id)
        assert [r.seq for r in stored] == [e.seq for e in logged]
        assert [r.kind for r in stored] == kinds
        assert [r.body for r in stored] == [e.SerializeToString() for e in logged]
        assert all(r.event is None for r in stored)
        # What the same events give when logged as JSON, as before revision 0008:
        # streaming them is identical, message for message.
        records = await srv.store.read_events(DEV_SCOPE, run_id, limit=1000)
        before = await legacy_run(
            srv.store,
            [(r.created_at, logged_before(event_from_record(r).payload)) for r in records],
        )
        assert await stream(srv, before) == logged


async def test_stream_run_sends_the_stored_body_untouched(database_url: str) -> None:
    async with serve_in_process(database_url, agents=agents("one two"), **MANUAL) as srv:
        run_id = await send(srv, "go")
        events = await stream(srv, run_id)
        # Rewrite one stored body in a valid but non-canonical field order (chunk
        # before seq and time): a server that decoded and encoded again would
        # send the canonical order instead.
        target = next(e for e in events if e.chunk.HasField("text_delta"))
        body = (
            runs_pb2.RunEvent(chunk=target.chunk).SerializeToString()
            + runs_pb2.RunEvent(seq=target.seq, time=target.time).SerializeToString()
        )
        assert body != target.SerializeToString()
        assert runs_pb2.RunEvent.FromString(body) == target
        stmt = (
            update(run_events)
            .where(run_events.c.run_id == run_id, run_events.c.seq == target.seq)
            .values(body=body)
        )
        await srv.store.run_in_transaction(lambda c: c.execute(stmt))
        stored = {r.seq: r.body for r in await rows(srv.store, run_id)}
        responses = await raw_stream(srv, run_id)
        assert len(responses) == len(events)
        for response, event in zip(responses, events, strict=True):
            # StreamRunResponse{event = 1}: the key, the length, the stored bytes.
            expected = stored[event.seq]
            assert response == b"\x0a" + varint(len(expected)) + expected
        parsed = [run_service_pb2.StreamRunResponse.FromString(r).event for r in responses]
        assert parsed == events


async def test_json_rows_from_before_0008_stream_and_compact_after_the_upgrade(
    database_url: str,
) -> None:
    # A database at revision 0007 with a finished run logged as JSON, as it was written then.
    t0 = datetime(2026, 1, 1, tzinfo=UTC)

    def chunk(c: Any) -> dict[str, Any]:
        return logged_before(ChunkEvent(chunk=c))

    usage = Usage(input_tokens=3, output_tokens=6)
    old_log = [
        logged_before(StatusEvent(status="running")),
        chunk(StartChunk()),
        chunk(StartStepChunk(warnings=[])),
        chunk(TextStartChunk(id="t")),
        *[chunk(TextDeltaChunk(id="t", text=f"w{i} ")) for i in range(6)],
        chunk(TextEndChunk(id="t")),
        chunk(FinishStepChunk(usage=usage)),
        chunk(FinishChunk(total_usage=usage)),
        logged_before(StatusEvent(status="completed", outcome="completed")),
    ]
    store = Store.open(database_url)
    try:
        await upgrade(store, "0007")
        assert await current_revision(store) == "0007"
        old = await legacy_run(
            store, [(t0 + timedelta(seconds=i), e) for i, e in enumerate(old_log)]
        )
    finally:
        await store.close()

    async with serve_in_process(database_url, agents=agents("new run words"), **MANUAL) as srv:
        assert await current_revision(srv.store) == head_revision()
        # The old rows were left as they were, and stream as they did.
        stored = await rows(srv.store, old)
        assert [(r.event, r.body, r.kind) for r in stored] == [(e, None, None) for e in old_log]
        events = await stream(srv, old)
        assert [e.seq for e in events] == list(range(1, len(old_log) + 1))
        assert [e.time.ToDatetime(UTC) for e in events] == [
            t0 + timedelta(seconds=i) for i in range(len(old_log))
        ]
        assert [kind_of(e) for e in events] == [
            "status",
            "start",
            "start-step",
            "text-start",
            *["text-delta"] * 6,
            "text-end",
            "finish-step",
            "finish",
            "status",
        ]
        assert "".join(e.chunk.text_delta.text for e in events) == "w0 w1 w2 w3 w4 w5 "
        assert events[-1].status.status == runs_pb2.RUN_STATUS_COMPLETED
        assert events[-1].status.outcome == runs_pb2.RUN_OUTCOME_COMPLETED
        # Resuming inside the old log works too.
        assert await stream(srv, old, after=5) == events[5:]

        # A run after the upgrade is logged in binary only.
        new = await send(srv, "go")
        new_events = await stream(srv, new)
        assert all(r.event is None and r.body for r in await rows(srv.store, new))

        # Compaction: the old run's deltas are found in their JSON, the new run's by kind.
        report = await sweep(srv.store)
        assert report.compacted_runs == 2
        new_deltas = [e.seq for e in new_events if e.chunk.WhichOneof("chunk") in DELTAS]
        assert report.removed_events == 6 + len(new_deltas)
        for run_id, original, deltas in (
            (old, events, list(range(5, 11))),
            (new, new_events, new_deltas),
        ):
            compacted = await stream(srv, run_id)
            marks = [e for e in compacted if e.HasField("compacted")]
            assert [
                (m.seq, m.compacted.first_seq, m.compacted.last_seq, m.compacted.removed_events)
                for m in marks
            ] == [(deltas[-1], deltas[0], deltas[-1], len(deltas))]
            # The marker takes the time of the last event it stands for.
            by_seq = {e.seq: e for e in original}
            assert marks[0].time == by_seq[deltas[-1]].time
            assert not any(e.chunk.WhichOneof("chunk") in DELTAS for e in compacted)
            assert [e for e in compacted if not e.HasField("compacted")] == [
                e for e in original if e.seq not in deltas
            ]
            # A reader resuming inside the stretch gets the marker next.
            assert (await stream(srv, run_id, after=deltas[0]))[0] == marks[0]
        # Kept old rows are still JSON; the marker, like every new row, is binary.
        after = await rows(srv.store, old)
        assert [(r.seq, r.kind) for r in after if r.body is not None] == [(10, "compacted")]
        assert all(r.event is not None for r in after if r.seq != 10)


def test_the_stream_run_serializer_passes_bytes_through_and_still_takes_messages() -> None:
    generated = grpc.unary_stream_rpc_method_handler(
        lambda request, context: iter(()),
        request_deserializer=run_service_pb2.StreamRunRequest.FromString,
        response_serializer=run_service_pb2.StreamRunResponse.SerializeToString,
    )
    serialize = _guard_handler(generated, "/pai.v1.RunService/StreamRun").response_serializer
    message = run_service_pb2.StreamRunResponse(event=runs_pb2.RunEvent(seq=7))
    assert serialize(message) == message.SerializeToString()
    assert serialize(b"\x0a\x02\x08\x07") == b"\x0a\x02\x08\x07"
    # Other methods keep the generated serializer.
    other = _guard_handler(generated, "/pai.v1.RunService/GetRun").response_serializer
    assert other is run_service_pb2.StreamRunResponse.SerializeToString
