"""How the embedded store sets up each SQLite connection."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Connection

from pai_grpc.testing import migrated_store
from storage._engine import SQLITE_CACHE_KIB


def _pragmas(conn: Connection) -> dict[str, object]:
    raw = conn.connection.driver_connection
    assert raw is not None
    return {
        name: raw.execute(f"PRAGMA {name}").fetchone()[0]
        for name in ("cache_size", "journal_mode", "foreign_keys", "synchronous")
    }


async def test_every_connection_has_a_bounded_page_cache(tmp_path: Path) -> None:
    """Reads and writes inline, reads on the reader threads, writes on the writer: each cache is capped.

    A serving process holds about ten connections; at SQLite's default cache
    their growth kept the process's memory from flattening under load.
    """
    store = await migrated_store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    try:
        seen = [
            await store.engines.read(_pragmas),
            await store.engines.read(_pragmas, heavy=True),
            await store.engines.write(_pragmas),
            await store.engines.write(_pragmas, heavy=True),
        ]
    finally:
        await store.close()
    for pragmas in seen:
        assert pragmas == {
            "cache_size": -SQLITE_CACHE_KIB,
            "journal_mode": "wal",
            "foreign_keys": 1,
            "synchronous": 1,  # NORMAL
        }
