"""The facade's write path: its state, the operations it stages and their commit.

This is the storage side of the hook-author facade (:mod:`pai_grpc.lifecycle`
declares its API): storage's version conflict surfaces to hooks as
:class:`pai_grpc.lifecycle.VersionConflict`.

Every facade write becomes an operation; the committer turns a batch of them
into one storage write set, fenced by the run's lease and checked against the
agent contract. Writes made directly commit at once; inside ``mutate()`` they
are staged and commit together when the callback returns.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeVar

from pai_grpc.domain import (
    DataPart,
    JsonObject,
    LifecycleMessage,
    MessagePart,
    ToolPart,
    Visibility,
    new_id,
)
from pai_grpc.errors import InvalidArgument
from pai_grpc.lifecycle import AgentContract, FacadeClosed, VersionConflict
from pai_grpc.lifecycle.internal import Bag
from pai_grpc.runtime._facade_backend import FacadeBackend
from storage import (
    Lease,
    LeaseLost,
    MessagePatch,
    MessageRecord,
    NewMessage,
    RunUpdate,
    ThreadPatch,
    WriteSet,
    check_strict_json,
)
from storage import VersionConflict as StoreVersionConflict

T = TypeVar("T")


@dataclass
class FacadeState:
    """The runtime's hold on one facade: scope, thread, lease and permissions."""

    backend: FacadeBackend
    scope: str
    thread_id: str
    contract: AgentContract
    run_id: str | None = None
    lease: Lease | None = None
    #: Whether writes are allowed now (cleared when the episode stops).
    alive: bool = True
    #: The step-start anchor: history reads never go past it (RMC-05..07).
    through_position: int | None = None

    def writable(self) -> Lease:
        if not self.alive or self.lease is None or self.run_id is None:
            raise FacadeClosed(
                "the thread facade is closed: writes work only during an execution episode "
                "(not while the run waits, after it ended, or after its lease was lost)",
                reason="FACADE_CLOSED",
            )
        return self.lease


# ---- staged operations --------------------------------------------------------


@dataclass
class _Append:
    message: NewMessage


@dataclass
class _Visibility:
    ids: list[str]
    transcript: bool | None
    context: bool | None


@dataclass
class _ThreadMeta:
    private: bool
    mode: Literal["merge", "replace"]
    value: JsonObject


@dataclass
class _RunMeta:
    private: bool
    value: JsonObject


_Op = _Append | _Visibility | _ThreadMeta | _RunMeta

_AUTHORABLE = ("text", "reasoning", "file", "source-url", "source-document", "step-start")


def _message_input(
    state: FacadeState,
    role: str,
    parts: Sequence[MessagePart],
    visibility: Visibility | dict[str, bool] | None,
    metadata: JsonObject | None,
    private_metadata: JsonObject | None,
) -> NewMessage:
    if role not in ("system", "user", "assistant"):
        raise InvalidArgument.field("role", "must be system, user or assistant")
    for i, part in enumerate(parts):
        if isinstance(part, DataPart | ToolPart) or part.type not in _AUTHORABLE:
            raise InvalidArgument.field(
                f"parts[{i}]",
                f"{part.type} parts have their own write paths (uiData, tool reduction)",
            )
    vis = visibility if isinstance(visibility, Visibility) else Visibility(**(visibility or {}))
    meta = state.contract.validate("message_metadata", dict(metadata or {}))
    private = state.contract.validate("message_private_metadata", dict(private_metadata or {}))
    check_strict_json(meta, path="metadata")
    check_strict_json(private, path="private_metadata")
    return NewMessage(
        id=new_id("msg"),
        role=role,
        parts=[p.model_dump(mode="json", exclude_none=True) for p in parts],
        metadata=meta,
        private_metadata=private,
        visible_transcript=vis.transcript,
        visible_context=vis.context,
        run_id=state.run_id,
    )


def visibility_change(
    record: MessageRecord, *, transcript: bool | None, context: bool | None
) -> tuple[Visibility, Visibility, MessagePatch] | None:
    """A message's complete visibility before and after an update, with its patch.

    ``None`` flags keep the current value; ``None`` is returned when nothing changes.
    """
    before = Visibility(transcript=record.visible_transcript, context=record.visible_context)
    after = Visibility(
        transcript=before.transcript if transcript is None else transcript,
        context=before.context if context is None else context,
    )
    if after == before:
        return None
    patch = MessagePatch(
        id=record.id, visible_transcript=after.transcript, visible_context=after.context
    )
    return before, after, patch


