"""Trusted/admin operations: visibility rewrites, private metadata, run enrichment.

A visibility rewrite is a history rewrite of the visibility kind: it runs
prepare_history_rewrite once (the rewrite is administratively locked: it
applies at the version it was prepared for or not at all), commits the
hook's metadata patches in the same write, and announces history_rewritten
after commit (HR-01..HR-06). It is refused while a run executes, so it never
overlaps a step's context resolution.
"""

from __future__ import annotations

from typing import Literal

from pai_grpc.domain import JsonObject, LifecycleMessage, Run, Thread
from pai_grpc.errors import Conflict, FailedPrecondition, InvalidArgument, NotFoundError
from pai_grpc.lifecycle import VisibilityChange, VisibilityRewrite
from pai_grpc.runtime._facade_commit import visibility_change
from pai_grpc.runtime._history import merge_thread_patch
from pai_grpc.runtime._records import (
    lifecycle_message_from_record,
    run_from_record,
    thread_from_record,
)
from pai_grpc.runtime._services import Services
from pai_grpc.runtime._validate import (
    Violations,
    check_id,
    check_json_object,
    page_size,
    parse_etag,
)
from pai_grpc.streams import ThreadHint
from storage import (
    InvalidPageToken,
    MessagePatch,
    RunUpdate,
    VersionConflict,
    WriteSet,
)

#: Most messages one visibility rewrite may change.
MAX_VISIBILITY_IDS = 1000


