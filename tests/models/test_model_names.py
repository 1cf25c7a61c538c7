"""One parser for ``provider:model-id``: the registry, convert and plugins agree."""

from __future__ import annotations

import pytest

from pai_grpc.models import ModelRegistry, ScriptedModel, UnknownModel, model_name, parse_model_name


@pytest.mark.parametrize(
    ("name", "parsed"),
    [
        ("anthropic:claude-x", ("anthropic", "claude-x")),
        ("offline", ("offline", None)),
        ("p:", ("p", "")),
        ("p:a:b", ("p", "a:b")),  # the model id keeps its own colons
    ],
)
def test_parse_model_name(name: str, parsed: tuple[str, str | None]) -> None:
    assert parse_model_name(name) == parsed


def test_model_name_round_trips_through_the_registry() -> None:
    model = ScriptedModel([], model_id="m-1")
    registry = ModelRegistry()
    registry.register(model.provider, lambda model_id: ScriptedModel([], model_id=model_id))
    assert parse_model_name(model_name(model)) == (model.provider, "m-1")
    assert registry.resolve(model_name(model)).model_id == "m-1"
    with pytest.raises(UnknownModel, match="needs a model id"):
        registry.resolve(model.provider)
    assert registry.resolve("offline").provider == "offline"
