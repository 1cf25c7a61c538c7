"""WatchThread head events, private metadata, and scope resolution from credentials."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import grpc
import pytest

from pai.v1 import run_service_pb2, runs_pb2, threads_pb2
from pai.v1 import thread_service_pb2 as tpb
from pai_grpc.models import ScriptedModel
from pai_grpc.testing import serve_in_process
from storage import ThreadPatch, WriteSet
from tests.conftest import rich_status
from tests.runtime.support import (
    count_log_reads,
    new_thread,
    rpc_error,
    send,
    text,
    transcript,
    wait_run,
)


class Watcher:
    """Reads a WatchThread stream in the background (cancelling a read cancels the call)."""

    def __init__(self, call: object) -> None:
        self.call = call
        self.queue: asyncio.Queue[tpb.WatchThreadResponse] = asyncio.Queue()
        self.task = asyncio.create_task(self._pump())

    async def _pump(self) -> None:
        async for response in self.call:  # type: ignore[attr-defined]
            self.queue.put_nowait(response)

    async def next(self, timeout: float = 5.0) -> tpb.WatchThreadResponse | None:
        try:
            return await asyncio.wait_for(self.queue.get(), timeout)
        except TimeoutError:
            return None

    def cancel(self) -> None:
        self.call.cancel()  # type: ignore[attr-defined]
        self.task.cancel()


@pytest.mark.rule("LC-06")
async def test_watch_thread_streams_public_head_changes_only(database_url: str) -> None:
    model = ScriptedModel(["hello back"], chunk_delay=0.01)
    async with serve_in_process(database_url, model=model) as srv:
        thread_id = await new_thread(srv)
        watch = Watcher(srv.threads.WatchThread(tpb.WatchThreadRequest(thread_id=thread_id)))
        first = await watch.next()
        assert first is not None
        assert first.change == tpb.THREAD_CHANGE_SNAPSHOT
        assert first.thread.status == threads_pb2.THREAD_STATUS_IDLE

        handle = await send(srv, thread_id, "hi")
        await wait_run(srv, handle.run_id)
        changes = []
        while True:
            change = await watch.next(timeout=1.5)
            if change is None:
                break
            changes.append(change)
        kinds = [c.change for c in changes]
        assert tpb.THREAD_CHANGE_STATUS in kinds
        assert tpb.THREAD_CHANGE_MESSAGES_COMMITTED in kinds
        assert changes[-1].thread.status == threads_pb2.THREAD_STATUS_IDLE
        assert changes[-1].thread.message_count == 2
        committed = [
            i
            for c in changes
            if c.change == tpb.THREAD_CHANGE_MESSAGES_COMMITTED
            for i in c.message_ids
        ]
        assert handle.message_id in committed

        # A private-only write bumps the version but publishes nothing to clients.
        record = await srv.store.get_thread("default", thread_id)
        assert record is not None
        await srv.app.runtime.services.commit(
            WriteSet(
                scope="default",
                thread_id=thread_id,
                thread=ThreadPatch(private_metadata={"cursor": "secret-value"}),
            )
        )
        after = await srv.store.get_thread("default", thread_id)
        assert after is not None
        assert after.version == record.version + 1
        assert await watch.next(timeout=2.5) is None

        # A public metadata change is an event, and the head never carries private data.
        await srv.threads.UpdateThreadMetadata(
            tpb.UpdateThreadMetadataRequest(thread_id=thread_id, metadata={"title": "chat"})  # type: ignore[arg-type]
        )
        change = await watch.next()
        assert change is not None
        assert change.change == tpb.THREAD_CHANGE_METADATA
        assert dict(change.thread.metadata) == {"title": "chat"}
        assert b"secret-value" not in change.SerializeToString()
        got = await srv.threads.GetThread(tpb.GetThreadRequest(thread_id=thread_id))
        assert b"secret-value" not in got.SerializeToString()
        listed = await srv.threads.ListThreads(tpb.ListThreadsRequest())
        assert b"secret-value" not in listed.SerializeToString()
        watch.cancel()


async def test_metadata_updates_merge_replace_and_honour_etags(database_url: str) -> None:
    async with serve_in_process(database_url) as srv:
        thread_id = await new_thread(srv)
        from google.protobuf import struct_pb2

        def struct(**kw: object) -> struct_pb2.Struct:
            s = struct_pb2.Struct()
            s.update(kw)
            return s

        t1 = (
            await srv.threads.UpdateThreadMetadata(
                tpb.UpdateThreadMetadataRequest(thread_id=thread_id, metadata=struct(a=1, b=2))
            )
        ).thread
        t2 = (
            await srv.threads.UpdateThreadMetadata(
                tpb.UpdateThreadMetadataRequest(
                    thread_id=thread_id, metadata=struct(b=3), etag=t1.etag
                )
            )
        ).thread
        assert dict(t2.metadata) == {"a": 1, "b": 3}
        err = await rpc_error(
            srv.threads.UpdateThreadMetadata(
                tpb.UpdateThreadMetadataRequest(
                    thread_id=thread_id, metadata=struct(c=1), etag=t1.etag
                )
            )
        )
        assert err.code() == grpc.StatusCode.ABORTED
        t3 = (
            await srv.threads.UpdateThreadMetadata(
                tpb.UpdateThreadMetadataRequest(
                    thread_id=thread_id, metadata=struct(z=0), replace=True
                )
            )
        ).thread
        assert dict(t3.metadata) == {"z": 0}
        await srv.threads.DeleteThread(tpb.DeleteThreadRequest(thread_id=thread_id, etag=t3.etag))
        err = await rpc_error(srv.threads.GetThread(tpb.GetThreadRequest(thread_id=thread_id)))
        assert err.code() == grpc.StatusCode.NOT_FOUND


def auth(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


def two_tenants(tmp_path: Path) -> dict[str, str]:
    """Bearer tokens of two tenants, read from a config file as the service reads them."""
    from pai_grpc.config import Settings

    config = tmp_path / "pai.toml"
    config.write_text('[auth.tokens]\nalice-token = "tenant-a"\nbob-token = "tenant-b"\n')
    settings = Settings(config_path=str(config))
    settings.load_file(config)
    return settings.tokens


@pytest.mark.rule("RT-01")
async def test_scopes_come_from_bearer_tokens_and_isolate_tenants(
    database_url: str, tmp_path: Path
) -> None:
    async with serve_in_process(database_url, tokens=two_tenants(tmp_path)) as srv:
        err = await rpc_error(srv.threads.CreateThread(tpb.CreateThreadRequest()))
        assert err.code() == grpc.StatusCode.UNAUTHENTICATED
        err = await rpc_error(
            srv.threads.CreateThread(tpb.CreateThreadRequest(), metadata=auth("mallory"))
        )
        assert err.code() == grpc.StatusCode.UNAUTHENTICATED

        created = await srv.threads.CreateThread(
            tpb.CreateThreadRequest(), metadata=auth("alice-token")
        )
        thread_id = created.thread.id
        handle = (
            await srv.threads.Send(
                tpb.SendRequest(thread_id=thread_id, parts=[text("hi")]),
                metadata=auth("alice-token"),
            )
        ).run
        for _ in range(500):  # let the run finish so only rejected writes could change it
            run = await srv.store.get_run("tenant-a", handle.run_id)
            if run is not None and run.status == "completed":
                break
            await asyncio.sleep(0.01)
        before = await srv.store.get_thread("tenant-a", thread_id)

        # Another tenant sees nothing: NOT_FOUND, never a hint that it exists.
        err = await rpc_error(
            srv.threads.Send(
                tpb.SendRequest(thread_id=thread_id, parts=[text("intrude")]),
                metadata=auth("bob-token"),
            )
        )
        assert rich_status(err)[:2] == (grpc.StatusCode.NOT_FOUND, "THREAD_NOT_FOUND")
        for call in (
            srv.threads.GetThread(
                tpb.GetThreadRequest(thread_id=thread_id), metadata=auth("bob-token")
            ),
            srv.runs.GetRun(
                run_service_pb2.GetRunRequest(run_id=handle.run_id), metadata=auth("bob-token")
            ),
            srv.runs.CancelRun(
                run_service_pb2.CancelRunRequest(run_id=handle.run_id), metadata=auth("bob-token")
            ),
        ):
            assert (await rpc_error(call)).code() == grpc.StatusCode.NOT_FOUND
        listed = await srv.threads.ListThreads(tpb.ListThreadsRequest(), metadata=auth("bob-token"))
        assert list(listed.threads) == []

        # A bad body is INVALID_ARGUMENT with field violations, and writes nothing.
        err = await rpc_error(
            srv.threads.Send(
                tpb.SendRequest(thread_id=thread_id, parts=[]), metadata=auth("alice-token")
            )
        )
        code, _, violations = rich_status(err)
        assert code == grpc.StatusCode.INVALID_ARGUMENT
        assert violations[0][0] == "parts"
        after = await srv.store.get_thread("tenant-a", thread_id)
        assert after is not None
        assert before is not None
        assert after.message_count == before.message_count
        runs = await srv.store.list_runs("tenant-a", thread_id)
        assert len(runs.items) == 1
        assert await srv.store.get_thread("tenant-b", thread_id) is None
        page = await srv.threads.ListMessages(
            tpb.ListMessagesRequest(thread_id=thread_id), metadata=auth("alice-token")
        )
        assert page.messages[0].id == handle.message_id


async def test_transcript_helper_covers_pagination(database_url: str) -> None:
    async with serve_in_process(database_url) as srv:
        thread_id = await new_thread(srv)
        handle = await send(srv, thread_id, "one")
        await wait_run(srv, handle.run_id)
        assert [r for r, _ in await transcript(srv, thread_id)] == ["user", "assistant"]


@pytest.mark.rule("RT-01")
async def test_a_run_executing_here_streams_only_to_its_own_scope(
    database_url: str, tmp_path: Path
) -> None:
    """StreamRun of a live run skips the store read, never the scope check."""
    from pai_grpc.models import OfflineModel

    # Slow chunks: the run is still executing in this process while it is streamed.
    async with serve_in_process(
        database_url, model=OfflineModel(chunk_delay=0.05), tokens=two_tenants(tmp_path)
    ) as srv:
        created = await srv.threads.CreateThread(
            tpb.CreateThreadRequest(), metadata=auth("alice-token")
        )
        handle = (
            await srv.threads.Send(
                tpb.SendRequest(thread_id=created.thread.id, parts=[text("hi there")]),
                metadata=auth("alice-token"),
            )
        ).run
        for _ in range(500):
            channel = srv.app.runtime.services.broker.channel(handle.run_id)
            if channel is not None:
                break
            await asyncio.sleep(0.01)
        assert channel is not None
        assert channel.scope == "tenant-a"
        assert not channel.ended

        request = run_service_pb2.StreamRunRequest(run_id=handle.run_id)
        err = await rpc_error(
            collect_stream(srv.runs.StreamRun(request, metadata=auth("bob-token")))
        )
        assert err.code() == grpc.StatusCode.NOT_FOUND
        assert srv.app.runtime.services.broker.channel(handle.run_id) is channel  # still live

        events = await collect_stream(srv.runs.StreamRun(request, metadata=auth("alice-token")))
        assert events[-1].event.HasField("status")
        assert events[-1].event.status.status == runs_pb2.RUN_STATUS_COMPLETED
        assert [e.event.seq for e in events] == list(range(1, len(events) + 1))


async def collect_stream(call: Any) -> list[Any]:
    """Every response of a server stream."""
    return [response async for response in call]


async def test_a_stream_of_a_run_executing_here_never_reads_the_log(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every event of a run executing in this process, terminal ones included, arrives live.

    The events the run's last commit made durable (its messages and final
    status) are published to the live channel like every other durable event,
    so a reader that was following it live does not have to go to the chunk
    log for the end of the run.
    """
    from pai_grpc.models import OfflineModel

    async with serve_in_process(database_url, model=OfflineModel(chunk_delay=0.02)) as srv:
        reads = count_log_reads(monkeypatch, srv.app.runtime.services.store)
        thread_id = await new_thread(srv)
        handle = await send(srv, thread_id, "hello there")
        for _ in range(500):
            if srv.app.runtime.services.broker.channel(handle.run_id) is not None:
                break
            await asyncio.sleep(0.01)
        events = await collect_stream(
            srv.runs.StreamRun(run_service_pb2.StreamRunRequest(run_id=handle.run_id))
        )
        assert events[-1].event.status.status == runs_pb2.RUN_STATUS_COMPLETED
        assert [e.event.seq for e in events] == list(range(1, len(events) + 1))
        assert reads == []
