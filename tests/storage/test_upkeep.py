"""What stops PostgreSQL's own upkeep (vacuum, analyze) is named, and a starting server says so."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from sqlalchemy import text

from pai_grpc.config import Settings
from pai_grpc.models import OfflineModel
from pai_grpc.runtime import DEFAULT_AGENT, Agent, AgentRegistry
from pai_grpc.server import App
from storage import Store
from tests.conftest import open_store

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
