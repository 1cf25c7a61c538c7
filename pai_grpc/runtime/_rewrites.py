"""History rewrites requested by clients: Regenerate re-answers from an assistant message."""

from __future__ import annotations

from dataclasses import dataclass, replace

from pai_grpc.domain import JsonObject, RunHandle, new_id
from pai_grpc.errors import Conflict, FailedPrecondition, NotFoundError
from pai_grpc.runtime._history import merge_thread_patch
from pai_grpc.runtime._mutation_path import Attempt, MutationPath, fingerprint, handle_json
from pai_grpc.runtime._validate import (
    Violations,
    check_id,
    check_json_object,
    check_request_id,
    parse_etag,
)
from pai_grpc.streams import ThreadHint
from storage import CommitResult, NewRun


@dataclass(frozen=True)
class RegenerateInput:
    """A Regenerate operation: re-answer from a target assistant message."""

    thread_id: str
    message_id: str
    request_id: str = ""
    etag: str = ""
    run_metadata: JsonObject | None = None


@dataclass(frozen=True)
class RegenerateResult:
    """The run handle plus the physical ids the rewrite removed and retained."""

    run: RunHandle
    removed_message_ids: list[str]
    retained_message_ids: list[str]


class Rewrites(MutationPath):
    """Operations that rewrite a thread's history and start a run on the result."""

    async def regenerate(self, scope: str, op: RegenerateInput) -> RegenerateResult:
        """Remove the target assistant message and everything after it; answer again.

        On a busy thread the rewrite is queued and applied when its run starts
        (the removed/retained ids are then empty in the response).
        """
        limits = self.services.limits
        v = Violations()
        check_id(v, "thread_id", "thr", op.thread_id)
        check_id(v, "message_id", "msg", op.message_id)
        if op.run_metadata is not None:
            check_json_object(v, "run_metadata", op.run_metadata, limits)
        check_request_id(v, op.request_id, limits)
        expected = parse_etag(v, op.etag)
        v.raise_if_any()
        key = f"regenerate:{op.request_id}" if op.request_id else ""
        digest = fingerprint({"thread": op.thread_id, "target": op.message_id, "etag": op.etag})

        async def attempt() -> Attempt:
            thread = await self._load(scope, op.thread_id)
            if expected is not None and thread.version != expected:
                raise Conflict("the etag does not match", reason="ETAG_MISMATCH")
            found = await self.services.store.get_messages(scope, thread.id, [op.message_id])
            if not found:
                raise NotFoundError("message", op.message_id)
            target = found[0]
            if target.role != "assistant":
                raise FailedPrecondition(
                    f"message {op.message_id!r} is a {target.role} message; "
                    "regenerate needs an assistant message",
                    reason="NOT_AN_ASSISTANT_MESSAGE",
                )
            run_id = new_id("run")
            handle = RunHandle(run_id=run_id, thread_id=thread.id, status="queued")
            if thread.status != "idle":
                run = NewRun(
                    id=run_id,
                    status="queued",
                    initiator="regenerate",
                    operation="regenerate",
                    input={"regenerate": {"target_message_id": target.id}},
                    metadata=op.run_metadata or {},
                )
                result = {"run": handle_json(handle), "removed": [], "retained": []}
                return Attempt(self._queue_run(scope, thread, run), result)
            # Prepared on every attempt; its patches share the write (HR-02, HR-03).
            agent = self.services.agents.get(thread.agent)
            runtime_context = await agent.build_runtime_context()
            history = self.services.history
            rewrite, patch = await history.regeneration(
                self.services.store, agent, thread, target, runtime_context
            )
            retained = list(rewrite.retained_message_ids)
            removed = list(rewrite.removed_message_ids)
            run = NewRun(
                id=run_id,
                status="queued",
                initiator="regenerate",
                operation="regenerate",
                input={
                    "regenerate": {
                        "target_message_id": target.id,
                        "applied": True,
                        "removed": [*removed],
                        "retained": [*retained],
                    }
                },
                metadata=op.run_metadata or {},
            )
            ws = self._start_run(scope, thread.id, run)
            ws.expected_version = thread.version  # the split was computed from this version
            ws.truncate_from_message_id = target.id
            ws.thread = merge_thread_patch(ws.thread, patch)

            def committed(result: CommitResult) -> None:
                after = result.thread.version if result.thread else thread.version + 1
                history.announce(
                    agent.lifecycle,
                    thread_id=thread.id,
                    rewrite=replace(rewrite, after_version=after),
                    runtime_context=runtime_context,
                )

            return Attempt(
                ws,
                {"run": handle_json(handle), "removed": removed, "retained": retained},
                hint=ThreadHint(thread.id, ("status", "messages_removed"), tuple(removed)),
                runnable=True,
                committed=committed,
            )

        result = await self._mutate(scope, key, digest, attempt)
        return RegenerateResult(
            run=RunHandle.model_validate(result["run"]),
            removed_message_ids=list(result["removed"]),
            retained_message_ids=list(result["retained"]),
        )


__all__ = ["RegenerateInput", "RegenerateResult", "Rewrites"]
