"""Migrations: one head, upgrade from empty, downgrade/upgrade with data, schema == metadata."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import text

from storage import (
    SchemaMismatch,
    check_schema,
    current_revision,
    downgrade,
    head_revision,
    upgrade,
)
from storage._migrate import alembic_config
from storage._schema import metadata
from tests.conftest import open_store
from tests.storage.helpers import SCOPE, make_thread, start_run


def test_there_is_a_single_head() -> None:
    heads = ScriptDirectory.from_config(alembic_config()).get_heads()
    assert heads == [head_revision()]


async def test_upgrade_from_empty_matches_the_schema_module(backend: str, tmp_path: Path) -> None:
    async with open_store(backend, tmp_path, migrate=False) as store:
        assert await current_revision(store) is None
        with pytest.raises(SchemaMismatch, match="not migrated"):
            await check_schema(store)
        await upgrade(store)
        assert await current_revision(store) == head_revision()
        await check_schema(store)
        diff = await store.engines.read(
            lambda c: compare_metadata(
                MigrationContext.configure(c, opts={"compare_type": True}), metadata
            )
        )
        assert diff == [], f"migrations and storage/_schema.py disagree: {diff}"


async def test_downgrade_and_upgrade_again_keep_the_data(backend: str, tmp_path: Path) -> None:
    async with open_store(backend, tmp_path) as store:
        thread_id = await make_thread(store, note="kept")
        run_id = await start_run(store, thread_id)
        revisions = [
            s.revision for s in ScriptDirectory.from_config(alembic_config()).walk_revisions()
        ]
        assert len(revisions) >= 2
        previous = revisions[1]
        await downgrade(store, previous)
        assert await current_revision(store) == previous
        with pytest.raises(SchemaMismatch, match="behind head"):
            await check_schema(store)
        await upgrade(store)
        await check_schema(store)
        thread = await store.get_thread(SCOPE, thread_id)
        assert thread is not None
        assert thread.metadata == {"note": "kept"}
        assert (await store.get_run(SCOPE, run_id)) is not None
        claimed = await store.claim_run("r", lease_seconds=5)
        assert claimed is not None
        assert claimed.run.id == run_id


async def test_a_database_newer_than_the_code_is_refused(backend: str, tmp_path: Path) -> None:
    async with open_store(backend, tmp_path) as store:
        await store.run_in_transaction(
            lambda c: c.execute(text("UPDATE alembic_version SET version_num = '9999'"))
        )
        with pytest.raises(SchemaMismatch, match="newer than this code"):
            await check_schema(store)
