"""The Python client's send_and_stream: one call, then resumption with StreamRun, and retries."""

from __future__ import annotations

import asyncio

import pytest

from pai.v1 import run_service_pb2
from pai_grpc.client import InvalidArgumentError, PaiClient, RetryPolicy, RunHandle, RunStream
from pai_grpc.domain import ChunkEvent, RunEvent, StatusEvent, TextDeltaChunk
from tests.client.proxy import CuttableProxy
from tests.client.test_client import serving


def text_of(events: list[RunEvent]) -> str:
    return "".join(
        e.payload.chunk.text
        for e in events
        if isinstance(e.payload, ChunkEvent) and isinstance(e.payload.chunk, TextDeltaChunk)
    )


async def test_send_and_stream_gives_the_run_then_its_events(sqlite_url: str) -> None:
    async with serving(sqlite_url) as srv, PaiClient(srv.address) as client:
        thread = await client.create_thread()
        stream = await thread.send_and_stream("hello")
        assert isinstance(stream, RunStream)
        assert isinstance(stream.run, RunHandle)
        assert stream.run.thread_id == thread.id
        assert stream.run.message_id is not None
        events = [event async for event in stream]
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        last = events[-1].payload
        assert isinstance(last, StatusEvent)
        assert last.status == "completed"
        assert "You said: hello" in text_of(events)
        # The same events as streaming the run afterwards.
        assert [e async for e in stream.run.stream()] == events


async def test_a_handle_lost_on_the_way_is_retried_into_the_same_run(sqlite_url: str) -> None:
    async with serving(sqlite_url) as srv:
        proxy = CuttableProxy(srv.address)
        through = await proxy.start()
        try:
            async with PaiClient(through, retry=RetryPolicy(initial_backoff=0.01)) as client:
                thread = await client.create_thread()
                proxy.holding = True  # the server answers; the client hears nothing
                sending = asyncio.ensure_future(thread.send_and_stream("only once"))
                for _ in range(500):
                    listed = await srv.runs.ListRuns(
                        run_service_pb2.ListRunsRequest(thread_id=thread.id)
                    )
                    if listed.runs:
                        break
                    await asyncio.sleep(0.01)
                assert len(listed.runs) == 1, "the server took the message"
                assert not sending.done()
                proxy.cut()  # the connection drops before the handle arrived
                stream = await asyncio.wait_for(sending, 30)
                events = [e async for e in stream]
                assert stream.run.id == listed.runs[0].id
                assert "You said: only once" in text_of(events)
                runs = [r async for r in thread.runs()]
                assert [r.id for r in runs] == [stream.run.id]
                users = [m async for m in thread.messages() if m.role == "user"]
                assert len(users) == 1
        finally:
            await proxy.close()


async def test_bad_input_is_a_typed_error_naming_the_field(sqlite_url: str) -> None:
    async with serving(sqlite_url) as srv, PaiClient(srv.address) as client:
        thread = await client.create_thread()
        with pytest.raises(InvalidArgumentError) as bad:
            await thread.send_and_stream([])
        assert [v.field for v in bad.value.violations] == ["send.parts"]
        assert [r async for r in thread.runs()] == []


async def test_the_sync_client_streams_on_one_call_too(sqlite_url: str) -> None:
    async with serving(sqlite_url) as srv:

        def script() -> tuple[str, str, int]:
            with PaiClient.sync(srv.address) as client:
                thread = client.create_thread()
                stream = thread.send_and_stream("from a script")
                events = list(stream)
                return stream.run.text(), stream.run.get().status, events[-1].seq

        reply, status, last = await asyncio.to_thread(script)
        assert "You said: from a script" in reply
        assert status == "completed"
        assert last > 1