class Admin:
    """AdminService operations (the caller holds an admin credential for ``scope``)."""

    services: Services

    async def update_message_visibility(
        self,
        scope: str,
        thread_id: str,
        message_ids: list[str],
        *,
        transcript: bool | None,
        context: bool | None,
        etag: str = "",
    ) -> Thread:
        """Change where messages are visible, through the history-rewrite hooks."""
        v = Violations()
        check_id(v, "thread_id", "thr", thread_id)
        if not message_ids:
            v.add("message_ids", "name at least one message")
        if len(message_ids) > MAX_VISIBILITY_IDS:
            v.add("message_ids", f"at most {MAX_VISIBILITY_IDS} messages per rewrite")
        for i, mid in enumerate(message_ids):
            check_id(v, f"message_ids[{i}]", "msg", mid)
        if transcript is None and context is None:
            v.add("transcript", "set transcript, context or both")
        expected = parse_etag(v, etag)
        v.raise_if_any()
        store = self.services.store
        thread = await store.get_thread(scope, thread_id)
        if thread is None:
            raise NotFoundError("thread", thread_id)
        if expected is not None and thread.version != expected:
            raise Conflict("the etag does not match", reason="ETAG_MISMATCH")
        if thread.status == "running":
            raise FailedPrecondition(
                "a run is executing on this thread; rewrite its history when it waits or ends",
                reason="THREAD_BUSY",
            )
        found = {m.id: m for m in await store.get_messages(scope, thread_id, message_ids)}
        missing = [m for m in message_ids if m not in found]
        if missing:
            raise InvalidArgument.field(
                "message_ids", f"not messages of this thread: {missing}", reason="UNKNOWN_MESSAGE"
            )
        changes: list[VisibilityChange] = []
        patches: list[MessagePatch] = []
        for mid in dict.fromkeys(message_ids):
            change = visibility_change(found[mid], transcript=transcript, context=context)
            if change is not None:
                changes.append(VisibilityChange(mid, change[0], change[1]))
                patches.append(change[2])
        if not changes:
            return thread_from_record(thread)
        agent = self.services.agents.get(thread.agent)
        runtime_context = await agent.build_runtime_context()
        rewrite = VisibilityRewrite(changes=tuple(changes), before_version=thread.version)
        history = self.services.history
        patch = await history.thread_patch(
            agent.lifecycle, agent.contract, thread, rewrite, runtime_context
        )
        ws = WriteSet(
            scope=scope,
            thread_id=thread_id,
            expected_version=thread.version,
            expected_status=("idle", "waiting"),
            thread=merge_thread_patch(None, patch),
            update_messages=patches,
        )
        kinds = (
            ("visibility", "metadata") if patch is not None and patch.metadata else ("visibility",)
        )
        try:
            result = await self.services.commit(
                ws, hint=ThreadHint(thread_id, kinds, tuple(c.message_id for c in changes))
            )
        except VersionConflict as e:
            # Locked to the version its hooks saw: never prepared twice (HR-03).
            raise Conflict(
                "the thread changed while the rewrite was prepared; read it again and retry",
                reason="THREAD_CHANGED",
            ) from e
        assert result.thread is not None
        history.announce(
            agent.lifecycle,
            thread_id=thread_id,
            rewrite=VisibilityRewrite(
                changes=rewrite.changes,
                before_version=thread.version,
                after_version=result.thread.version,
            ),
            runtime_context=runtime_context,
        )
        return thread_from_record(result.thread)

    async def get_thread_private_metadata(
        self, scope: str, thread_id: str
    ) -> tuple[JsonObject, int]:
        """A thread's private metadata and its version."""
        v = Violations()
        check_id(v, "thread_id", "thr", thread_id)
        v.raise_if_any()
        thread = await self.services.store.get_thread(scope, thread_id)
        if thread is None:
            raise NotFoundError("thread", thread_id)
        return dict(thread.private_metadata), thread.version

    async def get_run_private_metadata(self, scope: str, run_id: str) -> JsonObject:
        """A run's private metadata."""
        v = Violations()
        check_id(v, "run_id", "run", run_id)
        v.raise_if_any()
        run = await self.services.store.get_run(scope, run_id)
        if run is None:
            raise NotFoundError("run", run_id)
        return dict(run.private_metadata)

    async def update_run_metadata(
        self,
        scope: str,
        run_id: str,
        *,
        metadata: JsonObject | None,
        private_metadata: JsonObject | None,
    ) -> Run:
        """Post-run enrichment: shallow merges, validated whole against the agent contract."""
        limits = self.services.limits
        v = Violations()
        check_id(v, "run_id", "run", run_id)
        if metadata is None and private_metadata is None:
            v.add("metadata", "set metadata, private_metadata or both")
        if metadata is not None:
            check_json_object(v, "metadata", metadata, limits)
        if private_metadata is not None:
            check_json_object(v, "private_metadata", private_metadata, limits)
        v.raise_if_any()
        store = self.services.store
        run = await store.get_run(scope, run_id)
        if run is None:
            raise NotFoundError("run", run_id)
        thread = await store.get_thread(scope, run.thread_id)
        if thread is None:
            raise NotFoundError("run", run_id)
        contract = self.services.agents.get(thread.agent).contract
        fields: dict[str, JsonObject] = {}
        if metadata is not None:
            fields["metadata"] = contract.validate("run_metadata", {**run.metadata, **metadata})
        if private_metadata is not None:
            fields["private_metadata"] = contract.validate(
                "run_private_metadata", {**run.private_metadata, **private_metadata}
            )
        await self.services.commit(
            WriteSet(
                scope=scope,
                thread_id=run.thread_id,
                update_runs=[RunUpdate(id=run_id, **fields)],  # type: ignore[arg-type]
            ),
            hint=ThreadHint(run.thread_id, ("runs",)) if metadata is not None else None,
        )
        updated = await store.get_run(scope, run_id)
        assert updated is not None
        return run_from_record(updated)

    async def list_lifecycle_messages(
        self,
        scope: str,
        thread_id: str,
        *,
        view: Literal["context", "transcript", "all"],
        order: str,
        page_size_: int = 0,
        page_token: str = "",
    ) -> tuple[list[LifecycleMessage], str]:
        """Messages with visibility and private metadata."""
        v = Violations()
        check_id(v, "thread_id", "thr", thread_id)
        size = page_size(v, page_size_, self.services.limits)
        v.raise_if_any()
        if await self.services.store.get_thread(scope, thread_id) is None:
            raise NotFoundError("thread", thread_id)
        try:
            page = await self.services.store.list_messages(
                scope, thread_id, view=view, order=order, limit=size, page_token=page_token
            )
        except InvalidPageToken as e:
            raise InvalidArgument.field("page_token", str(e), reason="INVALID_PAGE_TOKEN") from e
        return [lifecycle_message_from_record(m) for m in page.items], page.next_page_token
