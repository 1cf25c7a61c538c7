"""Rich statuses: a PaiError as a google.rpc status, read back, and servicer guards."""

from __future__ import annotations

import functools
import inspect
import logging
import math
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar, cast

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from pai_grpc import errors

DOMAIN = errors.ERROR_DOMAIN
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

F = TypeVar("F", bound=Callable[..., Any])

#: grpc.aio.ServicerContext (grpcio ships no type information).
Context = Any


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


def pai_error_of(exc: BaseException) -> errors.PaiError:
    """Any exception as a :class:`PaiError` (a ValueError is bad input; others internal)."""
    match exc:
        case errors.PaiError():
            return exc
        case ValueError():
            return errors.InvalidArgument(str(exc), _violations_from_value_error(exc))
        case _:
            return errors.PaiError("internal error", reason="INTERNAL")


def status_of(err: errors.PaiError) -> grpc.Status:
    """The rich gRPC status of an error: ErrorInfo, plus RetryInfo or BadRequest."""
    code = next((c for t, c in _CODES if isinstance(err, t)), code_pb2.INTERNAL)
    details = [
        _packed(
            error_details_pb2.ErrorInfo(reason=err.reason, domain=DOMAIN, metadata=err.metadata)
        )
    ]
    if isinstance(err, errors.Unavailable):
        details.append(_packed(error_details_pb2.RetryInfo(retry_delay=_RETRY_DELAY)))
    if isinstance(err, errors.ResourceExhausted) and err.retry_after is not None:
        delay = duration_pb2.Duration()
        # Rounded up to the millisecond: a client that waits exactly this long finds room.
        delay.FromMilliseconds(max(1, math.ceil(err.retry_after * 1000)))
        details.append(_packed(error_details_pb2.RetryInfo(retry_delay=delay)))
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


def error_info(err: grpc.aio.AioRpcError) -> tuple[str, str] | None:
    """(reason, message) of a rich status in our domain, if the error carries one."""
    try:
        status = rpc_status.from_call(err)
    except ValueError:
        return None
    if status is None:
        return None
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            if info.domain == DOMAIN:
                return info.reason, status.message
    return None


async def abort_with(context: Any, status: grpc.Status) -> None:
    """End the call with ``status`` (and its rich details).

    The code is set first so a tracing interceptor wrapping the context (which
    sees ``set_code`` and ``abort`` but not ``abort_with_status``) records the
    call's real status instead of OK.
    """
    context.set_code(status.code)
    await context.abort_with_status(status)


def guard(
    to_status: Callable[[BaseException], grpc.Status],
    *,
    expected: tuple[type[BaseException], ...],
    log: logging.Logger,
) -> Callable[[F], F]:
    """A decorator that turns every exception of a servicer method into a rich status.

    Works for unary (coroutine) and server-streaming (async generator)
    handlers. Exceptions that are not ``expected`` are logged with their
    traceback (``to_status`` reports them without internals).
    """

    def guarded(fn: F) -> F:
        def report(exc: BaseException) -> grpc.Status:
            if not isinstance(exc, expected):
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
                    await abort_with(context, report(exc))

            return cast(F, stream)

        @functools.wraps(fn)
        async def unary(self: Any, request: Any, context: Context) -> Any:
            try:
                return await fn(self, request, context)
            except Exception as exc:
                await abort_with(context, report(exc))

        return cast(F, unary)

    return guarded


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
            details=[_packed(error_details_pb2.ErrorInfo(reason="NOT_IMPLEMENTED", domain=DOMAIN))],
        )
    )
    if streaming:

        async def stream(self: Any, request: Any, context: Any) -> AsyncIterator[Any]:
            await abort_with(context, status)
            yield  # pragma: no cover - makes this an async generator

        stream.__name__ = name
        return stream

    async def unary(self: Any, request: Any, context: Any) -> Any:
        await abort_with(context, status)

    unary.__name__ = name
    return unary
