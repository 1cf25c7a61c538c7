"""Engines for the two providers.

SQLite (the embedded default) runs in WAL mode with a busy timeout; writes
take the database lock up front with ``BEGIN IMMEDIATE`` (so a write
transaction never fails half way on a lock upgrade) through a single-connection
write engine, which also serialises writers inside one process instead of
letting them spin on ``SQLITE_BUSY``. Reads use a separate pool and see a
consistent WAL snapshot. PostgreSQL uses one asyncpg pool.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

DEFAULT_DATABASE_URL = "sqlite+aiosqlite:///./pai.db"
SQLITE_BUSY_TIMEOUT_MS = 10_000


def normalize_url(raw: str) -> URL:
    """Accept ``sqlite:///``/``postgresql://`` spellings and pick the async drivers."""
    url = make_url(raw)
    backend = url.get_backend_name()
    if backend == "sqlite":
        return url.set(drivername="sqlite+aiosqlite")
    if backend in ("postgresql", "postgres"):
        return url.set(drivername="postgresql+asyncpg")
    raise ValueError(f"unsupported database URL {raw!r}: use sqlite:/// or postgresql://")


@dataclass(frozen=True)
class Engines:
    """The read and write engines of one provider (the same object on PostgreSQL)."""

    read: AsyncEngine
    write: AsyncEngine
    dialect: str
    schema: str | None = None

    async def dispose(self) -> None:
        """Close every pooled connection."""
        await self.write.dispose()
        if self.read is not self.write:
            await self.read.dispose()


def _sqlite_engine(url: URL, *, immediate: bool, pool_size: int) -> AsyncEngine:
    engine = create_async_engine(
        url,
        pool_size=pool_size,
        max_overflow=0,
        pool_timeout=60,
        connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000},
    )

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Take transaction control away from the driver so BEGIN is ours.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


def create_engines(raw_url: str, *, pool_size: int = 10, schema: str | None = None) -> Engines:
    """Create the engines for ``raw_url``.

    Args:
        raw_url: ``sqlite:///path`` or ``postgresql://...``.
        pool_size: Connections per pool.
        schema: PostgreSQL only: the schema to use (``search_path``), e.g. to
            isolate tests or tenants in one database.
    """
    url = normalize_url(raw_url)
    if url.get_backend_name() == "sqlite":
        if url.database in (None, "", ":memory:"):
            raise ValueError("SQLite needs a database file; in-memory databases cannot be shared")
        write = _sqlite_engine(url, immediate=True, pool_size=1)
        read = _sqlite_engine(url, immediate=False, pool_size=max(2, pool_size // 2))
        return Engines(read=read, write=write, dialect="sqlite")
    if schema is not None and not schema.isidentifier():
        raise ValueError(f"invalid schema name {schema!r}")
    connect_args: dict[str, Any] = {}
    if schema is not None:
        connect_args["server_settings"] = {"search_path": schema}
    engine = create_async_engine(
        url,
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_pre_ping=True,
        connect_args=connect_args,
    )
    return Engines(read=engine, write=engine, dialect="postgresql", schema=schema)
