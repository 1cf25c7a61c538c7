"""The Anthropic model provider, built on the official ``anthropic`` SDK.

:class:`AnthropicModel` maps a :class:`~pai_grpc.models.ModelCall` to one
streaming Messages API request and the raw stream events to canonical chunks;
failures raise :class:`~pai_grpc.errors.ModelError` with one of the
``PROVIDER_*`` reasons below.
"""

from pai_grpc.models.anthropic._errors import (
    PROVIDER_AUTH_ERROR,
    PROVIDER_BAD_REQUEST,
    PROVIDER_CONNECTION_ERROR,
    PROVIDER_ERROR,
    PROVIDER_OVERLOADED,
    PROVIDER_RATE_LIMITED,
    PROVIDER_STREAM_TRUNCATED,
)
from pai_grpc.models.anthropic._model import (
    AnthropicModel,
    AnthropicStepStream,
    anthropic_model_from_env,
)
from pai_grpc.models.anthropic._request import DEFAULT_MAX_TOKENS

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "PROVIDER_AUTH_ERROR",
    "PROVIDER_BAD_REQUEST",
    "PROVIDER_CONNECTION_ERROR",
    "PROVIDER_ERROR",
    "PROVIDER_OVERLOADED",
    "PROVIDER_RATE_LIMITED",
    "PROVIDER_STREAM_TRUNCATED",
    "AnthropicModel",
    "AnthropicStepStream",
    "anthropic_model_from_env",
]
