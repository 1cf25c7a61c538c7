"""The facade a hook sees, as Protocols: one API, two implementations.

In process, hooks get the runtime's ``LifecycleThread`` / ``LifecycleRun`` /
``ModelHistory`` (``pai_grpc.runtime``); in a plugin process, the SDK's
proxies over HookHostService (``pai_grpc.plugin_sdk``). Hook inputs are typed
against these Protocols, so the type checker holds both implementations to
the same API.
"""

from __future__ import annotations

import builtins
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, Literal, Protocol, TypeVar, overload

from pai_grpc.domain import (
    JsonObject,
    LifecycleMessage,
    MessagePart,
    MessageView,
    ModelMessage,
    Visibility,
)

T = TypeVar("T")
#: Which messages a read returns: context-visible, transcript-visible, or all.
View = MessageView


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """One page of a facade read; repeat the query with ``next_page_token`` ("" at the end)."""

    items: list[T]
    next_page_token: str = ""


@dataclass
class ContextProjection:
    """context.current(): durable messages and the corresponding model messages (LC-12)."""

    messages: list[LifecycleMessage]
    model_messages: list[ModelMessage]
    next_page_token: str = ""


@dataclass(frozen=True)
class Execution:
    """The current execution episode (``operation`` includes ``resume``)."""

    operation: Literal["send", "trigger", "regenerate", "resume"]
    started_at: datetime | None


class MessagesFacade(Protocol):
    """``thread.messages``: append, update_visibility, list, get, get_many."""

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
        ...

    async def update_visibility(
        self,
        message_ids: Sequence[str],
        *,
        transcript: bool | None = None,
        context: bool | None = None,
    ) -> None:
        """Change where messages are visible."""
        ...

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
        """A page of this thread's messages."""
        ...

    async def get(self, message_id: str) -> LifecycleMessage | None:
        """One message of this thread (None when absent)."""
        ...

    async def get_many(self, message_ids: Sequence[str]) -> builtins.list[LifecycleMessage]:
        """The named messages of this thread that exist."""
        ...


class ThreadMetadataFacade(Protocol):
    """``thread.metadata`` / ``thread.private_metadata``: get, merge (shallow), replace."""

    async def get(self) -> JsonObject:
        """The persisted bag."""
        ...

    async def merge(self, patch: JsonObject) -> JsonObject | None:
        """Add or replace top-level keys (the merged bag, when the implementation has it)."""
        ...

    async def replace(self, value: JsonObject) -> None:
        """Replace the whole bag."""
        ...


class RunMetadataFacade(Protocol):
    """``run.metadata`` / ``run.private_metadata``: get, merge — fenced by the lease."""

    async def get(self) -> JsonObject:
        """The persisted bag."""
        ...

    async def merge(self, patch: JsonObject) -> JsonObject:
        """Shallow-merge into the run's bag; return the merged bag."""
        ...


class ContextFacade(Protocol):
    """``thread.context``: the context view of the thread."""

    async def messages(
        self,
        *,
        before_message_id: str | None = None,
        after_message_id: str | None = None,
        limit: int = 50,
        page_token: str = "",
    ) -> Page[LifecycleMessage]:
        """A page of context-visible messages, chronologically."""
        ...

    async def current(
        self,
        *,
        before_message_id: str | None = None,
        after_message_id: str | None = None,
        limit: int = 1000,
        page_token: str = "",
    ) -> ContextProjection:
        """Context messages and their model messages."""
        ...


class TransactionFacade(Protocol):
    """The clients inside ``mutate``: writes are staged, reads see persisted state."""

    @property
    def messages(self) -> MessagesFacade:
        """Staged appends and visibility updates; reads of persisted messages."""
        ...

    @property
    def metadata(self) -> ThreadMetadataFacade:
        """The thread's public metadata (writes staged)."""
        ...

    @property
    def private_metadata(self) -> ThreadMetadataFacade:
        """The thread's private metadata (writes staged)."""
        ...

    @property
    def context(self) -> ContextFacade:
        """The context view (persisted state)."""
        ...


class ThreadFacade(Protocol):
    """``input.thread``: the current thread, writes fenced by the run's lease."""

    @property
    def thread_id(self) -> str:
        """The thread's id."""
        ...

    @property
    def messages(self) -> MessagesFacade:
        """The thread's messages."""
        ...

    @property
    def metadata(self) -> ThreadMetadataFacade:
        """The thread's public metadata."""
        ...

    @property
    def private_metadata(self) -> ThreadMetadataFacade:
        """The thread's private metadata."""
        ...

    @property
    def context(self) -> ContextFacade:
        """The context view of the thread."""
        ...

    @overload
    async def mutate(
        self,
        fn: Callable[[TransactionFacade], Awaitable[T]],
        *,
        expected_version: int | None = None,
        expected_private_metadata: JsonObject | None = None,
    ) -> T: ...

    @overload
    async def mutate(
        self,
        fn: Callable[[TransactionFacade], T],
        *,
        expected_version: int | None = None,
        expected_private_metadata: JsonObject | None = None,
    ) -> T: ...

    async def mutate(
        self,
        fn: Callable[[TransactionFacade], Any],
        *,
        expected_version: int | None = None,
        expected_private_metadata: JsonObject | None = None,
    ) -> Any:
        """Stage writes in ``fn``; they commit atomically when it returns."""
        ...


class RunFacade(Protocol):
    """``input.run``: the run's stable identity and its fenced metadata."""

    @property
    def run_id(self) -> str:
        """The run's id."""
        ...

    @property
    def thread_id(self) -> str:
        """The run's thread."""
        ...

    @property
    def initiator(self) -> Literal["send", "trigger", "regenerate"]:
        """The operation that created the run."""
        ...

    @property
    def started_at(self) -> datetime | None:
        """When the run started."""
        ...

    @property
    def execution(self) -> Execution:
        """The current execution episode."""
        ...

    @property
    def metadata(self) -> RunMetadataFacade:
        """The run's public metadata."""
        ...

    @property
    def private_metadata(self) -> RunMetadataFacade:
        """The run's private metadata."""
        ...


class HistoryFacade(Protocol):
    """``input.history`` of resolve_model_context, capped at the step-start anchor."""

    @property
    def through(self) -> LifecycleMessage | None:
        """The step-start anchor (reads never go past it)."""
        ...

    async def before(
        self,
        *,
        view: View = "context",
        order: Literal["asc", "desc"] = "asc",
        after_message_id: str | None = None,
        limit: int = 100,
        page_token: str = "",
    ) -> Page[LifecycleMessage]:
        """A page strictly below the anchor."""
        ...

    async def collect(
        self,
        *,
        view: View = "context",
        order: Literal["asc", "desc"] = "asc",
        after_message_id: str | None = None,
    ) -> list[LifecycleMessage]:
        """Every page, including ``through`` when it matches."""
        ...

    async def model_messages(
        self,
        *,
        view: View = "context",
        order: Literal["asc", "desc"] = "asc",
        after_message_id: str | None = None,
    ) -> list[ModelMessage]:
        """The collected history as model messages."""
        ...

    def convert(self, messages: Sequence[LifecycleMessage]) -> list[ModelMessage]:
        """Model messages of durable messages (the same conversion the runtime uses)."""
        ...
