"""The LanguageModel seam: one streaming call producing canonical step-stream chunks."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from pai_grpc.domain import (
    JsonObject,
    ModelMessage,
    ModelSettings,
    StepStreamChunk,
    SystemModelMessage,
    ToolChoice,
    ToolManifestEntry,
)


@dataclass(frozen=True)
class ModelCall:
    """Everything one provider attempt receives.

    ``settings`` are the portable model settings (spread into the call);
    ``provider_options`` are passed separately, keyed by provider (RT-06).
    """

    messages: list[ModelMessage]
    instructions: list[SystemModelMessage] = field(default_factory=list)
    tools: list[ToolManifestEntry] = field(default_factory=list)
    tool_choice: ToolChoice | None = None
    settings: ModelSettings = field(default_factory=ModelSettings)
    provider_options: JsonObject = field(default_factory=dict)
    provider_tools: JsonObject | None = None


@runtime_checkable
class LanguageModel(Protocol):
    """A model provider.

    ``stream`` resolves once the provider stream is constructed (the request
    is accepted), before it is consumed; iterating yields the step's chunks
    and ends with a ``finish-step`` chunk. Closing the iterator early aborts
    the provider stream. Failures raise :class:`pai_grpc.errors.ModelError`.
    """

    @property
    def provider(self) -> str:
        """Provider name, e.g. ``anthropic``."""
        ...

    @property
    def model_id(self) -> str:
        """Model id within the provider."""
        ...

    async def stream(self, call: ModelCall) -> AsyncIterator[StepStreamChunk]:
        """Start one model step."""
        ...
