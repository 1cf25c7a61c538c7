"""Model selections: ``provider:model-id`` strings resolved to LanguageModels (RT-06).

A selection carries the model, the portable settings (spread into every
call) and provider options (passed separately, keyed by provider).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from pai_grpc.domain import JsonObject, ModelSettings
from pai_grpc.models._protocol import LanguageModel
from pai_grpc.models._scripted import OfflineModel

ModelFactory = Callable[[str], LanguageModel]


def parse_model_name(name: str) -> tuple[str, str | None]:
    """Split a ``provider:model-id`` name: the provider and the model id.

    The model id is ``None`` when the name has no colon (``offline``), and
    ``""`` when the colon has nothing after it; callers decide which they accept.
    """
    provider, sep, model_id = name.partition(":")
    return provider, model_id if sep else None


def model_name(model: LanguageModel) -> str:
    """A model as config, patches and the wire name it: ``provider:model-id``."""
    return f"{model.provider}:{model.model_id}"


class UnknownModel(ValueError):
    """The selection names a provider this process cannot reach."""


@dataclass(frozen=True)
class ModelSelection:
    """A model with its portable settings and provider options."""

    model: str
    settings: ModelSettings = field(default_factory=ModelSettings)
    provider_options: JsonObject = field(default_factory=dict)


def _anthropic(model_id: str) -> LanguageModel:
    from pai_grpc.models.anthropic import anthropic_model_from_env

    return anthropic_model_from_env(model_id)


class ModelRegistry:
    """Providers by name; ``resolve`` turns a selection string into a model."""

    def __init__(self, *, offline_chunk_delay: float = 0.02) -> None:
        self._factories: dict[str, ModelFactory] = {
            "offline": lambda _id: OfflineModel(chunk_delay=offline_chunk_delay),
            "anthropic": _anthropic,
        }

    def register(self, provider: str, factory: ModelFactory) -> None:
        """Add (or replace) a provider."""
        self._factories[provider] = factory

    def resolve(self, spec: str) -> LanguageModel:
        """``provider:model-id`` (or just ``offline``) -> a model instance."""
        provider, model_id = parse_model_name(spec)
        factory = self._factories.get(provider)
        if factory is None:
            raise UnknownModel(
                f"unknown model provider {provider!r} in {spec!r}; "
                f"known: {', '.join(sorted(self._factories))}"
            )
        if model_id is None:
            if provider != "offline":
                raise UnknownModel(f"model {spec!r} needs a model id: use {provider}:<model-id>")
            model_id = ""
        return factory(model_id)
