"""Migrations: one head, upgrade from empty, downgrade/upgrade with data, schema == metadata."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text

from pai_grpc.testing import migrated_store
from storage import (
    SchemaMismatch,
    check_schema,
    current_revision,
    downgrade,
    head_revision,
    upgrade,
)
from storage._migrate import _revisions, alembic_config
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


def test_the_startup_check_reads_the_same_revisions_as_alembic() -> None:
    """The schema check parses the scripts itself: it must agree with Alembic's own reading."""
    scripts = ScriptDirectory.from_config(alembic_config())
    assert head_revision() == scripts.get_heads()[0]
    assert _revisions() == {s.revision: s.down_revision for s in scripts.walk_revisions()}


async def test_the_startup_check_does_not_load_alembic(tmp_path: Path) -> None:
    """``serve`` and ``runner`` check the schema at every start; Alembic stays unloaded."""
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    await (await migrated_store(url)).close()
    code = (
        "import asyncio, sys\n"
        "from storage import Store, check_schema\n"
        "async def main():\n"
        f"    store = Store.open({url!r})\n"
        "    await check_schema(store)\n"
        "    await store.close()\n"
        "asyncio.run(main())\n"
        "assert not [m for m in sys.modules if m.split('.')[0] == 'alembic'], 'alembic loaded'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


async def test_the_active_runs_index_built_beforehand_is_kept_on_postgresql(
    tmp_path: Path,
) -> None:
    # Revision 0009's docstring tells operators of large databases to build the
    # index CONCURRENTLY (outside a transaction, writes going on) before migrating.
    async with open_store("postgresql", tmp_path, migrate=False) as store:
        await upgrade(store, "0008")
        thread_id = await make_thread(store)
        run_id = await start_run(store, thread_id)
        engine = store.engines.async_engine
        assert engine is not None
        async with engine.connect() as conn:
            conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
            await conn.execute(
                text(
                    "CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_runs_scope_active ON runs (scope)"
                    " WHERE status IN ('queued', 'running', 'waiting')"
                )
            )
        await upgrade(store)
        await check_schema(store)
        indexes = await store.engines.read(
            lambda c: {i["name"] for i in inspect(c).get_indexes("runs")}
        )
        assert "ix_runs_scope_active" in indexes
        assert "ix_runs_scope_status" not in indexes
        assert (await store.get_run(SCOPE, run_id)) is not None
