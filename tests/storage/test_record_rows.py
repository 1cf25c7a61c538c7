"""Runs and messages are inserted through the driver, not SQLAlchemy Core: the rows are Core's.

Every Send inserts a run and a message and every step a message, so their
inserts skip Core's per-row parameter processing. What lands in the tables
must not change: the same values, JSON as the text Core writes (``None`` in
a JSON column as JSON ``null``), and on SQLite the same timestamp text. On
PostgreSQL a commit's inserts travel as one statement (one round trip), each
table's rows as arrays: the rows are still Core's.
"""

from __future__ import annotations

from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import insert
from sqlalchemy.exc import IntegrityError

from pai_grpc.domain import new_id
from storage import NewMessage, NewRun, RunUpdate, Store, WriteSet
from storage._schema import messages, runs
from storage._sql import _FUSED_ROWS
from tests.conftest import open_store
from tests.storage.helpers import (
    SCOPE,
    claim,
    make_thread,
    send_on_idle,
    statements_sent,
    text_message,
)
from tests.storage.helpers import event as log_entry

#: JSON that text encodings can disagree on: non-ASCII, escapes, nesting, numbers.
PARTS: list[Any] = [
    {"type": "text", "text": 'Grüße, 世界 "quoted" \\ tab\t'},
    {"type": "data", "data": {"n": [1, 2.5, -3e-7, None, True], "nested": {"k": ""}}},
]


async def _stored(
    store: Store, table: Any, ids: list[str], skip: set[str]
) -> list[tuple[Any, ...]]:
    """The rows of ``ids``, in that order, as the driver returns them (on SQLite: the stored text)."""
    # With each column whether it is SQL NULL: a driver reads JSON null and NULL alike.
    columns = ", ".join(f"{c.name}, {c.name} IS NULL" for c in table.columns if c.name not in skip)
    listed = ", ".join(f"'{i}'" for i in ids)

    def read(conn: Any) -> list[tuple[Any, ...]]:
        rows = conn.exec_driver_sql(
            f"SELECT id, {columns} FROM {table.name} WHERE id IN ({listed})"
        ).all()
        by_id = {row[0]: tuple(row[1:]) for row in rows}
        return [by_id[i] for i in ids]

    return await store.run_in_transaction(read)


def _values(record: Any, **changes: Any) -> dict[str, Any]:
    """A record's columns as Core's insert takes them, with ``changes``."""
    return {f.name: getattr(record, f.name) for f in fields(record)} | changes


