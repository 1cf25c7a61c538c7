"""Alembic migrations, run through the provider's transaction runner.

``pai-grpc migrate`` applies them; ``serve`` refuses to start unless the
database is exactly at this code's head (an older database needs
``migrate``; a newer one needs newer code).

Alembic is imported only to migrate: the check that every ``serve`` and
``runner`` makes at startup reads the scripts' revision lines and the
``alembic_version`` table itself, because importing Alembic cost a serving
process ≈11 MiB of memory it never used again.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, inspect, text

from storage.errors import SchemaMismatch

if TYPE_CHECKING:
    from alembic.config import Config

    from storage._provider import Store

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
#: Alembic's own table of the applied revision.
VERSION_TABLE = "alembic_version"

_REVISION = re.compile(
    r"""^(down_revision|revision)\s*(?::[^=]*)?=\s*(['"])?([^'"\s]*)\2?\s*$""", re.M
)


def alembic_config(connection: Any = None) -> Config:
    """An Alembic config pointing at our scripts (and an open connection, when given)."""
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.attributes["connection"] = connection
    return cfg


@cache
def _revisions() -> dict[str, str | None]:
    """Every script's revision -> the revision it follows (read from the scripts' source)."""
    found: dict[str, str | None] = {}
    for script in sorted((MIGRATIONS_DIR / "versions").glob("*.py")):
        lines = {m.group(1): m.group(3) for m in _REVISION.finditer(script.read_text())}
        if "revision" not in lines:
            raise SchemaMismatch(f"migration script {script.name} names no revision")
        down = lines.get("down_revision")
        found[lines["revision"]] = None if down in (None, "None") else down
    return found


def head_revision() -> str:
    """The single head revision of the migration scripts."""
    revisions = _revisions()
    followed = set(revisions.values())
    heads = sorted(r for r in revisions if r not in followed)
    if len(heads) != 1:
        raise SchemaMismatch(f"migrations must have exactly one head, found {heads}")
    return heads[0]


def _applied(conn: Connection) -> str | None:
    if not inspect(conn).has_table(VERSION_TABLE):
        return None
    versions = [row[0] for row in conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}"))]
    if len(versions) > 1:
        raise SchemaMismatch(f"the database is at several revisions {versions}: run migrations")
    return versions[0] if versions else None


async def current_revision(store: Store) -> str | None:
    """The revision the database is at (``None`` when unmigrated)."""
    return await store.engines.read(_applied)


async def upgrade(store: Store, revision: str = "head") -> None:
    """Upgrade the database to ``revision``."""
    from alembic import command

    await store.engines.migrate(lambda c: command.upgrade(alembic_config(c), revision))


async def downgrade(store: Store, revision: str) -> None:
    """Downgrade the database to ``revision`` (``base`` drops everything)."""
    from alembic import command

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
    if current not in _revisions():
        raise SchemaMismatch(
            f"the database is at revision {current}, which is newer than this code "
            f"(head {head}): upgrade pai-grpc"
        )
    raise SchemaMismatch(
        f"the database is at revision {current}, behind head {head}: run `pai-grpc migrate`"
    )
