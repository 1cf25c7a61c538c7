"""Bad input gets a precise status with field violations, and nothing is written."""

from __future__ import annotations

import grpc
import pytest
from google.protobuf import struct_pb2

from pai.v1 import parts_pb2, run_service_pb2
from pai.v1 import thread_service_pb2 as tpb
from pai_grpc.testing import InProcessServer
from tests.conftest import rich_status

UNKNOWN_THREAD = "thr_01M8MJV00594YT84ABF026CWB8"


def text(s: str) -> parts_pb2.MessagePart:
    return parts_pb2.MessagePart(text=parts_pb2.TextPart(text=s))


async def snapshot(srv: InProcessServer, thread_id: str) -> tuple[int, int, int]:
    """(version, message count, run count) of a thread, read from storage."""
    record = await srv.store.get_thread("default", thread_id)
    assert record is not None
    runs = await srv.store.list_runs("default", thread_id)
    return record.version, record.message_count, len(runs.items)


async def fails(call: object) -> tuple[grpc.StatusCode, str, list[tuple[str, str]]]:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call  # type: ignore[misc]
    return rich_status(info.value)


@pytest.mark.rule("RT-01")
@pytest.mark.parametrize(
    ("parts", "field", "reason_part"),
    [
        ([], "parts", "at least one part"),
        ([text("   ")], "parts", "empty"),
        ([parts_pb2.MessagePart()], "parts[0]", ""),
        (
            [parts_pb2.MessagePart(reasoning=parts_pb2.ReasoningPart(text="x"))],
            "parts[0]",
            "cannot be sent by a user",
        ),
        ([text("x" * (1 << 20))], "parts", "at most"),
    ],
    ids=["no-parts", "blank-text", "unset-part", "reasoning-part", "oversized"],
)
async def test_send_rejects_bad_messages_and_writes_nothing(
    server: InProcessServer, parts: list[parts_pb2.MessagePart], field: str, reason_part: str
) -> None:
    thread_id = (await server.threads.CreateThread(tpb.CreateThreadRequest())).thread.id
    before = await snapshot(server, thread_id)
    code, reason, violations = await fails(
        server.threads.Send(tpb.SendRequest(thread_id=thread_id, parts=parts))
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert reason == "INVALID_ARGUMENT"
    assert any(f == field and reason_part in d for f, d in violations), violations
    assert await snapshot(server, thread_id) == before


@pytest.mark.rule("RT-01")
@pytest.mark.parametrize("thread_id", ["", "nope", "thr_123", "run_01M8MJV00594YT84ABF026CWB8"])
async def test_malformed_thread_ids_are_invalid_argument(
    server: InProcessServer, thread_id: str
) -> None:
    code, _, violations = await fails(
        server.threads.Send(tpb.SendRequest(thread_id=thread_id, parts=[text("hi")]))
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert [f for f, _ in violations] == ["thread_id"]
    code, _, violations = await fails(
        server.threads.GetThread(tpb.GetThreadRequest(thread_id=thread_id))
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT


async def test_unknown_threads_are_not_found(server: InProcessServer) -> None:
    code, reason, _ = await fails(
        server.threads.Send(tpb.SendRequest(thread_id=UNKNOWN_THREAD, parts=[text("hi")]))
    )
    assert (code, reason) == (grpc.StatusCode.NOT_FOUND, "THREAD_NOT_FOUND")
    code, reason, _ = await fails(
        server.threads.GetThread(tpb.GetThreadRequest(thread_id=UNKNOWN_THREAD))
    )
    assert (code, reason) == (grpc.StatusCode.NOT_FOUND, "THREAD_NOT_FOUND")
    code, _, _ = await fails(
        server.threads.ListMessages(tpb.ListMessagesRequest(thread_id=UNKNOWN_THREAD))
    )
    assert code == grpc.StatusCode.NOT_FOUND
    code, reason, _ = await fails(
        server.runs.GetRun(run_service_pb2.GetRunRequest(run_id="run_01M8MJV00594YT84ABF026CWB8"))
    )
    assert (code, reason) == (grpc.StatusCode.NOT_FOUND, "RUN_NOT_FOUND")


async def test_non_strict_json_metadata_is_rejected(server: InProcessServer) -> None:
    thread_id = (await server.threads.CreateThread(tpb.CreateThreadRequest())).thread.id
    before = await snapshot(server, thread_id)
    meta = struct_pb2.Struct()
    meta.fields["score"].number_value = float("nan")
    code, _, violations = await fails(
        server.threads.Send(tpb.SendRequest(thread_id=thread_id, parts=[text("hi")], metadata=meta))
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert violations
    assert violations[0][0] == "metadata"
    assert await snapshot(server, thread_id) == before
    code, _, violations = await fails(
        server.threads.CreateThread(tpb.CreateThreadRequest(metadata=meta))
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert violations[0][0] == "metadata"


async def test_unknown_agent_is_invalid_argument(server: InProcessServer) -> None:
    code, reason, violations = await fails(
        server.threads.CreateThread(tpb.CreateThreadRequest(agent="nobody"))
    )
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "UNKNOWN_AGENT")
    assert violations[0][0] == "agent"
    listed = await server.store.list_threads("default")
    assert listed.items == []


async def test_page_tokens_are_bound_to_their_query(server: InProcessServer) -> None:
    thread_id = (await server.threads.CreateThread(tpb.CreateThreadRequest())).thread.id
    for word in ("a", "b", "c"):
        sent = await server.threads.Send(tpb.SendRequest(thread_id=thread_id, parts=[text(word)]))
        async for _ in server.runs.StreamRun(
            run_service_pb2.StreamRunRequest(run_id=sent.run.run_id)
        ):
            pass
    first = await server.threads.ListMessages(
        tpb.ListMessagesRequest(thread_id=thread_id, page_size=2)
    )
    assert len(first.messages) == 2
    assert first.next_page_token
    second = await server.threads.ListMessages(
        tpb.ListMessagesRequest(thread_id=thread_id, page_size=3, page_token=first.next_page_token)
    )
    assert [m.position for m in second.messages] == [2, 3, 4]
    code, reason, violations = await fails(
        server.threads.ListMessages(
            tpb.ListMessagesRequest(thread_id=thread_id, order=2, page_token=first.next_page_token)
        )
    )
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_PAGE_TOKEN")
    assert violations[0][0] == "page_token"
    code, _, _ = await fails(
        server.threads.ListMessages(tpb.ListMessagesRequest(thread_id=thread_id, page_token="%%%"))
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT


async def test_request_id_makes_send_idempotent(server: InProcessServer) -> None:
    thread_id = (await server.threads.CreateThread(tpb.CreateThreadRequest())).thread.id
    request = tpb.SendRequest(thread_id=thread_id, parts=[text("once")], request_id="req-1")
    first = await server.threads.Send(request)
    again = await server.threads.Send(request)
    assert again.run == first.run
    runs = await server.store.list_runs("default", thread_id)
    assert len(runs.items) == 1
    code, reason, _ = await fails(
        server.threads.Send(
            tpb.SendRequest(thread_id=thread_id, parts=[text("other")], request_id="req-1")
        )
    )
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "REQUEST_ID_REUSED")
