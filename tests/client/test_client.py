"""The Python client against a real in-process server: typed objects, verbs, errors, retries."""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import grpc
import pytest
from pydantic import BaseModel

from pai_grpc.client import (
    ConflictError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    PaiClient,
    ResourceExhaustedError,
    RetryPolicy,
    RunHandle,
    ThreadHandle,
    ThreadUpdate,
    UnavailableError,
)
from pai_grpc.domain import (
    ChunkEvent,
    Message,
    MessageEvent,
    PendingActionEvent,
    Run,
    RunEvent,
    StatusEvent,
    TextDeltaChunk,
    TextPart,
    Thread,
    ToolPart,
)
from pai_grpc.models import ModelCall, ScriptedModel, tool_call_step
from pai_grpc.runtime import DEFAULT_AGENT, Agent, AgentRegistry
from pai_grpc.testing import InProcessServer, serve_in_process
from pai_grpc.tools import Tool, ToolContext, client_tool, tool
from tests.client.proxy import CuttableProxy


class City(BaseModel):
    city: str


@tool(approval=True, description="Delete a file.")
async def delete_file(value: City, ctx: ToolContext) -> str:
    return f"deleted {value.city}"


def calls_then_answers(tool_name: str, tool_input: Any) -> ScriptedModel:
    """A model that calls ``tool_name`` first, then says what the tool returned."""

    def script(call: ModelCall) -> Any:
        for message in call.messages:
            for part in getattr(message, "content", []):
                if getattr(part, "tool_call_id", None) == "c1" and hasattr(part, "output"):
                    return f"tool said {part.output.type}"
        return tool_call_step(("c1", tool_name, tool_input))

    return ScriptedModel(script)


@asynccontextmanager
async def serving(
    sqlite_url: str, model: ScriptedModel | None = None, tools: list[Tool] | None = None, **kw: Any
) -> AsyncIterator[InProcessServer]:
    agents = None
    if model is not None:
        agents = AgentRegistry([Agent(name=DEFAULT_AGENT, model=model, tools=tools or [])])
    async with serve_in_process(sqlite_url, agents=agents, sends_per_second=0, **kw) as srv:
        yield srv


async def events_until_waiting(run: RunHandle) -> list[RunEvent]:
    seen: list[RunEvent] = []
    async for event in run.stream():
        seen.append(event)
        if isinstance(event.payload, StatusEvent) and event.payload.status == "waiting":
            return seen
    raise AssertionError(f"the run never waited: {seen}")


async def test_send_streams_typed_events_and_reads_the_reply(sqlite_url: str) -> None:
    async with serving(sqlite_url) as srv, PaiClient(srv.address) as client:
        thread = await client.create_thread(metadata={"topic": "greeting"})
        assert isinstance(thread, ThreadHandle)
        assert isinstance(thread.info, Thread)
        assert thread.info.metadata == {"topic": "greeting"}
        run = await thread.send("hello")
        assert isinstance(run, RunHandle)
        assert run.thread_id == thread.id
        assert run.message_id is not None

        events = [event async for event in run.stream()]
        assert all(isinstance(e, RunEvent) for e in events)
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        last = events[-1].payload
        assert isinstance(last, StatusEvent)
        assert last.status == "completed"
        streamed = "".join(
            e.payload.chunk.text
            for e in events
            if isinstance(e.payload, ChunkEvent) and isinstance(e.payload.chunk, TextDeltaChunk)
        )
        assert "You said: hello" in streamed
        assert await run.text() == streamed

        # Resuming from a cursor gives exactly the rest.
        cursor = events[2].seq
        assert [e async for e in run.stream(after_seq=cursor)] == events[3:]

        finished = await run.wait()
        assert isinstance(finished, Run)
        assert finished.status == "completed"
        assert finished.last_seq == events[-1].seq

        transcript = [m async for m in thread.messages()]
        assert all(isinstance(m, Message) for m in transcript)
        assert [m.role for m in transcript] == ["user", "assistant"]
        assert transcript[0].parts == [TextPart(text="hello")]
        committed = [e.payload.message for e in events if isinstance(e.payload, MessageEvent)]
        assert [m.id for m in committed] == [transcript[1].id]  # the run's assistant step
        assert transcript[0].id == run.message_id


