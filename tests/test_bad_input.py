"""Bad input gets a precise status with field violations, and nothing is written."""

from __future__ import annotations

import base64
import json
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import asyncpg
import grpc
import pytest
from google.protobuf import struct_pb2

from pai.v1 import admin_service_pb2 as apb
from pai.v1 import admin_service_pb2_grpc, parts_pb2, run_service_pb2, runs_pb2
from pai.v1 import thread_service_pb2 as tpb
from pai_grpc.testing import InProcessServer, serve_in_process
from tests.conftest import rich_status
from tests.runtime.support import wait_run

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


# ------------------------------------------------- data that would poison storage

NUL = "a\x00b"


def nul_struct(*, key: bool = False) -> struct_pb2.Struct:
    meta = struct_pb2.Struct()
    if key:
        meta.fields[NUL].string_value = "x"
    else:
        meta.fields["k"].list_value.values.add().string_value = NUL
    return meta


@pytest.fixture
async def any_server(database_url: str) -> AsyncIterator[InProcessServer]:
    """A server on each backend; no runner, so runs stay queued (cancellable)."""
    async with serve_in_process(database_url, embedded_runner=False) as srv:
        yield srv


async def store_state(srv: InProcessServer) -> list[object]:
    """Everything a rejected call could have written, read from storage."""
    state: list[object] = []
    for thread in (await srv.store.list_threads("default", limit=1000)).items:
        messages = await srv.store.list_messages("default", thread.id, view="all", limit=1000)
        runs = await srv.store.list_runs("default", thread.id, limit=1000)
        state.append((thread, messages.items, runs.items))
    return state


def admin_stub(srv: InProcessServer) -> admin_service_pb2_grpc.AdminServiceStub:
    return admin_service_pb2_grpc.AdminServiceStub(srv.channel)


@pytest.mark.rule("RT-01")
async def test_nul_characters_are_rejected_naming_the_field(any_server: InProcessServer) -> None:
    srv = any_server
    thread_id = (await srv.threads.CreateThread(tpb.CreateThreadRequest())).thread.id
    run_id = (
        await srv.threads.Send(tpb.SendRequest(thread_id=thread_id, parts=[text("hi")]))
    ).run.run_id
    calls: list[tuple[str, object]] = [
        (
            "metadata",
            srv.threads.CreateThread(tpb.CreateThreadRequest(metadata=nul_struct(key=True))),
        ),
        ("metadata.k[0]", srv.threads.CreateThread(tpb.CreateThreadRequest(metadata=nul_struct()))),
        ("request_id", srv.threads.CreateThread(tpb.CreateThreadRequest(request_id=NUL))),
        ("agent", srv.threads.CreateThread(tpb.CreateThreadRequest(agent=NUL))),
        (
            "parts[0].text.text",
            srv.threads.Send(tpb.SendRequest(thread_id=thread_id, parts=[text(NUL)])),
        ),
        (
            "metadata.k[0]",
            srv.threads.Send(
                tpb.SendRequest(thread_id=thread_id, parts=[text("x")], metadata=nul_struct())
            ),
        ),
        (
            "run_metadata",
            srv.threads.Send(
                tpb.SendRequest(
                    thread_id=thread_id, parts=[text("x")], run_metadata=nul_struct(key=True)
                )
            ),
        ),
        (
            "request_id",
            srv.threads.Send(
                tpb.SendRequest(thread_id=thread_id, parts=[text("x")], request_id=NUL)
            ),
        ),
        (
            "input",
            srv.threads.Trigger(
                tpb.TriggerRequest(thread_id=thread_id, input=struct_pb2.Value(string_value=NUL))
            ),
        ),
        (
            "metadata.k[0]",
            srv.threads.UpdateThreadMetadata(
                tpb.UpdateThreadMetadataRequest(thread_id=thread_id, metadata=nul_struct())
            ),
        ),
        ("reason", srv.runs.CancelRun(run_service_pb2.CancelRunRequest(run_id=run_id, reason=NUL))),
        (
            "metadata.k[0]",
            admin_stub(srv).UpdateRunMetadata(
                apb.UpdateRunMetadataRequest(run_id=run_id, metadata=nul_struct())
            ),
        ),
    ]
    before = await store_state(srv)
    for field, call in calls:
        code, reason, violations = await fails(call)
        assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_CHARACTER"), field
        assert [f for f, _ in violations] == [field]
    assert await store_state(srv) == before


@pytest.mark.rule("RT-01")
async def test_cancel_reason_is_bounded(any_server: InProcessServer) -> None:
    srv = any_server
    thread_id = (await srv.threads.CreateThread(tpb.CreateThreadRequest())).thread.id
    run_id = (
        await srv.threads.Send(tpb.SendRequest(thread_id=thread_id, parts=[text("hi")]))
    ).run.run_id
    before = await store_state(srv)
    code, reason, violations = await fails(
        srv.runs.CancelRun(run_service_pb2.CancelRunRequest(run_id=run_id, reason="x" * 201))
    )
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT")
    assert [f for f, _ in violations] == ["reason"]
    assert await store_state(srv) == before
    cancelled = await srv.runs.CancelRun(
        run_service_pb2.CancelRunRequest(run_id=run_id, reason="y" * 200)
    )
    assert cancelled.run.status == runs_pb2.RUN_STATUS_CANCELLED


