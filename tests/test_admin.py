"""AdminService: admin credentials, private reads, run enrichment, visibility rewrites."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest
from google.protobuf import struct_pb2

from pai.v1 import admin_service_pb2 as apb
from pai.v1 import admin_service_pb2_grpc, parts_pb2, run_service_pb2, runs_pb2, threads_pb2
from pai.v1 import thread_service_pb2 as tpb
from pai_grpc.lifecycle import AgentContract, lifecycle
from pai_grpc.models import ScriptedModel
from pai_grpc.runtime import DEFAULT_AGENT, Agent, AgentRegistry
from pai_grpc.testing import InProcessServer, serve_in_process
from storage import ThreadPatch, WriteSet
from tests.conftest import rich_status
from tests.runtime.support import rpc_error

USER = [("authorization", "Bearer user-token")]
ADMIN = [("authorization", "Bearer admin-token")]


def struct(**values: object) -> struct_pb2.Struct:
    s = struct_pb2.Struct()
    s.update(values)
    return s


@pytest.fixture
async def secured(database_url: str) -> AsyncIterator[InProcessServer]:
    gate = asyncio.Event()
    gate.set()

    async def hold(_: object) -> None:
        await gate.wait()

    agent = Agent(
        name=DEFAULT_AGENT,
        model=ScriptedModel(["answer"]),
        contract=AgentContract(
            run_metadata={"type": "object", "properties": {"score": {"type": "integer"}}}
        ),
        lifecycle=lifecycle("hold", prepare_run=hold),
    )
    agent.gate = gate  # type: ignore[attr-defined]
    async with serve_in_process(
        database_url,
        agents=AgentRegistry([agent]),
        tokens={"user-token": "acme"},
        admin_tokens={"admin-token": "acme"},
    ) as srv:
        yield srv


def admin(srv: InProcessServer) -> admin_service_pb2_grpc.AdminServiceStub:
    return admin_service_pb2_grpc.AdminServiceStub(srv.channel)


async def conversation(srv: InProcessServer) -> tuple[str, str, list[str]]:
    thread_id = str(
        (await srv.threads.CreateThread(tpb.CreateThreadRequest(), metadata=USER)).thread.id
    )
    handle = (
        await srv.threads.Send(
            tpb.SendRequest(thread_id=thread_id, parts=[text("hello")]), metadata=USER
        )
    ).run
    while True:
        run = (
            await srv.runs.GetRun(
                run_service_pb2.GetRunRequest(run_id=handle.run_id), metadata=USER
            )
        ).run
        if run.status == runs_pb2.RUN_STATUS_COMPLETED:
            break
        await asyncio.sleep(0.02)
    page = await admin(srv).ListLifecycleMessages(
        apb.ListLifecycleMessagesRequest(thread_id=thread_id), metadata=ADMIN
    )
    return thread_id, handle.run_id, [m.message.id for m in page.messages]


def text(s: str) -> parts_pb2.MessagePart:
    return parts_pb2.MessagePart(text=parts_pb2.TextPart(text=s))


async def test_admin_rpcs_need_an_admin_credential(secured: InProcessServer) -> None:
    thread_id, _, _ = await conversation(secured)
    err = await rpc_error(
        admin(secured).GetThreadPrivateMetadata(
            apb.GetThreadPrivateMetadataRequest(thread_id=thread_id), metadata=USER
        )
    )
    assert rich_status(err)[:2] == (grpc.StatusCode.PERMISSION_DENIED, "NOT_ADMIN")
    err = await rpc_error(
        admin(secured).GetThreadPrivateMetadata(
            apb.GetThreadPrivateMetadataRequest(thread_id=thread_id)
        )
    )
    assert err.code() == grpc.StatusCode.UNAUTHENTICATED


@pytest.mark.rule("LC-09")
async def test_private_reads_and_run_enrichment(secured: InProcessServer) -> None:
    thread_id, run_id, _ = await conversation(secured)
    await secured.store.commit(
        WriteSet(
            scope="acme", thread_id=thread_id, thread=ThreadPatch(private_metadata={"cursor": 3})
        )
    )
    got = await admin(secured).GetThreadPrivateMetadata(
        apb.GetThreadPrivateMetadataRequest(thread_id=thread_id), metadata=ADMIN
    )
    assert dict(got.private_metadata) == {"cursor": 3}
    assert got.version > 0

    enriched = await admin(secured).UpdateRunMetadata(
        apb.UpdateRunMetadataRequest(
            run_id=run_id, metadata=struct(score=5), private_metadata=struct(grader="v2")
        ),
        metadata=ADMIN,
    )
    assert dict(enriched.run.metadata) == {"score": 5}
    private = await admin(secured).GetRunPrivateMetadata(
        apb.GetRunPrivateMetadataRequest(run_id=run_id), metadata=ADMIN
    )
    assert dict(private.private_metadata) == {"grader": "v2"}
    # The complete merged object is checked against the agent contract.
    err = await rpc_error(
        admin(secured).UpdateRunMetadata(
            apb.UpdateRunMetadataRequest(run_id=run_id, metadata=struct(score="high")),
            metadata=ADMIN,
        )
    )
    code, reason, violations = rich_status(err)
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "CONTRACT_VIOLATION")
    assert violations[0][0].startswith("run_metadata")


async def test_visibility_rewrite_hides_from_the_transcript_and_validates_input(
    secured: InProcessServer,
) -> None:
    thread_id, _, ids = await conversation(secured)
    response = await admin(secured).UpdateMessageVisibility(
        apb.UpdateMessageVisibilityRequest(
            thread_id=thread_id, message_ids=[ids[0]], transcript=False
        ),
        metadata=ADMIN,
    )
    assert response.thread.id == thread_id
    page = await secured.threads.ListMessages(
        tpb.ListMessagesRequest(thread_id=thread_id), metadata=USER
    )
    assert [m.id for m in page.messages] == [ids[1]]
    listed = await admin(secured).ListLifecycleMessages(
        apb.ListLifecycleMessagesRequest(thread_id=thread_id, view=threads_pb2.MESSAGE_VIEW_ALL),
        metadata=ADMIN,
    )
    assert [(m.message.id, m.visibility.transcript) for m in listed.messages] == [
        (ids[0], False),
        (ids[1], True),
    ]
    for request, field in (
        (
            apb.UpdateMessageVisibilityRequest(thread_id=thread_id, message_ids=[ids[0]]),
            "transcript",
        ),
        (apb.UpdateMessageVisibilityRequest(thread_id=thread_id, transcript=True), "message_ids"),
        (
            apb.UpdateMessageVisibilityRequest(
                thread_id=thread_id, message_ids=["msg_bad"], transcript=True
            ),
            "message_ids[0]",
        ),
    ):
        err = await rpc_error(admin(secured).UpdateMessageVisibility(request, metadata=ADMIN))
        code, _, violations = rich_status(err)
        assert code == grpc.StatusCode.INVALID_ARGUMENT
        assert field in [f for f, _ in violations]


async def test_visibility_rewrite_is_refused_while_a_run_executes(secured: InProcessServer) -> None:
    thread_id, _, ids = await conversation(secured)
    gate = secured.app.runtime.agents.resolve("").gate  # type: ignore[attr-defined]
    gate.clear()
    await secured.threads.Send(
        tpb.SendRequest(thread_id=thread_id, parts=[text("again")]), metadata=USER
    )
    for _ in range(200):
        head = await secured.store.get_thread("acme", thread_id)
        if head is not None and head.status == "running":
            break
        await asyncio.sleep(0.01)
    err = await rpc_error(
        admin(secured).UpdateMessageVisibility(
            apb.UpdateMessageVisibilityRequest(
                thread_id=thread_id, message_ids=[ids[0]], context=False
            ),
            metadata=ADMIN,
        )
    )
    assert rich_status(err)[:2] == (grpc.StatusCode.FAILED_PRECONDITION, "THREAD_BUSY")
    gate.set()
