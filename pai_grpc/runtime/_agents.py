"""Agents: what answers in a thread (model, instructions, limits)."""

from __future__ import annotations

from dataclasses import dataclass, field

from pai_grpc.domain import JsonObject, ModelSettings
from pai_grpc.errors import InvalidArgument
from pai_grpc.models import LanguageModel
from pai_grpc.tools import Tool

DEFAULT_AGENT = "default"


@dataclass
class Agent:
    """An agent definition.

    Attributes:
        name: The name threads refer to.
        model: The model that answers.
        instructions: System instructions for every step.
        max_steps: Model-step ceiling per execution episode.
        model_settings: Portable settings spread into every call.
        provider_options: Provider-specific options, passed separately.
        tools: Tools the model may call (backend, remote or client tools).
    """

    name: str
    model: LanguageModel
    instructions: str = ""
    max_steps: int = 8
    model_settings: ModelSettings = field(default_factory=ModelSettings)
    provider_options: JsonObject = field(default_factory=dict)
    tools: list[Tool] = field(default_factory=list)

    def tool_map(self) -> dict[str, Tool]:
        """The agent's tools by name."""
        return {t.name: t for t in self.tools}


class AgentRegistry:
    """The agents a service hosts; one of them is the default."""

    def __init__(self, agents: list[Agent], *, default: str | None = None) -> None:
        if not agents:
            raise ValueError("at least one agent is required")
        self._agents = {a.name: a for a in agents}
        self.default = default or agents[0].name
        if self.default not in self._agents:
            raise ValueError(f"default agent {self.default!r} is not defined")

    def resolve(self, name: str) -> Agent:
        """The agent called ``name`` ("" selects the default)."""
        agent = self._agents.get(name or self.default)
        if agent is None:
            raise InvalidArgument.field("agent", f"unknown agent {name!r}", reason="UNKNOWN_AGENT")
        return agent

    def get(self, name: str) -> Agent:
        """The agent a stored thread names (the default when it was removed from config)."""
        return self._agents.get(name) or self._agents[self.default]

    def names(self) -> list[str]:
        """Every agent name."""
        return sorted(self._agents)