def big_numbers() -> struct_pb2.Struct:
    meta = struct_pb2.Struct()
    meta.fields["f"].number_value = 1e16
    meta.fields["g"].list_value.values.add().number_value = -(2.0**60)
    meta.fields["h"].number_value = 1e300
    meta.fields["i"].number_value = 2.0**53
    return meta


async def test_numbers_beyond_the_safe_integer_range_round_trip_as_doubles(
    any_server: InProcessServer,
) -> None:
    """Doubles of any finite size are accepted and read back unchanged on every backend."""
    srv = any_server
    created = await srv.threads.CreateThread(tpb.CreateThreadRequest(metadata=big_numbers()))
    thread_id = created.thread.id
    sent = await srv.threads.Send(
        tpb.SendRequest(
            thread_id=thread_id,
            parts=[text("x")],
            metadata=big_numbers(),
            run_metadata=big_numbers(),
        )
    )
    got = await srv.threads.GetThread(tpb.GetThreadRequest(thread_id=thread_id))
    assert got.thread.metadata == big_numbers()
    listed = await srv.threads.ListThreads(tpb.ListThreadsRequest())
    assert [t.metadata for t in listed.threads] == [big_numbers()]
    messages = await srv.threads.ListMessages(tpb.ListMessagesRequest(thread_id=thread_id))
    assert messages.messages[0].metadata == big_numbers()
    run = await srv.runs.GetRun(run_service_pb2.GetRunRequest(run_id=sent.run.run_id))
    assert run.run.metadata == big_numbers()


async def poison(database_url: str, backend: str, sql: str) -> None:
    """Write ``sql`` behind the service's back (data an older release may have stored)."""
    if backend == "sqlite":
        path = database_url.removeprefix("sqlite:///")
        with sqlite3.connect(path) as conn:
            conn.execute(sql)
        return
    url, _, schema = database_url.partition("?schema=")
    conn = await asyncpg.connect(url, server_settings={"search_path": schema})
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


async def test_reads_degrade_on_stored_numbers_that_are_out_of_range(
    any_server: InProcessServer, database_url: str, backend: str
) -> None:
    srv = any_server
    bad = (await srv.threads.CreateThread(tpb.CreateThreadRequest())).thread.id
    good = (await srv.threads.CreateThread(tpb.CreateThreadRequest())).thread.id
    await poison(
        database_url,
        backend,
        f"""UPDATE threads SET metadata = '{{"n": 100000000000000000000, "m": [-{2**53}]}}'
            WHERE id = '{bad}'""",
    )
    listed = await srv.threads.ListThreads(tpb.ListThreadsRequest())
    assert {t.id for t in listed.threads} == {bad, good}
    got = await srv.threads.GetThread(tpb.GetThreadRequest(thread_id=bad))
    assert got.thread.metadata["n"] == 1e20
    assert list(got.thread.metadata["m"]) == [-(2.0**53)]


# ------------------------------------------------------- statuses that tell the truth


def forged(token: str, cursor: object) -> str:
    """A token with the real query fingerprint of ``token`` and a forged cursor."""
    payload = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    raw = json.dumps({"q": payload["q"], "c": cursor}).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


FORGED_CURSORS: list[object] = [
    10**30,
    2**63,
    -1,
    True,
    None,
    1.5,
    "12",
    [10**30, "x"],
    ["x", 10**30],
    [True, True],
    ["2026-01-01T00:00:00", "thr_x"],
    ["2026-01-01T00:00:00+00:00", "x" * 5000],
    {"a": 1},
]


@pytest.mark.rule("RT-01")
async def test_forged_page_tokens_are_invalid_page_token(database_url: str) -> None:
    async with serve_in_process(database_url) as srv:
        await check_forged_page_tokens(srv)


