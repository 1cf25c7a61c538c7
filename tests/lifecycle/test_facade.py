"""LC-01..LC-12: the run and thread facade hooks receive, proven through real runs."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC
from typing import Any

import pytest
from google.protobuf import struct_pb2
from pydantic import BaseModel, ConfigDict
from sqlalchemy import update

from pai.v1 import run_service_pb2, runs_pb2, threads_pb2
from pai.v1 import thread_service_pb2 as tpb
from pai_grpc.domain import (
    AssistantModelMessage,
    DataPart,
    LifecycleMessage,
    ModelMessage,
    ModelTextPart,
    ReasoningPart,
    SystemModelMessage,
    TextPart,
    ToolModelMessage,
    UserModelMessage,
    new_id,
)
from pai_grpc.lifecycle import (
    AgentContract,
    PrepareModelStepInput,
    PrepareRunInput,
    VersionConflict,
    lifecycle,
)
from pai_grpc.models import ModelCall, ScriptedModel, tool_call_step
from pai_grpc.server._scope import DEV_SCOPE
from pai_grpc.tools import client_tool
from storage import NewMessage, NewThread, Store, ThreadPatch, WriteSet
from storage._schema import runs as runs_table
from tests.lifecycle.harness import Harness, harness

Env = dict[str, Any]


def text_of(m: LifecycleMessage) -> str:
    return "".join(p.text for p in m.message.parts if isinstance(p, TextPart))


def model_text(m: ModelMessage) -> str:
    if isinstance(m, SystemModelMessage):
        return m.content
    if isinstance(m, UserModelMessage | AssistantModelMessage):
        return "".join(p.text for p in m.content if isinstance(p, ModelTextPart))
    return ""


def roles_and_texts(messages: list[ModelMessage]) -> list[tuple[str, str]]:
    return [(m.role, model_text(m)) for m in messages]


async def failure(
    action: Callable[[], Any],
) -> tuple[str, str]:
    """Run ``action``; return (exception type, reason) of what it raised."""
    try:
        await action()
    except Exception as e:
        return type(e).__name__, str(getattr(e, "reason", ""))
    return "", "no error"


def client_pick_model() -> ScriptedModel:
    """Calls the client tool ``pick`` first, then answers once it has a result."""

    def script(call: ModelCall) -> Any:
        if any(isinstance(m, ToolModelMessage) for m in call.messages):
            return "thanks"
        return tool_call_step(("c1", "pick", {}))

    return ScriptedModel(script)


async def until_waiting(h: Harness, run_id: str) -> None:
    """Stream the run until it waits for a pending action."""
    async for response in h.srv.runs.StreamRun(
        run_service_pb2.StreamRunRequest(run_id=run_id), timeout=20
    ):
        event = response.event
        if event.WhichOneof("event") == "status" and event.status.status in (
            runs_pb2.RUN_STATUS_WAITING,
            runs_pb2.RUN_STATUS_FAILED,
            runs_pb2.RUN_STATUS_COMPLETED,
        ):
            break
    got = await h.srv.runs.GetRun(run_service_pb2.GetRunRequest(run_id=run_id))
    assert got.run.status == runs_pb2.RUN_STATUS_WAITING, got.run


async def resolve_pick(h: Harness, run_id: str, value: str) -> None:
    got = await h.srv.runs.GetRun(run_service_pb2.GetRunRequest(run_id=run_id))
    (action,) = got.pending_actions
    await h.srv.runs.ResolvePendingAction(
        run_service_pb2.ResolvePendingActionRequest(
            run_id=run_id,
            action_id=action.id,
            tool_result=run_service_pb2.ClientToolResult(
                output=struct_pb2.Value(string_value=value)
            ),
        )
    )


# ---- LC-01 ---------------------------------------------------------------------


def _storage_handles(root: Any) -> list[str]:
    """Public attribute paths under a hook input that reach a storage provider."""
    found: list[str] = []
    seen: set[int] = set()

    def walk(obj: Any, path: str, depth: int) -> None:
        if id(obj) in seen or depth > 3:
            return
        seen.add(id(obj))
        if isinstance(obj, Store):
            found.append(path)
            return
        if isinstance(obj, BaseModel) or not type(obj).__module__.startswith("pai_grpc"):
            return
        for name in dir(obj):
            if name.startswith("_"):
                continue
            try:
                value = getattr(obj, name)
            except Exception:
                continue
            if isinstance(value, str | int | float | bool | type(None)) or callable(value):
                if isinstance(value, Store):
                    found.append(f"{path}.{name}")
                continue
            walk(value, f"{path}.{name}", depth + 1)

    walk(root, "input", 0)
    return found


@pytest.mark.rule("LC-01")
async def test_hooks_return_decisions_and_write_only_through_the_facade(
    database_url: str, hooks_mode: str
) -> None:
    seen: Env = {}

    async def prepare_run(i: PrepareRunInput) -> Any:
        if i.latest_user_message is not None and text_of(i.latest_user_message) == "raw":
            # Not a structured decision: the runtime refuses it.
            return {"action": "respond", "response": "sneaky"}
        seen["handles"] = _storage_handles(i)
        seen["has_store"] = [
            name
            for obj in (i.thread, i.thread.messages, i.run)
            for name in ("store", "storage", "provider", "commit")
            if hasattr(obj, name)
        ]
        appended = await i.thread.messages.append(
            role="system", parts=[TextPart(text="facade note")], visibility={"transcript": False}
        )
        assert appended is not None
        seen["appended"] = appended.message.id
        await i.thread.metadata.merge({"touched": True})
        return None

    hooks = lifecycle("facade-only", prepare_run=prepare_run)
    model = ScriptedModel(["ok"])
    async with harness(database_url, hooks, model=model, mode=hooks_mode) as h:
        thread_id, done = await h.ask("hello")
        assert done.status == "completed"
        assert seen["handles"] == []
        assert seen["has_store"] == []
        # The facade's writes are durable, with the semantics the runtime applies.
        stored = {m.message.id: m for m in await h.messages(thread_id)}
        note = stored[seen["appended"]]
        assert note.message.run_id == done.run.id
        assert (note.visibility.transcript, note.visibility.context) == (False, True)
        assert (await h.thread_record(thread_id)).metadata == {"touched": True}
        assert ("system", "facade note") in roles_and_texts(model.calls[0].messages)
        assert await h.transcript(thread_id) == [("user", "hello"), ("assistant", "ok")]

        # A hook that returns something other than a decision fails the run; nothing is written.
        before = await h.thread_record(thread_id)
        _, refused = await h.ask("raw", thread_id)
        assert refused.status == "failed"
        assert refused.run.error.reason == "HOOK_INVALID_DECISION"
        assert "prepare_run" in refused.run.error.message
        after = await h.thread_record(thread_id)
        assert after.metadata == before.metadata
        assert [r for r, _ in await h.transcript(thread_id)] == ["user", "assistant", "user"]
        assert len(model.calls) == 1


# ---- LC-02 ---------------------------------------------------------------------


def run_view(i: PrepareRunInput) -> dict[str, Any]:
    r = i.run
    return {
        "run_id": r.run_id,
        "thread_id": r.thread_id,
        "initiator": r.initiator,
        "started_at": r.started_at,
        "operation": r.execution.operation,
        "execution_started_at": r.execution.started_at,
    }


@pytest.mark.rule("LC-02")
async def test_run_identity_is_stable_across_waiting_and_resume(
    database_url: str, hooks_mode: str
) -> None:
    seen: list[dict[str, Any]] = []
    hooks = lifecycle("ids", prepare_run=lambda i: seen.append(run_view(i)))
    model = client_pick_model()
    async with harness(
        database_url, hooks, model=model, tools=[client_tool("pick")], mode=hooks_mode
    ) as h:
        thread_id = await h.thread()
        handle = await h.send(thread_id, "choose")
        await until_waiting(h, handle.run_id)
        await resolve_pick(h, handle.run_id, "blue")
        done = await h.finish(handle.run_id)
        assert done.status == "completed"

        first, second = seen
        for view in seen:
            assert view["run_id"] == handle.run_id
            assert view["thread_id"] == thread_id
            assert view["initiator"] == "send"
        assert first["operation"] == "send"
        assert second["operation"] == "resume"
        assert first["started_at"] is not None
        assert second["started_at"] == first["started_at"]  # the logical run's start
        assert second["execution_started_at"] > first["execution_started_at"]  # the episode's
        record = await h.run_record(handle.run_id)
        assert record.started_at == first["started_at"]
        assert record.execution_started_at == second["execution_started_at"]
        assert done.run.initiator == runs_pb2.RUN_INITIATOR_SEND
        assert done.run.execution.operation == runs_pb2.RUN_OPERATION_RESUME
        assert done.run.start_time.ToDatetime(tzinfo=UTC) == first["started_at"]


@pytest.mark.rule("LC-02")
async def test_run_initiator_names_trigger_and_regenerate(
    database_url: str, hooks_mode: str
) -> None:
    seen: list[dict[str, Any]] = []
    hooks = lifecycle("ids", prepare_run=lambda i: seen.append(run_view(i)))
    async with harness(database_url, hooks, model=ScriptedModel(["a1"]), mode=hooks_mode) as h:
        thread_id, sent = await h.ask("hi")
        triggered = (
            await h.srv.threads.Trigger(
                tpb.TriggerRequest(thread_id=thread_id, input=struct_pb2.Value(string_value="t"))
            )
        ).run
        assert (await h.finish(triggered.run_id)).status == "completed"
        answers = [m for m in await h.messages(thread_id) if m.message.role == "assistant"]
        regenerated = (
            await h.srv.threads.Regenerate(
                tpb.RegenerateRequest(thread_id=thread_id, message_id=answers[0].message.id)
            )
        ).run
        assert (await h.finish(regenerated.run_id)).status == "completed"

        assert [(v["run_id"], v["initiator"], v["operation"]) for v in seen] == [
            (sent.run.id, "send", "send"),
            (triggered.run_id, "trigger", "trigger"),
            (regenerated.run_id, "regenerate", "regenerate"),
        ]
        assert all(v["thread_id"] == thread_id for v in seen)
        for view in seen:
            record = await h.run_record(view["run_id"])
            assert view["started_at"] == record.started_at
            assert view["execution_started_at"] == record.execution_started_at


# ---- LC-03 ---------------------------------------------------------------------


@pytest.mark.rule("LC-03")
async def test_facade_reads_are_lazy_paginated_and_bound_to_the_thread(
    database_url: str, hooks_mode: str
) -> None:
    env: Env = {}
    seen: Env = {}

    async def prepare_run(i: PrepareRunInput) -> None:
        if "target" not in env or i.thread.thread_id != env["target"]:
            return
        t = i.thread
        assert i.latest_user_message is not None
        own = i.latest_user_message.message.id
        seen["thread_id"] = t.thread_id
        seen["get_other"] = await t.messages.get(env["other_message"])
        seen["get_foreign_scope"] = await t.messages.get(env["foreign_message"])
        seen["get_many"] = [
            m.message.id
            for m in await t.messages.get_many([env["other_message"], own, env["foreign_message"]])
        ]
        seen["list_ids"] = [m.message.id for m in (await t.messages.list(view="all")).items]
        seen["bound_other"] = await failure(
            lambda: t.messages.list(after_message_id=env["other_message"])
        )
        one = await t.messages.list(view="all", limit=1)
        seen["page"] = (len(one.items), bool(one.next_page_token))
        # Lazy: every read is made when asked, against the current durable state.
        before = len((await t.messages.list(view="all")).items)
        await t.messages.append(role="assistant", parts=[TextPart(text="late")])
        after = len((await t.messages.list(view="all")).items)
        seen["lazy"] = (before, after)

    hooks = lifecycle("reader", prepare_run=prepare_run)
    async with harness(database_url, hooks, mode=hooks_mode) as h:
        other_thread, _ = await h.ask("secret of another thread")
        env["other_message"] = (await h.messages(other_thread))[0].message.id
        # A thread of another tenant (scope), holding a message.
        foreign_thread, foreign_message = new_id("thr"), new_id("msg")
        await h.store.commit(
            WriteSet(
                scope="tenant-x",
                thread_id=foreign_thread,
                new_thread=NewThread(id=foreign_thread, agent="default"),
            )
        )
        await h.store.commit(
            WriteSet(
                scope="tenant-x",
                thread_id=foreign_thread,
                append_messages=[
                    NewMessage(
                        id=foreign_message,
                        role="user",
                        parts=[{"type": "text", "text": "foreign"}],
                    )
                ],
            )
        )
        env["foreign_message"] = foreign_message
        target = env["target"] = await h.thread()
        handle = await h.send(target, "mine")
        done = await h.finish(handle.run_id)
        assert done.status == "completed"

        assert seen["thread_id"] == target
        assert seen["get_other"] is None
        assert seen["get_foreign_scope"] is None
        assert seen["get_many"] == [handle.message_id]
        assert seen["list_ids"] == [handle.message_id]
        assert seen["bound_other"][0] != ""  # another thread's message is no bound here
        assert seen["page"] == (1, False)
        assert seen["lazy"] == (1, 2)


# ---- LC-04 ---------------------------------------------------------------------


@pytest.mark.rule("LC-04")
async def test_mutate_stages_writes_and_commits_them_atomically(
    database_url: str, hooks_mode: str
) -> None:
    env: Env = {}
    seen: Env = {}
    contract = AgentContract(
        thread_metadata={"type": "object", "properties": {"step": {"type": "integer"}}}
    )

    async def prepare_run(i: PrepareRunInput) -> None:
        h: Harness = env["h"]
        thread_id = i.thread.thread_id

        async def stage(tx: Any) -> str:
            await tx.messages.append(
                role="system", parts=[TextPart(text="staged")], visibility={"transcript": False}
            )
            await tx.metadata.merge({"step": 1})
            await tx.private_metadata.merge({"cursor": "c1"})
            # Reads inside the callback see persisted state, not the staged writes.
            seen["inside_ids"] = [m.message.id for m in (await tx.messages.list(view="all")).items]
            seen["inside_context"] = len((await tx.context.current()).messages)
            seen["inside_metadata"] = await tx.metadata.get()
            seen["inside_private"] = await tx.private_metadata.get()
            seen["inside_direct"] = await i.thread.metadata.get()
            seen["inside_version"] = (await h.thread_record(thread_id)).version
            return "callback result"

        seen["version_before"] = (await h.thread_record(thread_id)).version
        seen["returned"] = await i.thread.mutate(stage)
        seen["version_after"] = (await h.thread_record(thread_id)).version

        # One invalid write makes the whole mutation fail: nothing of it commits.
        async def half_bad(tx: Any) -> None:
            await tx.messages.append(role="assistant", parts=[TextPart(text="must not exist")])
            await tx.private_metadata.merge({"cursor": "c2"})
            await tx.metadata.merge({"step": "not an integer"})

        seen["invalid"] = await failure(lambda: i.thread.mutate(half_bad))

        # A callback that raises commits nothing either.
        async def raises(tx: Any) -> None:
            await tx.messages.append(role="assistant", parts=[TextPart(text="must not exist")])
            await tx.metadata.merge({"step": 2})
            raise RuntimeError("changed my mind")

        seen["raised"] = await failure(lambda: i.thread.mutate(raises))
        seen["version_end"] = (await h.thread_record(thread_id)).version

    hooks = lifecycle("mutator", prepare_run=prepare_run)
    async with harness(database_url, hooks, contract=contract, mode=hooks_mode) as h:
        env["h"] = h
        thread_id = await h.thread()
        handle = await h.send(thread_id, "go")
        done = await h.finish(handle.run_id)
        assert done.status == "completed"

        assert seen["inside_ids"] == [handle.message_id]
        assert seen["inside_context"] == 1
        assert seen["inside_metadata"] == {}
        assert seen["inside_private"] == {}
        assert seen["inside_direct"] == {}
        assert seen["inside_version"] == seen["version_before"]
        assert seen["returned"] == "callback result"
        assert seen["version_after"] == seen["version_before"] + 1  # one atomic commit
        assert seen["invalid"] == ("ContractViolation", "CONTRACT_VIOLATION")
        assert seen["raised"][0] == "RuntimeError"
        assert seen["version_end"] == seen["version_after"]

        record = await h.thread_record(thread_id)
        assert record.metadata == {"step": 1}
        assert record.private_metadata == {"cursor": "c1"}
        texts = [text_of(m) for m in await h.messages(thread_id)]
        assert texts == ["go", "staged", "hello"]


# ---- LC-05 ---------------------------------------------------------------------


@pytest.mark.rule("LC-05")
async def test_expected_version_is_a_root_cas_and_private_metadata_compares_only_itself(
    database_url: str, hooks_mode: str
) -> None:
    env: Env = {}
    seen: Env = {}

    def note(tx: Any, key: str) -> Any:
        return tx.private_metadata.merge({key: True})

    async def prepare_run(i: PrepareRunInput) -> None:
        h: Harness = env["h"]
        t = i.thread
        stale_version = env["version_before_send"]  # the run start revised the root since
        seen["stale_version"] = await failure(
            lambda: t.mutate(
                lambda tx: note(tx, "by_stale_version"), expected_version=stale_version
            )
        )
        # The private bag did not change, so a private-metadata comparison still holds.
        await t.mutate(lambda tx: note(tx, "by_private"), expected_private_metadata={"cursor": 0})
        now = (await h.thread_record(t.thread_id)).version
        await t.metadata.merge({"unrelated": 1})  # another root revision
        seen["outdated_version"] = await failure(
            lambda: t.mutate(lambda tx: note(tx, "by_outdated"), expected_version=now)
        )
        current = await t.private_metadata.get()
        await t.mutate(lambda tx: note(tx, "by_current_private"), expected_private_metadata=current)
        seen["wrong_private"] = await failure(
            lambda: t.mutate(
                lambda tx: note(tx, "by_wrong_private"), expected_private_metadata={"cursor": 0}
            )
        )
        # The hook-author class, in process as in a plugin (never storage's own).
        try:
            await t.mutate(lambda tx: note(tx, "by_stale_again"), expected_version=stale_version)
        except VersionConflict as e:
            seen["conflict_thread"] = e.thread_id
        latest = (await h.thread_record(t.thread_id)).version
        await t.mutate(lambda tx: note(tx, "by_latest_version"), expected_version=latest)
        seen["latest_version"] = latest

    hooks = lifecycle("cas", prepare_run=prepare_run)
    async with harness(database_url, hooks, mode=hooks_mode) as h:
        env["h"] = h
        thread_id = await h.thread()
        # Seed private metadata before the run (a trusted write outside any run).
        await h.store.commit(
            WriteSet(
                scope=DEV_SCOPE,
                thread_id=thread_id,
                thread=ThreadPatch(private_metadata={"cursor": 0}),
            )
        )
        env["version_before_send"] = (await h.thread_record(thread_id)).version
        _, done = await h.ask("go", thread_id)
        assert done.status == "completed"

        assert seen["stale_version"][0] == VersionConflict.__name__
        assert seen["outdated_version"][0] == VersionConflict.__name__
        assert seen["wrong_private"][0] == VersionConflict.__name__
        assert seen["conflict_thread"] == thread_id
        record = await h.thread_record(thread_id)
        assert record.private_metadata == {
            "cursor": 0,
            "by_private": True,
            "by_current_private": True,
            "by_latest_version": True,
        }
        assert record.metadata == {"unrelated": 1}
        assert record.version > seen["latest_version"]


# ---- LC-06 ---------------------------------------------------------------------


class Watcher:
    """Reads a WatchThread stream in the background."""

    def __init__(self, call: Any) -> None:
        self.call = call
        self.queue: asyncio.Queue[tpb.WatchThreadResponse] = asyncio.Queue()
        self.all: list[tpb.WatchThreadResponse] = []
        self.task = asyncio.create_task(self._pump())

    async def _pump(self) -> None:
        async for response in self.call:
            self.all.append(response)
            self.queue.put_nowait(response)

    async def next(self, timeout: float = 10.0) -> tpb.WatchThreadResponse | None:
        try:
            return await asyncio.wait_for(self.queue.get(), timeout)
        except TimeoutError:
            return None

    async def until(
        self, done: Callable[[tpb.WatchThreadResponse], bool]
    ) -> list[tpb.WatchThreadResponse]:
        out = []
        while True:
            change = await self.next()
            assert change is not None, f"no matching change after {[c.change for c in out]}"
            out.append(change)
            if done(change):
                return out

    def cancel(self) -> None:
        self.call.cancel()
        self.task.cancel()


SECRET = "s3cr3t-private-value"


@pytest.mark.rule("LC-06")
async def test_private_metadata_never_reaches_clients_and_private_writes_publish_nothing(
    database_url: str, hooks_mode: str
) -> None:
    go, written, release = asyncio.Event(), asyncio.Event(), asyncio.Event()
    # Held until the test has read the public changes: a slow watcher would otherwise
    # read a head where the run had already ended, and report that status change too.
    checked = asyncio.Event()

    async def prepare_run(i: PrepareRunInput) -> None:
        await go.wait()
        await i.thread.private_metadata.merge({"cursor": SECRET})
        await i.run.private_metadata.merge({"run_secret": SECRET})
        written.set()
        await release.wait()
        await i.thread.messages.append(
            role="system", parts=[TextPart(text="note")], private_metadata={"why": SECRET}
        )
        await i.thread.metadata.merge({"marker": "public"})
        await checked.wait()

    hooks = lifecycle("private", prepare_run=prepare_run)
    async with harness(database_url, hooks, mode=hooks_mode) as h:
        thread_id = await h.thread()
        watch = Watcher(h.srv.threads.WatchThread(tpb.WatchThreadRequest(thread_id=thread_id)))
        try:
            snapshot = await watch.next()
            assert snapshot is not None
            assert snapshot.change == tpb.THREAD_CHANGE_SNAPSHOT
            handle = await h.send(thread_id, "hi")
            await watch.until(lambda c: c.change == tpb.THREAD_CHANGE_MESSAGES_COMMITTED)
            before = (await h.thread_record(thread_id)).version
            go.set()
            await written.wait()
            # The private-only writes revised the root but published no head event.
            assert (await h.thread_record(thread_id)).version > before
            assert await watch.next(timeout=1.5) is None
            release.set()
            public = await watch.until(lambda c: c.change == tpb.THREAD_CHANGE_METADATA)
            assert {c.change for c in public} <= {
                tpb.THREAD_CHANGE_MESSAGES_COMMITTED,
                tpb.THREAD_CHANGE_METADATA,
            }
            marker = public[-1]
            checked.set()
            done = await h.finish(handle.run_id)
            assert done.status == "completed"
            await watch.until(lambda c: c.thread.status == threads_pb2.THREAD_STATUS_IDLE)
        finally:
            checked.set()  # never leave the run held if an assertion failed
            watch.cancel()

        record = await h.thread_record(thread_id)
        assert record.private_metadata == {"cursor": SECRET}
        assert dict(marker.thread.metadata) == {"marker": "public"}
        secret = SECRET.encode()
        for change in watch.all:
            assert secret not in change.SerializeToString()
        for event in done.events:
            assert secret not in event.SerializeToString()
        got = await h.srv.threads.GetThread(tpb.GetThreadRequest(thread_id=thread_id))
        listed = await h.srv.threads.ListThreads(tpb.ListThreadsRequest())
        messages = await h.srv.threads.ListMessages(tpb.ListMessagesRequest(thread_id=thread_id))
        assert len(messages.messages) == 3
        run = await h.srv.runs.GetRun(run_service_pb2.GetRunRequest(run_id=handle.run_id))
        for response in (got, listed, messages, run):
            assert secret not in response.SerializeToString()


# ---- LC-07 ---------------------------------------------------------------------


class PrivateBag(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cursor: int
    seen: list[str] = []


@pytest.mark.rule("LC-07")
async def test_merge_is_shallow_and_validates_the_complete_merged_object(
    database_url: str, hooks_mode: str
) -> None:
    seen: Env = {}
    contract = AgentContract(
        thread_metadata={
            "type": "object",
            "required": ["plan"],
            "maxProperties": 3,
            "properties": {"plan": {"type": "string"}, "prefs": {"type": "object"}},
        },
        thread_private_metadata=PrivateBag,
        run_metadata={"type": "object", "properties": {"a": {"type": "object"}}},
    )

    async def prepare_run(i: PrepareRunInput) -> None:
        t, r = i.thread, i.run
        await t.metadata.merge({"prefs": {"lang": "fr"}})  # replaces prefs as a whole
        seen["after_prefs"] = await t.metadata.get()
        await t.metadata.merge({"seen": 1})  # alone it lacks "plan"; merged it is valid
        # Valid on its own, but the merged object would have four properties.
        seen["too_many"] = await failure(lambda: t.metadata.merge({"plan": "basic", "extra": 2}))
        seen["wrong_type"] = await failure(lambda: t.metadata.merge({"plan": 5}))

        await t.private_metadata.merge({"cursor": 1})
        await t.private_metadata.merge({"seen": ["a"]})  # alone it lacks "cursor"
        seen["private_bad"] = await failure(lambda: t.private_metadata.merge({"seen": "x"}))

        seen["run_first"] = await r.metadata.merge({"a": {"x": 1}})
        seen["run_second"] = await r.metadata.merge({"a": {"y": 2}})
        seen["run_bad"] = await failure(lambda: r.metadata.merge({"a": 3}))

    hooks = lifecycle("merger", prepare_run=prepare_run)
    async with harness(database_url, hooks, contract=contract, mode=hooks_mode) as h:
        meta = struct_pb2.Struct()
        meta.update({"plan": "pro", "prefs": {"lang": "en", "tz": "UTC"}})
        thread_id = await h.thread(metadata=meta)
        run_meta = struct_pb2.Struct()
        run_meta.update({"source": "web"})
        handle = await h.send(thread_id, "go", run_metadata=run_meta)
        done = await h.finish(handle.run_id)
        assert done.status == "completed"

        assert seen["after_prefs"] == {"plan": "pro", "prefs": {"lang": "fr"}}
        for key in ("too_many", "wrong_type", "private_bad", "run_bad"):
            assert seen[key] == ("ContractViolation", "CONTRACT_VIOLATION"), key
        record = await h.thread_record(thread_id)
        assert record.metadata == {"plan": "pro", "prefs": {"lang": "fr"}, "seen": 1}
        assert record.private_metadata == {"cursor": 1, "seen": ["a"]}
        assert seen["run_first"] == {"source": "web", "a": {"x": 1}}
        assert seen["run_second"] == {"source": "web", "a": {"y": 2}}
        assert (await h.run_record(handle.run_id)).metadata == {"source": "web", "a": {"y": 2}}


# ---- LC-08 ---------------------------------------------------------------------


@pytest.mark.rule("LC-08")
async def test_facade_writes_are_refused_while_waiting_and_after_the_run_ends(
    database_url: str, hooks_mode: str
) -> None:
    kept: list[PrepareRunInput] = []
    steps: list[int] = []

    async def prepare_run(i: PrepareRunInput) -> None:
        kept.append(i)
        await i.thread.private_metadata.merge({f"episode{len(kept)}": True})

    async def prepare_model_step(i: PrepareModelStepInput) -> None:
        assert i.step is not None
        steps.append(i.step.index)
        # Usable in every hook of the episode.
        await i.thread.metadata.merge({f"step{i.step.index}": True})
        await i.run.metadata.merge({f"step{i.step.index}": True})

    hooks = lifecycle("keeper", prepare_run=prepare_run, prepare_model_step=prepare_model_step)
    async with harness(
        database_url,
        hooks,
        model=client_pick_model(),
        tools=[client_tool("pick")],
        mode=hooks_mode,
    ) as h:
        thread_id = await h.thread()
        handle = await h.send(thread_id, "choose")
        await until_waiting(h, handle.run_id)

        first = kept[0]
        attempts: dict[str, Callable[[PrepareRunInput], Any]] = {
            "thread.metadata.merge": lambda i: i.thread.metadata.merge({"late": 1}),
            "thread.metadata.replace": lambda i: i.thread.metadata.replace({"late": 1}),
            "thread.private_metadata.merge": lambda i: i.thread.private_metadata.merge({"l": 1}),
            "messages.append": lambda i: i.thread.messages.append(
                role="assistant", parts=[TextPart(text="late")]
            ),
            "mutate": lambda i: i.thread.mutate(lambda tx: tx.metadata.merge({"late": 1})),
            "run.metadata.merge": lambda i: i.run.metadata.merge({"late": 1}),
            "run.private_metadata.merge": lambda i: i.run.private_metadata.merge({"late": 1}),
        }
        # A retained facade is closed in process; remotely its capability token died
        # with its hook call (REM-02). Either way the write is refused.
        refused = (
            ("FacadeClosed", "FACADE_CLOSED")
            if hooks_mode == "in-process"
            else ("PermissionDenied", "CAPABILITY_EXPIRED")
        )
        waiting_before = await h.thread_record(thread_id)
        while_waiting = {k: await failure(lambda f=f: f(first)) for k, f in attempts.items()}
        assert while_waiting == {k: refused for k in attempts}
        if hooks_mode == "in-process":
            # Reads still work; they just cannot write (a remote token is dead for both).
            assert (await first.thread.metadata.get()) == {"step0": True}
        assert await h.thread_record(thread_id) == waiting_before

        await resolve_pick(h, handle.run_id, "red")
        done = await h.finish(handle.run_id)
        assert done.status == "completed"
        assert len(kept) == 2
        # The resumed episode wrote through its own facade; the first one stays closed.
        assert (await h.thread_record(thread_id)).private_metadata == {
            "episode1": True,
            "episode2": True,
        }
        assert steps == [0, 1]
        assert (await h.run_record(handle.run_id)).metadata == {"step0": True, "step1": True}
        ended_before = await h.thread_record(thread_id)
        for keeper in kept:
            after_end = {
                k: await failure(lambda f=f, keeper=keeper: f(keeper)) for k, f in attempts.items()
            }
            assert after_end == {k: refused for k in attempts}
        assert await h.thread_record(thread_id) == ended_before
        assert (await h.run_record(handle.run_id)).metadata == {"step0": True, "step1": True}


@pytest.mark.rule("LC-08")
async def test_facade_writes_are_refused_after_lease_loss(
    database_url: str, hooks_mode: str
) -> None:
    ready, go = asyncio.Event(), asyncio.Event()
    seen: Env = {}

    async def prepare_run(i: PrepareRunInput) -> None:
        await i.thread.metadata.merge({"before": 1})
        ready.set()
        await go.wait()
        seen["thread"] = await failure(lambda: i.thread.metadata.merge({"after": 1}))
        seen["again"] = await failure(lambda: i.thread.private_metadata.merge({"after": 1}))
        seen["run"] = await failure(lambda: i.run.metadata.merge({"after": 1}))
        seen["done"] = True

    hooks = lifecycle("stale", prepare_run=prepare_run)
    async with harness(database_url, hooks, mode=hooks_mode) as h:
        thread_id = await h.thread()
        handle = await h.send(thread_id, "go")
        await asyncio.wait_for(ready.wait(), 10)
        # Another execution took the run over: this one's lease is no longer current.
        await h.store.run_in_transaction(
            lambda c: c.execute(
                update(runs_table)
                .where(runs_table.c.id == handle.run_id)
                .values(lease_epoch=runs_table.c.lease_epoch + 100)
            )
        )
        go.set()
        for _ in range(500):
            if "done" in seen:
                break
            await asyncio.sleep(0.01)
        assert seen["thread"] == ("FacadeClosed", "LEASE_LOST")
        assert seen["again"] == ("FacadeClosed", "FACADE_CLOSED")
        assert seen["run"] == ("FacadeClosed", "FACADE_CLOSED")
        record = await h.thread_record(thread_id)
        assert record.metadata == {"before": 1}
        assert record.private_metadata == {}
        assert (await h.run_record(handle.run_id)).metadata == {}


# ---- LC-09 ---------------------------------------------------------------------


@pytest.mark.rule("LC-09")
async def test_run_metadata_is_its_own_bag_and_clients_never_see_run_private_metadata(
    database_url: str, hooks_mode: str
) -> None:
    seen: Env = {}

    async def prepare_run(i: PrepareRunInput) -> None:
        seen["run_initial"] = await i.run.metadata.get()
        seen["thread_initial"] = await i.thread.metadata.get()
        await i.thread.metadata.merge({"topic": "thread-level"})
        seen["merged"] = await i.run.metadata.merge({"score": 7})
        await i.run.private_metadata.merge({"trace": SECRET})
        seen["run_after"] = await i.run.metadata.get()
        seen["private_after"] = await i.run.private_metadata.get()
        seen["thread_after"] = await i.thread.metadata.get()

    hooks = lifecycle("run-meta", prepare_run=prepare_run)
    async with harness(database_url, hooks, mode=hooks_mode) as h:
        meta = struct_pb2.Struct()
        meta.update({"owner": "thread"})
        thread_id = await h.thread(metadata=meta)
        run_meta = struct_pb2.Struct()
        run_meta.update({"source": "web"})
        handle = await h.send(thread_id, "go", run_metadata=run_meta)
        done = await h.finish(handle.run_id)
        assert done.status == "completed"

        assert seen["run_initial"] == {"source": "web"}
        assert seen["thread_initial"] == {"owner": "thread"}
        assert seen["merged"] == {"source": "web", "score": 7}
        assert seen["run_after"] == {"source": "web", "score": 7}
        assert seen["private_after"] == {"trace": SECRET}
        assert seen["thread_after"] == {"owner": "thread", "topic": "thread-level"}
        record = await h.run_record(handle.run_id)
        assert (record.metadata, record.private_metadata) == (
            {"source": "web", "score": 7},
            {"trace": SECRET},
        )
        assert (await h.thread_record(thread_id)).metadata == {
            "owner": "thread",
            "topic": "thread-level",
        }
        # Client run state: run.metadata, never run.privateMetadata.
        got = await h.srv.runs.GetRun(run_service_pb2.GetRunRequest(run_id=handle.run_id))
        assert dict(got.run.metadata) == {"source": "web", "score": 7}
        listed = await h.srv.runs.ListRuns(run_service_pb2.ListRunsRequest(thread_id=thread_id))
        assert [dict(r.metadata) for r in listed.runs] == [{"source": "web", "score": 7}]
        secret = SECRET.encode()
        assert secret not in got.SerializeToString()
        assert secret not in listed.SerializeToString()
        assert all(secret not in e.SerializeToString() for e in done.events)


# ---- LC-10 ---------------------------------------------------------------------


@pytest.mark.rule("LC-10")
async def test_pagination_repeats_the_query_with_an_opaque_token_and_any_page_size(
    database_url: str, hooks_mode: str
) -> None:
    seen: Env = {}

    async def prepare_run(i: PrepareRunInput) -> None:
        t = i.thread
        for n in range(7):
            await t.messages.append(
                role="assistant",
                parts=[TextPart(text=f"m{n}")],
                visibility={"transcript": n % 3 != 0, "context": n % 2 == 0},
            )
        everything = (await t.messages.list(view="all", limit=100)).items
        seen["all"] = [text_of(m) for m in everything]
        # transcript view, newest first, below a bound; page sizes 2, 1, 3, ...
        bound = everything[-1].message.id
        pages: list[list[str]] = []
        tokens: list[str] = []
        token = ""
        for size in (2, 1, 3, 3):
            page = await t.messages.list(
                view="transcript",
                order="desc",
                before_message_id=bound,
                limit=size,
                page_token=token,
            )
            pages.append([text_of(m) for m in page.items])
            token = page.next_page_token
            tokens.append(token)
            if not token:
                break
        seen["pages"] = pages
        seen["tokens"] = tokens
        # context view through context.messages, ascending, after a bound
        first = everything[0].message.id
        ctx_pages = []
        token = ""
        for size in (1, 2, 5):
            page = await t.context.messages(after_message_id=first, limit=size, page_token=token)
            ctx_pages.append([text_of(m) for m in page.items])
            token = page.next_page_token
            if not token:
                break
        seen["ctx_pages"] = ctx_pages
        # A token continues only the query that minted it.
        one = await t.messages.list(view="transcript", order="desc", limit=1)
        seen["changed_view"] = await failure(
            lambda: t.messages.list(
                view="all", order="desc", limit=1, page_token=one.next_page_token
            )
        )
        seen["changed_order"] = await failure(
            lambda: t.messages.list(view="transcript", limit=1, page_token=one.next_page_token)
        )

    hooks = lifecycle("pager", prepare_run=prepare_run)
    async with harness(database_url, hooks, mode=hooks_mode) as h:
        _, done = await h.ask("u")
        assert done.status == "completed"

    assert seen["all"] == ["u", "m0", "m1", "m2", "m3", "m4", "m5", "m6"]
    # transcript: u, m1, m2, m4, m5 (m0, m3, m6 hidden); below m6, newest first
    assert seen["pages"] == [["m5", "m4"], ["m2"], ["m1", "u"]]
    assert all(isinstance(t, str) for t in seen["tokens"])
    assert seen["tokens"][-1] == ""
    assert all(t and not t.isdigit() for t in seen["tokens"][:-1])  # opaque, not a position
    # context: u, m0, m2, m4, m6 ; after u, chronological
    assert seen["ctx_pages"] == [["m0"], ["m2", "m4"], ["m6"]]
    assert seen["changed_view"] == ("InvalidArgument", "INVALID_PAGE_TOKEN")
    assert seen["changed_order"] == ("InvalidArgument", "INVALID_PAGE_TOKEN")


# ---- LC-11 ---------------------------------------------------------------------


@pytest.mark.rule("LC-11")
async def test_append_takes_roles_native_parts_visibility_and_both_metadata_bags(
    database_url: str, hooks_mode: str
) -> None:
    seen: Env = {}
    contract = AgentContract(
        message_metadata={"type": "object", "properties": {"tag": {"type": "string"}}},
        message_private_metadata={"type": "object", "properties": {"why": {"type": "string"}}},
    )

    async def prepare_run(i: PrepareRunInput) -> None:
        m = i.thread.messages
        system = await m.append(
            role="system",
            parts=[TextPart(text="house rules")],
            visibility={"transcript": False},
            private_metadata={"why": "PRIVATE-WHY"},
        )
        user = await m.append(
            role="user",
            parts=[TextPart(text="remembered fact")],
            visibility={"context": True, "transcript": True},
            metadata={"tag": "PUBLIC-TAG"},
        )
        assistant = await m.append(
            role="assistant",
            parts=[ReasoningPart(text="thinking"), TextPart(text="earlier answer")],
            visibility={"context": False},
        )
        seen["appended"] = [system, user, assistant]
        seen["tool_role"] = await failure(lambda: m.append(role="tool", parts=[TextPart(text="x")]))
        seen["data_part"] = await failure(
            lambda: m.append(role="assistant", parts=[DataPart(name="card", data={})])
        )
        seen["bad_private"] = await failure(
            lambda: m.append(role="user", parts=[TextPart(text="x")], private_metadata={"why": 1})
        )

    hooks = lifecycle("author", prepare_run=prepare_run)
    model = ScriptedModel(["done"])
    async with harness(database_url, hooks, model=model, contract=contract, mode=hooks_mode) as h:
        thread_id, done = await h.ask("question")
        assert done.status == "completed"

        system, user, assistant = seen["appended"]
        for message in seen["appended"]:
            assert isinstance(message, LifecycleMessage)
            assert message.message.run_id == done.run.id
        assert system.message.role == "system"
        assert (system.visibility.transcript, system.visibility.context) == (False, True)
        assert system.private_metadata == {"why": "PRIVATE-WHY"}
        assert user.message.metadata == {"tag": "PUBLIC-TAG"}
        assert user.private_metadata == {}
        assert (assistant.visibility.transcript, assistant.visibility.context) == (True, False)
        assert [p.type for p in assistant.message.parts] == ["reasoning", "text"]
        for key in ("tool_role", "data_part", "bad_private"):
            assert seen[key][0] in ("InvalidArgument", "ContractViolation"), key

        stored = {m.message.id: m for m in await h.messages(thread_id)}
        for message in seen["appended"]:
            assert stored[message.message.id] == message
        assert len(stored) == 5  # question, three appended, the answer

        # ModelMessage carries none of the lifecycle facts.
        messages = model.calls[0].messages
        assert roles_and_texts(messages) == [
            ("user", "question"),
            ("system", "house rules"),
            ("user", "remembered fact"),
        ]
        for model_message in messages:
            fields = set(type(model_message).model_fields)
            assert not fields & {"visibility", "private_metadata", "metadata", "id", "run_id"}
            dumped = model_message.model_dump_json()
            assert "PRIVATE-WHY" not in dumped
            assert "PUBLIC-TAG" not in dumped
        assert await h.transcript(thread_id) == [
            ("user", "question"),
            ("user", "remembered fact"),
            ("assistant", "earlier answer"),
            ("assistant", "done"),
        ]


# ---- LC-12 ---------------------------------------------------------------------


@pytest.mark.rule("LC-12")
async def test_context_current_returns_durable_and_model_messages(
    database_url: str, hooks_mode: str
) -> None:
    seen: list[Any] = []

    async def prepare_run(i: PrepareRunInput) -> None:
        if len(seen) == 0:
            await i.thread.messages.append(
                role="assistant", parts=[TextPart(text="hidden")], visibility={"context": False}
            )
            await i.thread.messages.append(
                role="system",
                parts=[TextPart(text="only context")],
                visibility={"transcript": False},
            )

    async def prepare_model_step(i: PrepareModelStepInput) -> None:
        projection = await i.thread.context.current()
        assert i.input is not None
        seen.append((projection, list(i.input.messages)))

    hooks = lifecycle("ctx", prepare_run=prepare_run, prepare_model_step=prepare_model_step)
    model = ScriptedModel(["a1", "a2"])
    async with harness(database_url, hooks, model=model, mode=hooks_mode) as h:
        thread_id, _ = await h.ask("q1")
        _, done = await h.ask("q2", thread_id)
        assert done.status == "completed"

        context_ids = [m.message.id for m in await h.messages(thread_id) if m.visibility.context]
        projection, request_messages = seen[-1]
        assert [m.message.id for m in projection.messages] == context_ids[:-1]  # before a2
        assert [text_of(m) for m in projection.messages] == ["q1", "only context", "a1", "q2"]
        assert all(isinstance(m, LifecycleMessage) for m in projection.messages)
        assert projection.messages[1].visibility.transcript is False
        # The model messages correspond to those durable messages: what the step sends.
        assert projection.model_messages == request_messages
        assert projection.model_messages == model.calls[-1].messages
        assert roles_and_texts(projection.model_messages) == [
            ("user", "q1"),
            ("system", "only context"),
            ("assistant", "a1"),
            ("user", "q2"),
        ]
        assert projection.next_page_token == ""
