"""Typed storage errors.

Hierarchy::

    StorageError
    ├── NotFound            the addressed record is absent or outside the caller's scope
    ├── VersionConflict     a root compare-and-swap (version / private metadata) failed
    ├── LeaseLost           the run's lease is no longer held by this execution
    ├── StateConflict       a child record is not in the expected state (e.g. resolved twice)
    ├── ActiveRunLimit      new runs would take the scope past its active-run quota
    ├── InvalidJson         a value is not strict JSON; nothing was written
    ├── InvalidPageToken    a page token is malformed or was minted for another query
    ├── SchemaMismatch      the database is not migrated to this code's schema head
    └── Unavailable         the database cannot be reached (retryable)
"""

from __future__ import annotations


class StorageError(Exception):
    """Root of every error raised by a storage provider."""


class NotFound(StorageError):
    """The record does not exist in the caller's scope (indistinguishable from absent)."""

    def __init__(self, kind: str, key: str) -> None:
        super().__init__(f"{kind} {key!r} not found")
        self.kind = kind
        self.key = key


class VersionConflict(StorageError):
    """The thread changed since the caller read it."""

    def __init__(self, thread_id: str, expected: object, actual: object = None) -> None:
        super().__init__(f"thread {thread_id!r} changed: expected {expected!r}, found {actual!r}")
        self.thread_id = thread_id
        self.expected = expected
        self.actual = actual


class LeaseLost(StorageError):
    """The execution no longer holds the run's lease; it must stop writing."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"lease on run {run_id!r} was lost")
        self.run_id = run_id


class StateConflict(StorageError):
    """A record is not in the state the write set expected."""

    def __init__(self, kind: str, key: str, detail: str) -> None:
        super().__init__(f"{kind} {key!r}: {detail}")
        self.kind = kind
        self.key = key
        self.detail = detail


class ActiveRunLimit(StorageError):
    """The scope already holds its quota of active (queued, running, waiting) runs."""

    def __init__(self, scope: str, limit: int, active: int) -> None:
        super().__init__(f"scope {scope!r} has {active} active runs (limit {limit})")
        self.scope = scope
        self.limit = limit
        self.active = active


class InvalidJson(StorageError):
    """A value is not strict JSON."""

    def __init__(self, path: str, detail: str) -> None:
        super().__init__(f"{path}: {detail}")
        self.path = path
        self.detail = detail


class InvalidPageToken(StorageError):
    """The page token is malformed or bound to a different query."""


class SchemaMismatch(StorageError):
    """The database schema is not at this code's migration head."""


class Unavailable(StorageError):
    """The database cannot be reached right now (refused, dropped, shutting down).

    ``ambiguous`` is set when the connection failed while committing: the
    write may or may not have landed, so it must not simply be applied again.
    Otherwise nothing was written and the same work may be retried.
    """

    def __init__(self, detail: str, *, ambiguous: bool = False) -> None:
        super().__init__(f"the database is unavailable: {detail}")
        self.detail = detail
        self.ambiguous = ambiguous