async def check_forged_page_tokens(srv: InProcessServer) -> None:
    thread_id = ""
    for _ in range(2):
        thread_id = (await srv.threads.CreateThread(tpb.CreateThreadRequest())).thread.id
        for word in ("a", "b"):
            sent = await srv.threads.Send(tpb.SendRequest(thread_id=thread_id, parts=[text(word)]))
            await wait_run(srv, sent.run.run_id)
    listings: list[tuple[str, Callable[[str], Awaitable[Any]]]] = [
        (
            "threads",
            lambda t: srv.threads.ListThreads(tpb.ListThreadsRequest(page_size=1, page_token=t)),
        ),
        (
            "messages",
            lambda t: srv.threads.ListMessages(
                tpb.ListMessagesRequest(thread_id=thread_id, page_size=1, page_token=t)
            ),
        ),
        (
            "runs",
            lambda t: srv.runs.ListRuns(
                run_service_pb2.ListRunsRequest(thread_id=thread_id, page_size=1, page_token=t)
            ),
        ),
        (
            "lifecycle",
            lambda t: admin_stub(srv).ListLifecycleMessages(
                apb.ListLifecycleMessagesRequest(thread_id=thread_id, page_size=1, page_token=t)
            ),
        ),
    ]
    for name, listing in listings:
        token = (await listing("")).next_page_token
        assert token, name
        assert (await listing(token)).next_page_token != token
        garbage = ["%%%", "x" * 5000, base64.urlsafe_b64encode(b"[1,2]").decode(), "é"]
        for bad in [*(forged(token, c) for c in FORGED_CURSORS), *garbage]:
            code, reason, violations = await fails(listing(bad))
            assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_PAGE_TOKEN"), (
                name,
                bad,
            )
            assert [f for f, _ in violations] == ["page_token"]


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (wire type 2)."""
    size, length = bytearray(), len(payload)
    while True:
        size.append((length & 0x7F) | (0x80 if length > 0x7F else 0))
        length >>= 7
        if not length:
            break
    return bytes([number << 3 | 2]) + bytes(size) + payload


def deep_struct(levels: int) -> bytes:
    """CreateThreadRequest bytes whose metadata nests ``levels`` JSON objects.

    Built by hand: the protobuf runtime refuses to build what it cannot parse.
    """
    struct = b""
    for _ in range(levels - 1):
        value = _field(5, struct)  # Value.struct_value
        struct = _field(1, _field(1, b"a") + _field(2, value))  # Struct.fields entry
    return _field(2, struct)  # CreateThreadRequest.metadata


@pytest.mark.rule("RT-01")
@pytest.mark.parametrize(
    ("method", "payload"),
    [
        ("/pai.v1.ThreadService/GetThread", b"\xff\xff\xff"),
        ("/pai.v1.ThreadService/GetThread", b"\x0a\x02\xc3\x28"),  # invalid UTF-8
        ("/pai.v1.ThreadService/CreateThread", deep_struct(35)),
        ("/pai.v1.ThreadService/WatchThread", b"\x0a\x05\xed\xa0\x80ab"),  # a lone surrogate
        ("/pai.v1.RunService/StreamRun", b"\x12"),  # truncated
        ("/pai.v1.ThreadService/SendAndStream", b"\x0a\x04\x0a\x02\xc3\x28"),  # bad UTF-8
        ("/pai.v1.AdminService/GetRunPrivateMetadata", b"\x0a\xff"),
    ],
    ids=[
        "garbage",
        "bad-utf8",
        "deep-struct",
        "surrogate-stream",
        "truncated-stream",
        "bad-utf8-send-and-stream",
        "admin",
    ],
)
async def test_undecodable_requests_are_malformed_request(
    any_server: InProcessServer, method: str, payload: bytes
) -> None:
    before = await store_state(any_server)
    if method.endswith(("WatchThread", "StreamRun", "SendAndStream")):
        call: Any = any_server.channel.unary_stream(method)(payload)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            async for _ in call:
                pass
        code, reason, violations = rich_status(info.value)
    else:
        code, reason, violations = await fails(any_server.channel.unary_unary(method)(payload))
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "MALFORMED_REQUEST")
    assert [f for f, _ in violations] == ["request"]
    assert await store_state(any_server) == before


async def test_deep_but_decodable_metadata_is_invalid_argument(any_server: InProcessServer) -> None:
    code, _, violations = await fails(
        any_server.channel.unary_unary("/pai.v1.ThreadService/CreateThread")(deep_struct(34))
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert violations[0][0].startswith("metadata")


@pytest.mark.rule("RT-01")
@pytest.mark.parametrize("suffix", ["\n", " ", "\t", "\r\n"])
async def test_ids_with_trailing_whitespace_are_malformed(
    server: InProcessServer, suffix: str
) -> None:
    thread_id = (await server.threads.CreateThread(tpb.CreateThreadRequest())).thread.id
    code, _, violations = await fails(
        server.threads.GetThread(tpb.GetThreadRequest(thread_id=thread_id + suffix))
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert [f for f, _ in violations] == ["thread_id"]


@pytest.mark.parametrize("etag", ["²", "99999999999999999999999", '"9223372036854775808"'])
async def test_etags_that_were_never_issued_are_invalid_argument(
    server: InProcessServer, etag: str
) -> None:
    thread_id = (await server.threads.CreateThread(tpb.CreateThreadRequest())).thread.id
    code, _, violations = await fails(
        server.threads.DeleteThread(tpb.DeleteThreadRequest(thread_id=thread_id, etag=etag))
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert [f for f, _ in violations] == ["etag"]
