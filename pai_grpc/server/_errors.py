"""Exceptions -> google.rpc rich status, in one place.

Every error carries ErrorInfo{reason, domain "pai.v1"}; bad input also
carries BadRequest field violations. Anything outside the caller's scope is
NOT_FOUND, never a hint that it exists.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar, cast

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from pai_grpc import errors
from storage import errors as storage_errors

log = logging.getLogger("pai_grpc.server")

#: The back-off suggested to clients with UNAVAILABLE (RetryInfo).
_RETRY_DELAY = duration_pb2.Duration(seconds=1)

_CODES: list[tuple[type[BaseException], int]] = [
    (errors.InvalidArgument, code_pb2.INVALID_ARGUMENT),
    (errors.NotFoundError, code_pb2.NOT_FOUND),
    (errors.FailedPrecondition, code_pb2.FAILED_PRECONDITION),
    (errors.Conflict, code_pb2.ABORTED),
    (errors.AlreadyExists, code_pb2.ALREADY_EXISTS),
    (errors.Unauthenticated, code_pb2.UNAUTHENTICATED),
    (errors.PermissionDenied, code_pb2.PERMISSION_DENIED),
    (errors.ResourceExhausted, code_pb2.RESOURCE_EXHAUSTED),
    (errors.Unavailable, code_pb2.UNAVAILABLE),
]


def _packed(message: Any) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)
    return packed


def _violations_from_value_error(e: ValueError) -> list[errors.FieldViolation]:
    # Conversion errors read "Field.path: description".
    text = str(e)
    field, sep, description = text.partition(": ")
    if sep and " " not in field:
        return [errors.FieldViolation(field, description)]
    return [errors.FieldViolation("request", text)]


def to_pai_error(exc: BaseException) -> errors.PaiError:
    """Normalise any exception into a :class:`PaiError`."""
    match exc:
        case errors.PaiError():
            return exc
        case storage_errors.NotFound():
            return errors.NotFoundError(exc.kind, exc.key)
        case storage_errors.VersionConflict():
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
        case ValueError():
            return errors.InvalidArgument(str(exc), _violations_from_value_error(exc))
        case _:
            return errors.PaiError("internal error", reason="INTERNAL")


def to_status(exc: BaseException) -> grpc.Status:
    """The rich gRPC status for an exception."""
    err = to_pai_error(exc)
    code = next((c for t, c in _CODES if isinstance(err, t)), code_pb2.INTERNAL)
    details = [
        _packed(
            error_details_pb2.ErrorInfo(
                reason=err.reason, domain=errors.ERROR_DOMAIN, metadata=err.metadata
            )
        )
    ]
    if isinstance(err, errors.Unavailable):
        details.append(_packed(error_details_pb2.RetryInfo(retry_delay=_RETRY_DELAY)))
    if isinstance(err, errors.InvalidArgument) and err.violations:
        details.append(
            _packed(
                error_details_pb2.BadRequest(
                    field_violations=[
                        error_details_pb2.BadRequest.FieldViolation(
                            field=v.field, description=v.description
                        )
                        for v in err.violations
                    ]
                )
            )
        )
    return rpc_status.to_status(status_pb2.Status(code=code, message=err.message, details=details))


F = TypeVar("F", bound=Callable[..., Any])

#: grpc.aio.ServicerContext (grpcio ships no type information).
Context = Any


def guarded(fn: F) -> F:
    """Wrap a servicer method so every exception becomes a rich status.

    Works for unary (coroutine) and server-streaming (async generator)
    handlers. Unexpected exceptions are logged with their traceback and
    reported as INTERNAL without internals.
    """

    def report(exc: BaseException) -> grpc.Status:
        if not isinstance(exc, errors.PaiError | storage_errors.StorageError | ValueError):
            log.exception("unexpected error in %s", fn.__qualname__, exc_info=exc)
        return to_status(exc)

    if inspect.isasyncgenfunction(fn):

        @functools.wraps(fn)
        async def stream(
            self: Any, request: Any, context: grpc.aio.ServicerContext
        ) -> AsyncIterator[Any]:
            try:
                async for item in fn(self, request, context):
                    yield item
            except Exception as exc:
                await context.abort_with_status(report(exc))

        return cast(F, stream)

    @functools.wraps(fn)
    async def unary(self: Any, request: Any, context: Context) -> Any:
        try:
            return await fn(self, request, context)
        except Exception as exc:
            await context.abort_with_status(report(exc))

    return cast(F, unary)


def fill_unimplemented(cls: type, service_name: str) -> type:
    """Give every RPC ``cls`` does not define an async handler that answers UNIMPLEMENTED.

    The generated base class answers with a synchronous handler, which an
    asyncio server cannot run; ours also carries ErrorInfo.
    """
    from google.protobuf import descriptor_pool

    service = descriptor_pool.Default().FindServiceByName(service_name)
    for method in service.methods:
        if method.name not in cls.__dict__:
            setattr(
                cls, method.name, _unimplemented(service_name, method.name, method.server_streaming)
            )
    return cls


def _unimplemented(service: str, name: str, streaming: bool) -> Callable[..., Any]:
    status = rpc_status.to_status(
        status_pb2.Status(
            code=code_pb2.UNIMPLEMENTED,
            message=f"{service}/{name} is not implemented by this server yet",
            details=[
                _packed(
                    error_details_pb2.ErrorInfo(
                        reason="NOT_IMPLEMENTED", domain=errors.ERROR_DOMAIN
                    )
                )
            ],
        )
    )
    if streaming:

        async def stream(self: Any, request: Any, context: Any) -> AsyncIterator[Any]:
            await context.abort_with_status(status)
            yield  # pragma: no cover - makes this an async generator

        stream.__name__ = name
        return stream

    async def unary(self: Any, request: Any, context: Any) -> Any:
        await context.abort_with_status(status)

    unary.__name__ = name
    return unary
