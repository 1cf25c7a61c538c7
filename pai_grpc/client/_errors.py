"""Typed client errors, read from the server's rich status (``grpc-status-details-bin``).

Every error the service sends carries a ``google.rpc.ErrorInfo`` (reason,
domain ``pai.v1``, metadata); bad input adds ``BadRequest`` field violations
and retryable conditions add ``RetryInfo``. :func:`error_from_rpc` turns a
failed call into the matching :class:`PaiClientError` subclass with all of
them parsed, so callers branch on types and reasons, never on message text.
"""

from __future__ import annotations

from typing import Any

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from pai_grpc.errors import ERROR_DOMAIN, FieldViolation


class PaiClientError(Exception):
    """A call to the service failed.

    Attributes:
        code: The gRPC status code.
        reason: ``ErrorInfo.reason`` (a stable UPPER_SNAKE identifier), or the
            code's name when the status carried none (e.g. an unreachable server).
        message: The status message.
        metadata: ``ErrorInfo.metadata`` (e.g. ``{"run_id": ...}`` of a NOT_FOUND).
        violations: ``BadRequest`` field violations of an invalid request.
        retry_after: Seconds from ``RetryInfo``: when a retry may succeed.
    """

    def __init__(
        self,
        code: grpc.StatusCode,
        message: str,
        *,
        reason: str | None = None,
        metadata: dict[str, str] | None = None,
        violations: list[FieldViolation] | None = None,
        retry_after: float | None = None,
    ) -> None:
        self.code = code
        self.reason = reason or code.name
        self.message = message
        self.metadata = dict(metadata or {})
        self.violations = list(violations or [])
        self.retry_after = retry_after
        super().__init__(f"{code.name} {self.reason}: {message}")


class InvalidArgumentError(PaiClientError):
    """INVALID_ARGUMENT: the request is malformed (see ``violations``)."""


class NotFoundError(PaiClientError):
    """NOT_FOUND: no such resource in the caller's scope."""


class FailedPreconditionError(PaiClientError):
    """FAILED_PRECONDITION: the resource's state forbids the operation."""


class ConflictError(PaiClientError):
    """ABORTED: a concurrent change won (etag / version); read again and retry."""


class AlreadyExistsError(PaiClientError):
    """ALREADY_EXISTS."""


class UnauthenticatedError(PaiClientError):
    """UNAUTHENTICATED: no valid credential."""


class PermissionDeniedError(PaiClientError):
    """PERMISSION_DENIED: the credential does not allow the operation."""


class ResourceExhaustedError(PaiClientError):
    """RESOURCE_EXHAUSTED: a limit was hit; ``retry_after`` says when to retry."""


class UnavailableError(PaiClientError):
    """UNAVAILABLE: the server (or a dependency) cannot take the request now."""


class DeadlineExceededError(PaiClientError):
    """DEADLINE_EXCEEDED: the call's deadline passed."""


class ProtocolError(PaiClientError):
    """The server answered something this client cannot read (a contract mismatch)."""


_BY_CODE: dict[grpc.StatusCode, type[PaiClientError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPreconditionError,
    grpc.StatusCode.ABORTED: ConflictError,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExistsError,
    grpc.StatusCode.UNAUTHENTICATED: UnauthenticatedError,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDeniedError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhaustedError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceededError,
}


def _details(err: grpc.aio.AioRpcError) -> list[Any]:
    try:
        status = rpc_status.from_call(err)
    except ValueError:  # details that do not match the status: read none
        return []
    return list(status.details) if status is not None else []


def error_from_rpc(err: grpc.aio.AioRpcError) -> PaiClientError:
    """The typed error of a failed call, with its ErrorInfo, BadRequest and RetryInfo."""
    code: grpc.StatusCode = err.code()
    reason: str | None = None
    metadata: dict[str, str] = {}
    violations: list[FieldViolation] = []
    retry_after: float | None = None
    for detail in _details(err):
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            if info.domain == ERROR_DOMAIN:
                reason = info.reason
                metadata = dict(info.metadata)
        elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            violations += [FieldViolation(v.field, v.description) for v in bad.field_violations]
        elif detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            retry = error_details_pb2.RetryInfo()
            detail.Unpack(retry)
            retry_after = retry.retry_delay.ToTimedelta().total_seconds()
    cls = _BY_CODE.get(code, PaiClientError)
    return cls(
        code,
        err.details() or "",
        reason=reason,
        metadata=metadata,
        violations=violations,
        retry_after=retry_after,
    )


__all__ = [
    "AlreadyExistsError",
    "ConflictError",
    "DeadlineExceededError",
    "FailedPreconditionError",
    "FieldViolation",
    "InvalidArgumentError",
    "NotFoundError",
    "PaiClientError",
    "PermissionDeniedError",
    "ProtocolError",
    "ResourceExhaustedError",
    "UnauthenticatedError",
    "UnavailableError",
    "error_from_rpc",
]
