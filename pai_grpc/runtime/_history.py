"""History rewrites: prepare_history_rewrite before commit, history_rewritten after (HR-*).

``prepare`` runs the thread agent's prepare_history_rewrite hooks; their
patches commit in the rewrite's own transaction. ``announce`` delivers
history_rewritten after commit as a best-effort fact: serialised per thread,
bounded across threads, independent of the request that caused it (it runs
in its own task), coalesced under load, and never rolling anything back; a
failure is reported as a runtime error.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from pai_grpc.domain import JsonObject
from pai_grpc.lifecycle import (
    AgentContract,
    AgentLifecycle,
    HistoryRewrite,
    HistoryRewritePatch,
    HistoryRewrittenInput,
    PrepareHistoryRewriteInput,
    RegenerateRewrite,
    compose_lifecycle,
)
from pai_grpc.lifecycle.internal import current_hook_calls
from pai_grpc.runtime._agents import Agent
from storage import UNSET, MessageRecord, Store, ThreadPatch, ThreadRecord, check_strict_json

log = logging.getLogger("pai_grpc.history")

#: history_rewritten deliveries running at once across all threads.
CONCURRENCY = 8
#: Pending facts kept per thread; older ones are dropped (coalesced) beyond it.
MAX_PENDING = 16


@dataclass
class RuntimeError_:
    """A failure reported outside any request (best-effort hooks)."""

    reason: str
    message: str
    thread_id: str


@dataclass
class HistoryRewrites:
    """Coordinates the two history-rewrite phases for one process."""

    on_error: Callable[[RuntimeError_], None] | None = None
    #: The most recent failures (bounded: a failing hook must not grow memory).
    errors: deque[RuntimeError_] = field(default_factory=lambda: deque(maxlen=100))
    _queues: dict[str, list[tuple[AgentLifecycle, HistoryRewrittenInput]]] = field(
        default_factory=dict
    )
    _workers: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    _slots: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(CONCURRENCY))
    coalesced: int = 0

    async def prepare(
        self,
        lifecycle: AgentLifecycle | None,
        *,
        thread_id: str,
        rewrite: HistoryRewrite,
        metadata: JsonObject,
        private_metadata: JsonObject,
        runtime_context: object = None,
    ) -> HistoryRewritePatch | None:
        """prepare_history_rewrite (raises: a failing hook stops the rewrite)."""
        if lifecycle is None or "prepare_history_rewrite" not in lifecycle.phases():
            return None
        return await compose_lifecycle(lifecycle).prepare_history_rewrite(
            PrepareHistoryRewriteInput(
                thread_id=thread_id,
                rewrite=rewrite,
                metadata=dict(metadata),
                private_metadata=dict(private_metadata),
                runtime_context=runtime_context,
            )
        )

    async def thread_patch(
        self,
        lifecycle: AgentLifecycle | None,
        contract: AgentContract,
        thread: ThreadRecord,
        rewrite: HistoryRewrite,
        runtime_context: object = None,
    ) -> ThreadPatch | None:
        """prepare_history_rewrite as a thread patch for the rewrite's own write set (HR-02).

        The sparse patches are merged into the current bags and the complete
        objects validated against the agent contract.
        """
        patch = await self.prepare(
            lifecycle,
            thread_id=thread.id,
            rewrite=rewrite,
            metadata=thread.metadata,
            private_metadata=thread.private_metadata,
            runtime_context=runtime_context,
        )
        if patch is None:
            return None
        fields: dict[str, JsonObject] = {}
        if patch.metadata is not None:
            merged = {**thread.metadata, **patch.metadata}
            check_strict_json(merged, path="metadata")
            fields["metadata"] = contract.validate("thread_metadata", merged)
        if patch.private_metadata is not None:
            merged = {**thread.private_metadata, **patch.private_metadata}
            check_strict_json(merged, path="private_metadata")
            fields["private_metadata"] = contract.validate("thread_private_metadata", merged)
        return ThreadPatch(**fields) if fields else None  # type: ignore[arg-type]

    async def regeneration(
        self,
        store: Store,
        agent: Agent,
        thread: ThreadRecord,
        target: MessageRecord,
        runtime_context: object = None,
    ) -> tuple[RegenerateRewrite, ThreadPatch | None]:
        """A regeneration from ``target`` on ``thread`` and its hooks' patch for the write.

        Called on every attempt: a stale-version retry prepares again on fresh
        state (HR-03).
        """
        retained, removed = await split_at(store, thread.scope, thread.id, target.position)
        rewrite = RegenerateRewrite(
            target_message_id=target.id,
            retained_message_ids=tuple(retained),
            removed_message_ids=tuple(removed),
            before_version=thread.version,
        )
        patch = await self.thread_patch(
            agent.lifecycle, agent.contract, thread, rewrite, runtime_context
        )
        return rewrite, patch

    def announce(
        self,
        lifecycle: AgentLifecycle | None,
        *,
        thread_id: str,
        rewrite: HistoryRewrite,
        runtime_context: object = None,
    ) -> None:
        """Schedule history_rewritten for a committed rewrite."""
        if lifecycle is None or "history_rewritten" not in lifecycle.phases():
            return
        queue = self._queues.setdefault(thread_id, [])
        queue.append(
            (lifecycle, HistoryRewrittenInput(thread_id, rewrite, runtime_context=runtime_context))
        )
        if len(queue) > MAX_PENDING:
            # Under load older facts are dropped: delivery is deliberately best effort.
            del queue[: len(queue) - MAX_PENDING]
            self.coalesced += 1
        if thread_id not in self._workers or self._workers[thread_id].done():
            self._workers[thread_id] = asyncio.create_task(
                self._drain(thread_id), name=f"history_rewritten {thread_id}"
            )

    async def _drain(self, thread_id: str) -> None:
        # Scheduled from whichever task committed the rewrite, maybe a run's
        # execution: these calls belong to no run's timeline.
        current_hook_calls.set(None)
        queue = self._queues.get(thread_id, [])
        while queue:
            lifecycle, fact = queue.pop(0)
            async with self._slots:
                try:
                    await compose_lifecycle(lifecycle).history_rewritten(fact)
                except BaseException as e:  # reported, never rolled back
                    if isinstance(e, asyncio.CancelledError):
                        raise
                    causes = e.exceptions if isinstance(e, BaseExceptionGroup) else (e,)
                    message = "; ".join(str(c) for c in causes)
                    error = RuntimeError_("HISTORY_REWRITTEN_FAILED", message, thread_id)
                    self.errors.append(error)
                    log.error("history_rewritten failed for thread %s: %s", thread_id, message)
                    if self.on_error is not None:
                        self.on_error(error)
        # Nothing pending for this thread: forget it (threads come and go).
        self._queues.pop(thread_id, None)
        if self._workers.get(thread_id) is asyncio.current_task():
            del self._workers[thread_id]

    async def idle(self) -> None:
        """Wait until every scheduled delivery ran (tests and shutdown)."""
        while True:
            pending = [t for t in self._workers.values() if not t.done()]
            if not pending:
                return
            await asyncio.gather(*pending, return_exceptions=True)


async def split_at(
    store: Store, scope: str, thread_id: str, position: int
) -> tuple[list[str], list[str]]:
    """Chronological physical ids before ``position`` (retained) and from it on (removed)."""
    ids: list[tuple[int, str]] = []
    token = ""
    while True:
        page = await store.list_messages(scope, thread_id, view="all", limit=1000, page_token=token)
        ids += [(m.position, m.id) for m in page.items]
        token = page.next_page_token
        if not token:
            break
    return [i for p, i in ids if p < position], [i for p, i in ids if p >= position]


def merge_thread_patch(base: ThreadPatch | None, extra: ThreadPatch | None) -> ThreadPatch | None:
    """``base`` with the metadata bags ``extra`` sets."""
    if extra is None:
        return base
    if base is None:
        return extra
    changes = {
        name: getattr(extra, name)
        for name in ("metadata", "private_metadata")
        if getattr(extra, name) is not UNSET
    }
    return replace(base, **changes)
