"""Durable runs through the gRPC API, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import itertools

import grpc
import pytest

from pai.v1 import run_service_pb2, runs_pb2, threads_pb2
from pai.v1 import thread_service_pb2 as tpb
from pai_grpc.models import HeldStep, ScriptedModel
from pai_grpc.testing import serve_in_process
from tests.runtime.support import (
    collect,
    kinds,
    new_thread,
    rpc_error,
    send,
    transcript,
    wait_run,
)

SLOW_TEXT = " ".join(f"w{i}" for i in range(40))


@pytest.mark.rule("RT-04")
@pytest.mark.rule("RT-03")
async def test_disconnect_and_resume_receives_every_later_chunk_once(database_url: str) -> None:
    model = ScriptedModel([SLOW_TEXT], chunk_delay=0.02)
    async with serve_in_process(database_url, model=model) as srv:
        thread_id = await new_thread(srv)
        handle = await send(srv, thread_id, "go")
        call = srv.runs.StreamRun(run_service_pb2.StreamRunRequest(run_id=handle.run_id))
        seen = []
        async for response in call:
            seen.append(response.event)
            if len(seen) == 6:
                break
        call.cancel()  # the client disconnects mid-stream
        last = seen[-1].seq
        await asyncio.sleep(0.2)
        rest = await collect(srv, handle.run_id, after_seq=last)
        assert [e.seq for e in rest] == list(range(last + 1, last + 1 + len(rest)))
        assert kinds(rest)[-1] == "status:completed"
        full = await collect(srv, handle.run_id)
        assert [e.seq for e in seen + rest] == [e.seq for e in full]
        assert [e.SerializeToString() for e in seen + rest] == [e.SerializeToString() for e in full]
        deltas = "".join(
            e.chunk.text_delta.text for e in full if e.chunk.WhichOneof("chunk") == "text_delta"
        )
        assert deltas == SLOW_TEXT


@pytest.mark.rule("RT-04")
async def test_the_run_finishes_with_no_client_attached(database_url: str) -> None:
    model = ScriptedModel(["all by myself"], chunk_delay=0.02)
    async with serve_in_process(database_url, model=model) as srv:
        thread_id = await new_thread(srv)
        handle = await send(srv, thread_id, "hello")  # nobody ever streams it
        run = await wait_run(srv, handle.run_id)
        assert run.status == runs_pb2.RUN_STATUS_COMPLETED
        assert await transcript(srv, thread_id) == [
            ("user", "hello"),
            ("assistant", "all by myself"),
        ]


@pytest.mark.rule("RT-09")
@pytest.mark.rule("RT-02")
async def test_fifty_concurrent_sends_run_one_at_a_time_in_order(database_url: str) -> None:
    model = ScriptedModel(lambda call: "ok")
    async with serve_in_process(database_url, model=model) as srv:
        thread_id = await new_thread(srv)
        handles = await asyncio.gather(*(send(srv, thread_id, f"m{i:02d}") for i in range(50)))
        assert len({h.run_id for h in handles}) == 50
        for h in handles:
            await wait_run(srv, h.run_id, timeout=60)
        runs = await srv.store.list_runs("default", thread_id, limit=100)
        ordered = sorted(runs.items, key=lambda r: r.thread_seq)
        assert all(r.status == "completed" for r in ordered)
        for before, after in itertools.pairwise(ordered):
            assert before.ended_at is not None
            assert after.started_at is not None
            assert before.ended_at <= after.started_at  # one at a time, in queue order
        # Each user message exactly once, in submission (queue) order, each answered.
        by_run = {h.run_id: i for i, h in enumerate(handles)}
        expected_users = [f"m{by_run[r.id]:02d}" for r in ordered]
        assert await transcript(srv, thread_id) == [
            turn for u in expected_users for turn in (("user", u), ("assistant", "ok"))
        ]


async def test_trigger_runs_with_an_input_and_no_user_message(database_url: str) -> None:
    model = ScriptedModel(lambda call: f"seen {len(call.messages)} messages")
    async with serve_in_process(database_url, model=model) as srv:
        thread_id = await new_thread(srv)
        from google.protobuf import struct_pb2

        value = struct_pb2.Value()
        value.struct_value.update({"job": "digest"})
        handle = (
            await srv.threads.Trigger(tpb.TriggerRequest(thread_id=thread_id, input=value))
        ).run
        assert not handle.HasField("message_id")
        run = await wait_run(srv, handle.run_id)
        assert run.initiator == runs_pb2.RUN_INITIATOR_TRIGGER
        assert run.execution.operation == runs_pb2.RUN_OPERATION_TRIGGER
        assert await transcript(srv, thread_id) == [("assistant", "seen 0 messages")]
        record = await srv.store.get_run("default", handle.run_id)
        assert record is not None
        assert record.input == {"trigger": {"job": "digest"}}


async def test_regenerate_removes_the_target_and_answers_again(database_url: str) -> None:
    answers = iter(["first answer", "second answer"])
    model = ScriptedModel(lambda call: next(answers))
    async with serve_in_process(database_url, model=model) as srv:
        thread_id = await new_thread(srv)
        first = await send(srv, thread_id, "question")
        await wait_run(srv, first.run_id)
        messages = (
            await srv.threads.ListMessages(tpb.ListMessagesRequest(thread_id=thread_id))
        ).messages
        user_id, answer_id = messages[0].id, messages[1].id
        result = await srv.threads.Regenerate(
            tpb.RegenerateRequest(thread_id=thread_id, message_id=answer_id)
        )
        assert list(result.removed_message_ids) == [answer_id]
        assert list(result.retained_message_ids) == [user_id]
        run = await wait_run(srv, result.run.run_id)
        assert run.initiator == runs_pb2.RUN_INITIATOR_REGENERATE
        assert run.execution.operation == runs_pb2.RUN_OPERATION_REGENERATE
        assert await transcript(srv, thread_id) == [
            ("user", "question"),
            ("assistant", "second answer"),
        ]
        # Only assistant messages can be regenerated, and only existing ones.
        err = await rpc_error(
            srv.threads.Regenerate(tpb.RegenerateRequest(thread_id=thread_id, message_id=user_id))
        )
        assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
        err = await rpc_error(
            srv.threads.Regenerate(
                tpb.RegenerateRequest(
                    thread_id=thread_id, message_id="msg_01M8MJV00594YT84ABF026CWB8"
                )
            )
        )
        assert err.code() == grpc.StatusCode.NOT_FOUND
        err = await rpc_error(
            srv.threads.Regenerate(
                tpb.RegenerateRequest(thread_id=thread_id, message_id=answer_id, etag='"1"')
            )
        )
        assert err.code() in (grpc.StatusCode.ABORTED, grpc.StatusCode.NOT_FOUND)


async def test_regenerate_on_a_busy_thread_is_queued_and_applied_when_it_starts(
    database_url: str,
) -> None:
    # The busy run holds mid-step until the regeneration is queued behind it.
    release = asyncio.Event()
    replies = iter(["a1", HeldStep("slow reply " * 5, release), "a1 again"])
    model = ScriptedModel(lambda call: next(replies))
    async with serve_in_process(database_url, model=model) as srv:
        thread_id = await new_thread(srv)
        first = await send(srv, thread_id, "q1")
        await wait_run(srv, first.run_id)
        answer_id = (
            (await srv.threads.ListMessages(tpb.ListMessagesRequest(thread_id=thread_id)))
            .messages[1]
            .id
        )
        busy = await send(srv, thread_id, "q2")
        await wait_run(srv, busy.run_id, statuses={runs_pb2.RUN_STATUS_RUNNING})
        queued = await srv.threads.Regenerate(
            tpb.RegenerateRequest(thread_id=thread_id, message_id=answer_id)
        )
        assert list(queued.removed_message_ids) == []  # applied when its run starts
        release.set()
        await wait_run(srv, busy.run_id)
        await wait_run(srv, queued.run.run_id)
        assert await transcript(srv, thread_id) == [("user", "q1"), ("assistant", "a1 again")]


async def test_cancel_a_running_run_aborts_the_step_and_promotes_the_queue(
    database_url: str,
) -> None:
    replies = iter([SLOW_TEXT, "next one"])
    model = ScriptedModel(lambda call: next(replies), chunk_delay=0.05)
    async with serve_in_process(database_url, model=model) as srv:
        thread_id = await new_thread(srv)
        running = await send(srv, thread_id, "long")
        queued = await send(srv, thread_id, "after")
        events = srv.runs.StreamRun(run_service_pb2.StreamRunRequest(run_id=running.run_id))
        async for response in events:
            if response.event.chunk.WhichOneof("chunk") == "text_delta":
                break
        cancelled = (
            await srv.runs.CancelRun(
                run_service_pb2.CancelRunRequest(run_id=running.run_id, reason="user")
            )
        ).run
        assert cancelled.status == runs_pb2.RUN_STATUS_CANCELLED
        assert cancelled.outcome == runs_pb2.RUN_OUTCOME_CANCELLED
        assert cancelled.reason == "user"
        tail = [r.event async for r in events]
        assert kinds(tail)[-2:] == ["abort", "status:cancelled"]
        await wait_run(srv, queued.run_id)
        # The partial step was never committed; the queued run ran next.
        assert await transcript(srv, thread_id) == [
            ("user", "long"),
            ("user", "after"),
            ("assistant", "next one"),
        ]
        err = await rpc_error(
            srv.runs.CancelRun(run_service_pb2.CancelRunRequest(run_id=running.run_id))
        )
        assert err.code() == grpc.StatusCode.FAILED_PRECONDITION


async def test_cancel_a_queued_run_skips_it(database_url: str) -> None:
    # The first run holds mid-step until the run queued behind it is cancelled.
    release = asyncio.Event()
    replies = iter([HeldStep("one two three four", release), "never", "third"])
    model = ScriptedModel(lambda call: next(replies))
    async with serve_in_process(database_url, model=model) as srv:
        thread_id = await new_thread(srv)
        first = await send(srv, thread_id, "a")
        second = await send(srv, thread_id, "b")
        third = await send(srv, thread_id, "c")
        cancelled = (
            await srv.runs.CancelRun(run_service_pb2.CancelRunRequest(run_id=second.run_id))
        ).run
        assert cancelled.status == runs_pb2.RUN_STATUS_CANCELLED
        release.set()
        events = await collect(srv, second.run_id)
        assert kinds(events) == ["status:cancelled"]
        await wait_run(srv, third.run_id)
        assert (await wait_run(srv, first.run_id)).status == runs_pb2.RUN_STATUS_COMPLETED
        assert await transcript(srv, thread_id) == [
            ("user", "a"),
            ("assistant", "one two three four"),
            ("user", "c"),
            ("assistant", "never"),
        ]


async def test_steering_is_taken_in_at_the_next_step_boundary(database_url: str) -> None:
    # The first step holds after its first delta until the steering message is in.
    release = asyncio.Event()

    def reply(call):  # type: ignore[no-untyped-def]
        from pai_grpc.models import last_user_text

        text = f"re: {last_user_text(call.messages)} " + "x " * 10
        return HeldStep(text, release) if len(model.calls) == 1 else text

    model = ScriptedModel(reply)
    async with serve_in_process(database_url, model=model) as srv:
        thread_id = await new_thread(srv)
        handle = await send(srv, thread_id, "first")
        # Steer once the first step is streaming (its first text delta is out),
        # so the message can only be taken in at the boundary after that step.
        stream = srv.runs.StreamRun(run_service_pb2.StreamRunRequest(run_id=handle.run_id))
        async for response in stream:
            if response.event.chunk.WhichOneof("chunk") == "text_delta":
                break
        stream.cancel()
        steer = await send(srv, thread_id, "actually, this", delivery=tpb.DELIVERY_STEER)
        assert steer.run_id == handle.run_id  # the active run takes it in
        assert steer.message_id
        mid = await transcript(srv, thread_id)
        assert ("user", "actually, this") in mid  # committed at once
        release.set()
        run = await wait_run(srv, handle.run_id)
        assert run.step_count == 2
        texts = await transcript(srv, thread_id)
        assert [r for r, _ in texts] == ["user", "user", "assistant", "assistant"]
        assert texts[2][1].startswith("re: first")  # the step under way finished first
        assert texts[3][1].startswith("re: actually, this")


async def test_lease_and_run_identity_stay_stable_across_the_run(database_url: str) -> None:
    model = ScriptedModel(["hi"])
    async with serve_in_process(database_url, model=model) as srv:
        thread_id = await new_thread(srv)
        handle = await send(srv, thread_id, "x")
        run = await wait_run(srv, handle.run_id)
        assert run.id == handle.run_id
        assert run.thread_id == thread_id
        assert run.initiator == runs_pb2.RUN_INITIATOR_SEND
        assert run.execution.operation == runs_pb2.RUN_OPERATION_SEND
        assert run.start_time.ToDatetime() <= run.execution.start_time.ToDatetime()
        assert run.attempts == 1
        thread = (await srv.threads.GetThread(tpb.GetThreadRequest(thread_id=thread_id))).thread
        assert thread.status == threads_pb2.THREAD_STATUS_IDLE
