"""Errors of the runtime, mapped to gRPC status in one place (``server/_errors.py``).

Hierarchy::

    PaiError                        reason (ErrorInfo.reason), message
    ├── InvalidArgument             INVALID_ARGUMENT + BadRequest field violations
    ├── NotFoundError               NOT_FOUND (also for anything outside the caller's scope)
    ├── FailedPrecondition          FAILED_PRECONDITION (a status forbids the operation)
    ├── Conflict                    ABORTED (version / etag conflict)
    ├── AlreadyExists               ALREADY_EXISTS
    ├── Unauthenticated             UNAUTHENTICATED
    ├── PermissionDenied            PERMISSION_DENIED
    ├── ResourceExhausted           RESOURCE_EXHAUSTED (limits)
    ├── Unavailable                 UNAVAILABLE (shutting down, dependency down)
    └── ModelError                  a provider call failed (becomes a run failure)

Storage errors (:mod:`storage.errors`) are mapped by the server as well.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The ``google.rpc.ErrorInfo.domain`` of every error this project's services
#: (the runtime's and a plugin's) put on the wire.
ERROR_DOMAIN = "pai.v1"


@dataclass(frozen=True)
class FieldViolation:
    """One bad field of a request (google.rpc.BadRequest.FieldViolation)."""

    field: str
    description: str


class PaiError(Exception):
    """Root of every runtime error. ``reason`` is a stable UPPER_SNAKE identifier."""

    default_reason = "INTERNAL"

    def __init__(
        self, message: str, *, reason: str | None = None, metadata: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason or self.default_reason
        self.metadata = dict(metadata or {})


class InvalidArgument(PaiError):
    """The request is malformed; ``violations`` name the fields."""

    default_reason = "INVALID_ARGUMENT"

    def __init__(
        self,
        message: str,
        violations: list[FieldViolation] | None = None,
        *,
        reason: str | None = None,
    ) -> None:
        super().__init__(message, reason=reason)
        self.violations = list(violations or [])

    @classmethod
    def field(cls, field: str, description: str, *, reason: str | None = None) -> InvalidArgument:
        """An error about a single field."""
        return cls(f"{field}: {description}", [FieldViolation(field, description)], reason=reason)

    def under(self, parent: str) -> InvalidArgument:
        """The same error about a request nested in field ``parent`` of another."""
        nested = InvalidArgument(
            self.message,
            [FieldViolation(f"{parent}.{v.field}", v.description) for v in self.violations],
            reason=self.reason,
        )
        nested.metadata = dict(self.metadata)
        return nested


class NotFoundError(PaiError):
    """The resource does not exist in the caller's scope."""

    default_reason = "NOT_FOUND"

    def __init__(self, kind: str, key: str) -> None:
        super().__init__(
            f"{kind} {key!r} not found",
            reason=f"{kind.upper().replace(' ', '_')}_NOT_FOUND",
            metadata={kind.replace(" ", "_") + "_id": key},
        )
        self.kind = kind
        self.key = key


class FailedPrecondition(PaiError):
    """The resource's state forbids the operation."""

    default_reason = "FAILED_PRECONDITION"


class Conflict(PaiError):
    """A concurrent change won (version / etag mismatch); retry with fresh state."""

    default_reason = "VERSION_CONFLICT"


class AlreadyExists(PaiError):
    """The resource already exists."""

    default_reason = "ALREADY_EXISTS"


class Unauthenticated(PaiError):
    """No valid credential."""

    default_reason = "UNAUTHENTICATED"


class PermissionDenied(PaiError):
    """The credential does not allow the operation."""

    default_reason = "PERMISSION_DENIED"


class ResourceExhausted(PaiError):
    """A limit was hit; ``retry_after`` (seconds) is when a retry may succeed (RetryInfo)."""

    default_reason = "RESOURCE_EXHAUSTED"

    def __init__(
        self,
        message: str,
        *,
        reason: str | None = None,
        metadata: dict[str, str] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, reason=reason, metadata=metadata)
        self.retry_after = retry_after


class Unavailable(PaiError):
    """The service (or a dependency) cannot take the request now."""

    default_reason = "UNAVAILABLE"


class ModelError(PaiError):
    """A model provider call failed; ``retryable`` tells whether a retry may help."""

    default_reason = "MODEL_ERROR"

    def __init__(self, message: str, *, reason: str = "MODEL_ERROR", retryable: bool = False):
        super().__init__(message, reason=reason)
        self.retryable = retryable
