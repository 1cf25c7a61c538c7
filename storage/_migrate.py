"""Alembic migrations, run through the provider's transaction runner.

``pai-grpc migrate`` applies them; ``serve`` refuses to start unless the
database is exactly at this code's head (an older database needs
``migrate``; a newer one needs newer code).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from storage.errors import SchemaMismatch

if TYPE_CHECKING:
    from storage._provider import Store

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"


def alembic_config(connection: Any = None) -> Config:
    """An Alembic config pointing at our scripts (and an open connection, when given)."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.attributes["connection"] = connection
    return cfg


def head_revision() -> str:
    """The single head revision of the migration scripts."""
    heads = ScriptDirectory.from_config(alembic_config()).get_heads()
    if len(heads) != 1:
        raise SchemaMismatch(f"migrations must have exactly one head, found {heads}")
    return heads[0]


async def current_revision(store: Store) -> str | None:
    """The revision the database is at (``None`` when unmigrated)."""
    return await store.engines.read(lambda c: MigrationContext.configure(c).get_current_revision())


async def upgrade(store: Store, revision: str = "head") -> None:
    """Upgrade the database to ``revision``."""
    await store.engines.migrate(lambda c: command.upgrade(alembic_config(c), revision))


async def downgrade(store: Store, revision: str) -> None:
    """Downgrade the database to ``revision`` (``base`` drops everything)."""
    await store.engines.migrate(lambda c: command.downgrade(alembic_config(c), revision))


async def check_schema(store: Store) -> None:
    """Raise :class:`SchemaMismatch` unless the database is at the head revision."""
    head = head_revision()
    current = await current_revision(store)
    if current == head:
        return
    if current is None:
        raise SchemaMismatch(
            "the database is not migrated: run `pai-grpc migrate` (same --database-url) first"
        )
    known = {s.revision for s in ScriptDirectory.from_config(alembic_config()).walk_revisions()}
    if current not in known:
        raise SchemaMismatch(
            f"the database is at revision {current}, which is newer than this code "
            f"(head {head}): upgrade pai-grpc"
        )
    raise SchemaMismatch(
        f"the database is at revision {current}, behind head {head}: run `pai-grpc migrate`"
    )
