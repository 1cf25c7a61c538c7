"""SendAndStream: Send and StreamRun on one call, with both calls' guarantees."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import grpc
import pytest

from pai.v1 import run_service_pb2, runs_pb2
from pai.v1 import thread_service_pb2 as tpb
from pai_grpc.models import HeldStep, ScriptedModel, ScriptStep
from pai_grpc.testing import InProcessServer, serve_in_process
from tests.conftest import rich_status
from tests.runtime.support import collect, kinds, new_thread, send, text, transcript, wait_run


def send_and_stream(
    srv: InProcessServer, thread_id: str, message: str, **kw: object
) -> grpc.aio.UnaryStreamCall:
    """The call, not yet read."""
    request = tpb.SendRequest(thread_id=thread_id, parts=[text(message)], **kw)  # type: ignore[arg-type]
    return srv.threads.SendAndStream(tpb.SendAndStreamRequest(send=request), timeout=30)


async def read_all(
    call: grpc.aio.UnaryStreamCall,
) -> tuple[runs_pb2.RunHandle, list[runs_pb2.RunEvent]]:
    """The handle (the first response) and every event after it."""
    responses = [r async for r in call]
    assert responses, "the call answered nothing"
    assert responses[0].WhichOneof("response") == "run"
    assert all(r.WhichOneof("response") == "event" for r in responses[1:])
    return responses[0].run, [r.event for r in responses[1:]]


async def rest_of(call: grpc.aio.UnaryStreamCall) -> list[runs_pb2.RunEvent]:
    """The events of a call already read with ``read()`` (the two styles do not mix)."""
    events = []
    while (response := await call.read()) is not grpc.aio.EOF:
        events.append(response.event)
    return events


async def test_the_first_response_is_the_handle_then_the_runs_events_as_stream_run_gives_them(
    database_url: str,
) -> None:
    async with serve_in_process(database_url, model=ScriptedModel(["Hello there"])) as srv:
        thread_id = await new_thread(srv)
        handle, events = await read_all(send_and_stream(srv, thread_id, "hi"))
        assert handle.run_id.startswith("run_")
        assert handle.thread_id == thread_id
        assert handle.message_id.startswith("msg_")
        assert kinds(events) == [
            "status:running",
            "start_step",
            "text_start",
            "text_delta",
            "text_delta",
            "text_end",
            "finish_step",
            "message",
            "finish",
            "status:completed",
        ]
        # The same events, byte for byte, as StreamRun gives them from the log.
        assert [e.SerializeToString() for e in events] == [
            e.SerializeToString() for e in await collect(srv, handle.run_id)
        ]
        assert await transcript(srv, thread_id) == [("user", "hi"), ("assistant", "Hello there")]


async def first_error(call: grpc.aio.UnaryStreamCall) -> grpc.aio.AioRpcError:
    """The status a call fails with before its first response."""
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await call.read()
    return failed.value


async def test_bad_input_names_the_field_under_send_and_accepts_nothing(sqlite_url: str) -> None:
    async with serve_in_process(sqlite_url) as srv:
        thread_id = await new_thread(srv)
        cases = [
            (tpb.SendRequest(parts=[text("hi")]), "send.thread_id"),
            (tpb.SendRequest(thread_id=thread_id), "send.parts"),
            (
                tpb.SendRequest(thread_id=thread_id, parts=[text("hi")], delivery=99),  # type: ignore[arg-type]
                "send.delivery",
            ),
        ]
        for request, field in cases:
            call = srv.threads.SendAndStream(tpb.SendAndStreamRequest(send=request))
            code, reason, violations = rich_status(await first_error(call))
            assert code == grpc.StatusCode.INVALID_ARGUMENT, field
            assert reason == "INVALID_ARGUMENT", field
            assert [f for f, _ in violations] == [field]
        unknown = srv.threads.SendAndStream(
            tpb.SendAndStreamRequest(
                send=tpb.SendRequest(thread_id="thr_" + "0" * 26, parts=[text("hi")])
            )
        )
        assert rich_status(await first_error(unknown))[:2] == (
            grpc.StatusCode.NOT_FOUND,
            "THREAD_NOT_FOUND",
        )
        assert await transcript(srv, thread_id) == []
        runs = await srv.runs.ListRuns(run_service_pb2.ListRunsRequest(thread_id=thread_id))
        assert list(runs.runs) == []


@asynccontextmanager
async def busy_thread(
    database_url: str, held: str, then: str
) -> AsyncIterator[tuple[InProcessServer, str, runs_pb2.RunHandle, asyncio.Event]]:
    """A thread whose run (sent "first") holds mid-step with ``held`` until the event is set.

    The model answers ``then`` to the next call.
    """
    release = asyncio.Event()
    replies: Iterator[ScriptStep] = iter([HeldStep(held, release), then])
    model = ScriptedModel(lambda call: next(replies))
    async with serve_in_process(database_url, model=model) as srv:
        thread_id = await new_thread(srv)
        busy = await send(srv, thread_id, "first")
        await wait_run(srv, busy.run_id, statuses={runs_pb2.RUN_STATUS_RUNNING})
        yield srv, thread_id, busy, release


async def test_a_message_queued_behind_a_busy_run_streams_its_own_run_when_it_starts(
    database_url: str,
) -> None:
    async with busy_thread(database_url, "busy reply", "second answer") as (
        srv,
        thread_id,
        busy,
        release,
    ):
        call = send_and_stream(srv, thread_id, "second")
        first = await call.read()
        assert first.run.status == runs_pb2.RUN_STATUS_QUEUED
        assert first.run.run_id != busy.run_id
        release.set()
        events = await rest_of(call)
        assert kinds(events)[0] == "status:running"
        assert kinds(events)[-1] == "status:completed"
        assert "".join(e.chunk.text_delta.text for e in events) == "second answer"
        assert await transcript(srv, thread_id) == [
            ("user", "first"),
            ("assistant", "busy reply"),
            ("user", "second"),
            ("assistant", "second answer"),
        ]


async def test_a_retry_with_the_same_request_id_streams_the_same_run_again(
    database_url: str,
) -> None:
    model = ScriptedModel(["only once"])
    async with serve_in_process(database_url, model=model) as srv:
        thread_id = await new_thread(srv)
        handle, events = await read_all(send_and_stream(srv, thread_id, "hi", request_id="r-1"))
        again, replay = await read_all(send_and_stream(srv, thread_id, "hi", request_id="r-1"))
        assert again.run_id == handle.run_id
        assert again.message_id == handle.message_id
        assert [e.seq for e in replay] == [e.seq for e in events]
        assert len(model.calls) == 1
        assert await transcript(srv, thread_id) == [("user", "hi"), ("assistant", "only once")]


async def test_a_call_broken_after_the_handle_resumes_with_stream_run(database_url: str) -> None:
    release = asyncio.Event()
    model = ScriptedModel([HeldStep("one two three four", release)])
    async with serve_in_process(database_url, model=model) as srv:
        thread_id = await new_thread(srv)
        call = send_and_stream(srv, thread_id, "hi")
        handle = (await call.read()).run
        seen: list[runs_pb2.RunEvent] = []
        while not seen or seen[-1].chunk.WhichOneof("chunk") != "text_delta":
            seen.append((await call.read()).event)
        call.cancel()  # the client goes away mid-step
        release.set()
        rest = await collect(srv, handle.run_id, after_seq=seen[-1].seq)
        whole = await collect(srv, handle.run_id)
        assert [e.seq for e in seen + rest] == [e.seq for e in whole]
        assert kinds(rest)[-1] == "status:completed"
        assert await transcript(srv, thread_id) == [
            ("user", "hi"),
            ("assistant", "one two three four"),
        ]


async def test_a_steered_message_streams_the_active_run_from_its_first_event(
    database_url: str,
) -> None:
    async with busy_thread(database_url, "first step", "after the steer") as (
        srv,
        thread_id,
        busy,
        release,
    ):
        call = send_and_stream(srv, thread_id, "also this", delivery=tpb.DELIVERY_STEER)
        first = await call.read()
        assert first.run.run_id == busy.run_id
        release.set()
        events = await rest_of(call)
        assert kinds(events)[0] == "status:running"
        assert kinds(events)[-1] == "status:completed"
        assert [e.seq for e in events] == [e.seq for e in await collect(srv, busy.run_id)]
