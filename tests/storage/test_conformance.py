"""One conformance suite for both providers: every guarantee of the storage contract.

Each test runs on SQLite and on PostgreSQL (a private schema per test). After
every rejected write set the suite checks that nothing was written.
"""

from __future__ import annotations

import asyncio
import math
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy.exc import IntegrityError

from pai_grpc.domain import new_id
from storage import (
    NOW,
    PROMOTE_NEXT,
    CommitResult,
    DuplicateRequest,
    IdempotencyRecord,
    InvalidJson,
    InvalidPageToken,
    LeaseLost,
    MessagePatch,
    NewEvent,
    NewPendingAction,
    NewRun,
    NotFound,
    PendingActionPatch,
    RunUpdate,
    StateConflict,
    Store,
    ThreadPatch,
    VersionConflict,
    WriteSet,
)
from tests.storage.helpers import (
    OTHER,
    SCOPE,
    claim,
    event,
    finish_and_promote,
    make_thread,
    queue_run,
    start_run,
    state,
    text_message,
)

pytestmark = pytest.mark.rule("RT-08")


def _deep(levels: int) -> object:
    value: object = 1
    for _ in range(levels):
        value = [value]
    return value


# ---- scope ----------------------------------------------------------------


async def test_reads_outside_the_scope_are_indistinguishable_from_absent(store: Store) -> None:
    thread_id = await make_thread(store)
    run_id = await start_run(store, thread_id)
    assert await store.get_thread(SCOPE, thread_id) is not None
    assert await store.get_thread(OTHER, thread_id) is None
    assert await store.get_run(OTHER, run_id) is None
    assert await store.list_pending_actions(OTHER, run_id) == []
    assert await store.read_events(OTHER, run_id) == []
    with pytest.raises(NotFound):
        await store.list_messages(OTHER, thread_id)
    with pytest.raises(NotFound):
        await store.list_runs(OTHER, thread_id)
    with pytest.raises(NotFound):
        await store.get_messages(OTHER, thread_id, ["msg_x"])
    assert (await store.list_threads(OTHER)).items == []
    assert [t.id for t in (await store.list_threads(SCOPE)).items] == [thread_id]


async def test_writes_outside_the_scope_fail_and_write_nothing(store: Store) -> None:
    thread_id = await make_thread(store)
    run_id = await start_run(store, thread_id)
    before = await state(store, thread_id)
    with pytest.raises(NotFound):
        await store.commit(
            WriteSet(scope=OTHER, thread_id=thread_id, append_messages=[text_message("x")])
        )
    with pytest.raises(NotFound):
        await store.commit(
            WriteSet(
                scope=OTHER,
                thread_id=thread_id,
                update_runs=[RunUpdate(id=run_id, status="cancelled")],
            )
        )
    assert await state(store, thread_id) == before


# ---- write sets: root CAS, children, atomicity -----------------------------


async def test_a_write_set_commits_root_children_and_run_together(store: Store) -> None:
    thread_id = await make_thread(store)
    run_id = await start_run(store, thread_id)
    lease = (await claim(store)).lease
    action_id = new_id("act")
    result = await store.commit(
        WriteSet(
            scope=SCOPE,
            thread_id=thread_id,
            thread=ThreadPatch(status="waiting", metadata={"k": 1}),
            append_messages=[text_message("a"), text_message("b")],
            update_runs=[
                RunUpdate(id=run_id, lease=lease, status="waiting", step_count=1, last_seq=2)
            ],
            insert_pending=[
                NewPendingAction(
                    id=action_id,
                    run_id=run_id,
                    kind="client_tool",
                    tool_call_id="c1",
                    tool_name="t",
                )
            ],
            events=[event(run_id, 1), event(run_id, 2, "message")],
        )
    )
    assert result.thread is not None
    assert result.thread.version == 3  # create, start, this write
    assert result.thread.status == "waiting"
    assert result.thread.metadata == {"k": 1}
    assert [m.position for m in result.messages] == [1, 2]
    run = await store.get_run(SCOPE, run_id)
    assert run is not None
    assert (run.status, run.step_count, run.last_seq) == ("waiting", 1, 2)
    assert [p.id for p in await store.list_pending_actions(SCOPE, run_id)] == [action_id]
    assert [e.seq for e in await store.read_events(SCOPE, run_id)] == [1, 2]


