"""Threads and messages."""

from __future__ import annotations

from datetime import datetime
from typing import Literal, TypeAlias

from pydantic import Field

from pai_grpc.domain._base import DomainModel, JsonObject
from pai_grpc.domain._parts import MessagePart

ThreadStatus: TypeAlias = Literal["idle", "running", "waiting"]
Role: TypeAlias = Literal["system", "user", "assistant"]
MessageView: TypeAlias = Literal["transcript", "context", "all"]
SortOrder: TypeAlias = Literal["asc", "desc"]
#: How a Send reaches a busy thread: queued as the next run, or steered into the running one.
Delivery: TypeAlias = Literal["queue", "steer"]
#: What a thread-watch event reports changed.
ThreadChangeKind: TypeAlias = Literal[
    "snapshot",
    "status",
    "messages_committed",
    "messages_removed",
    "visibility",
    "metadata",
    "deleted",
]


class Thread(DomainModel):
    """A thread head as clients see it (never private metadata)."""

    id: str
    agent: str
    status: ThreadStatus
    version: int
    metadata: JsonObject = Field(default_factory=dict)
    active_run_id: str | None = None
    message_count: int = 0
    created_at: datetime
    updated_at: datetime

    @property
    def etag(self) -> str:
        """The version as an opaque entity tag."""
        return f'"{self.version}"'


class Visibility(DomainModel):
    """Where a message is visible (server-only)."""

    transcript: bool = True
    context: bool = True


class Message(DomainModel):
    """A committed message as clients see it."""

    id: str
    thread_id: str
    role: Role
    parts: list[MessagePart]
    metadata: JsonObject = Field(default_factory=dict)
    position: int
    run_id: str | None = None
    step_index: int | None = None
    created_at: datetime


class LifecycleMessage(DomainModel):
    """The trusted durable-message boundary: a message with visibility and private metadata."""

    message: Message
    visibility: Visibility = Field(default_factory=Visibility)
    private_metadata: JsonObject = Field(default_factory=dict)
