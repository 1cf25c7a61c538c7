"""The runtime-owned thread facade handed to hooks (LC-01..12, RMC-05..08).

It implements the facade Protocols of :mod:`pai_grpc.lifecycle` over the
storage provider (a plugin process gets the SDK's proxies instead), without
being one: reads are explicit, lazy, scoped to the current
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
from typing import Any, Literal, TypeVar, overload

from pai_grpc.domain import (
    JsonObject,
    LifecycleMessage,
    MessagePart,
    ModelMessage,
    Visibility,
)
from pai_grpc.errors import InvalidArgument
from pai_grpc.lifecycle import (
    ContextProjection,
    Execution,
    FacadeClosed,
    HistoryFacade,
    Page,
    RunFacade,
    ThreadFacade,
    TransactionFacade,
    View,
)
from pai_grpc.lifecycle.internal import maybe_await
from pai_grpc.runtime._facade_commit import (
    FacadeState,
    _Append,
    _Committer,
    _Direct,
    _message_input,
    _RunMeta,
    _Sink,
    _Staged,
    _ThreadMeta,
    _Visibility,
)
from storage import InvalidPageToken, check_strict_json

T = TypeVar("T")


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
