"""A queued operation's input, applied when its run starts.

On a busy thread Send and Regenerate queue a run whose input is applied by
the run itself once it becomes active: the user message is appended, or the
history rewrite is prepared again and committed, with the run's own write.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pai_grpc.domain import MessageEvent
from pai_grpc.lifecycle import RegenerateRewrite
from pai_grpc.runtime._agents import Agent
from pai_grpc.runtime._committer import RunCommitter, RunFailure
from pai_grpc.runtime._records import message_from_record
from pai_grpc.runtime._services import Services
from storage import NewMessage, RunUpdate, VersionConflict, WriteSet


async def apply_queued_message(committer: RunCommitter, queued: dict[str, Any]) -> None:
    """A queued Send, applied now: its user message is committed with the run."""
    parts, metadata = queued.get("parts"), queued.get("metadata")
    message = NewMessage(
        id=str(queued["id"]),
        role="user",
        parts=parts if isinstance(parts, list) else [],
        metadata=metadata if isinstance(metadata, dict) else {},
        run_id=committer.run_id,
    )
    committer.input = {**committer.input, "message_id": message.id}
    await committer.commit(
        WriteSet(
            scope=committer.scope,
            thread_id=committer.thread_id,
            append_messages=[message],
            update_runs=[
                RunUpdate(
                    id=committer.run_id,
                    lease=committer.lease,
                    input={"message_id": message.id},
                )
            ],
        ),
        after=lambda result: [MessageEvent(message=message_from_record(result.messages[0]))],
        count=1,
        kinds=("messages_committed",),
    )


async def apply_queued_regenerate(
    committer: RunCommitter,
    *,
    services: Services,
    agent: Agent,
    target_id: str,
    runtime_context: Any,
) -> None:
    """A queued regeneration, applied now: the same history-rewrite hooks as Regenerate."""
    store = services.store
    for _ in range(20):
        target = await store.get_messages(committer.scope, committer.thread_id, [target_id])
        thread = await store.get_thread(committer.scope, committer.thread_id)
        if not target or target[0].role != "assistant" or thread is None:
            raise RunFailure("REGENERATE_TARGET_GONE", f"message {target_id!r} is no longer there")
        history = services.history
        rewrite, patch = await history.regeneration(
            store, agent, thread, target[0], runtime_context
        )
        applied: dict[str, Any] = {
            "target_message_id": target_id,
            "applied": True,
            "removed": list(rewrite.removed_message_ids),
            "retained": list(rewrite.retained_message_ids),
        }
        try:
            result = await committer.commit(
                WriteSet(
                    scope=committer.scope,
                    thread_id=committer.thread_id,
                    expected_version=thread.version,
                    thread=patch,
                    truncate_from_message_id=target_id,
                    update_runs=[
                        RunUpdate(
                            id=committer.run_id,
                            lease=committer.lease,
                            input={"regenerate": applied},
                        )
                    ],
                ),
                kinds=("messages_removed",),
            )
        except VersionConflict:
            continue  # decided on stale state: prepare again (HR-03)
        after = result.thread.version if result.thread else thread.version + 1
        history.announce(
            agent.lifecycle,
            thread_id=committer.thread_id,
            rewrite=_with_after(rewrite, after),
            runtime_context=runtime_context,
        )
        return
    raise RunFailure("THREAD_CONTENDED", "the thread kept changing during regeneration")


def _with_after(rewrite: RegenerateRewrite, after: int) -> RegenerateRewrite:
    return replace(rewrite, after_version=after)


__all__ = ["apply_queued_message", "apply_queued_regenerate"]
