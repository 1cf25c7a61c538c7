"""The hot statements go straight to the driver, compiled once.

A single-step run costs two write transactions: on SQLite two ``BEGIN
IMMEDIATE``, three guarded updates and four inserts; on PostgreSQL about six
statements. Each went through SQLAlchemy's execution machinery: the
compiled-statement cache (a cache key walked per execution), parameter
processing, an execution context, a cursor result and its metadata. On
SQLite that was more CPU than SQLite's own work, on PostgreSQL about a
tenth of a run's. The statements are the same every time, so here each is
compiled once and executed on a DBAPI cursor of the transaction's
connection: values bound in order through the bind processors SQLAlchemy
compiled for them, rows returned as SQLAlchemy ``Row`` objects with its
result processors applied, so callers read them as they read Core's.

What does not change: transactions are still SQLAlchemy's (``conn.begin()``;
on PostgreSQL the asyncpg adapter's cursor starts it as for Core), a driver
error is raised as the same SQLAlchemy exception Core raises
(``DBAPIError.instance``: a locked SQLite database is still an
``OperationalError``, which moves a write to the writer thread; a unique
violation an ``IntegrityError``; a lost connection is invalidated and marked
so, which the outage handling reads, and so is one whose statement was cut
short by a cancellation), and the connection's
``before_cursor_execute`` / ``after_cursor_execute`` listeners still see
every statement (with no execution context, which SQLAlchemy allows).
Statements whose execution needs more than binding (expanding ``IN`` lists,
Python-side defaults, post-compile parameters) keep Core's path.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy.engine import Connection, Dialect, Row
from sqlalchemy.engine.result import SimpleResultMetaData
from sqlalchemy.exc import DBAPIError, MultipleResultsFound, NoResultFound
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.util import is_exit_exception

#: A parameter the caller must give (no value was bound when the statement was built).
_REQUIRED = object()
#: Result processors not looked up yet (they depend on the driver's column types).
_UNKNOWN: Any = object()


def direct_execute(
    conn: Connection,
    sql: str,
    params: Sequence[Any] = (),
    *,
    many: bool = False,
) -> Any:
    """Execute ``sql`` on a DBAPI cursor of ``conn``'s connection; return the cursor.

    ``params``: the driver's positional parameters (a sequence of them with
    ``many``). Errors are raised as Core raises them.
    """
    dbapi_conn = conn.connection.dbapi_connection
    assert dbapi_conn is not None
    cursor = dbapi_conn.cursor()
    dispatch = conn.dispatch
    if dispatch.before_cursor_execute:
        dispatch.before_cursor_execute(conn, cursor, sql, params, None, many)
    try:
        if many:
            cursor.executemany(sql, params)
        else:
            cursor.execute(sql, params)
    except conn.dialect.loaded_dbapi.Error as e:
        _raise(conn, dbapi_conn, cursor, sql, params, e, many)
    except BaseException as e:
        _interrupted(conn, e)
        raise
    if dispatch.after_cursor_execute:
        dispatch.after_cursor_execute(conn, cursor, sql, params, None, many)
    return cursor


def _interrupted(conn: Connection, error: BaseException) -> None:
    """Invalidate ``conn`` when ``error`` cut a statement short, as Core does.

    A cancelled task (a run whose lease was lost is cancelled mid-commit), a
    timeout around it or an interrupt leave the connection in an unknown
    state. On PostgreSQL the asyncpg adapter begins a transaction with the
    first statement: cancelled once BEGIN was sent but before the adapter
    recorded it, the rollback that follows does nothing, and the pooled
    connection stayed idle in a transaction nobody knew of (its next user's
    work ran inside it). Invalidated, it is closed and the pool opens a
    fresh one.
    """
    if is_exit_exception(error) and not conn.invalidated:
        conn.invalidate(error)


def _raise(
    conn: Connection,
    dbapi_conn: Any,
    cursor: Any,
    sql: str,
    params: Any,
    error: Any,
    many: bool = False,
) -> None:
    """Raise ``error`` as Core would: wrapped, and a lost connection invalidated."""
    dialect = conn.dialect
    lost = dialect.is_disconnect(error, dbapi_conn, cursor)
    if lost and not conn.invalidated:
        conn.invalidate(error)
    raise DBAPIError.instance(
        sql,
        params,
        error,
        dialect.loaded_dbapi.Error,
        connection_invalidated=lost,
        dialect=dialect,
        ismulti=many,
    ) from error


class DirectResult:
    """The rows of one statement, read as a ``CursorResult``'s are (first, one, scalar...)."""

    __slots__ = ("_rows", "rowcount")

    def __init__(self, rows: list[Row[Any]], rowcount: int) -> None:
        self._rows = rows
        #: Rows the statement changed (an ``UPDATE`` without ``RETURNING``).
        self.rowcount = rowcount

    def all(self) -> list[Row[Any]]:
        """Every row."""
        return self._rows

    def first(self) -> Row[Any] | None:
        """The first row, or None."""
        return self._rows[0] if self._rows else None

    def one(self) -> Row[Any]:
        """The only row; raises as Core does when there is none or more than one."""
        if len(self._rows) == 1:
            return self._rows[0]
        if not self._rows:
            raise NoResultFound("No row was found when one was required")
        raise MultipleResultsFound("Multiple rows were found when exactly one was required")

    def scalar(self) -> Any:
        """The first column of the first row, or None."""
        return self._rows[0][0] if self._rows else None

    def scalar_one(self) -> Any:
        """The first column of the only row."""
        return self.one()[0]


