"""History rewrites: prepare_history_rewrite in the rewrite's transaction, history_rewritten after.

Regenerate (retry) and visibility rewrites (AdminService and the lifecycle
facade) go through the same two hooks (HR-01..HR-06).
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from pai.v1 import admin_service_pb2 as apb
from pai.v1 import thread_service_pb2 as tpb
from pai_grpc.lifecycle import (
    AfterStepInput,
    HistoryRewritePatch,
    HistoryRewrittenInput,
    PrepareHistoryRewriteInput,
    RegenerateRewrite,
    VisibilityRewrite,
    lifecycle,
)
from pai_grpc.models import ScriptedModel
from pai_grpc.runtime._history import HistoryRewrites
from pai_grpc.server._scope import DEV_SCOPE
from storage import ThreadPatch, WriteSet
from tests.conftest import rich_status
from tests.lifecycle.harness import Harness, harness
from tests.runtime.support import rpc_error


async def two_turns(h: Harness) -> tuple[str, list[str]]:
    """A thread with user/assistant/user/assistant; returns it with the message ids."""
    thread_id, _ = await h.ask("one")
    await h.ask("two", thread_id)
    return thread_id, [m.message.id for m in await h.messages(thread_id)]


async def regenerate(h: Harness, thread_id: str, message_id: str) -> Any:
    response = await h.srv.threads.Regenerate(
        tpb.RegenerateRequest(thread_id=thread_id, message_id=message_id)
    )
    await h.finish(response.run.run_id)
    return response


async def bump_thread(h: Harness, thread_id: str, key: str) -> None:
    """A concurrent writer: change the thread root (its version) behind the rewrite's back."""
    await h.store.commit(
        WriteSet(scope=DEV_SCOPE, thread_id=thread_id, thread=ThreadPatch(metadata={key: True}))
    )


@pytest.mark.rule("HR-01")
@pytest.mark.rule("HR-02")
@pytest.mark.rule("HR-06")
async def test_regenerate_prepares_with_target_retained_removed_and_commits_patches_atomically(
    database_url: str, hooks_mode: str
) -> None:
    seen: list[PrepareHistoryRewriteInput] = []

    def prepare(i: PrepareHistoryRewriteInput) -> HistoryRewritePatch:
        seen.append(i)
        assert isinstance(i.rewrite, RegenerateRewrite)
        return HistoryRewritePatch(
            metadata={"rewritten": True},
            private_metadata={"cursor": list(i.rewrite.retained_message_ids)},
        )

    hooks = lifecycle("cursor", prepare_history_rewrite=prepare)
    async with harness(
        database_url, hooks, model=ScriptedModel(["a1", "a2", "again"]), mode=hooks_mode
    ) as h:
        thread_id, ids = await two_turns(h)
        before = await h.thread_record(thread_id)
        await h.store.commit(
            WriteSet(
                scope=DEV_SCOPE,
                thread_id=thread_id,
                thread=ThreadPatch(private_metadata={"keep": 1}),
            )
        )
        before = await h.thread_record(thread_id)
        response = await regenerate(h, thread_id, ids[1])
        assert len(seen) == 1
        rewrite = seen[0].rewrite
        assert isinstance(rewrite, RegenerateRewrite)
        assert rewrite.kind == "regenerate"
        assert rewrite.target_message_id == ids[1]
        assert rewrite.retained_message_ids == (ids[0],)
        assert rewrite.removed_message_ids == tuple(ids[1:])
        assert rewrite.before_version == before.version
        assert seen[0].private_metadata == {"keep": 1}
        assert list(response.removed_message_ids) == ids[1:]
        after = await h.thread_record(thread_id)
        # Shallow-merged into the bags, in the rewrite's own write.
        assert after.private_metadata == {"keep": 1, "cursor": [ids[0]]}
        assert after.metadata["rewritten"] is True
        assert [m.message.id for m in await h.messages(thread_id)][:1] == [ids[0]]


@pytest.mark.rule("HR-02")
async def test_a_failing_prepare_hook_leaves_the_thread_untouched(
    database_url: str, hooks_mode: str
) -> None:
    def prepare(i: PrepareHistoryRewriteInput) -> HistoryRewritePatch:
        raise RuntimeError("cursor store unreachable")

    hooks = lifecycle("cursor", prepare_history_rewrite=prepare)
    async with harness(database_url, hooks, mode=hooks_mode) as h:
        thread_id, ids = await two_turns(h)
        before = await h.thread_record(thread_id)
        err = await rpc_error(
            h.srv.threads.Regenerate(tpb.RegenerateRequest(thread_id=thread_id, message_id=ids[1]))
        )
        _, reason, _ = rich_status(err)
        assert reason == "HOOK_FAILED"
        assert "cursor store unreachable" in (err.details() or "")
        after = await h.thread_record(thread_id)
        assert after.version == before.version
        assert [m.message.id for m in await h.messages(thread_id)] == ids


