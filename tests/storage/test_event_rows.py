"""Events are logged through the driver, not SQLAlchemy Core: the rows are the ones Core writes.

Every run logs a row per event, so their insert skips Core's per-row
parameter processing. What lands in the table must not change: the same
values, and on SQLite the same timestamp text (reads parse it, and
retention compares it as text).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import DateTime, insert
from sqlalchemy.dialects import sqlite

from storage import NewEvent, RunUpdate, Store, WriteSet
from storage._schema import run_events
from storage._sql import sqlite_timestamp
from tests.storage.helpers import SCOPE, claim, make_thread, start_run

offsets = st.integers(-23 * 60, 23 * 60).map(lambda m: timezone(timedelta(minutes=m)))


@given(st.datetimes() | st.datetimes(timezones=st.just(UTC) | offsets))
def test_sqlite_timestamps_are_the_text_sqlalchemy_writes(value: datetime) -> None:
    dialect = sqlite.dialect()
    process = DateTime(timezone=True).dialect_impl(dialect).bind_processor(dialect)
    assert process is not None
    assert sqlite_timestamp(value) == process(value)


#: Times as the runtime makes them, one with a microsecond of zero, one not in UTC.
TIMES = [
    datetime(2026, 12, 5, 12, 0, 0, 0, tzinfo=UTC),
    datetime(2026, 12, 5, 12, 0, 0, 123456, tzinfo=UTC),
    datetime(2026, 12, 5, 14, 30, 1, 5, tzinfo=timezone(timedelta(hours=2))),
]


async def test_logged_events_are_the_rows_core_writes(store: Store) -> None:
    thread_id = await make_thread(store)
    run_id = await start_run(store, thread_id)
    lease = (await claim(store)).lease
    logged = [
        NewEvent(run_id, seq, f"body {seq}".encode(), "text-delta", time)
        for seq, time in enumerate(TIMES, start=1)
    ]
    await store.commit(
        WriteSet(
            scope=SCOPE,
            thread_id=thread_id,
            events=logged,
            update_runs=[RunUpdate(id=run_id, lease=lease, last_seq=len(TIMES))],
        )
    )
    # The same values through Core, at later seqs of the same run.
    shift = len(TIMES)

    def through_core(conn: Any) -> None:
        conn.execute(
            insert(run_events),
            [
                {
                    "run_id": e.run_id,
                    "seq": e.seq + shift,
                    "body": e.body,
                    "kind": e.kind,
                    "created_at": e.time,
                }
                for e in logged
            ],
        )

    await store.run_in_transaction(through_core)

    def rows(conn: Any) -> list[tuple[Any, ...]]:
        # The stored text on SQLite (a cast-free read of the column), the instant on PostgreSQL.
        return [
            tuple(r)
            for r in conn.exec_driver_sql(
                "SELECT seq, body, kind, event, created_at FROM run_events "
                f"WHERE run_id = '{run_id}' ORDER BY seq"
            ).all()
        ]

    stored = await store.run_in_transaction(rows)
    ours, core = stored[:shift], stored[shift:]
    assert len(ours) == len(core) == len(TIMES)
    assert [r[1:] for r in ours] == [r[1:] for r in core]
    # And they read back as the instants they were written with (in UTC, as the
    # runtime writes them: SQLite's text keeps no offset, through Core or not).
    records = await store.read_events(SCOPE, run_id)
    assert [r.created_at for r in records[:2]] == TIMES[:2]
