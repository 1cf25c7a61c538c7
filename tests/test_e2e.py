"""One message end to end through a real server and client stub."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import grpc
import pytest

from pai.v1 import parts_pb2, run_service_pb2, runs_pb2, threads_pb2
from pai.v1 import thread_service_pb2 as tpb
from pai_grpc.domain import FinishStepChunk, TextDeltaChunk, TextEndChunk, TextStartChunk, Usage
from pai_grpc.models import ScriptedModel
from pai_grpc.testing import InProcessServer, serve_in_process


def text(s: str) -> parts_pb2.MessagePart:
    return parts_pb2.MessagePart(text=parts_pb2.TextPart(text=s))


async def collect(srv: InProcessServer, run_id: str, after_seq: int = 0) -> list[runs_pb2.RunEvent]:
    events = []
    async for response in srv.runs.StreamRun(
        run_service_pb2.StreamRunRequest(run_id=run_id, after_seq=after_seq), timeout=20
    ):
        events.append(response.event)
    return events


def kinds(events: list[runs_pb2.RunEvent]) -> list[str]:
    out = []
    for e in events:
        kind = e.WhichOneof("event")
        if kind == "chunk":
            out.append(e.chunk.WhichOneof("chunk"))
        elif kind == "status":
            out.append("status:" + runs_pb2.RunStatus.Name(e.status.status))
        else:
            out.append(kind)
    return out


async def test_send_streams_and_commits_the_assistant_step(sqlite_url: str) -> None:
    model = ScriptedModel(
        [
            [
                TextStartChunk(id="a"),
                TextDeltaChunk(id="a", text="Hello"),
                TextDeltaChunk(id="a", text=", world"),
                TextEndChunk(id="a"),
                FinishStepChunk(usage=Usage(input_tokens=7, output_tokens=3), finish_reason="stop"),
            ]
        ]
    )
    async with serve_in_process(sqlite_url, model=model) as srv:
        created = await srv.threads.CreateThread(tpb.CreateThreadRequest())
        thread_id = created.thread.id
        assert thread_id.startswith("thr_")
        assert created.thread.status == threads_pb2.THREAD_STATUS_IDLE

        sent = await srv.threads.Send(tpb.SendRequest(thread_id=thread_id, parts=[text("hi")]))
        assert sent.run.run_id.startswith("run_")
        assert sent.run.thread_id == thread_id
        assert sent.run.message_id.startswith("msg_")

        events = await collect(srv, sent.run.run_id)
        assert kinds(events) == [
            "status:RUN_STATUS_RUNNING",
            "start_step",
            "text_start",
            "text_delta",
            "text_delta",
            "text_end",
            "finish_step",
            "message",
            "finish",
            "status:RUN_STATUS_COMPLETED",
        ]
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        deltas = [e.chunk.text_delta for e in events if e.chunk.WhichOneof("chunk") == "text_delta"]
        assert {d.id for d in deltas} == {"a"}
        assert "".join(d.text for d in deltas) == "Hello, world"
        finish_step = next(e.chunk.finish_step for e in events if e.chunk.HasField("finish_step"))
        assert finish_step.usage.output_tokens == 3
        assert finish_step.finish_reason == 1  # FINISH_REASON_STOP

        listed = await srv.threads.ListMessages(tpb.ListMessagesRequest(thread_id=thread_id))
        assert [m.role for m in listed.messages] == [
            threads_pb2.MESSAGE_ROLE_USER,
            threads_pb2.MESSAGE_ROLE_ASSISTANT,
        ]
        assert [m.position for m in listed.messages] == [0, 1]
        assert listed.messages[0].id == sent.run.message_id
        assistant = listed.messages[1]
        assert [p.WhichOneof("part") for p in assistant.parts] == ["step_start", "text"]
        assert assistant.parts[1].text.text == "Hello, world"
        assert assistant.run_id == sent.run.run_id
        committed = next(e.message for e in events if e.WhichOneof("event") == "message")
        assert committed == assistant

        run = (await srv.runs.GetRun(run_service_pb2.GetRunRequest(run_id=sent.run.run_id))).run
        assert run.status == runs_pb2.RUN_STATUS_COMPLETED
        assert run.outcome == runs_pb2.RUN_OUTCOME_COMPLETED
        assert run.initiator == runs_pb2.RUN_INITIATOR_SEND
        assert run.step_count == 1
        assert run.usage.input_tokens == 7
        assert run.last_seq == len(events)
        assert run.HasField("start_time")
        assert run.HasField("end_time")

        thread = (await srv.threads.GetThread(tpb.GetThreadRequest(thread_id=thread_id))).thread
        assert thread.status == threads_pb2.THREAD_STATUS_IDLE
        assert thread.message_count == 2
        assert not thread.HasField("active_run_id")


@pytest.mark.rule("RT-02")
async def test_send_returns_before_the_model_finishes(sqlite_url: str) -> None:
    """The handle arrives while the model is still streaming (slow scripted model)."""
    model = ScriptedModel(["one two three four"], chunk_delay=0.3)
    async with serve_in_process(sqlite_url, model=model) as srv:
        thread_id = (await srv.threads.CreateThread(tpb.CreateThreadRequest())).thread.id
        sent = await srv.threads.Send(tpb.SendRequest(thread_id=thread_id, parts=[text("go")]))
        run = (await srv.runs.GetRun(run_service_pb2.GetRunRequest(run_id=sent.run.run_id))).run
        assert run.status in (runs_pb2.RUN_STATUS_QUEUED, runs_pb2.RUN_STATUS_RUNNING)
        events = await collect(srv, sent.run.run_id)
        assert kinds(events)[-1] == "status:RUN_STATUS_COMPLETED"


async def test_stream_resumes_after_a_sequence_number(server: InProcessServer) -> None:
    thread_id = (await server.threads.CreateThread(tpb.CreateThreadRequest())).thread.id
    sent = await server.threads.Send(tpb.SendRequest(thread_id=thread_id, parts=[text("hi")]))
    full = await collect(server, sent.run.run_id)
    tail = await collect(server, sent.run.run_id, after_seq=3)
    assert tail == full[3:]


async def test_two_threads_run_concurrently(server: InProcessServer) -> None:
    ids = [
        (await server.threads.CreateThread(tpb.CreateThreadRequest())).thread.id for _ in range(2)
    ]
    sends = await asyncio.gather(
        *(server.threads.Send(tpb.SendRequest(thread_id=t, parts=[text(t)])) for t in ids)
    )
    results = await asyncio.gather(*(collect(server, s.run.run_id) for s in sends))
    for events in results:
        assert kinds(events)[-1] == "status:RUN_STATUS_COMPLETED"


async def test_a_second_send_queues_behind_the_active_run(sqlite_url: str) -> None:
    model = ScriptedModel(["first reply", "second reply"], chunk_delay=0.05)
    async with serve_in_process(sqlite_url, model=model) as srv:
        thread_id = (await srv.threads.CreateThread(tpb.CreateThreadRequest())).thread.id
        first = await srv.threads.Send(tpb.SendRequest(thread_id=thread_id, parts=[text("one")]))
        second = await srv.threads.Send(tpb.SendRequest(thread_id=thread_id, parts=[text("two")]))
        # Queued behind a busy thread: no message is committed yet.
        assert not second.run.HasField("message_id")
        await collect(srv, first.run.run_id)
        events = await collect(srv, second.run.run_id)
        assert kinds(events)[-1] == "status:RUN_STATUS_COMPLETED"
        listed = await srv.threads.ListMessages(tpb.ListMessagesRequest(thread_id=thread_id))
        texts = [m.parts[-1].text.text for m in listed.messages]
        assert texts == ["one", "first reply", "two", "second reply"]


async def test_a_model_error_fails_the_run_with_its_reason(sqlite_url: str) -> None:
    from pai_grpc.errors import ModelError

    model = ScriptedModel([ModelError("the provider is overloaded", reason="PROVIDER_OVERLOADED")])
    async with serve_in_process(sqlite_url, model=model) as srv:
        thread_id = (await srv.threads.CreateThread(tpb.CreateThreadRequest())).thread.id
        sent = await srv.threads.Send(tpb.SendRequest(thread_id=thread_id, parts=[text("hi")]))
        events = await collect(srv, sent.run.run_id)
        assert kinds(events)[-2:] == ["error", "status:RUN_STATUS_FAILED"]
        run = (await srv.runs.GetRun(run_service_pb2.GetRunRequest(run_id=sent.run.run_id))).run
        assert run.error.reason == "PROVIDER_OVERLOADED"
        assert "overloaded" in run.error.message
        listed = await srv.threads.ListMessages(tpb.ListMessagesRequest(thread_id=thread_id))
        assert len(listed.messages) == 1  # only the user message; nothing pretends to answer
        thread = (await srv.threads.GetThread(tpb.GetThreadRequest(thread_id=thread_id))).thread
        assert thread.status == threads_pb2.THREAD_STATUS_IDLE


async def test_services_the_server_does_not_host_answer_unimplemented(
    server: InProcessServer,
) -> None:
    # ToolService is implemented by tool servers, never by the runtime itself.
    from pai.v1 import tool_service_pb2, tool_service_pb2_grpc

    tools = tool_service_pb2_grpc.ToolServiceStub(server.channel)
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await tools.ListTools(tool_service_pb2.ListToolsRequest())
    assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_testing_helper_module_is_importable_without_a_loop() -> None:
    # A fresh interpreter, so no event loop exists: importing must not need one,
    # and serve_in_process only builds an async context manager until entered.
    code = (
        "import asyncio\n"
        "from pai_grpc import testing\n"
        "cm = testing.serve_in_process('sqlite:///unused.db')\n"
        "assert hasattr(cm, '__aenter__') and hasattr(cm, '__aexit__'), cm\n"
        "try:\n"
        "    asyncio.get_running_loop()\n"
        "except RuntimeError:\n"
        "    print('no loop')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "no loop"
