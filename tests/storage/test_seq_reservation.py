"""The durable sequence reservation: every claim starts above whatever may have been published."""

from __future__ import annotations

import asyncio

from pai_grpc.convert import run_event_from_bytes
from pai_grpc.models import ScriptedModel
from pai_grpc.runtime import DEFAULT_AGENT, Agent, AgentRegistry, Runtime
from storage import SEQ_BLOCK, RunUpdate, Store, WriteSet
from tests.storage.helpers import SCOPE, claim, event, make_thread, start_run


async def test_a_claim_starts_above_the_reservation_and_reserves_a_block(store: Store) -> None:
    thread_id = await make_thread(store)
    run_id = await start_run(store, thread_id)
    first = await claim(store, "r1")
    assert first.first_seq == 1
    assert first.run.reserved_seq == SEQ_BLOCK  # the first deltas never wait for a write
    # The execution logs seqs 1..10 and raises the reservation with them.
    await store.commit(
        WriteSet(
            scope=SCOPE,
            thread_id=thread_id,
            events=[event(run_id, s) for s in range(1, 11)],
            update_runs=[
                RunUpdate(id=run_id, lease=first.lease, last_seq=10, reserved_seq=10 + SEQ_BLOCK)
            ],
        )
    )
    # It dies having published up to 10 + SEQ_BLOCK live; the next attempt starts above.
    await store.release(first.lease)
    second = await claim(store, "r2")
    assert second.run.last_seq == 10
    assert second.first_seq == 10 + SEQ_BLOCK + 1
    assert second.run.reserved_seq == 10 + 2 * SEQ_BLOCK
    # A write that releases the lease published everything it wrote: the next is dense.
    await store.commit(
        WriteSet(
            scope=SCOPE,
            thread_id=thread_id,
            events=[event(run_id, second.first_seq)],
            update_runs=[
                RunUpdate(
                    id=run_id,
                    lease=second.lease,
                    status="running",
                    last_seq=second.first_seq,
                    reserved_seq=second.first_seq,
                    release_lease=True,
                )
            ],
        )
    )
    third = await claim(store, "r3")
    assert third.first_seq == second.first_seq + 1
    events = await store.read_events(SCOPE, run_id)
    assert [e.seq for e in events] == [*range(1, 11), second.first_seq]


async def test_cancelling_a_lost_run_writes_above_the_reservation(store: Store) -> None:
    # A runner claimed the run, logged seqs 1..3, published more live, and died.
    thread_id = await make_thread(store)
    run_id = await start_run(store, thread_id)
    lost = await claim(store, "dead", lease=0.2)
    await store.commit(
        WriteSet(
            scope=SCOPE,
            thread_id=thread_id,
            events=[event(run_id, s) for s in range(1, 4)],
            update_runs=[
                RunUpdate(id=run_id, lease=lost.lease, last_seq=3, reserved_seq=3 + SEQ_BLOCK)
            ],
        )
    )
    await asyncio.sleep(0.4)  # its lease runs out
    runtime = Runtime(store, AgentRegistry([Agent(name=DEFAULT_AGENT, model=ScriptedModel([]))]))
    run = await runtime.cancel_run(SCOPE, run_id, reason="stop")
    assert run.status == "cancelled"
    # A reader that saw seq 7 live resumes: the abort first, then the cancellation.
    streamed = [e async for e in await runtime.stream_run(SCOPE, run_id, after_seq=7)]
    events = [run_event_from_bytes(e.body) for e in streamed]
    assert [e.seq for e in events] == [4 + SEQ_BLOCK, 5 + SEQ_BLOCK]
    assert [e.terminal for e in streamed] == [False, True]
    first, last = (e.payload.model_dump(mode="json") for e in events)
    assert first["chunk"] == {"type": "abort", "reason": "recovery"}
    assert last["status"] == "cancelled"