async def test_pagination_is_an_async_iterator_over_every_page(sqlite_url: str) -> None:
    async with serving(sqlite_url) as srv, PaiClient(srv.address) as client:
        created = [await client.create_thread() for _ in range(3)]
        listed = [t async for t in client.threads(page_size=1)]
        assert [t.id for t in listed] == [t.id for t in reversed(created)]  # newest first

        thread = created[0]
        runs = [await thread.send(f"m{i}") for i in range(3)]
        for run in runs:
            await run.wait()
        got = [r async for r in thread.runs(page_size=2)]
        assert [r.id for r in got] == [r.id for r in reversed(runs)]
        newest_first = [m async for m in thread.messages(order="desc", page_size=2)]
        assert [m.position for m in newest_first] == [5, 4, 3, 2, 1, 0]


async def test_approval_and_denial_through_the_run_handle(sqlite_url: str) -> None:
    model = calls_then_answers("delete_file", {"city": "notes.txt"})
    async with (
        serving(sqlite_url, model, [delete_file]) as srv,
        PaiClient(srv.address) as client,
    ):
        for approve in (True, False):
            thread = await client.create_thread()
            run = await thread.send("clean up")
            seen = await events_until_waiting(run)
            (action,) = [
                e.payload.action for e in seen if isinstance(e.payload, PendingActionEvent)
            ]
            assert action.kind == "approval"
            assert action.tool_name == "delete_file"
            assert [a.id for a in await run.pending_actions()] == [action.id]
            if approve:
                await run.approve(action)
            else:
                await run.deny(action.id, reason="not today")
            done = await run.wait()
            assert done.status == "completed"
            stored = [m async for m in thread.messages() if m.run_id == run.id]
            tool_part = next(p for m in stored for p in m.parts if isinstance(p, ToolPart))
            assert tool_part.approval is not None
            assert tool_part.approval.approved is approve
            assert tool_part.state == ("output-available" if approve else "output-denied")
            assert (await run.text()).startswith("tool said")
            # An answered action cannot be answered again: a typed error with the reason.
            with pytest.raises(FailedPreconditionError) as caught:
                await run.approve(action)
            assert caught.value.reason == "PENDING_ACTION_NOT_OPEN"


async def test_a_client_tool_result_resumes_the_run(sqlite_url: str) -> None:
    picker = client_tool("pick", description="Pick", input_schema={"type": "object"})
    model = calls_then_answers("pick", {})
    async with serving(sqlite_url, model, [picker]) as srv, PaiClient(srv.address) as client:
        run = await (await client.create_thread()).send("pick one")
        seen = await events_until_waiting(run)
        (action,) = [e.payload.action for e in seen if isinstance(e.payload, PendingActionEvent)]
        assert action.kind == "client_tool"
        await run.submit_tool_result(action, {"color": "blue"})
        assert (await run.wait()).status == "completed"
        assert await run.text() == "tool said json"


async def test_cancel_ends_a_waiting_run(sqlite_url: str) -> None:
    picker = client_tool("pick", description="Pick", input_schema={"type": "object"})
    async with (
        serving(sqlite_url, calls_then_answers("pick", {}), [picker]) as srv,
        PaiClient(srv.address) as client,
    ):
        run = await (await client.create_thread()).send("pick one")
        await events_until_waiting(run)
        cancelled = await run.cancel("changed my mind")
        assert cancelled.status == "cancelled"
        assert (await run.wait()).status == "cancelled"


