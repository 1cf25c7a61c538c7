"""SQLite writes: small ones inline on the event loop, which never waits for a lock or the disk."""

from __future__ import annotations

import asyncio
import sqlite3
import sys
import threading
import time
from asyncio.subprocess import PIPE
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import Connection

from pai_grpc.testing import migrated_store
from storage import Store
from storage._engine import SQLITE_BUSY_TIMEOUT_MS
from tests.storage.helpers import make_thread, start_run

#: Another process that takes SQLite's write lock and holds it until told to let go.
_HOLDER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.readline()
conn.execute("COMMIT")
"""

#: Another process that reads in one transaction and keeps it open until told to end it.
_READER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN")
conn.execute("SELECT count(*) FROM threads").fetchall()
print("reading", flush=True)
sys.stdin.readline()
conn.execute("COMMIT")
"""


class _OtherProcess:
    """A process running ``script`` on the database: ready once it printed a line,
    done once :meth:`release` told it to finish."""

    def __init__(self, script: str, path: Path) -> None:
        self._script = script
        self._path = path
        self._proc: asyncio.subprocess.Process | None = None

    async def __aenter__(self) -> _OtherProcess:
        self._proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", self._script, str(self._path), stdin=PIPE, stdout=PIPE
        )
        assert self._proc.stdout is not None
        assert (await self._proc.stdout.readline()).strip() in (b"locked", b"reading")
        return self

    async def release(self) -> None:
        """Let it end its transaction and exit (successfully)."""
        assert self._proc is not None
        assert self._proc.stdin is not None
        self._proc.stdin.write(b"go\n")
        await self._proc.stdin.drain()
        assert await asyncio.wait_for(self._proc.wait(), 10) == 0

    async def __aexit__(self, *exc: object) -> None:
        if self._proc is not None and self._proc.returncode is None:
            self._proc.kill()
            await self._proc.wait()


def _thread_id(_conn: Connection) -> int:
    return threading.get_ident()


async def test_a_small_write_runs_on_the_loop_and_a_heavy_one_on_the_writer_thread(
    tmp_path: Path,
) -> None:
    """A commit costs no thread hop; sweeps and maintenance SQL never stall the loop."""
    store = await migrated_store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    try:
        assert await store.engines.write(_thread_id) == threading.get_ident()
        assert await store.engines.write(_thread_id, heavy=True) != threading.get_ident()
        assert await store.run_in_transaction(_thread_id) != threading.get_ident()
    finally:
        await store.close()


async def test_a_write_that_finds_the_database_locked_waits_off_the_loop(tmp_path: Path) -> None:
    """Another process holds the write lock: the commit waits for it, the loop keeps serving.

    The loop's write connection has no busy timeout, so the refused write
    moves to the writer thread (which waits); an inline wait would freeze
    every call the process serves until the lock is released.
    """
    path = tmp_path / "db.sqlite"
    store = await migrated_store(f"sqlite:///{path}")
    try:
        async with _OtherProcess(_HOLDER, path) as holder:
            commit = asyncio.create_task(make_thread(store))
            # An inline wait would hold the loop for the whole busy timeout (ten
            # seconds): here the loop runs on and the commit waits its turn.
            loop = asyncio.get_running_loop()
            started = loop.time()
            await asyncio.sleep(0.2)
            assert loop.time() - started < SQLITE_BUSY_TIMEOUT_MS / 2000
            assert not commit.done()
            await holder.release()
            thread_id = await asyncio.wait_for(commit, 10)
        # The write was refused inline once, then landed; the next ones run inline
        # again, on a fresh connection.
        assert store.engines.refused == 1
        run_id = await start_run(store, thread_id)
        assert (await store.get_run("tenant-a", run_id)) is not None
        assert await store.engines.write(_thread_id) == threading.get_ident()
    finally:
        await store.close()


def _held(seconds: float) -> Callable[[Connection], None]:
    """A write that holds the write lock for ``seconds`` (on whichever thread runs it)."""

    def fn(conn: Connection) -> None:
        conn.exec_driver_sql("CREATE TABLE IF NOT EXISTS held (n INTEGER)")
        time.sleep(seconds)

    return fn


