"""A StreamRun arriving just after its run ended in this process skips the run read.

Short runs often end before their StreamRun arrives. The process remembers
for a moment that the run ended, in which scope and at which seq, so the
stream reads only the log; the answers are those of the database path.
"""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from pai.v1 import run_service_pb2, runs_pb2
from pai.v1 import thread_service_pb2 as tpb
from pai_grpc.errors import NotFoundError
from pai_grpc.testing import serve_in_process
from tests.runtime.support import collect, new_thread, rpc_error, send, wait_run


def _count_get_run(monkeypatch: pytest.MonkeyPatch, store: Any) -> list[str]:
    """Record each run the store is asked for (the read still happens)."""
    asked: list[str] = []
    real = store.get_run

    async def counted(scope: str, run_id: str) -> Any:
        asked.append(run_id)
        return await real(scope, run_id)

    monkeypatch.setattr(store, "get_run", counted)
    return asked


async def test_a_stream_of_a_run_that_just_ended_here_reads_only_its_log(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with serve_in_process(database_url) as srv:
        thread_id = await new_thread(srv)
        run_id = (await send(srv, thread_id, "hello there")).run_id
        assert (await wait_run(srv, run_id)).status == runs_pb2.RUN_STATUS_COMPLETED
        asked = _count_get_run(monkeypatch, srv.app.store)
        events = await collect(srv, run_id)
        assert asked == []
        assert events[-1].status.status == runs_pb2.RUN_STATUS_COMPLETED
        assert [e.seq for e in events] == sorted({e.seq for e in events})
        last = events[-1].seq
        # Resuming mid-way and at the end answer as the database path does.
        assert [e.seq for e in await collect(srv, run_id, after_seq=events[1].seq)] == [
            e.seq for e in events[2:]
        ]
        assert await collect(srv, run_id, after_seq=last) == []
        beyond = run_service_pb2.StreamRunRequest(run_id=run_id, after_seq=last + 1)
        error = await rpc_error(_drain(srv.runs.StreamRun(beyond)))
        assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "beyond" in (error.details() or "")
        assert asked == []


async def test_a_run_of_a_deleted_thread_is_not_found_even_just_after_it_ended(
    sqlite_url: str,
) -> None:
    async with serve_in_process(sqlite_url) as srv:
        thread_id = await new_thread(srv)
        run_id = (await send(srv, thread_id, "hello")).run_id
        await wait_run(srv, run_id)
        await srv.threads.DeleteThread(tpb.DeleteThreadRequest(thread_id=thread_id))
        error = await rpc_error(
            _drain(srv.runs.StreamRun(run_service_pb2.StreamRunRequest(run_id=run_id)))
        )
        assert error.code() == grpc.StatusCode.NOT_FOUND


async def test_a_run_that_ended_here_is_not_found_in_another_scope(sqlite_url: str) -> None:
    async with serve_in_process(sqlite_url) as srv:
        thread_id = await new_thread(srv)
        run_id = (await send(srv, thread_id, "hello")).run_id
        await wait_run(srv, run_id)
        assert srv.app.runtime.services.broker.ended(run_id) is not None
        with pytest.raises(NotFoundError):
            await srv.app.runtime.stream_run("another-scope", run_id)


async def _drain(call: Any) -> None:
    async for _ in call:
        pass