@pytest.mark.rule("RT-09")
async def test_a_stale_version_rejects_the_whole_write_set(store: Store) -> None:
    thread_id = await make_thread(store)
    run_id = await start_run(store, thread_id)
    thread = await store.get_thread(SCOPE, thread_id)
    assert thread is not None
    await store.commit(
        WriteSet(scope=SCOPE, thread_id=thread_id, thread=ThreadPatch(metadata={"a": 1}))
    )
    before = await state(store, thread_id)
    with pytest.raises(VersionConflict):
        await store.commit(
            WriteSet(
                scope=SCOPE,
                thread_id=thread_id,
                expected_version=thread.version,
                thread=ThreadPatch(metadata={"b": 2}),
                append_messages=[text_message("lost")],
                insert_runs=[
                    NewRun(id=new_id("run"), status="queued", initiator="send", operation="send")
                ],
                events=[event(run_id, 1)],
            )
        )
    assert await state(store, thread_id) == before


@pytest.mark.rule("LC-05")
async def test_expected_private_metadata_compares_only_private_metadata(store: Store) -> None:
    thread_id = await make_thread(store)
    await store.commit(
        WriteSet(
            scope=SCOPE, thread_id=thread_id, thread=ThreadPatch(private_metadata={"cursor": 1})
        )
    )
    # Unrelated root revisions (status, public metadata) do not reject it ...
    await store.commit(
        WriteSet(scope=SCOPE, thread_id=thread_id, thread=ThreadPatch(metadata={"x": 1}))
    )
    await store.commit(
        WriteSet(
            scope=SCOPE,
            thread_id=thread_id,
            expected_private_metadata={"cursor": 1},
            thread=ThreadPatch(private_metadata={"cursor": 2}),
        )
    )
    # ... but a changed private bag does, and nothing is written.
    before = await state(store, thread_id)
    with pytest.raises(VersionConflict):
        await store.commit(
            WriteSet(
                scope=SCOPE,
                thread_id=thread_id,
                expected_private_metadata={"cursor": 1},
                thread=ThreadPatch(private_metadata={"cursor": 3}),
                append_messages=[text_message("no")],
            )
        )
    assert await state(store, thread_id) == before


async def test_expected_status_guards_the_root(store: Store) -> None:
    thread_id = await make_thread(store)
    await start_run(store, thread_id)
    before = await state(store, thread_id)
    with pytest.raises(VersionConflict):
        await start_run(store, thread_id)  # expects idle; it is running
    assert await state(store, thread_id) == before


async def test_positions_are_dense_and_truncation_reuses_them(store: Store) -> None:
    thread_id = await make_thread(store)
    ids = []
    for word in "abcde":
        result = await store.commit(
            WriteSet(scope=SCOPE, thread_id=thread_id, append_messages=[text_message(word)])
        )
        ids.append(result.messages[0].id)
    result = await store.commit(
        WriteSet(
            scope=SCOPE,
            thread_id=thread_id,
            truncate_from_message_id=ids[2],
            append_messages=[text_message("z")],
        )
    )
    assert result.removed_message_ids == ids[2:]
    assert result.messages[0].position == 2
    page = await store.list_messages(SCOPE, thread_id, view="all")
    assert [m.position for m in page.items] == [0, 1, 2]
    assert [m.parts[0]["text"] for m in page.items] == ["a", "b", "z"]  # type: ignore[index]
    thread = await store.get_thread(SCOPE, thread_id)
    assert thread is not None
    assert thread.message_count == 3


async def test_message_updates_and_views(store: Store) -> None:
    thread_id = await make_thread(store)
    result = await store.commit(
        WriteSet(
            scope=SCOPE,
            thread_id=thread_id,
            append_messages=[text_message("a"), text_message("b"), text_message("c")],
        )
    )
    a, b, c = (m.id for m in result.messages)
    await store.commit(
        WriteSet(
            scope=SCOPE,
            thread_id=thread_id,
            update_messages=[
                MessagePatch(id=a, visible_context=False),
                MessagePatch(id=b, visible_transcript=False, private_metadata={"p": 1}),
            ],
        )
    )
    ids = lambda page: [m.id for m in page.items]  # noqa: E731
    assert ids(await store.list_messages(SCOPE, thread_id, view="transcript")) == [a, c]
    assert ids(await store.list_messages(SCOPE, thread_id, view="context")) == [b, c]
    assert ids(await store.list_messages(SCOPE, thread_id, view="all", order="desc")) == [c, b, a]
    got = await store.get_messages(SCOPE, thread_id, [c, a, "msg_missing"])
    assert [m.id for m in got] == [a, c]
    before = await state(store, thread_id)
    with pytest.raises(NotFound):
        await store.commit(
            WriteSet(
                scope=SCOPE,
                thread_id=thread_id,
                thread=ThreadPatch(metadata={"lost": True}),
                update_messages=[MessagePatch(id="msg_missing", visible_context=False)],
            )
        )
    assert await state(store, thread_id) == before