async def test_this_process_writer_thread_never_refuses_an_inline_write(tmp_path: Path) -> None:
    """While the writer thread has work (a heavy write, a checkpoint, writes queued behind
    them), small writes queue behind it instead of trying the lock inline.

    Trying would fail at once (the writer thread holds the lock), cost a fresh
    connection and a second attempt on the thread, and on a busy server the
    retries kept the writer thread busy, so a third of all commits went that
    way after every checkpoint.
    """
    store = await migrated_store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    try:
        store.engines.checkpoint_every = 4
        heavy = asyncio.create_task(store.engines.write(_held(0.2), heavy=True))
        await asyncio.sleep(0.05)  # the writer thread holds the lock now
        threads = await asyncio.gather(*(make_thread(store) for _ in range(40)))
        await heavy
        assert len(set(threads)) == 40
        assert store.engines.refused == 0
        # Once the writer thread is idle again, small writes run inline.
        assert await store.engines.write(_thread_id) == threading.get_ident()
    finally:
        await store.close()


async def _fill(store: Store, commits: int) -> None:
    """Commit ``commits`` small write sets inline, yielding to the loop between them."""
    await store.run_in_transaction(
        lambda c: c.exec_driver_sql("CREATE TABLE IF NOT EXISTS filler (body BLOB)")
    )
    for _ in range(commits):
        await store.engines.write(
            lambda c: c.exec_driver_sql("INSERT INTO filler VALUES (randomblob(8000))")
        )
        await asyncio.sleep(0)


def _wal(path: Path) -> tuple[int, int]:
    """Frames in the WAL now (a PASSIVE checkpoint from another connection reports
    them), and the WAL file's size in bytes."""
    conn = sqlite3.connect(path)
    try:
        _busy, frames, _copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    finally:
        conn.close()
    return int(frames), Path(f"{path}-wal").stat().st_size


async def _filled(tmp_path: Path, checkpoint_every: int) -> tuple[int, int, int]:
    """Frames in the WAL, its size and the rows, after 400 inline commits of 8 KB."""
    path = tmp_path / "db.sqlite"
    store = await migrated_store(f"sqlite:///{path}")
    try:
        store.engines.checkpoint_every = checkpoint_every
        await _fill(store, 400)
        frames, size = _wal(path)
        rows = await store.engines.read(
            lambda c: c.exec_driver_sql("SELECT count(*) FROM filler").scalar_one()
        )
    finally:
        await store.close()
    return frames, size, rows


async def test_inline_commits_checkpoint_the_wal_on_the_writer_thread(tmp_path: Path) -> None:
    """The writer thread checkpoints every few inline commits, so the WAL is reused, not grown.

    400 commits of 8 KB write over 1,000 WAL frames; with a checkpoint every
    eight commits the WAL restarts from its beginning again and again.
    """
    frames, size, rows = await _filled(tmp_path, checkpoint_every=8)
    assert frames < 200
    assert size < 1_000_000
    assert rows == 400


async def test_the_loop_connection_never_checkpoints_by_itself(tmp_path: Path) -> None:
    """Left alone, the loop's commits keep every frame in the WAL: they never write the
    database file or sync it (SQLite's own checkpoint would, every 1,000 frames)."""
    frames, _size, rows = await _filled(tmp_path, checkpoint_every=1_000_000)
    assert frames > 1_000
    assert rows == 400


async def test_a_reader_elsewhere_holds_up_a_checkpoint_only_briefly(tmp_path: Path) -> None:
    """A checkpoint waits for other processes' readers for a moment, not the busy timeout.

    The loop's writes queue behind a checkpoint: one that waited the whole
    busy timeout (ten seconds) for a long read elsewhere would stall them all.
    """
    path = tmp_path / "db.sqlite"
    store = await migrated_store(f"sqlite:///{path}")
    try:
        async with _OtherProcess(_READER, path) as reader:
            store.engines.checkpoint_every = 1
            loop = asyncio.get_running_loop()
            started = loop.time()
            threads = [await make_thread(store) for _ in range(5)]
            assert loop.time() - started < SQLITE_BUSY_TIMEOUT_MS / 2000
            assert len(set(threads)) == 5
            await reader.release()
    finally:
        await store.close()
