"""Engines and transaction runners for the two providers.

SQLite (the embedded default): WAL mode, a busy timeout, and ``BEGIN
IMMEDIATE`` for writes so a write transaction never fails half way on a lock
upgrade. Every transaction runs as one synchronous unit. Small ones (a
commit, a claim, a lookup) run inline on the event loop's thread: in WAL mode
without a checkpoint a commit never waits on the disk, and a thread hop per
transaction cost more than the transaction (on the runs benchmark, inline
commits took CPU per run from ≈6.2 to ≈4.6 ms). The loop never waits on a
lock either: its write connection has no busy timeout, and a write that
finds the database locked (another process, or a heavy write in progress)
moves to the writer thread, which waits. Heavy work (sweeps, deletions,
migrations, big reads) and WAL checkpoints run on threads; while the writer
thread has work, small writes wait for it to finish and then run inline
(a write never tries a lock this process's writer thread holds: on the runs
benchmark a third of all commits used to fail that way, each costing a fresh
connection and a thread hop). One unit per
transaction instead of one hop per statement is what makes the embedded
store fast (a per-statement async driver paid ~0.3 ms per statement here).

PostgreSQL (production): one asyncpg pool; the same synchronous SQL runs
in one greenlet per transaction (SQLAlchemy's ``greenlet_spawn``, over the
asyncpg engine's synchronous API). A database that cannot be reached
raises :class:`~storage.errors.Unavailable` (retryable), or is waited out
inside :func:`~storage.patient` blocks; listeners of
:meth:`Engines.on_availability` learn when it goes away and comes back.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.pool import NullPool
from sqlalchemy.util import greenlet_spawn

from storage._direct import direct_execute
from storage._json import load_stored_json
from storage._retry import is_outage, is_patient, outage_delay
from storage.errors import Unavailable

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

log = logging.getLogger("storage.engine")

DEFAULT_DATABASE_URL = "sqlite:///./pai.db"
SQLITE_BUSY_TIMEOUT_MS = 10_000
#: Page cache per SQLite connection, in KiB (SQLite's default is 2,000). A
#: serving process holds a writer, up to 8 readers and the event loop's own
#: connection: at the default their caches grew RSS by ≈20 MiB over 10,000
#: runs of the memory bench and kept it from flattening (162 MiB at the end;
#: 144 MiB and flat from 6,000 runs on with 512). The operating system's file
#: cache still holds the database's hot pages.
SQLITE_CACHE_KIB = 512
#: Inline commits between two WAL checkpoints (the loop's write connection
#: never checkpoints itself: a checkpoint writes the database file and syncs it).
SQLITE_CHECKPOINT_EVERY = 256
#: How long a checkpoint waits for other connections' readers and writers (ms).
SQLITE_CHECKPOINT_WAIT_MS = 100

T = TypeVar("T")


def normalize_url(raw: str) -> URL:
    """Accept ``sqlite:///`` and ``postgresql://`` spellings; pick our drivers."""
    url = make_url(raw)
    backend = url.get_backend_name()
    if backend == "sqlite":
        return url.set(drivername="sqlite+pysqlite")
    if backend in ("postgresql", "postgres"):
        return url.set(drivername="postgresql+asyncpg")
    raise ValueError(f"unsupported database URL {raw!r}: use sqlite:/// or postgresql://")