async def test_pending_actions_resolve_once(store: Store) -> None:
    thread_id = await make_thread(store)
    run_id = await start_run(store, thread_id)
    action = new_id("act")
    await store.commit(
        WriteSet(
            scope=SCOPE,
            thread_id=thread_id,
            insert_pending=[
                NewPendingAction(
                    id=action, run_id=run_id, kind="approval", tool_call_id="c", tool_name="t"
                )
            ],
        )
    )
    resolve = WriteSet(
        scope=SCOPE,
        thread_id=thread_id,
        update_pending=[PendingActionPatch(id=action, status="resolved", resolution={"ok": True})],
        update_runs=[RunUpdate(id=run_id, expect_status=("queued", "running"), metadata={"r": 1})],
    )
    await store.commit(resolve)
    before = await state(store, thread_id)
    with pytest.raises(StateConflict):
        await store.commit(
            WriteSet(
                scope=SCOPE,
                thread_id=thread_id,
                update_pending=[PendingActionPatch(id=action, status="resolved", resolution=2)],
                update_runs=[RunUpdate(id=run_id, metadata={"r": 2})],
            )
        )
    assert await state(store, thread_id) == before
    (pa,) = await store.list_pending_actions(SCOPE, run_id)
    assert (pa.status, pa.resolution) == ("resolved", {"ok": True})


async def test_run_status_guard(store: Store) -> None:
    thread_id = await make_thread(store)
    run_id = await start_run(store, thread_id)
    before = await state(store, thread_id)
    with pytest.raises(StateConflict):
        await store.commit(
            WriteSet(
                scope=SCOPE,
                thread_id=thread_id,
                append_messages=[text_message("x")],
                update_runs=[RunUpdate(id=run_id, expect_status=("waiting",), status="running")],
            )
        )
    assert await state(store, thread_id) == before


async def test_events_after_commit_atomically_and_see_positions(store: Store) -> None:
    thread_id = await make_thread(store)
    run_id = await start_run(store, thread_id)

    def positioned(r: CommitResult) -> list[NewEvent]:
        body = f"position {r.messages[0].position}".encode()
        return [NewEvent(run_id, 1, body, "message", datetime.now(UTC))]

    result = await store.commit(
        WriteSet(scope=SCOPE, thread_id=thread_id, append_messages=[text_message("m")]),
        events_after=positioned,
    )
    (logged,) = await store.read_events(SCOPE, run_id)
    assert (logged.kind, logged.event) == ("message", None)
    assert logged.body == f"position {result.messages[0].position}".encode()
    before = await state(store, thread_id)
    # An entry that cannot be written (seq 1 is taken) takes the message with it.
    with pytest.raises(IntegrityError):
        await store.commit(
            WriteSet(scope=SCOPE, thread_id=thread_id, append_messages=[text_message("m")]),
            events_after=lambda r: [event(run_id, 1)],
        )
    assert await state(store, thread_id) == before


# ---- strict JSON ----------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        math.nan,
        math.inf,
        -math.inf,
        b"bytes",
        {1: "non-string key"},
        ("tuple",),
        {"set"},
        object(),
        2**60,
        "\ud800",
        _deep(40),
    ],
    ids=[
        "nan", "inf", "-inf", "bytes", "int-key", "tuple", "set", "object",
        "big-int", "lone-surrogate", "too-deep",
    ],
)  # fmt: skip
async def test_non_strict_json_is_rejected_before_anything_is_written(
    store: Store, bad: object
) -> None:
    thread_id = await make_thread(store)
    run_id = await start_run(store, thread_id)
    before = await state(store, thread_id)
    attempts = [
        WriteSet(scope=SCOPE, thread_id=thread_id, thread=ThreadPatch(metadata={"v": bad})),
        WriteSet(
            scope=SCOPE,
            thread_id=thread_id,
            append_messages=[text_message("ok"), text_message("x", metadata={"v": bad})],
        ),
        WriteSet(
            scope=SCOPE,
            thread_id=thread_id,
            update_runs=[RunUpdate(id=run_id, metadata={"v": bad})],
        ),
    ]
    for ws in attempts:
        with pytest.raises(InvalidJson):
            await store.commit(ws)
    assert await state(store, thread_id) == before


# ---- idempotency ----------------------------------------------------------