class DirectStatement:
    """One Core statement compiled once for a dialect, executed on a DBAPI cursor."""

    __slots__ = ("_binds", "_meta", "_processors", "_types", "sql")

    def __init__(
        self,
        sql: str,
        binds: tuple[tuple[str, str, Any, Any], ...],
        keys: list[str],
        types: list[Any],
    ) -> None:
        self.sql = sql
        #: Per position: the parameter's key, its compiled name, its bound value, its processor.
        self._binds = binds
        self._meta = SimpleResultMetaData(keys) if keys else None
        #: The result columns' SQLAlchemy types, for their processors.
        self._types = types
        self._processors: Any = _UNKNOWN

    @classmethod
    def compile(cls, stmt: Any, dialect: Dialect) -> DirectStatement | None:
        """``stmt`` compiled for ``dialect``, or None when it needs Core's execution."""
        compiled = stmt.compile(dialect=dialect)
        assert isinstance(compiled, SQLCompiler)
        if (
            compiled.positiontup is None
            or "POSTCOMPILE" in compiled.string
            or compiled.insert_prefetch
            or compiled.update_prefetch
            or compiled.escaped_bind_names
            or any(b.expanding or b.literal_execute or b.callable for b in compiled.binds.values())
        ):
            return None
        by_name = {name: bind for bind, name in compiled.bind_names.items()}
        processors: dict[str, Any] = dict(compiled._bind_processors)
        if any(not callable(p) for p in processors.values()):
            return None  # a tuple type's processors, one per element
        binds = tuple(
            (
                by_name[name].key,
                name,
                _REQUIRED if by_name[name].required else by_name[name].value,
                processors.get(name),
            )
            for name in compiled.positiontup
        )
        columns = compiled._result_columns
        return cls(compiled.string, binds, [c.keyname for c in columns], [c.type for c in columns])

    def values(self, params: Mapping[str, Any]) -> tuple[Any, ...]:
        """The driver's parameters, in order, from Core-style named ``params``."""
        out = []
        for key, name, bound, process in self._binds:
            if key in params:
                value = params[key]
            elif name in params:
                value = params[name]
            elif bound is _REQUIRED:
                raise KeyError(f"no value for the statement's parameter {key!r}")
            else:
                value = bound
            # Processors see None too: a JSON column stores None as JSON null, as Core does.
            out.append(value if process is None else process(value))
        return tuple(out)

    def execute(self, conn: Connection, params: Mapping[str, Any]) -> DirectResult:
        """Run the statement with ``params`` in ``conn``'s transaction."""
        values = self.values(params)
        cursor = direct_execute(conn, self.sql, values)
        meta = self._meta
        if meta is None:
            return DirectResult([], cursor.rowcount)
        try:
            fetched = cursor.fetchall()
        except conn.dialect.loaded_dbapi.Error as e:
            _raise(conn, conn.connection.dbapi_connection, cursor, self.sql, values, e)
        except BaseException as e:
            _interrupted(conn, e)
            raise
        processors = self._processors
        if processors is _UNKNOWN:
            processors = self._processors = self._result_processors(conn.dialect, cursor)
        key_to_index = meta._key_to_index
        return DirectResult([Row(meta, processors, key_to_index, r) for r in fetched], len(fetched))

    def _result_processors(self, dialect: Dialect, cursor: Any) -> list[Any] | None:
        """The columns' result processors, as Core looks them up: by type and driver type."""
        description = cursor.description or ()
        found = [
            type_._cached_result_processor(
                dialect, description[i][1] if i < len(description) else None
            )
            for i, type_ in enumerate(self._types)
        ]
        return found if any(p is not None for p in found) else None