class _Committer:
    """Turns staged operations into one fenced write set (and retries CAS when implicit)."""

    def __init__(self, state: FacadeState, *, allow_visibility: bool = True) -> None:
        self._state = state
        self._allow_visibility = allow_visibility
        #: The thread version after the last commit.
        self.last_version: int | None = None

    async def commit(
        self,
        ops: list[_Op],
        *,
        expected_version: int | None = None,
        expected_private_metadata: JsonObject | None = None,
    ) -> list[LifecycleMessage]:
        state = self._state
        lease = state.writable()
        if any(isinstance(op, _Visibility) for op in ops) and not self._allow_visibility:
            raise FacadeClosed(
                "messages.update_visibility is not available while resolving model context",
                reason="VISIBILITY_NOT_ALLOWED",
            )
        implicit = expected_version is None and expected_private_metadata is None
        for _ in range(50):
            thread = await state.backend.store.get_thread(state.scope, state.thread_id)
            if thread is None:
                raise FacadeClosed("the thread is gone", reason="THREAD_GONE")
            try:
                return await self._attempt(
                    ops,
                    thread_version=thread.version,
                    metadata=thread.metadata,
                    private=thread.private_metadata,
                    lease=lease,
                    expected_version=thread.version if implicit else expected_version,
                    expected_private_metadata=expected_private_metadata,
                )
            except StoreVersionConflict as e:
                if not implicit:
                    # Hooks catch the lifecycle's class, in process as in a plugin.
                    raise VersionConflict(e.thread_id, e.expected, e.actual) from e
            except LeaseLost as e:
                state.alive = False
                raise FacadeClosed("the run's lease was lost", reason="LEASE_LOST") from e
        raise VersionConflict(state.thread_id, "a stable thread", "constant change")

    async def _attempt(
        self,
        ops: list[_Op],
        *,
        thread_version: int,
        metadata: JsonObject,
        private: JsonObject,
        lease: Lease,
        expected_version: int | None,
        expected_private_metadata: JsonObject | None,
    ) -> list[LifecycleMessage]:
        state = self._state
        store = state.backend.store
        thread_patch: dict[str, Any] = {}
        run_meta: dict[str, JsonObject] = {}
        appends: list[NewMessage] = []
        visibility: dict[str, tuple[bool | None, bool | None]] = {}
        kinds: list[str] = []
        for op in ops:
            match op:
                case _Append():
                    appends.append(op.message)
                case _Visibility():
                    for mid in op.ids:
                        t, c = visibility.get(mid, (None, None))
                        visibility[mid] = (
                            op.transcript if op.transcript is not None else t,
                            op.context if op.context is not None else c,
                        )
                case _ThreadMeta():
                    key = "private_metadata" if op.private else "metadata"
                    current = thread_patch.get(key, private if op.private else metadata)
                    merged = dict(op.value) if op.mode == "replace" else {**current, **op.value}
                    thread_bag: Bag = "thread_private_metadata" if op.private else "thread_metadata"
                    thread_patch[key] = state.contract.validate(thread_bag, merged)
                case _RunMeta():
                    key = "private_metadata" if op.private else "metadata"
                    run_meta.setdefault(key, {}).update(op.value)
        run_patch: dict[str, Any] = {}
        if run_meta:
            run = await store.get_run(state.scope, state.run_id or "")
            assert run is not None
            for key, patch in run_meta.items():
                bag: Bag = "run_private_metadata" if key == "private_metadata" else "run_metadata"
                merged = {**getattr(run, key), **patch}
                run_patch[key] = state.contract.validate(bag, merged)
        message_patches: list[MessagePatch] = []
        changes: list[tuple[str, Visibility, Visibility]] = []
        if visibility:
            found = {
                m.id: m
                for m in await store.get_messages(state.scope, state.thread_id, list(visibility))
            }
            missing = sorted(set(visibility) - set(found))
            if missing:
                raise InvalidArgument.field(
                    "message_ids", f"not messages of this thread: {missing}"
                )
            for mid, (t, c) in visibility.items():
                change = visibility_change(found[mid], transcript=t, context=c)
                if change is not None:
                    changes.append((mid, change[0], change[1]))
                    message_patches.append(change[2])
            if changes:
                meta_patch, private_patch = await state.backend.visibility_rewrite(
                    state.scope, state.thread_id, changes, thread_version
                )
                if meta_patch:
                    base = thread_patch.get("metadata", metadata)
                    thread_patch["metadata"] = state.contract.validate(
                        "thread_metadata", {**base, **meta_patch}
                    )
                if private_patch:
                    base = thread_patch.get("private_metadata", private)
                    thread_patch["private_metadata"] = state.contract.validate(
                        "thread_private_metadata", {**base, **private_patch}
                    )
                kinds.append("visibility")
        if "metadata" in thread_patch:
            kinds.append("metadata")
        if appends:
            kinds.append("messages_committed")
        ws = WriteSet(
            scope=state.scope,
            thread_id=state.thread_id,
            expected_version=expected_version,
            expected_private_metadata=expected_private_metadata,
            thread=ThreadPatch(**thread_patch) if thread_patch else None,
            append_messages=appends,
            update_messages=message_patches,
            # Always fenced: a stale episode cannot write through a retained facade.
            update_runs=[RunUpdate(id=state.run_id or "", lease=lease, **run_patch)],
        )
        if expected_version is not None and not (
            thread_patch or appends or message_patches or expected_private_metadata
        ):
            ws.expected_version = None  # nothing touches the root: no CAS needed
        visible = tuple(m.id for m in appends if m.visible_transcript)
        result = await state.backend.commit_facade(ws, kinds=tuple(kinds), message_ids=visible)
        self.last_version = result.thread.version if result.thread else thread_version
        if changes:
            after_version = result.thread.version if result.thread else thread_version + 1
            state.backend.visibility_rewritten(
                state.scope, state.thread_id, changes, thread_version, after_version
            )
        return [state.backend.to_lifecycle(m) for m in result.messages]


# ---- clients --------------------------------------------------------------------


class _Sink(Protocol):
    async def write(self, op: _Op) -> list[LifecycleMessage]: ...


class _Direct:
    def __init__(self, committer: _Committer) -> None:
        self._committer = committer

    async def write(self, op: _Op) -> list[LifecycleMessage]:
        return await self._committer.commit([op])


class _Staged:
    def __init__(self) -> None:
        self.ops: list[_Op] = []

    async def write(self, op: _Op) -> list[LifecycleMessage]:
        self.ops.append(op)
        return []
