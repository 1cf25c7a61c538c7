"""Anthropic SDK and transport errors -> :class:`~pai_grpc.errors.ModelError`."""

from __future__ import annotations

import json

import anthropic
import httpx2

from pai_grpc.errors import ModelError

PROVIDER_CONNECTION_ERROR = "PROVIDER_CONNECTION_ERROR"
PROVIDER_RATE_LIMITED = "PROVIDER_RATE_LIMITED"
PROVIDER_OVERLOADED = "PROVIDER_OVERLOADED"
PROVIDER_AUTH_ERROR = "PROVIDER_AUTH_ERROR"
PROVIDER_BAD_REQUEST = "PROVIDER_BAD_REQUEST"
PROVIDER_STREAM_TRUNCATED = "PROVIDER_STREAM_TRUNCATED"
PROVIDER_ERROR = "PROVIDER_ERROR"

# (reason, retryable) by HTTP status; checked before the error type because the
# status is what the SDK's own retry policy looks at.
_BY_STATUS: dict[int, tuple[str, bool]] = {
    400: (PROVIDER_BAD_REQUEST, False),
    401: (PROVIDER_AUTH_ERROR, False),
    403: (PROVIDER_AUTH_ERROR, False),
    429: (PROVIDER_RATE_LIMITED, True),
    529: (PROVIDER_OVERLOADED, True),
}
# A mid-stream ``event: error`` arrives on a 200 response, so only the error
# type in its body tells what went wrong.
_BY_TYPE: dict[str, tuple[str, bool]] = {
    "invalid_request_error": (PROVIDER_BAD_REQUEST, False),
    "authentication_error": (PROVIDER_AUTH_ERROR, False),
    "permission_error": (PROVIDER_AUTH_ERROR, False),
    "rate_limit_error": (PROVIDER_RATE_LIMITED, True),
    "overloaded_error": (PROVIDER_OVERLOADED, True),
    "api_error": (PROVIDER_ERROR, True),
}


def stream_truncated() -> ModelError:
    """The error for a stream that ended before ``message_stop``."""
    return ModelError(
        "Anthropic stream ended before message_stop",
        reason=PROVIDER_STREAM_TRUNCATED,
        retryable=True,
    )


def to_model_error(error: Exception) -> ModelError:
    """Classify an SDK, transport or decoding error as a :class:`ModelError`.

    Callers raise the result ``from error`` so the provider's exception stays
    attached as the cause.
    """
    if isinstance(error, anthropic.APIStatusError):
        return _status_error(error)
    if isinstance(error, anthropic.APIConnectionError):
        # APITimeoutError is a subclass: a timeout is a connection failure here.
        cause = f" ({error.__cause__})" if error.__cause__ else ""
        return ModelError(
            f"Anthropic connection error: {error.message}{cause}",
            reason=PROVIDER_CONNECTION_ERROR,
            retryable=True,
        )
    if isinstance(error, httpx2.TransportError):
        # Raised while reading the body (the SDK only wraps errors of the request
        # itself): a dropped connection or a read timeout mid-stream.
        return ModelError(
            f"Anthropic connection error while streaming: {type(error).__name__}: {error}",
            reason=PROVIDER_CONNECTION_ERROR,
            retryable=True,
        )
    if isinstance(error, json.JSONDecodeError):
        return ModelError(f"Anthropic sent a malformed event: {error}", reason=PROVIDER_ERROR)
    return ModelError(f"Anthropic error: {type(error).__name__}: {error}", reason=PROVIDER_ERROR)


def _status_error(error: anthropic.APIStatusError) -> ModelError:
    error_type = error.type if isinstance(error.type, str) else None
    reason, retryable = (
        _BY_STATUS.get(error.status_code)
        or _BY_TYPE.get(error_type or "")
        or (
            PROVIDER_ERROR,
            error.status_code >= 500 or error.status_code in (408, 409),
        )
    )
    where = "mid-stream" if error.status_code == 200 else f"status {error.status_code}"
    detail = error.api_message or error.message
    request_id = f" (request-id {error.request_id})" if error.request_id else ""
    return ModelError(
        f"Anthropic API error, {where}, {error_type or 'unknown type'}: {detail}{request_id}",
        reason=reason,
        retryable=retryable,
    )
