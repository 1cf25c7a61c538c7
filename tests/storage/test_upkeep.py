"""What stops PostgreSQL's own upkeep (vacuum, analyze) is named, and a starting server says so."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from pai_grpc.config import Settings
from pai_grpc.models import OfflineModel
from pai_grpc.runtime import DEFAULT_AGENT, Agent, AgentRegistry
from pai_grpc.runtime._records import compaction_marker_body
from pai_grpc.server import App
from storage import RetentionPolicy, Store
from tests.conftest import open_store
from tests.storage.helpers import SCOPE, make_thread

#: A sweep with no retention configured: what it still does is upkeep.
NOTHING_TO_REMOVE = RetentionPolicy(events_after_terminal=None, idempotency_ttl=None)

RUNS_OFF = (
    "table runs has autovacuum_enabled = false: its dead row versions pile up"
    " (ALTER TABLE runs RESET (autovacuum_enabled))"
)


async def autovacuum(store: Store) -> str:
    return str(await store.engines.read(lambda c: c.execute(text("SHOW autovacuum")).scalar_one()))


async def test_upkeep_problems_name_what_stops_vacuum(backend: str, tmp_path: Path) -> None:
    async with open_store(backend, tmp_path) as store:
        problems = await store.upkeep_problems()
        if backend == "sqlite":
            assert problems == []  # SQLite has no vacuum to keep up
            return
        off = await autovacuum(store) == "off"
        assert any("autovacuum = off" in p for p in problems) == off
        assert not [p for p in problems if p.startswith("table")]
        await store.run_in_transaction(
            lambda c: c.execute(text("ALTER TABLE runs SET (autovacuum_enabled = off)"))
        )
        assert [p for p in await store.upkeep_problems() if p.startswith("table")] == [RUNS_OFF]


async def test_a_starting_server_warns_of_each_upkeep_problem(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with open_store("postgresql", tmp_path) as store:
        await store.run_in_transaction(
            lambda c: c.execute(text("ALTER TABLE runs SET (autovacuum_enabled = off)"))
        )
        agents = AgentRegistry([Agent(name=DEFAULT_AGENT, model=OfflineModel(chunk_delay=0))])
        url = "postgresql://unused"  # the App uses the store it is given
        app = App(Settings(database_url=url, address="127.0.0.1:0"), agents, store=store)
        with caplog.at_level(logging.WARNING, logger="pai_grpc.server"):
            assert await app.start() > 0
        await app.stop(grace=0)
    warned = [r.getMessage() for r in caplog.records if r.name == "pai_grpc.server"]
    assert f"{RUNS_OFF} (docs/storage.md, Vacuum)" in warned


async def lookup_buffers(store: Store, thread_id: str) -> int:
    """Buffers PostgreSQL reads to find a thread by id and scope, as every read of one does."""

    def explain(conn: Any) -> Any:
        found = conn.execute(
            text(
                "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)"
                " SELECT * FROM threads WHERE id = :id AND scope = :scope"
            ),
            {"id": thread_id, "scope": SCOPE},
        )
        return found.scalar_one()

    plan = await store.engines.read(explain)
    plan = json.loads(plan) if isinstance(plan, str) else plan
    top = plan[0]["Plan"]
    return int(top["Shared Hit Blocks"]) + int(top["Shared Read Blocks"])


async def changes_counted(store: Store, table: str, rows: int) -> None:
    """Wait until the server's statistics count ``rows`` changes to ``table`` (flushed ≤1 s late)."""
    query = text(
        "SELECT n_mod_since_analyze FROM pg_stat_user_tables"
        " WHERE schemaname = current_schema() AND relname = :t"
    )
    for _ in range(100):
        seen = await store.engines.read(lambda c: c.execute(query, {"t": table}).scalar_one())
        if seen >= rows:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{table}: {seen} changes counted, expected {rows}")


async def test_a_sweep_analyzes_the_tables_autovacuum_leaves_alone(tmp_path: Path) -> None:
    # Without statistics, finding a thread by id and scope read every thread of the
    # scope (the planner took the scope's index over the primary key). Where
    # autovacuum does not analyze (here: off for the table), the sweep does.
    async with open_store("postgresql", tmp_path) as store:
        await store.run_in_transaction(
            lambda c: c.execute(text("ALTER TABLE threads SET (autovacuum_enabled = off)"))
        )
        ids = [await make_thread(store) for _ in range(400)]
        await changes_counted(store, "threads", len(ids))
        unanalyzed = await lookup_buffers(store, ids[200])
        report = await store.sweep(NOTHING_TO_REMOVE, encode_marker=compaction_marker_body)
        assert "threads" in report.analyzed
        assert "analyzed threads" in str(report)
        analyzed = await lookup_buffers(store, ids[200])
        assert analyzed <= 4 < unanalyzed  # the primary key, not the scope's 400 threads
        # Nothing changed since: nothing to analyze again.
        again = await store.sweep(NOTHING_TO_REMOVE, encode_marker=compaction_marker_body)
        assert "threads" not in again.analyzed


async def test_sqlite_has_nothing_for_a_sweep_to_analyze(tmp_path: Path) -> None:
    async with open_store("sqlite", tmp_path) as store:
        await make_thread(store)
        assert await store.analyze_unattended() == []
        report = await store.sweep(NOTHING_TO_REMOVE, encode_marker=compaction_marker_body)
        assert report.analyzed == []
