"""The runtime-owned thread facade handed to hooks (LC-01..12, RMC-05..08).

Not the storage provider: reads are explicit, lazy, scoped to the current
thread and paginated; writes are fenced by the run's current lease, so they
work through one execution episode and are refused while the run waits,
after it ends, or after the lease was lost. ``mutate()`` stages writes and
commits them atomically after its callback returns; reads inside it see
persisted state only. A private-only write publishes no client-visible event.
"""

from __future__ import annotations

import builtins
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol, TypeVar, overload

from pai_grpc.domain import (
    DataPart,
    JsonObject,
    LifecycleMessage,
    MessagePart,
    ModelMessage,
    ToolPart,
    Visibility,
    new_id,
)
from pai_grpc.errors import InvalidArgument
from pai_grpc.lifecycle._contract import AgentContract, Bag
from pai_grpc.lifecycle._errors import FacadeClosed
from pai_grpc.lifecycle._lifecycle import maybe_await
from pai_grpc.lifecycle._protocols import (
    HistoryFacade,
    RunFacade,
    ThreadFacade,
    TransactionFacade,
    View,
)
from storage import (
    InvalidPageToken,
    Lease,
    LeaseLost,
    MessagePatch,
    MessageRecord,
    NewMessage,
    Page,
    RunPatch,
    Store,
    ThreadPatch,
    VersionConflict,
    WriteSet,
    check_strict_json,
)

T = TypeVar("T")


class FacadeBackend(Protocol):
    """What the runtime provides to facades (keeps lifecycle below the runtime)."""

    @property
    def store(self) -> Store:
        """The storage provider (reads only; writes go through commit_facade)."""
        ...

    async def commit_facade(
        self, ws: WriteSet, *, kinds: tuple[str, ...], message_ids: tuple[str, ...]
    ) -> Any:
        """Commit a facade write set and wake watchers (no event for private-only writes)."""
        ...

    def to_lifecycle(self, record: MessageRecord) -> LifecycleMessage:
        """A stored message as a lifecycle message."""
        ...

    def to_model_messages(self, messages: Sequence[LifecycleMessage]) -> list[ModelMessage]:
        """Model messages converted from the private native messages (RMC-10)."""
        ...

    async def visibility_rewrite(
        self,
        scope: str,
        thread_id: str,
        changes: list[tuple[str, Visibility, Visibility]],
        version: int,
    ) -> tuple[JsonObject | None, JsonObject | None]:
        """prepare_history_rewrite for a visibility rewrite: its metadata patches."""
        ...

    def visibility_rewritten(
        self,
        scope: str,
        thread_id: str,
        changes: list[tuple[str, Visibility, Visibility]],
        before: int,
        after: int,
    ) -> None:
        """Schedule history_rewritten after commit (best effort)."""
        ...


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
            except VersionConflict:
                if not implicit:
                    raise
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
            update_runs=[RunPatch(id=state.run_id or "", lease=lease, **run_patch)],
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