async def test_idempotency_keys_store_the_original_result(store: Store) -> None:
    thread_id = await make_thread(store)
    record = IdempotencyRecord("send:r1", "f1", {"run_id": "run_1"})
    await store.commit(
        WriteSet(
            scope=SCOPE,
            thread_id=thread_id,
            append_messages=[text_message("a")],
            idempotency=record,
        )
    )
    assert await store.get_idempotency(SCOPE, "send:r1") == record
    assert await store.get_idempotency(OTHER, "send:r1") is None
    before = await state(store, thread_id)
    with pytest.raises(DuplicateRequest):
        await store.commit(
            WriteSet(
                scope=SCOPE,
                thread_id=thread_id,
                append_messages=[text_message("again")],
                idempotency=IdempotencyRecord("send:r1", "f1", {"run_id": "run_2"}),
            )
        )
    assert await state(store, thread_id) == before


# ---- claims and leases ----------------------------------------------------


async def test_run_writes_are_fenced_by_the_lease(store: Store) -> None:
    thread_id = await make_thread(store)
    run_id = await start_run(store, thread_id)
    claimed = await claim(store, "r1", lease=30)
    await store.commit(
        WriteSet(
            scope=SCOPE,
            thread_id=thread_id,
            update_runs=[RunUpdate(id=run_id, lease=claimed.lease, step_count=1)],
        )
    )
    stale = claimed.lease.__class__(run_id, "r1", claimed.lease.epoch - 1, claimed.lease.expires_at)
    other = claimed.lease.__class__(run_id, "r2", claimed.lease.epoch, claimed.lease.expires_at)
    before = await state(store, thread_id)
    for lease in (stale, other):
        with pytest.raises(LeaseLost):
            await store.commit(
                WriteSet(
                    scope=SCOPE,
                    thread_id=thread_id,
                    append_messages=[text_message("late")],
                    update_runs=[RunUpdate(id=run_id, lease=lease, step_count=9)],
                )
            )
    assert await state(store, thread_id) == before


async def test_an_expired_lease_is_reclaimed_and_the_old_holder_cannot_write(store: Store) -> None:
    thread_id = await make_thread(store)
    run_id = await start_run(store, thread_id)
    first = await claim(store, "r1", lease=0.3)
    assert await store.claim_run("r2", lease_seconds=30) is None  # held
    await asyncio.sleep(0.5)
    with pytest.raises(LeaseLost):
        await store.heartbeat(first.lease, lease_seconds=30)
    second = await claim(store, "r2", lease=30)
    assert second.run.id == run_id
    assert second.run.attempts == 2
    assert second.lease.epoch == first.lease.epoch + 1
    before = await state(store, thread_id)
    with pytest.raises(LeaseLost):
        await store.commit(
            WriteSet(
                scope=SCOPE,
                thread_id=thread_id,
                events=[event(run_id, 1)],
                update_runs=[RunUpdate(id=run_id, lease=first.lease, last_seq=1)],
            )
        )
    assert await state(store, thread_id) == before
    # Even the same owner name is fenced by the epoch after a re-claim.
    await store.release(second.lease)
    third = await claim(store, "r1", lease=30)
    with pytest.raises(LeaseLost):
        await store.commit(
            WriteSet(
                scope=SCOPE,
                thread_id=thread_id,
                update_runs=[RunUpdate(id=run_id, lease=first.lease)],
            )
        )
    await store.commit(
        WriteSet(
            scope=SCOPE, thread_id=thread_id, update_runs=[RunUpdate(id=run_id, lease=third.lease)]
        )
    )


async def test_heartbeat_extends_and_release_hands_back(store: Store) -> None:
    thread_id = await make_thread(store)
    await start_run(store, thread_id)
    claimed = await claim(store, "r1", lease=1)
    beat = await store.heartbeat(claimed.lease, lease_seconds=60)
    extended = beat.lease
    assert not beat.cancel_requested
    assert extended.expires_at - claimed.lease.expires_at > timedelta(seconds=30)
    assert await store.claim_run("r2", lease_seconds=5) is None
    await store.release(extended)
    again = await claim(store, "r2")
    assert again.run.id == claimed.run.id


async def test_one_active_run_per_thread_and_queued_runs_in_order(store: Store) -> None:
    thread_id = await make_thread(store)
    first = await start_run(store, thread_id)
    queued = [await queue_run(store, thread_id) for _ in range(3)]
    a = await claim(store, "r1")
    assert a.run.id == first
    assert await store.claim_run("r2", lease_seconds=30) is None  # the others are behind it
    order = [first]
    current = a
    for _ in queued:
        await store.commit(finish_and_promote(current, thread_id, ended_at=NOW))
        thread = await store.get_thread(SCOPE, thread_id)
        assert thread is not None
        assert thread.status == "running"
        current = await claim(store, "r1")
        order.append(current.run.id)
    assert order == [first, *queued]
    await store.commit(finish_and_promote(current, thread_id))
    thread = await store.get_thread(SCOPE, thread_id)
    assert thread is not None
    assert (thread.status, thread.active_run_id) == ("idle", None)
    assert await store.claim_run("r1", lease_seconds=30) is None


