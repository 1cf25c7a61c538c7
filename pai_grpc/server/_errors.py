"""Exceptions -> google.rpc rich status, in one place.

Every error carries ErrorInfo{reason, domain "pai.v1"}; bad input also
carries BadRequest field violations. Anything outside the caller's scope is
NOT_FOUND, never a hint that it exists.
"""

from __future__ import annotations

import logging

import grpc

from pai_grpc import errors
from pai_grpc._wire import DOMAIN, Context, fill_unimplemented, guard, pai_error_of, status_of
from pai_grpc.lifecycle import VersionConflict
from storage import errors as storage_errors

log = logging.getLogger("pai_grpc.server")


def to_pai_error(exc: BaseException) -> errors.PaiError:
    """Normalise any exception into a :class:`PaiError`."""
    match exc:
        case errors.PaiError():
            return exc
        case storage_errors.NotFound():
            return errors.NotFoundError(exc.kind, exc.key)
        # The facade raises the lifecycle's conflict (HookHostService serves it).
        case storage_errors.VersionConflict() | VersionConflict():
            return errors.Conflict(
                "the thread changed; read it again and retry", reason="VERSION_CONFLICT"
            )
        case storage_errors.InvalidJson():
            return errors.InvalidArgument(
                str(exc), [errors.FieldViolation(exc.path, exc.detail)], reason="INVALID_JSON"
            )
        case storage_errors.InvalidPageToken():
            return errors.InvalidArgument.field("page_token", str(exc), reason="INVALID_PAGE_TOKEN")
        case storage_errors.StateConflict():
            return errors.FailedPrecondition(str(exc), reason="STATE_CONFLICT")
        case storage_errors.Unavailable():
            # Retryable: nothing was written, or (ambiguous) a retry with the same
            # request_id replays the outcome instead of repeating it.
            return errors.Unavailable(
                "the database is unavailable; retry shortly", reason="DATABASE_UNAVAILABLE"
            )
        case _:
            return pai_error_of(exc)


def to_status(exc: BaseException) -> grpc.Status:
    """The rich gRPC status for an exception."""
    return status_of(to_pai_error(exc))


#: Wraps a servicer method so every exception becomes a rich status (unary or
#: server-streaming); unexpected exceptions are logged and reported as INTERNAL.
guarded = guard(
    to_status,
    expected=(errors.PaiError, storage_errors.StorageError, VersionConflict, ValueError),
    log=log,
)

__all__ = ["DOMAIN", "Context", "fill_unimplemented", "guarded", "to_pai_error", "to_status"]