class MessagesClient:
    """messages: append, update_visibility, list, get, get_many."""

    def __init__(self, state: FacadeState, sink: _Sink, *, allow_visibility: bool = True) -> None:
        self._state = state
        self._sink = sink
        self._allow_visibility = allow_visibility

    async def append(
        self,
        *,
        role: str,
        parts: Sequence[MessagePart],
        visibility: Visibility | dict[str, bool] | None = None,
        metadata: JsonObject | None = None,
        private_metadata: JsonObject | None = None,
    ) -> LifecycleMessage | None:
        """Append a message (inside ``mutate`` it is staged and ``None`` is returned)."""
        self._state.writable()
        message = _message_input(self._state, role, parts, visibility, metadata, private_metadata)
        written = await self._sink.write(_Append(message))
        return written[0] if written else None

    async def update_visibility(
        self,
        message_ids: Sequence[str],
        *,
        transcript: bool | None = None,
        context: bool | None = None,
    ) -> None:
        """Change where messages are visible (a history rewrite of the visibility kind)."""
        if not self._allow_visibility:
            raise FacadeClosed(
                "messages.update_visibility is not available while resolving model context",
                reason="VISIBILITY_NOT_ALLOWED",
            )
        self._state.writable()
        await self._sink.write(_Visibility(list(message_ids), transcript, context))

    async def list(
        self,
        *,
        view: View = "context",
        order: Literal["asc", "desc"] = "asc",
        before_message_id: str | None = None,
        after_message_id: str | None = None,
        limit: int = 50,
        page_token: str = "",
    ) -> Page[LifecycleMessage]:
        """A page of this thread's messages; repeat the query with the page token (LC-10)."""
        state = self._state
        try:
            page = await state.backend.store.list_messages(
                state.scope,
                state.thread_id,
                view=view,
                order=order,
                before_message_id=before_message_id,
                after_message_id=after_message_id,
                limit=limit,
                page_token=page_token,
            )
        except InvalidPageToken as e:
            raise InvalidArgument.field("page_token", str(e), reason="INVALID_PAGE_TOKEN") from e
        return Page([state.backend.to_lifecycle(m) for m in page.items], page.next_page_token)

    async def get(self, message_id: str) -> LifecycleMessage | None:
        """One message of this thread (``None`` when absent)."""
        found = await self.get_many([message_id])
        return found[0] if found else None

    async def get_many(self, message_ids: Sequence[str]) -> builtins.list[LifecycleMessage]:
        """The named messages of this thread that exist, chronologically."""
        state = self._state
        records = await state.backend.store.get_messages(state.scope, state.thread_id, message_ids)
        return [state.backend.to_lifecycle(m) for m in records]


class MetadataClient:
    """Thread metadata (public or private): get, merge (shallow), replace."""

    def __init__(self, state: FacadeState, sink: _Sink, *, private: bool) -> None:
        self._state = state
        self._sink = sink
        self._private = private

    async def get(self) -> JsonObject:
        """The persisted bag."""
        state = self._state
        thread = await state.backend.store.get_thread(state.scope, state.thread_id)
        if thread is None:
            return {}
        return dict(thread.private_metadata if self._private else thread.metadata)

    async def merge(self, patch: JsonObject) -> None:
        """Add or replace top-level keys; the complete merged object is validated (LC-07)."""
        self._state.writable()
        check_strict_json(patch, path="metadata")
        await self._sink.write(_ThreadMeta(self._private, "merge", dict(patch)))

    async def replace(self, value: JsonObject) -> None:
        """Replace the whole bag."""
        self._state.writable()
        check_strict_json(value, path="metadata")
        await self._sink.write(_ThreadMeta(self._private, "replace", dict(value)))


class RunMetadataClient:
    """Run metadata (public or private): get, merge — fenced by the lease (LC-09)."""

    def __init__(self, state: FacadeState, sink: _Sink, *, private: bool) -> None:
        self._state = state
        self._sink = sink
        self._private = private

    async def get(self) -> JsonObject:
        """The persisted bag."""
        state = self._state
        run = await state.backend.store.get_run(state.scope, state.run_id or "")
        if run is None:
            return {}
        return dict(run.private_metadata if self._private else run.metadata)

    async def merge(self, patch: JsonObject) -> JsonObject:
        """Shallow-merge into the run's bag; return the merged bag."""
        self._state.writable()
        check_strict_json(patch, path="metadata")
        await self._sink.write(_RunMeta(self._private, dict(patch)))
        return await self.get()


@dataclass
class ContextProjection:
    """context.current(): durable messages and the corresponding model messages (LC-12)."""

    messages: list[LifecycleMessage]
    model_messages: list[ModelMessage]
    next_page_token: str = ""