async def test_claims_take_the_oldest_runnable_run_first(store: Store) -> None:
    threads = [await make_thread(store) for _ in range(3)]
    runs = [await start_run(store, t) for t in threads]
    claimed = [(await claim(store, "r")).run.id for _ in runs]
    assert claimed == runs


# ---- pagination -----------------------------------------------------------


@pytest.mark.rule("LC-10")
async def test_pages_repeat_the_query_with_an_opaque_token(store: Store) -> None:
    thread_id = await make_thread(store)
    result = await store.commit(
        WriteSet(
            scope=SCOPE,
            thread_id=thread_id,
            append_messages=[text_message(str(i)) for i in range(10)],
        )
    )
    ids = [m.id for m in result.messages]
    seen: list[str] = []
    token = ""
    sizes = iter([3, 1, 4, 10])
    while True:
        page = await store.list_messages(
            SCOPE,
            thread_id,
            view="all",
            order="desc",
            before_message_id=ids[9],
            limit=next(sizes),
            page_token=token,
        )
        seen += [m.id for m in page.items]
        token = page.next_page_token
        if not token:
            break
    assert seen == list(reversed(ids[:9]))  # page size changed between pages; nothing lost
    first = await store.list_messages(SCOPE, thread_id, view="all", limit=2)
    for other in (
        {"view": "context"},
        {"order": "desc"},
        {"after_message_id": ids[0]},
        {"through_position": 5},
    ):
        with pytest.raises(InvalidPageToken):
            await store.list_messages(
                SCOPE,
                thread_id,
                **{"view": "all", **other},
                page_token=first.next_page_token,  # type: ignore[arg-type]
            )
    with pytest.raises(InvalidPageToken):
        await store.list_messages(SCOPE, thread_id, page_token="not-a-token")
    bounded = await store.list_messages(
        SCOPE, thread_id, view="all", after_message_id=ids[2], through_position=5
    )
    assert [m.position for m in bounded.items] == [3, 4, 5]


async def test_thread_and_run_listings_paginate(store: Store) -> None:
    threads = [await make_thread(store) for _ in range(5)]
    seen: list[str] = []
    token = ""
    while True:
        page = await store.list_threads(SCOPE, limit=2, page_token=token)
        seen += [t.id for t in page.items]
        token = page.next_page_token
        if not token:
            break
    assert seen == list(reversed(threads))
    await start_run(store, threads[0])
    for _ in range(4):
        await queue_run(store, threads[0])
    runs = await store.list_runs(SCOPE, threads[0], limit=3)
    rest = await store.list_runs(SCOPE, threads[0], limit=3, page_token=runs.next_page_token)
    assert [r.thread_seq for r in runs.items + rest.items] == [4, 3, 2, 1, 0]
    with pytest.raises(InvalidPageToken):
        await store.list_runs(SCOPE, threads[1], page_token=runs.next_page_token)


async def test_delete_thread(store: Store) -> None:
    thread_id = await make_thread(store)
    run_id = await start_run(store, thread_id)
    with pytest.raises(StateConflict):
        await store.delete_thread(SCOPE, thread_id)  # not idle
    with pytest.raises(NotFound):
        await store.delete_thread(OTHER, thread_id)
    c = await claim(store)
    await store.commit(
        WriteSet(
            scope=SCOPE,
            thread_id=thread_id,
            thread=ThreadPatch(active_run_id=PROMOTE_NEXT),
            update_runs=[
                RunUpdate(id=run_id, lease=c.lease, status="completed", release_lease=True)
            ],
        )
    )
    with pytest.raises(VersionConflict):
        await store.delete_thread(SCOPE, thread_id, expected_version=1)
    await store.delete_thread(SCOPE, thread_id)
    assert await store.get_thread(SCOPE, thread_id) is None
    assert await store.get_run(SCOPE, run_id) is None


async def test_provider_clock_is_timezone_aware(store: Store) -> None:
    now = await store.now()
    assert now.tzinfo is not None
    thread_id = await make_thread(store)
    thread = await store.get_thread(SCOPE, thread_id)
    assert thread is not None
    assert abs((thread.created_at - now).total_seconds()) < 60
