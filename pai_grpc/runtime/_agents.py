"""Agents: what answers in a thread (model, instructions, limits)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pai_grpc.domain import JsonObject, ModelSettings, ToolChoice
from pai_grpc.errors import InvalidArgument
from pai_grpc.lifecycle import AgentContract, AgentLifecycle, HookError
from pai_grpc.lifecycle.internal import maybe_await
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
        lifecycle: Hooks customising execution (compose several with compose_lifecycle).
        contract: Schemas of metadata bags and application data parts.
        runtime_context: Agent-wide runtime-only state handed to hooks (a value,
            or a zero-argument callable evaluated once per episode).
        provider_tools: Provider-native tools (replaced as a whole).
        tool_choice: How the model may use tools.
    """

    name: str
    model: LanguageModel
    instructions: str = ""
    max_steps: int = 8
    model_settings: ModelSettings = field(default_factory=ModelSettings)
    provider_options: JsonObject = field(default_factory=dict)
    tools: list[Tool] = field(default_factory=list)
    lifecycle: AgentLifecycle | None = None
    contract: AgentContract = field(default_factory=AgentContract)
    runtime_context: Any = None
    provider_tools: JsonObject | None = None
    tool_choice: ToolChoice | None = None

    async def build_runtime_context(self) -> Any:
        """The runtime context for hooks (the builder is called when it is callable)."""
        builder = self.runtime_context
        if not callable(builder):
            return builder
        try:
            return await maybe_await(builder())
        except Exception as e:
            raise HookError("runtime_context", "runtime_context", e) from e

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