class ContextClient:
    """The context view of this thread."""

    def __init__(self, messages: MessagesClient, state: FacadeState) -> None:
        self._messages = messages
        self._state = state

    async def messages(
        self,
        *,
        before_message_id: str | None = None,
        after_message_id: str | None = None,
        limit: int = 50,
        page_token: str = "",
    ) -> Page[LifecycleMessage]:
        """A page of context-visible messages, chronologically."""
        return await self._messages.list(
            view="context",
            before_message_id=before_message_id,
            after_message_id=after_message_id,
            limit=limit,
            page_token=page_token,
        )

    async def current(
        self,
        *,
        before_message_id: str | None = None,
        after_message_id: str | None = None,
        limit: int = 1000,
        page_token: str = "",
    ) -> ContextProjection:
        """Context messages and their model messages."""
        page = await self.messages(
            before_message_id=before_message_id,
            after_message_id=after_message_id,
            limit=limit,
            page_token=page_token,
        )
        return ContextProjection(
            messages=page.items,
            model_messages=self._state.backend.to_model_messages(page.items),
            next_page_token=page.next_page_token,
        )


class LifecycleTransaction:
    """The clients inside ``mutate``: writes are staged, reads see persisted state."""

    def __init__(self, state: FacadeState, *, allow_visibility: bool = True) -> None:
        self._staged = _Staged()
        self.messages = MessagesClient(state, self._staged, allow_visibility=allow_visibility)
        self.metadata = MetadataClient(state, self._staged, private=False)
        self.private_metadata = MetadataClient(state, self._staged, private=True)
        self.context = ContextClient(self.messages, state)


class LifecycleThread:
    """The server-only facade for the current thread and run lease.

    ``allow_visibility=False`` is the narrowed facade of resolve_model_context:
    messages.update_visibility is refused, directly and inside mutate (RMC-08).
    """

    def __init__(self, state: FacadeState, *, allow_visibility: bool = True) -> None:
        self._state = state
        self._allow_visibility = allow_visibility
        self._committer = _Committer(state, allow_visibility=allow_visibility)
        direct = _Direct(self._committer)
        self.thread_id = state.thread_id
        #: (appended messages, thread version) of the last mutate() (for the hook host).
        self.last_mutation: tuple[list[LifecycleMessage], int | None] = ([], None)
        self.messages = MessagesClient(state, direct, allow_visibility=allow_visibility)
        self.metadata = MetadataClient(state, direct, private=False)
        self.private_metadata = MetadataClient(state, direct, private=True)
        self.context = ContextClient(self.messages, state)

    @overload
    async def mutate(
        self,
        fn: Callable[[LifecycleTransaction], Awaitable[T]],
        *,
        expected_version: int | None = None,
        expected_private_metadata: JsonObject | None = None,
    ) -> T: ...

    @overload
    async def mutate(
        self,
        fn: Callable[[LifecycleTransaction], T],
        *,
        expected_version: int | None = None,
        expected_private_metadata: JsonObject | None = None,
    ) -> T: ...

    async def mutate(
        self,
        fn: Callable[[LifecycleTransaction], Any],
        *,
        expected_version: int | None = None,
        expected_private_metadata: JsonObject | None = None,
    ) -> Any:
        """Stage writes in ``fn`` and commit them atomically when it returns (LC-04).

        ``expected_version`` is a full root compare-and-swap;
        ``expected_private_metadata`` compares only private metadata and ignores
        unrelated status, usage or heartbeat revisions (LC-05).
        """
        self._state.writable()
        tx = LifecycleTransaction(self._state, allow_visibility=self._allow_visibility)
        result = await maybe_await(fn(tx))
        self.last_mutation = ([], None)
        if tx._staged.ops:
            appended = await self._committer.commit(
                tx._staged.ops,
                expected_version=expected_version,
                expected_private_metadata=expected_private_metadata,
            )
            self.last_mutation = (appended, self._committer.last_version)
        return result


@dataclass(frozen=True)
class Execution:
    """The current execution episode (``operation`` includes ``resume``)."""

    operation: Literal["send", "trigger", "regenerate", "resume"]
    started_at: datetime | None