@pytest.mark.rule("HR-03")
async def test_regenerate_prepares_again_after_a_stale_version_retry(
    database_url: str, hooks_mode: str
) -> None:
    versions: list[int] = []
    h_ref: list[Harness] = []

    async def prepare(i: PrepareHistoryRewriteInput) -> HistoryRewritePatch:
        versions.append(i.rewrite.before_version)
        if len(versions) == 1:
            await bump_thread(h_ref[0], i.thread_id, "concurrent")
        return HistoryRewritePatch(private_metadata={"prepared_at": i.rewrite.before_version})

    hooks = lifecycle("cursor", prepare_history_rewrite=prepare)
    async with harness(database_url, hooks, mode=hooks_mode) as h:
        h_ref.append(h)
        thread_id, ids = await two_turns(h)
        await regenerate(h, thread_id, ids[1])
        assert len(versions) == 2
        assert versions[1] == versions[0] + 1  # decided again on the fresh version
        after = await h.thread_record(thread_id)
        assert after.private_metadata["prepared_at"] == versions[1]
        assert after.metadata.get("concurrent") is True


@pytest.mark.rule("HR-01")
@pytest.mark.rule("HR-03")
@pytest.mark.rule("HR-06")
async def test_admin_visibility_rewrite_prepares_once_with_complete_before_after(
    database_url: str, hooks_mode: str
) -> None:
    seen: list[PrepareHistoryRewriteInput] = []
    h_ref: list[Harness] = []
    interfere = [False]

    async def prepare(i: PrepareHistoryRewriteInput) -> HistoryRewritePatch:
        seen.append(i)
        if interfere[0]:
            await bump_thread(h_ref[0], i.thread_id, "concurrent")
        return HistoryRewritePatch(private_metadata={"eligibility": "changed"})

    hooks = lifecycle("cursor", prepare_history_rewrite=prepare)
    async with harness(database_url, hooks, mode=hooks_mode) as h:
        h_ref.append(h)
        thread_id, ids = await two_turns(h)
        before = await h.thread_record(thread_id)
        response = await h.admin.UpdateMessageVisibility(
            apb.UpdateMessageVisibilityRequest(
                thread_id=thread_id, message_ids=[ids[0], ids[1]], context=False
            )
        )
        assert len(seen) == 1
        rewrite = seen[0].rewrite
        assert isinstance(rewrite, VisibilityRewrite)
        assert rewrite.kind == "visibility"
        assert rewrite.before_version == before.version
        assert [
            (c.message_id, c.before.model_dump(), c.after.model_dump()) for c in rewrite.changes
        ] == [
            (ids[0], {"transcript": True, "context": True}, {"transcript": True, "context": False}),
            (ids[1], {"transcript": True, "context": True}, {"transcript": True, "context": False}),
        ]
        after = await h.thread_record(thread_id)
        assert after.private_metadata == {"eligibility": "changed"}
        assert response.thread.etag  # the new head
        stored = {m.message.id: m.visibility.context for m in await h.messages(thread_id)}
        assert [stored[ids[0]], stored[ids[1]], stored[ids[2]]] == [False, False, True]

        # Locked: a concurrent change makes it fail instead of preparing again.
        interfere[0] = True
        err = await rpc_error(
            h.admin.UpdateMessageVisibility(
                apb.UpdateMessageVisibilityRequest(
                    thread_id=thread_id, message_ids=[ids[2]], context=False
                )
            )
        )
        assert err.code() == grpc.StatusCode.ABORTED
        assert len(seen) == 2  # once for this rewrite
        assert {m.message.id: m.visibility.context for m in await h.messages(thread_id)}[ids[2]]


