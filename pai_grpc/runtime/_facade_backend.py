"""The runtime side of the lifecycle thread facade."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pai_grpc.domain import LifecycleMessage, ModelMessage, Visibility
from pai_grpc.lifecycle import VisibilityChange, VisibilityRewrite
from pai_grpc.models import to_model_messages
from pai_grpc.runtime._agents import Agent
from pai_grpc.runtime._records import lifecycle_message_from_record
from pai_grpc.runtime._services import Services
from pai_grpc.streams import ThreadHint
from storage import CommitResult, JsonObject, MessageRecord, Store, WriteSet


class FacadeBackend:
    """Commits facade write sets with wake-ups and runs visibility-rewrite hooks."""

    def __init__(self, services: Services, agent: Agent, runtime_context: Any = None) -> None:
        self._services = services
        self._agent = agent
        self._runtime_context = runtime_context

    @property
    def store(self) -> Store:
        """The storage provider."""
        return self._services.store

    async def commit_facade(
        self, ws: WriteSet, *, kinds: tuple[str, ...], message_ids: tuple[str, ...]
    ) -> CommitResult:
        """Commit; only client-visible changes wake watchers (LC-06)."""
        hint = ThreadHint(ws.thread_id, kinds, message_ids) if kinds else None
        return await self._services.commit(ws, hint=hint)

    def to_lifecycle(self, record: MessageRecord) -> LifecycleMessage:
        """A stored message as a lifecycle message."""
        return lifecycle_message_from_record(record)

    def to_model_messages(self, messages: Sequence[LifecycleMessage]) -> list[ModelMessage]:
        """Model messages from the private native messages (RMC-10)."""
        return to_model_messages(m.message for m in messages)

    async def visibility_rewrite(
        self,
        scope: str,
        thread_id: str,
        changes: list[tuple[str, Visibility, Visibility]],
        version: int,
    ) -> tuple[JsonObject | None, JsonObject | None]:
        """prepare_history_rewrite (visibility variant): patches for the same write."""
        thread = await self._services.store.get_thread(scope, thread_id)
        assert thread is not None
        patch = await self._services.history.prepare(
            self._agent.lifecycle,
            thread_id=thread_id,
            rewrite=_rewrite(changes, version),
            metadata=thread.metadata,
            private_metadata=thread.private_metadata,
            runtime_context=self._runtime_context,
        )
        if patch is None:
            return None, None
        return patch.metadata, patch.private_metadata

    def visibility_rewritten(
        self,
        scope: str,
        thread_id: str,
        changes: list[tuple[str, Visibility, Visibility]],
        before: int,
        after: int,
    ) -> None:
        """history_rewritten after commit (best effort)."""
        self._services.history.announce(
            self._agent.lifecycle,
            thread_id=thread_id,
            rewrite=_rewrite(changes, before, after),
            runtime_context=self._runtime_context,
        )


def _rewrite(
    changes: list[tuple[str, Visibility, Visibility]], before: int, after: int | None = None
) -> VisibilityRewrite:
    return VisibilityRewrite(
        changes=tuple(VisibilityChange(m, b, a) for m, b, a in changes),
        before_version=before,
        after_version=after,
    )