async def test_errors_are_typed_and_carry_reason_violations_and_retry_delay(
    sqlite_url: str,
) -> None:
    async with serving(sqlite_url) as srv, PaiClient(srv.address) as client:
        with pytest.raises(NotFoundError) as missing:
            await client.get_thread("thr_01J00000000000000000000000")
        assert missing.value.code == grpc.StatusCode.NOT_FOUND
        assert missing.value.reason == "THREAD_NOT_FOUND"
        assert missing.value.metadata == {"thread_id": "thr_01J00000000000000000000000"}

        thread = await client.create_thread()
        with pytest.raises(InvalidArgumentError) as bad:
            await thread.send([])
        assert bad.value.violations, "BadRequest field violations are parsed"
        assert bad.value.violations[0].field.startswith("parts")

    async with (
        serve_in_process(sqlite_url, sends_per_second=0.001, send_burst=1) as srv,
        PaiClient(srv.address) as client,
    ):
        thread = await client.create_thread()
        await thread.send("first")
        with pytest.raises(ResourceExhaustedError) as limited:
            await thread.send("second")
        assert limited.value.retry_after is not None
        assert limited.value.retry_after > 1


class LoseFirstReply(grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    """The server handles the first call of ``method``, but its reply never arrives."""

    def __init__(self, method: str) -> None:
        self.method = method
        self.lost = 0

    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        call = await continuation(details, request)
        method = details.method.decode() if isinstance(details.method, bytes) else details.method
        if method.endswith(self.method) and not self.lost:
            await call  # the server did the work
            self.lost += 1
            raise grpc.aio.AioRpcError(
                grpc.StatusCode.UNAVAILABLE,
                grpc.aio.Metadata(),
                grpc.aio.Metadata(),
                details="connection reset before the reply",
            )
        return call


async def test_send_retried_after_a_lost_reply_starts_one_run(sqlite_url: str) -> None:
    lose = LoseFirstReply("/Send")
    fast = RetryPolicy(initial_backoff=0.01)
    async with (
        serving(sqlite_url) as srv,
        PaiClient(srv.address, interceptors=[lose], retry=fast) as client,
    ):
        thread = await client.create_thread()
        run = await thread.send("only once")
        assert lose.lost == 1  # the first reply really was lost, and the call retried
        await run.wait()
        runs = [r async for r in thread.runs()]
        assert [r.id for r in runs] == [run.id]
        users = [m async for m in thread.messages() if m.role == "user"]
        assert len(users) == 1

    # Without retries the same loss surfaces as a typed UNAVAILABLE.
    lose = LoseFirstReply("/CreateThread")
    async with (
        serving(sqlite_url) as srv,
        PaiClient(srv.address, interceptors=[lose], retry=RetryPolicy(max_attempts=1)) as client,
    ):
        with pytest.raises(UnavailableError):
            await client.create_thread()


async def test_the_sync_client_does_the_same_without_await(sqlite_url: str) -> None:
    async with serving(sqlite_url) as srv:

        def script() -> tuple[str, list[str], str]:
            with PaiClient.sync(srv.address) as client:
                thread = client.create_thread()
                run = thread.send("from a script")
                seqs = [e.seq for e in run.stream()]
                roles = [m.role for m in thread.messages()]
                assert run.wait().status == "completed"
                assert [t.id for t in client.threads()] == [thread.id]
                return run.text(), roles, str(seqs[-1] == run.get().last_seq)

        reply, roles, same = await asyncio.to_thread(script)
        assert "You said: from a script" in reply
        assert roles == ["user", "assistant"]
        assert same == "True"


async def test_watch_yields_the_head_then_its_changes(sqlite_url: str) -> None:
    async with serving(sqlite_url) as srv, PaiClient(srv.address) as client:
        thread = await client.create_thread()
        updates: list[ThreadUpdate] = []
        watching_from_here = asyncio.Event()

        async def watch() -> None:
            async for update in thread.watch():
                updates.append(update)
                watching_from_here.set()
                if update.change == "deleted":
                    return

        watching = asyncio.create_task(watch())
        # The snapshot comes once the server follows the thread: sent before it, the
        # whole run could land in the snapshot and leave no change to see.
        await asyncio.wait_for(watching_from_here.wait(), 30)
        run = await thread.send("hello")
        await run.wait()
        await thread.delete()
        await asyncio.wait_for(watching, 30)
        assert updates[0].change == "snapshot"
        assert updates[-1].change == "deleted"
        committed = [u for u in updates if u.change == "messages_committed"]
        assert committed, [u.change for u in updates]
        assert all(isinstance(u.thread, Thread) for u in updates)
        versions = [u.thread.version for u in updates[:-1]]
        assert versions == sorted(versions)


@pytest.mark.parametrize("one_call", [False, True], ids=["send-then-stream", "send-and-stream"])
async def test_a_stream_reset_mid_run_resumes_without_a_gap_or_a_duplicate(
    sqlite_url: str, one_call: bool
) -> None:
    """With SendAndStream the call that breaks is the one that sent; it resumes with StreamRun."""
    slow = ScriptedModel([" ".join(f"w{i}" for i in range(60))], chunk_delay=0.02)
    async with serving(sqlite_url, slow) as srv:
        proxy = CuttableProxy(srv.address)
        through = await proxy.start()
        try:
            async with PaiClient(through, retry=RetryPolicy(initial_backoff=0.01)) as client:
                thread = await client.create_thread()
                events: AsyncIterator[RunEvent]
                if one_call:
                    stream = await thread.send_and_stream("go")
                    run, events = stream.run, aiter(stream)
                else:
                    run = await thread.send("go")
                    events = run.stream()
                received: list[RunEvent] = []
                async for event in events:
                    received.append(event)
                    if len(received) == 10:
                        proxy.cut()  # the connection resets under the open stream
                assert proxy.connections >= 2, "the stream was reopened on a new connection"
                log = [e async for e in run.stream()]
        finally:
            await proxy.close()
    assert received == log  # the whole durable log, once, in order (no recovery: no skip)
    assert [e.seq for e in received] == list(range(1, len(received) + 1))


async def test_a_chat_session_without_a_terminal(sqlite_url: str) -> None:
    from pai_grpc._cli_chat import ChatSession

    model = calls_then_answers("delete_file", {"city": "notes.txt"})
    async with serving(sqlite_url, model, [delete_file]) as srv, PaiClient(srv.address) as client:
        typed = io.StringIO(
            "/history\n"
            "clean up\n"
            "maybe\n"  # not an answer: asked again
            "y\n"
            "/history\n"
            "/thread thr_01J00000000000000000000000\n"
            "/cancel\n"
            "/new\n"
            "/bogus\n"
        )
        out, err = io.StringIO(), io.StringIO()
        session = ChatSession(
            client, thread_id=None, agent="", stdin=typed, out=out, err=err, tty=False
        )
        assert await asyncio.wait_for(session.run(), 30) == 0  # end of input ends it
    shown, said = out.getvalue(), err.getvalue()
    assert shown.count('? allow delete_file {"city": "notes.txt"}?') == 2
    assert "tool said json" in shown
    assert 'assistant: [tool delete_file {"city": "notes.txt"} -> output-available' in shown
    assert "no thread yet" in said  # /history before the first message
    assert "NOT_FOUND THREAD_NOT_FOUND" in said  # /thread with an unknown id; the session goes on
    assert "nothing to cancel" in said
    assert said.count("thread thr_") == 2  # the first message's thread, then /new
    assert "unknown command /bogus" in said
    assert "\r" not in shown + said  # no spinner without a terminal


async def test_regenerate_and_metadata_through_the_thread_handle(sqlite_url: str) -> None:
    async with serving(sqlite_url) as srv, PaiClient(srv.address) as client:
        thread = await client.create_thread(metadata={"a": 1})
        first = await thread.send("hello")
        await first.wait()
        (answer,) = [m async for m in thread.messages() if m.role == "assistant"]
        again = await thread.regenerate(answer.id)
        assert again.id != first.id
        assert (await again.wait()).initiator == "regenerate"
        roles_and_ids = [(m.role, m.id) async for m in thread.messages()]
        assert [r for r, _ in roles_and_ids] == ["user", "assistant"]
        assert answer.id not in [i for _, i in roles_and_ids]

        merged = await thread.update_metadata({"b": 2})
        assert merged.metadata == {"a": 1, "b": 2}
        replaced = await thread.update_metadata({"c": 3}, replace=True, etag=merged.etag)
        assert replaced.metadata == {"c": 3}
        with pytest.raises(ConflictError):  # a stale etag: a typed ABORTED
            await thread.update_metadata({"d": 4}, etag=merged.etag)