@pytest.mark.rule("HR-06")
async def test_lifecycle_visibility_writes_use_the_visibility_variant(
    database_url: str, hooks_mode: str
) -> None:
    kinds: list[str] = []

    async def after_step(i: AfterStepInput) -> None:
        page = await i.thread.messages.list(view="all")
        first_user = page.items[0].message.id
        await i.thread.messages.update_visibility([first_user], transcript=False)

    def prepare(i: PrepareHistoryRewriteInput) -> None:
        kinds.append(i.rewrite.kind)

    hooks = lifecycle("hide", after_step=after_step, prepare_history_rewrite=prepare)
    async with harness(database_url, hooks, mode=hooks_mode) as h:
        thread_id, done = await h.ask("secret question")
        assert done.status == "completed"
        assert kinds == ["visibility"]
        assert await h.transcript(thread_id) == [("assistant", "hello")]


@pytest.mark.rule("HR-04")
async def test_history_rewritten_runs_after_commit_and_its_failure_is_reported_not_rolled_back(
    database_url: str, hooks_mode: str
) -> None:
    facts: list[HistoryRewrittenInput] = []

    def rewritten(i: HistoryRewrittenInput) -> None:
        facts.append(i)
        raise RuntimeError("outbox down")

    hooks = lifecycle("mirror", history_rewritten=rewritten)
    async with harness(database_url, hooks, mode=hooks_mode) as h:
        thread_id, ids = await two_turns(h)
        before = await h.thread_record(thread_id)
        await h.admin.UpdateMessageVisibility(
            apb.UpdateMessageVisibilityRequest(
                thread_id=thread_id, message_ids=[ids[0]], transcript=False
            )
        )
        await h.history_idle()
        after = await h.thread_record(thread_id)
        assert len(facts) == 1
        assert facts[0].rewrite.before_version == before.version
        assert facts[0].rewrite.after_version == after.version
        # The rewrite stands; the failure is a reported runtime error.
        assert (await h.messages(thread_id))[0].visibility.transcript is False
        errors = h.srv.app.runtime.services.history.errors
        assert [(e.reason, e.thread_id) for e in errors] == [
            ("HISTORY_REWRITTEN_FAILED", thread_id)
        ]
        assert "outbox down" in errors[0].message


@pytest.mark.rule("HR-05")
async def test_history_rewritten_is_serialised_per_thread_and_outlives_the_request(
    database_url: str, hooks_mode: str
) -> None:
    release = asyncio.Event()
    running: dict[str, int] = {}
    peak: dict[str, int] = {}
    done: list[str] = []

    async def rewritten(i: HistoryRewrittenInput) -> None:
        running[i.thread_id] = running.get(i.thread_id, 0) + 1
        peak[i.thread_id] = max(peak.get(i.thread_id, 0), running[i.thread_id])
        await release.wait()
        running[i.thread_id] -= 1
        done.append(i.thread_id)

    hooks = lifecycle("mirror", history_rewritten=rewritten)
    async with harness(database_url, hooks, mode=hooks_mode) as h:
        a, ids_a = await two_turns(h)
        b, ids_b = await two_turns(h)
        for thread_id, ids, flag in ((a, ids_a, False), (a, ids_a, True), (b, ids_b, False)):
            for i in (0, 1):
                await h.admin.UpdateMessageVisibility(
                    apb.UpdateMessageVisibilityRequest(
                        thread_id=thread_id, message_ids=[ids[i]], transcript=flag
                    )
                )
        # Every request has returned while the facts are still being delivered.
        for _ in range(500):
            if len(running) == 2:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)  # room for a second delivery per thread to (wrongly) start
        assert done == []
        assert running == {a: 1, b: 1}  # one at a time per thread, threads in parallel
        release.set()
        await h.history_idle()
        assert peak == {a: 1, b: 1}
        assert sorted(done) == sorted([a] * 4 + [b] * 2)


@pytest.mark.rule("HR-05")
async def test_history_rewritten_facts_coalesce_under_load() -> None:
    release = asyncio.Event()
    delivered: list[int] = []

    async def rewritten(i: HistoryRewrittenInput) -> None:
        await release.wait()
        assert i.rewrite.after_version is not None
        delivered.append(i.rewrite.after_version)

    hooks = lifecycle("mirror", history_rewritten=rewritten)
    rewrites = HistoryRewrites()
    for version in range(40):
        rewrites.announce(
            hooks,
            thread_id="thr_1",
            rewrite=VisibilityRewrite(
                changes=(), before_version=version, after_version=version + 1
            ),
        )
    await asyncio.sleep(0)
    release.set()
    await rewrites.idle()
    assert rewrites.coalesced > 0
    assert len(delivered) < 40
    assert delivered == sorted(delivered)  # order kept
    assert delivered[-1] == 40  # the newest fact is never dropped