async def test_sent_runs_and_messages_are_the_rows_core_writes(store: Store) -> None:
    thread_id = await make_thread(store)
    run_id = new_id("run")
    messages_sent = [
        NewMessage(
            id=new_id("msg"), role="user", parts=PARTS, metadata={"tag": "ünï"}, run_id=run_id
        ),
        # No run, no step, hidden: the nullable and boolean columns.
        NewMessage(
            id=new_id("msg"), role="user", parts=[], visible_transcript=False, visible_context=False
        ),
        # A third: on PostgreSQL the messages go as arrays, the two runs as values.
        NewMessage(id=new_id("msg"), role="user", parts=PARTS[:1], private_metadata={"p": None}),
    ]
    runs_sent = [
        # Handed to a runner at once: every timestamp and the lease are set.
        NewRun(
            id=run_id,
            status="queued",
            initiator="send",
            operation="send",
            input={"message": {"parts": PARTS}},
            metadata={"k": [1, None]},
            lease_owner="runner-1",
            trace_context="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        ),
        # Queued: its timestamps, lease and error unset.
        NewRun(id=new_id("run"), status="queued", initiator="send", operation="send"),
    ]
    # With events of the run it inserts: on PostgreSQL all three tables in one statement.
    logged = [log_entry(run_id, 1), log_entry(run_id, 2, "text-delta")]
    sent = await store.commit(
        replace(send_on_idle(thread_id, messages_sent, runs_sent), events=logged)
    )
    assert len(sent.messages) == 3
    assert len(sent.runs) == 2
    # The same records through Core, under new ids (and positions, sequence numbers).
    top = sent.messages[-1].position + 1
    core_messages = [
        _values(m, id=new_id("msg"), position=top + i) for i, m in enumerate(sent.messages)
    ]
    seq = max(r.thread_seq for r in sent.runs) + 1
    core_runs = [_values(r, id=new_id("run"), thread_seq=seq + i) for i, r in enumerate(sent.runs)]

    def through_core(conn: Any) -> None:
        conn.execute(insert(messages), core_messages)
        conn.execute(insert(runs), core_runs)

    await store.run_in_transaction(through_core)
    skip = {"id", "position"}
    ours = await _stored(store, messages, [m.id for m in sent.messages], skip)
    core = await _stored(store, messages, [m["id"] for m in core_messages], skip)
    assert ours == core
    skip = {"id", "thread_seq"}
    ours = await _stored(store, runs, [r.id for r in sent.runs], skip)
    core = await _stored(store, runs, [r["id"] for r in core_runs], skip)
    assert ours == core
    # And they read back as the records the commit returned.
    page = await store.list_messages(SCOPE, thread_id, view="all")
    assert [m.parts for m in page.items] == [m.parts for m in sent.messages] * 2
    for record in sent.runs:
        assert await store.get_run(SCOPE, record.id) == record
    assert [(e.seq, e.body, e.kind) for e in await store.read_events(SCOPE, run_id)] == [
        (e.seq, e.body, e.kind) for e in logged
    ]


async def test_a_commits_inserts_are_one_statement_on_postgresql(tmp_path: Path) -> None:
    async with open_store("postgresql", tmp_path) as store:
        thread_id = await make_thread(store)
        with statements_sent(store) as sent:

            def inserts() -> int:
                return sum("INSERT" in statement for statement in sent)

            run_id = new_id("run")
            run = NewRun(id=run_id, status="queued", initiator="send", operation="send")
            await store.commit(send_on_idle(thread_id, [text_message("hi", run_id=run_id)], [run]))
            assert inserts() == 1, "a Send's run and message"
            lease = (await claim(store)).lease
            sent.clear()
            # A step's commit: its message and its events, with the run's progress.
            answer = NewMessage(
                id=new_id("msg"), role="assistant", parts=PARTS, run_id=run_id, step_index=0
            )
            step = [log_entry(run_id, seq, "text-delta") for seq in range(1, 4)]
            await store.commit(
                WriteSet(
                    scope=SCOPE,
                    thread_id=thread_id,
                    append_messages=[answer],
                    events=step,
                    update_runs=[RunUpdate(id=run_id, lease=lease, last_seq=len(step))],
                )
            )
            assert inserts() == 1, "a step's message and events"
            page = await store.list_messages(SCOPE, thread_id, view="all")
            assert [m.id for m in page.items][-1] == answer.id
            assert [e.seq for e in await store.read_events(SCOPE, run_id)] == [1, 2, 3]
            # A refused row refuses the whole statement: neither table keeps a row.
            again = NewMessage(id=answer.id, role="assistant", parts=[], run_id=run_id)
            with pytest.raises(IntegrityError):
                await store.commit(
                    WriteSet(
                        scope=SCOPE,
                        thread_id=thread_id,
                        append_messages=[again],
                        events=[log_entry(run_id, 4)],
                        update_runs=[RunUpdate(id=run_id, lease=lease, last_seq=4)],
                    )
                )
            assert [e.seq for e in await store.read_events(SCOPE, run_id)] == [1, 2, 3]
            assert len((await store.list_messages(SCOPE, thread_id, view="all")).items) == 2
            # Many events go in a statement of their own, after the rows they may name.
            sent.clear()
            many = [log_entry(run_id, seq, "text-delta") for seq in range(4, 5 + _FUSED_ROWS)]
            await store.commit(
                WriteSet(
                    scope=SCOPE,
                    thread_id=thread_id,
                    append_messages=[text_message("more", run_id=run_id)],
                    events=many,
                    update_runs=[RunUpdate(id=run_id, lease=lease, last_seq=many[-1].seq)],
                )
            )
            assert inserts() == 2
            logged = await store.read_events(SCOPE, run_id)
            assert [e.seq for e in logged] == list(range(1, 5 + _FUSED_ROWS))
