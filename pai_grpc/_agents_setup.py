"""Build the agents a process hosts from its settings (``[agents.NAME]`` tables)."""

from __future__ import annotations

import logging
import os
from typing import Any

from pai_grpc.config import ConfigError, Settings
from pai_grpc.models import OFFLINE_NOTICE, LanguageModel, OfflineModel
from pai_grpc.runtime import DEFAULT_AGENT, Agent, AgentRegistry

log = logging.getLogger("pai_grpc")


def _model(spec: str, settings: Settings) -> LanguageModel:
    provider, _, _model_id = spec.partition(":")
    if provider == "offline":
        return OfflineModel(chunk_delay=settings.offline_chunk_delay)
    raise ConfigError(f"unknown model {spec!r}: use offline")


def build_agents(settings: Settings) -> AgentRegistry:
    """The configured agents; without any, a default agent on the best available model."""
    tables: dict[str, Any] = settings.raw.get("agents", {})
    if not isinstance(tables, dict):
        raise ConfigError("[agents] must be a table of agent tables")
    agents: list[Agent] = []
    for name, table in tables.items():
        if not isinstance(table, dict):
            raise ConfigError(f"[agents.{name}] must be a table")
        agents.append(
            Agent(
                name=name,
                model=_model(str(table.get("model", "offline")), settings),
                instructions=str(table.get("instructions", "")),
                max_steps=int(table.get("max_steps", 8)),
            )
        )
    if not agents:
        if not os.environ.get("ANTHROPIC_API_KEY"):
            log.warning("ANTHROPIC_API_KEY is not set: answering with the %s", OFFLINE_NOTICE)
        else:
            log.warning(
                "the Anthropic provider is not wired in yet: answering with the %s", OFFLINE_NOTICE
            )
        agents.append(
            Agent(name=DEFAULT_AGENT, model=OfflineModel(chunk_delay=settings.offline_chunk_delay))
        )
    for agent in agents:
        log.info(
            "agent %s answers with %s:%s", agent.name, agent.model.provider, agent.model.model_id
        )
    default = settings.raw.get("default_agent")
    return AgentRegistry(agents, default=str(default) if default else None)