@dataclass
class LifecycleRun:
    """Stable run identity for hooks (LC-02), with fenced metadata clients."""

    run_id: str
    thread_id: str
    initiator: Literal["send", "trigger", "regenerate"]
    started_at: datetime | None
    execution: Execution
    metadata: RunMetadataClient
    private_metadata: RunMetadataClient

    @classmethod
    def of(
        cls,
        state: FacadeState,
        *,
        initiator: str,
        started_at: datetime | None,
        operation: str,
        execution_started_at: datetime | None,
    ) -> LifecycleRun:
        """The run view of a facade's state."""
        direct = _Direct(_Committer(state))
        return cls(
            run_id=state.run_id or "",
            thread_id=state.thread_id,
            initiator=initiator,  # type: ignore[arg-type]
            started_at=started_at,
            execution=Execution(operation=operation, started_at=execution_started_at),  # type: ignore[arg-type]
            metadata=RunMetadataClient(state, direct, private=False),
            private_metadata=RunMetadataClient(state, direct, private=True),
        )


@dataclass
class ModelHistory:
    """history for resolve_model_context: capped at the step-start anchor (RMC-05..07)."""

    state: FacadeState
    through: LifecycleMessage | None
    _cache: dict[str, Any] = field(default_factory=dict)

    async def before(
        self,
        *,
        view: View = "context",
        order: Literal["asc", "desc"] = "asc",
        after_message_id: str | None = None,
        limit: int = 100,
        page_token: str = "",
    ) -> Page[LifecycleMessage]:
        """A page strictly below the anchor (callers include ``through`` themselves)."""
        if self.through is None:
            return Page([], "")
        state = self.state
        page = await state.backend.store.list_messages(
            state.scope,
            state.thread_id,
            view=view,
            order=order,
            after_message_id=after_message_id,
            through_position=self.through.message.position - 1,
            limit=limit,
            page_token=page_token,
        )
        return Page([state.backend.to_lifecycle(m) for m in page.items], page.next_page_token)

    async def collect(
        self,
        *,
        view: View = "context",
        order: Literal["asc", "desc"] = "asc",
        after_message_id: str | None = None,
    ) -> list[LifecycleMessage]:
        """Every page, including ``through`` when it matches the view and range."""
        out: list[LifecycleMessage] = []
        token = ""
        while True:
            page = await self.before(
                view=view,
                order="asc",
                after_message_id=after_message_id,
                limit=1000,
                page_token=token,
            )
            out.extend(page.items)
            token = page.next_page_token
            if not token:
                break
        if (
            self.through is not None
            and _in_view(self.through, view)
            and await self._through_after(after_message_id)
        ):
            out.append(self.through)
        return list(reversed(out)) if order == "desc" else out

    async def _through_after(self, after_message_id: str | None) -> bool:
        """Whether ``through`` lies in the range ``after_message_id`` opens (exclusive)."""
        if after_message_id is None or self.through is None:
            return True
        state = self.state
        found = await state.backend.store.get_messages(
            state.scope, state.thread_id, [after_message_id]
        )
        return bool(found) and found[0].position < self.through.message.position

    def convert(self, messages: Sequence[LifecycleMessage]) -> list[ModelMessage]:
        """Model messages of durable messages (from the private native values, RMC-10)."""
        return self.state.backend.to_model_messages(messages)

    async def model_messages(
        self,
        *,
        view: View = "context",
        order: Literal["asc", "desc"] = "asc",
        after_message_id: str | None = None,
    ) -> list[ModelMessage]:
        """The collected history as model messages (from the private native messages)."""
        messages = await self.collect(view=view, order=order, after_message_id=after_message_id)
        return self.state.backend.to_model_messages(messages)


def _in_view(message: LifecycleMessage, view: View) -> bool:
    if view == "all":
        return True
    return message.visibility.context if view == "context" else message.visibility.transcript


def _facades(
    thread: LifecycleThread, run: LifecycleRun, history: ModelHistory, tx: LifecycleTransaction
) -> tuple[ThreadFacade, RunFacade, HistoryFacade, TransactionFacade]:
    """The in-process facade satisfies the facade Protocols (checked by mypy, never called)."""
    return thread, run, history, tx
