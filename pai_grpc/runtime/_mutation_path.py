"""The mutation path (RT-01) every operation shares: load by scope, then commit or retry.

Every operation writes one atomic write set or nothing. A ``request_id``
makes it idempotent (AIP-155): the original result is stored in the same
transaction and replayed on retry; a concurrent change retries the
operation's decision on fresh state.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pai_grpc.domain import RunHandle
from pai_grpc.errors import Conflict, InvalidArgument, NotFoundError
from pai_grpc.runtime._services import Services
from pai_grpc.streams import ThreadHint
from pai_grpc.telemetry import tracing
from storage import (
    ActiveRunLimit,
    ClaimedRun,
    CommitResult,
    DuplicateRequest,
    IdempotencyRecord,
    Lease,
    NewMessage,
    NewRun,
    ThreadPatch,
    ThreadRecord,
    VersionConflict,
    WriteSet,
)

#: How often a contended thread's CAS is retried before the caller sees ABORTED.
MUTATION_ATTEMPTS = 100


def fingerprint(payload: object) -> str:
    """A stable hash of a request body, bound to its idempotency key."""
    return hashlib.sha256(
        json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()


@dataclass
class Attempt:
    """One attempt's write set, its result (stored for idempotent replay) and wake-ups.

    ``runnable`` marks a write set that makes a new run active; it may be
    handed straight to the embedded runner (leased in the same write).
    """

    ws: WriteSet
    result: dict[str, Any]
    hint: ThreadHint | None = None
    runnable: bool = False
    #: Called once the write set committed (e.g. history_rewritten announcements).
    committed: Callable[[CommitResult], None] | None = None


class MutationPath:
    """The shared steps of every mutation: load by scope, replay, commit with CAS retry."""

    services: Services

    async def _load(self, scope: str, thread_id: str) -> ThreadRecord:
        record = await self.services.store.get_thread(scope, thread_id)
        if record is None:
            raise NotFoundError("thread", thread_id)
        return record

    async def _replay(self, scope: str, key: str, digest: str) -> dict[str, Any] | None:
        prior = await self.services.store.get_idempotency(scope, key)
        if prior is None:
            return None
        if prior.fingerprint != digest:
            raise InvalidArgument.field(
                "request_id", "was already used for a different request", reason="REQUEST_ID_REUSED"
            )
        return prior.result

    async def _mutate(
        self,
        scope: str,
        key: str,
        digest: str,
        attempt: Callable[[], Awaitable[Attempt]],
    ) -> dict[str, Any]:
        """Run ``attempt`` until its write set commits (CAS retry), idempotently."""
        if key:
            prior = await self._replay(scope, key, digest)
            if prior is not None:
                return prior
        for _ in range(MUTATION_ATTEMPTS):
            a = await attempt()
            if key:
                a.ws.idempotency = IdempotencyRecord(key, digest, a.result)
            if a.ws.insert_runs:
                a.ws.max_active_runs = self.services.quotas.max_active_runs
            traceparent = tracing.current_traceparent() if a.ws.insert_runs else None
            if traceparent:
                # Every execution of the run, in any process, continues this request's trace.
                a.ws.insert_runs = [replace(r, trace_context=traceparent) for r in a.ws.insert_runs]
            handoff = self.services.handoff
            owner = handoff.reserve() if (handoff and a.runnable and a.ws.insert_runs) else None
            if owner is not None:
                a.ws.insert_runs = [
                    replace(r, lease_owner=owner, lease_seconds=self.services.lease_seconds)
                    for r in a.ws.insert_runs
                ]
            try:
                result = await self.services.commit(
                    a.ws, hint=a.hint, runnable=a.runnable and owner is None
                )
            except VersionConflict:
                if handoff and owner:
                    handoff.unreserve()
                # The thread changed under us: decide again on fresh state.
                await asyncio.sleep(0)
                continue
            except DuplicateRequest:
                if handoff and owner:
                    handoff.unreserve()
                prior = await self._replay(scope, key, digest)
                assert prior is not None
                return prior
            except ActiveRunLimit as e:
                if handoff and owner:
                    handoff.unreserve()
                raise self.services.quotas.active_runs_error(e) from None
            except BaseException:
                if handoff and owner:
                    handoff.unreserve()
                raise
            if a.committed is not None:
                a.committed(result)
            if handoff and owner:
                run = result.runs[0]
                assert run.lease_expires_at is not None
                assert result.thread is not None
                # The run's first step reads its context from what this commit left.
                self.services.contexts.prime(scope, result)
                await handoff.adopt(
                    ClaimedRun(run, Lease(run.id, owner, run.lease_epoch, run.lease_expires_at)),
                    result.thread.agent,
                )
            return a.result
        raise Conflict("the thread kept changing; retry the request", reason="THREAD_CONTENDED")

    @staticmethod
    def _start_run(
        scope: str,
        thread_id: str,
        run: NewRun,
        *,
        messages: Sequence[NewMessage] = (),
    ) -> WriteSet:
        """Idle thread: commit the input with a new active run."""
        return WriteSet(
            scope=scope,
            thread_id=thread_id,
            expected_status=("idle",),
            thread=ThreadPatch(status="running", active_run_id=run.id),
            append_messages=list(messages),
            insert_runs=[run],
        )

    @staticmethod
    def _queue_run(scope: str, thread: ThreadRecord, run: NewRun) -> WriteSet:
        """Busy thread: a durable queued run whose input is applied when it starts."""
        return WriteSet(
            scope=scope,
            thread_id=thread.id,
            expected_status=("running", "waiting"),
            insert_runs=[run],
        )


def handle_json(handle: RunHandle) -> dict[str, Any]:
    """A run handle as an operation's stored (replayable) result."""
    out: dict[str, Any] = handle.model_dump(mode="json", exclude_none=True)
    return out


__all__ = ["MUTATION_ATTEMPTS", "Attempt", "MutationPath", "fingerprint", "handle_json"]