def _sqlite_engine(url: URL, *, immediate: bool, pool_size: int, inline: bool = False) -> Engine:
    """An engine whose connections are set up for the store.

    ``inline``: the event loop's write connection. It never waits for a lock
    (no busy timeout: a locked database fails its ``BEGIN IMMEDIATE`` at once,
    and the write moves to the writer thread) and never checkpoints the WAL
    on commit (the writer thread does, see :data:`SQLITE_CHECKPOINT_EVERY`).
    Each thread keeps its own connection for good, so it is not pooled.
    """
    busy_ms = 0 if inline else SQLITE_BUSY_TIMEOUT_MS
    pooling: dict[str, Any] = (
        {"poolclass": NullPool}
        if inline
        else {"pool_size": pool_size, "max_overflow": 0, "pool_timeout": 60}
    )
    engine = create_engine(
        url,
        **pooling,
        # Transactions always end explicitly; skip the extra ROLLBACK on check-in.
        pool_reset_on_return=None,
        connect_args={"timeout": busy_ms / 1000, "check_same_thread": False},
        # Reads never fail on a stored number (see load_stored_json).
        json_deserializer=load_stored_json,
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Take transaction control away from the driver so BEGIN is ours.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={busy_ms}")
        if inline:
            cursor.execute("PRAGMA wal_autocheckpoint=0")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute(f"PRAGMA cache_size=-{SQLITE_CACHE_KIB}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        # On the driver (see storage._direct): Core's execution of a fixed statement
        # cost more than SQLite's work. A locked database still raises Core's
        # OperationalError, which moves the write to the writer thread.
        direct_execute(conn, "BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


class _Transaction(Generic[T]):
    """One PostgreSQL transaction as a synchronous unit, run in one greenlet.

    The pool is the asyncpg engine's: inside :func:`greenlet_spawn` its
    synchronous API awaits the driver. ``committing`` tells an error raised
    by COMMIT (the transaction may have committed) from one raised before.
    Reads run on the autocommit engine, without BEGIN and COMMIT.
    """

    __slots__ = ("committing", "engine", "fn", "write")

    def __init__(self, engine: Engine, fn: Callable[[Connection], T], write: bool) -> None:
        self.engine = engine
        self.fn = fn
        self.write = write
        self.committing = False

    def run(self) -> T:
        """The transaction (called inside the greenlet)."""
        with self.engine.connect() as conn:
            if not self.write:
                return self.fn(conn)
            with conn.begin():
                result = self.fn(conn)
                self.committing = True
            return result


class Engines:
    """How one provider reaches its database: transactions as units of work."""

    def __init__(
        self,
        *,
        dialect: str,
        url: URL,
        schema: str | None = None,
        async_engine: AsyncEngine | None = None,
        sync_write: Engine | None = None,
        sync_read: Engine | None = None,
        sync_inline: Engine | None = None,
        readers: int = 4,
    ) -> None:
        self.dialect = dialect
        self.url = url
        self.schema = schema
        self._async = async_engine
        # PostgreSQL reads run at READ COMMITTED, where every statement takes its own
        # snapshot anyway: BEGIN and COMMIT around them would only add two round trips.
        self._async_read = (
            async_engine.execution_options(isolation_level="AUTOCOMMIT") if async_engine else None
        )
        self._sync_write = sync_write
        self._sync_read = sync_read
        self._sync_inline = sync_inline
        #: Inline commits between two WAL checkpoints on the writer thread.
        self.checkpoint_every = SQLITE_CHECKPOINT_EVERY
        self._since_checkpoint = 0
        #: Writes and checkpoints handed to the writer thread and not yet finished.
        #: Small writes wait for them, then run inline: tried meanwhile they would
        #: find the thread holding the lock and fail; queued behind them on the
        #: thread, a busy server's writes would never find it idle again.
        self._on_writer: set[asyncio.Future[Any]] = set()
        self._writer = (
            ThreadPoolExecutor(1, thread_name_prefix="sqlite-writer") if sync_write else None
        )
        self._local = threading.local()
        self._all: list[Connection] = []
        self._all_lock = threading.Lock()
        self._readers = (
            ThreadPoolExecutor(readers, thread_name_prefix="sqlite-reader") if sync_read else None
        )
        #: Whether the last attempt to reach the database succeeded.
        self.available = True
        #: Read and write transactions started so far (a plain count: the
        #: benchmarks report it per run, a figure that does not drift).
        self.transactions = 0
        #: Inline writes a lock refused (they moved to the writer thread). Only
        #: another process's lock refuses one: writes wait for this process's
        #: writer thread instead of trying the lock it holds.
        self.refused = 0
        self._availability: list[Callable[[bool], None]] = []

    @property
    def async_engine(self) -> AsyncEngine | None:
        """The asyncpg engine (PostgreSQL), for work that holds a session; else None."""
        return self._async

    def on_availability(self, callback: Callable[[bool], None]) -> None:
        """Call ``callback(available)`` whenever the database goes away or comes back."""
        self._availability.append(callback)

    def _set_available(self, available: bool) -> None:
        if available == self.available:
            return
        self.available = available
        if available:
            log.info("the database is reachable again")
        for callback in self._availability:
            try:
                callback(available)
            except Exception:
                log.exception("availability callback failed")

    async def _postgres(self, fn: Callable[[Connection], T], *, write: bool) -> T:
        """One transaction on the pool, translating (or waiting out) an outage."""
        assert self._async is not None
        assert self._async_read is not None
        attempt = 0
        stale_checked = False
        engine = (self._async if write else self._async_read).sync_engine
        while True:
            tx = _Transaction(engine, fn, write)
            try:
                # One greenlet for checkout, BEGIN, the work, COMMIT and checkin:
                # AsyncConnection spawns one for each (five per transaction, about
                # a sixth of a small transaction's CPU).
                result = await greenlet_spawn(tx.run)
            except Exception as e:
                committing = tx.committing
                if not is_outage(e):
                    raise
                if not committing and not stale_checked:
                    # Pooled connections are not pinged on checkout (a ping costs
                    # three round trips per transaction): one the server dropped
                    # (a restart, an idle timeout) is found dead on first use
                    # instead. Nothing was committed, so drop every pooled
                    # connection and try once more at once on a fresh one; only
                    # if that fails too is the database unreachable.
                    stale_checked = True
                    await self._async.dispose()
                    continue
                if self.available:
                    log.warning("the database is unreachable: %s", _describe(e))
                self._set_available(False)
                # Nothing was written unless the connection died during COMMIT:
                # only then is repeating the transaction unsafe.
                if committing or not is_patient():
                    raise Unavailable(_describe(e), ambiguous=committing) from e
                await asyncio.sleep(outage_delay(attempt))
                attempt += 1
                continue
            self._set_available(True)
            return result

    async def write(self, fn: Callable[[Connection], T], *, heavy: bool = False) -> T:
        """Run ``fn`` in one write transaction (committed unless it raises).

        On SQLite a small write runs inline on the calling thread (see the
        module's docstring); ``heavy`` writes (batches of deletions, operators'
        maintenance SQL) go to the writer thread so they never stall the event
        loop. ``fn`` may run twice: a transaction that found the database
        locked is rolled back and repeated on the writer thread.
        """
        self.transactions += 1
        if self._async is not None:
            return await self._postgres(fn, write=True)
        assert self._writer is not None
        loop = asyncio.get_running_loop()
        if not heavy and self._sync_inline is not None:
            # While the writer thread has work, wait for it: a checkpoint that
            # writers keep overtaking never lets the WAL restart, and a write
            # tried inline meanwhile would only find the lock taken.
            while self._on_writer:
                await asyncio.wait(list(self._on_writer))
            try:
                result = self._in_thread(self._sync_inline, fn)
            except OperationalError as e:
                if not _locked(e):
                    raise
                self.refused += 1
                # Another process holds the lock: wait for it off the loop. The
                # refused BEGIN can leave SQLAlchemy's connection half begun:
                # the next inline write starts on a fresh one.
                self._discard(self._sync_inline)
            else:
                self._after_inline_commit(loop)
                # A commit stays a point where other tasks run (and a cancellation
                # lands), as it was when every commit hopped to a thread: an
                # execution committing step after step must not starve the loop.
                await asyncio.sleep(0)
                return result
        return await self._to_writer(loop, self._in_thread, self._sync_write, fn)

    def _to_writer(
        self, loop: asyncio.AbstractEventLoop, fn: Callable[..., T], *args: Any
    ) -> asyncio.Future[T]:
        """Run ``fn(*args)`` on the writer thread; small writes wait until it has finished."""
        future = loop.run_in_executor(self._writer, fn, *args)
        self._on_writer.add(future)
        future.add_done_callback(self._on_writer.discard)
        return future

    def _after_inline_commit(self, loop: asyncio.AbstractEventLoop) -> None:
        """Checkpoint the WAL on the writer thread every :attr:`checkpoint_every` commits."""
        self._since_checkpoint += 1
        if self._since_checkpoint < self.checkpoint_every:
            return
        self._since_checkpoint = 0
        self._to_writer(loop, self._checkpoint).add_done_callback(self._checkpointed)

    def _checkpoint(self) -> None:
        assert self._sync_write is not None
        # Outside a transaction, on the raw connection (a checkpoint cannot run
        # inside one). RESTART: copy every frame, then wait until no reader
        # still uses the WAL, so the next write starts it over from its
        # beginning (the file is reused, not grown). It holds the write lock
        # meanwhile: the loop's writes queue behind it on this thread.
        raw = self._connection(self._sync_write).connection.dbapi_connection
        assert raw is not None
        # It waits for readers and writers of other processes too: briefly, since
        # this process's writes wait behind it. A checkpoint cut short leaves the
        # WAL to grow until the next one.
        raw.execute(f"PRAGMA busy_timeout={SQLITE_CHECKPOINT_WAIT_MS}")
        try:
            raw.execute("PRAGMA wal_checkpoint(RESTART)").fetchall()
        finally:
            raw.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")

    def _checkpointed(self, future: asyncio.Future[None]) -> None:
        if not future.cancelled() and future.exception() is not None:
            log.warning("WAL checkpoint failed: %s", _describe(future.exception()))  # type: ignore[arg-type]

    async def migrate(self, fn: Callable[[Connection], T]) -> T:
        """Run schema changes in one transaction.

        On SQLite, foreign keys are switched off around it (they cannot change
        inside a transaction): Alembic's batch mode rebuilds a table by copying
        it, and dropping the old copy must not cascade into child rows. The
        foreign keys are checked before committing.
        """
        if self._async is not None:
            return await greenlet_spawn(_Transaction(self._async.sync_engine, fn, True).run)
        assert self._writer is not None
        engine = self._sync_write
        assert engine is not None

        def work() -> T:
            # The writer thread's own connection (the write pool holds only that one).
            conn = self._connection(engine)
            # On the raw DBAPI connection: SQLAlchemy would autobegin a transaction.
            raw = conn.connection.dbapi_connection
            assert raw is not None
            raw.execute("PRAGMA foreign_keys=OFF")
            try:
                with conn.begin():
                    result = fn(conn)
                    broken = conn.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
                    if broken:
                        raise RuntimeError(f"migration broke foreign keys: {broken[:5]}")
                return result
            finally:
                raw.execute("PRAGMA foreign_keys=ON")

        return await self._to_writer(asyncio.get_running_loop(), work)

    async def read(self, fn: Callable[[Connection], T], *, heavy: bool = False) -> T:
        """Run ``fn`` in one read transaction (a consistent snapshot on SQLite).

        On PostgreSQL a read runs in autocommit mode: at READ COMMITTED every
        statement takes its own snapshot inside a transaction too, so reads
        that span statements bound what they read by what the first one saw
        (as :meth:`~storage._sql.Sql.context` bounds messages by the head).

        On SQLite a small read runs inline: in WAL mode readers never wait for
        locks, and an indexed lookup (~60 µs) costs less than a thread hop
        (~110 µs of CPU here). ``heavy`` reads (whole contexts, big pages) go
        to the reader threads so they never stall the event loop.
        """
        self.transactions += 1
        if self._async is not None:
            return await self._postgres(fn, write=False)
        if not heavy:
            return self._in_thread(self._sync_read, fn)
        assert self._readers is not None
        return await asyncio.get_running_loop().run_in_executor(
            self._readers, self._in_thread, self._sync_read, fn
        )

    def _connection(self, engine: Engine) -> Connection:
        """The calling thread's own, long-lived connection to ``engine``."""
        conns: dict[int, Connection] = self._local.__dict__.setdefault("conns", {})
        conn = conns.get(id(engine))
        if conn is None or conn.closed or conn.invalidated:
            conn = conns[id(engine)] = engine.connect()
            with self._all_lock:
                self._all.append(conn)
        return conn

    def _discard(self, engine: Engine) -> None:
        """Close the calling thread's connection to ``engine`` (the next use opens one)."""
        conn = self._local.__dict__.get("conns", {}).pop(id(engine), None)
        if conn is None:
            return
        with self._all_lock:
            if conn in self._all:
                self._all.remove(conn)
        try:
            conn.invalidate()
        except Exception:
            log.debug("closing a refused SQLite connection failed", exc_info=True)

    def _in_thread(self, engine: Engine | None, fn: Callable[[Connection], T]) -> T:
        """One transaction on the calling thread's own, long-lived connection."""
        assert engine is not None
        conn = self._connection(engine)
        try:
            with conn.begin():
                return fn(conn)
        except DBAPIError as e:
            if e.connection_invalidated:
                self._local.__dict__.get("conns", {}).pop(id(engine), None)
            raise

    async def dispose(self) -> None:
        """Close every connection and stop the worker threads."""
        if self._async is not None:
            await self._async.dispose()
        for pool in (self._writer, self._readers):
            if pool is not None:
                pool.shutdown(wait=True)
        # Threads keep their connections checked out; close them all here.
        with self._all_lock:
            conns, self._all = self._all, []
        for conn in conns:
            if not conn.closed:
                conn.close()
        for engine in (self._sync_write, self._sync_read, self._sync_inline):
            if engine is not None:
                engine.dispose()

    def render_url(self) -> str:
        """The URL without its password."""
        return self.url.render_as_string(hide_password=True)


def _locked(e: OperationalError) -> bool:
    """Whether SQLite refused ``e``'s statement because another connection holds a lock."""
    message = str(e.orig).lower()
    return "database is locked" in message or "database is busy" in message


def _describe(e: BaseException) -> str:
    cause = getattr(e, "orig", None) or e
    return f"{type(cause).__name__}: {cause}".splitlines()[0][:200]


def create_engines(raw_url: str, *, pool_size: int = 20, schema: str | None = None) -> Engines:
    """Create the engines for ``raw_url``.

    Args:
        raw_url: ``sqlite:///path`` or ``postgresql://...``.
        pool_size: PostgreSQL: the most connections the pool opens, each kept
            once opened. SQLite: reader threads (at most 8).
        schema: PostgreSQL only: the schema to use (``search_path``), e.g. to
            isolate tests or tenants in one database. ``?schema=NAME`` in the
            URL does the same.
    """
    url = normalize_url(raw_url)
    if "schema" in url.query:
        # `?schema=NAME` selects a PostgreSQL schema (e.g. a tenant or a test's private one).
        schema = schema or str(url.query["schema"])
        url = url.difference_update_query(["schema"])
    if url.get_backend_name() == "sqlite":
        if url.database in (None, "", ":memory:"):
            raise ValueError("SQLite needs a database file; in-memory databases cannot be shared")
        readers = max(2, min(pool_size, 8))
        return Engines(
            dialect="sqlite",
            url=url,
            sync_write=_sqlite_engine(url, immediate=True, pool_size=1),
            sync_inline=_sqlite_engine(url, immediate=True, pool_size=1, inline=True),
            # One connection per reader thread, plus the event loop thread's own.
            sync_read=_sqlite_engine(url, immediate=False, pool_size=readers + 2),
            readers=readers,
        )
    if schema is not None and not schema.isidentifier():
        raise ValueError(f"invalid schema name {schema!r}")
    connect_args: dict[str, Any] = {}
    if schema is not None:
        connect_args["server_settings"] = {"search_path": schema}
    # Imported for PostgreSQL only: SQLAlchemy's asyncio extension loads its ORM
    # session machinery too (≈6 MiB an SQLite process never uses).
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(
        url,
        # Every connection is kept: an overflow connection, closed on its return,
        # was reopened by the next burst, and each opening costs a TLS probe, the
        # driver's type introspection and a new prepare of every statement (one
        # every ~20 runs at 16 clients). A transaction beyond the pool waits.
        pool_size=pool_size,
        max_overflow=0,
        # No pre-ping: _postgres retries once on a fresh connection instead.
        pool_pre_ping=False,
        connect_args=connect_args,
        # jsonb prints integral doubles without a fraction: read them back as doubles.
        json_deserializer=load_stored_json,
    )
    return Engines(dialect="postgresql", url=url, schema=schema, async_engine=engine)
