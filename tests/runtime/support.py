"""Helpers for runtime tests driven through the gRPC API."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

import grpc

from pai.v1 import parts_pb2, run_service_pb2, runs_pb2
from pai.v1 import thread_service_pb2 as tpb
from pai_grpc.lifecycle import AfterStepInput, AgentLifecycle, PrepareModelStepInput
from pai_grpc.models import ModelCall
from pai_grpc.testing import InProcessServer

TERMINAL = {
    runs_pb2.RUN_STATUS_COMPLETED,
    runs_pb2.RUN_STATUS_FAILED,
    runs_pb2.RUN_STATUS_CANCELLED,
}


def text(s: str) -> parts_pb2.MessagePart:
    return parts_pb2.MessagePart(text=parts_pb2.TextPart(text=s))


def call_texts(call: ModelCall) -> list[str]:
    """The text of each message a model call was given, in order."""
    out = []
    for message in call.messages:
        content = getattr(message, "content", "")
        if isinstance(content, str):
            out.append(content)
        else:
            out.append("".join(getattr(p, "text", "") for p in content))
    return out


def count_log_reads(monkeypatch: Any, store: Any) -> list[int]:
    """Record the cursor of each read of a run's log from ``store`` (the read still happens)."""
    reads: list[int] = []
    real = store.read_events

    async def counted(*args: Any, **kwargs: Any) -> Any:
        reads.append(kwargs.get("after_seq", 0))
        return await real(*args, **kwargs)

    monkeypatch.setattr(store, "read_events", counted)
    return reads


def lines_run(fn: Callable[[], object], in_file: str | None) -> int:
    """The lines of ``in_file`` that ``fn()`` runs: a measure of work that does not drift.

    For claims that some work stays constant however much state a component
    holds, where a timing would be noise on a shared machine.
    """
    lines = 0

    def count(frame: FrameType, event: str, _arg: object) -> Any:
        nonlocal lines
        if frame.f_code.co_filename == in_file:
            lines += event == "line"
            return count
        return None

    sys.settrace(count)
    try:
        fn()
    finally:
        sys.settrace(None)
    return lines


async def new_thread(srv: InProcessServer, **kw: Any) -> str:
    return str((await srv.threads.CreateThread(tpb.CreateThreadRequest(**kw))).thread.id)


async def send(srv: InProcessServer, thread_id: str, message: str, **kw: Any) -> Any:
    return (
        await srv.threads.Send(tpb.SendRequest(thread_id=thread_id, parts=[text(message)], **kw))
    ).run


async def collect(
    srv: InProcessServer, run_id: str, after_seq: int = 0, *, timeout: float = 30
) -> list[runs_pb2.RunEvent]:
    events = []
    async for response in srv.runs.StreamRun(
        run_service_pb2.StreamRunRequest(run_id=run_id, after_seq=after_seq), timeout=timeout
    ):
        events.append(response.event)
    return events


async def wait_run(
    srv: InProcessServer, run_id: str, *, statuses: set[int] = TERMINAL, timeout: float = 30
) -> runs_pb2.Run:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        run = (await srv.runs.GetRun(run_service_pb2.GetRunRequest(run_id=run_id))).run
        if run.status in statuses:
            return run
        if loop.time() > deadline:
            raise AssertionError(f"run {run_id} still {runs_pb2.RunStatus.Name(run.status)}")
        await asyncio.sleep(0.02)


async def transcript(srv: InProcessServer, thread_id: str) -> list[tuple[str, str]]:
    """(role, text) of every transcript message, in order."""
    out = []
    token = ""
    while True:
        page = await srv.threads.ListMessages(
            tpb.ListMessagesRequest(thread_id=thread_id, page_size=100, page_token=token)
        )
        for m in page.messages:
            role = {1: "system", 2: "user", 3: "assistant"}[m.role]
            body = "".join(p.text.text for p in m.parts if p.WhichOneof("part") == "text")
            out.append((role, body))
        token = page.next_page_token
        if not token:
            return out


def kinds(events: list[runs_pb2.RunEvent]) -> list[str]:
    out = []
    for e in events:
        kind = e.WhichOneof("event")
        if kind == "chunk":
            out.append(e.chunk.WhichOneof("chunk"))
        elif kind == "status":
            out.append("status:" + runs_pb2.RunStatus.Name(e.status.status)[11:].lower())
        else:
            out.append(kind)
    return out


async def rpc_error(call: Any) -> grpc.aio.AioRpcError:
    try:
        await call
    except grpc.aio.AioRpcError as e:
        return e
    raise AssertionError("the call succeeded")


class NoteHooks(AgentLifecycle):
    """Hooks that decide nothing, so a run's log holds hook_call events between its deltas."""

    name = "note"

    async def prepare_model_step(self, input: PrepareModelStepInput) -> Any:
        """No decision."""
        return None

    async def after_step(self, input: AfterStepInput) -> Any:
        """No decision."""
        return None
