"""Agents, tools and tool servers declared in the TOML config, for polyglot users.

::

    default_agent = "assistant"

    [agents.assistant]
    model = "anthropic:claude-sonnet-5-5"   # or "offline"
    instructions = "You are helpful."
    max_steps = 8
    tools = ["pick_color", "lookup"]
    model_settings = { max_output_tokens = 1024, temperature = 0.2 }
    provider_options = { anthropic = { thinking = { type = "enabled", budget_tokens = 1024 } } }

    [tools.pick_color]                      # a client tool: the client submits its result
    kind = "client"
    description = "Ask the user to pick a color"
    input_schema = { type = "object", properties = { palette = { type = "array" } } }

    [tool_servers.search]                   # remote backend tools (ToolService)
    address = "127.0.0.1:7000"
    approval = ["lookup"]                   # these ask a human before running

Without agents, a default agent answers with Claude when ANTHROPIC_API_KEY is
set and with the clearly labelled offline stand-in otherwise.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from pydantic import ValidationError

from pai_grpc.config import ConfigError, Settings
from pai_grpc.domain import ModelSettings
from pai_grpc.models import OFFLINE_NOTICE, ModelRegistry, UnknownModel
from pai_grpc.runtime import DEFAULT_AGENT, Agent, AgentRegistry
from pai_grpc.tools import RemoteToolError, RemoteToolServer, Tool, client_tool

log = logging.getLogger("pai_grpc")

#: The model the default agent uses when an API key is configured.
DEFAULT_CLAUDE = "anthropic:claude-sonnet-5-5"


def _table(raw: Any, where: str) -> dict[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{where} must be a table")
    return raw


async def _tool_servers(settings: Settings) -> tuple[dict[str, Tool], list[RemoteToolServer]]:
    tools: dict[str, Tool] = {}
    servers: list[RemoteToolServer] = []
    for name, table in _table(settings.raw.get("tool_servers"), "[tool_servers]").items():
        table = _table(table, f"[tool_servers.{name}]")
        address = table.get("address")
        if not isinstance(address, str) or not address:
            raise ConfigError(f"[tool_servers.{name}] needs an address")
        server = RemoteToolServer(name, address, timeout=float(table.get("timeout", 30.0)))
        try:
            listed = await server.connect()
        except RemoteToolError as e:
            raise ConfigError(f"tool server {name!r} is unreachable at start-up: {e}") from e
        servers.append(server)
        approval = set(table.get("approval", []))
        for remote in listed:
            remote.approval = remote.name in approval
            tools[remote.name] = remote
        log.info("tool server %s at %s: %s", name, address, ", ".join(t.name for t in listed))
    return tools, servers


def _declared_tools(settings: Settings) -> dict[str, Tool]:
    tools: dict[str, Tool] = {}
    for name, table in _table(settings.raw.get("tools"), "[tools]").items():
        table = _table(table, f"[tools.{name}]")
        kind = table.get("kind", "client")
        if kind != "client":
            raise ConfigError(
                f"[tools.{name}] kind {kind!r}: config declares client tools; backend tools "
                "come from [tool_servers] (any language) or Python"
            )
        schema = _table(
            table.get("input_schema", {"type": "object"}), f"[tools.{name}].input_schema"
        )
        tools[name] = client_tool(
            name, description=str(table.get("description", "")), input_schema=schema
        )
    return tools


async def load_agents(
    settings: Settings, *, extra_tools: list[Tool] | None = None
) -> tuple[AgentRegistry, list[RemoteToolServer]]:
    """Build the configured agents (connecting remote tool servers) or the default agent."""
    models = ModelRegistry(offline_chunk_delay=settings.offline_chunk_delay)
    available = {t.name: t for t in extra_tools or []}
    available.update(_declared_tools(settings))
    remote, servers = await _tool_servers(settings)
    available.update(remote)
    agents: list[Agent] = []
    try:
        for name, table in _table(settings.raw.get("agents"), "[agents]").items():
            agents.append(_agent(name, _table(table, f"[agents.{name}]"), models, available))
    except BaseException:
        for server in servers:
            await server.close()
        raise
    if not agents:
        agents.append(_default_agent(models))
    for agent in agents:
        log.info(
            "agent %s answers with %s:%s%s",
            agent.name,
            agent.model.provider,
            agent.model.model_id,
            f" (tools: {', '.join(t.name for t in agent.tools)})" if agent.tools else "",
        )
    default = settings.raw.get("default_agent")
    try:
        registry = AgentRegistry(agents, default=str(default) if default else None)
    except ValueError as e:
        raise ConfigError(str(e)) from e
    return registry, servers


def _agent(
    name: str, table: dict[str, Any], models: ModelRegistry, available: dict[str, Tool]
) -> Agent:
    try:
        model = models.resolve(str(table.get("model", "offline")))
    except UnknownModel as e:
        raise ConfigError(f"[agents.{name}] model: {e}") from e
    wanted = table.get("tools", [])
    if not isinstance(wanted, list):
        raise ConfigError(f"[agents.{name}] tools must be a list of tool names")
    missing = [t for t in wanted if t not in available]
    if missing:
        raise ConfigError(f"[agents.{name}] unknown tools: {', '.join(missing)}")
    try:
        model_settings = ModelSettings.model_validate(
            _table(table.get("model_settings"), f"[agents.{name}].model_settings")
        )
    except ValidationError as e:
        raise ConfigError(f"[agents.{name}].model_settings: {e}") from e
    return Agent(
        name=name,
        model=model,
        instructions=str(table.get("instructions", "")),
        max_steps=int(table.get("max_steps", 8)),
        model_settings=model_settings,
        provider_options=_table(table.get("provider_options"), f"[agents.{name}].provider_options"),
        tools=[available[t] for t in wanted],
    )


def _default_agent(models: ModelRegistry) -> Agent:
    if os.environ.get("ANTHROPIC_API_KEY"):
        model = models.resolve(os.environ.get("PAI_MODEL", DEFAULT_CLAUDE))
        log.info("ANTHROPIC_API_KEY is set: the default agent answers with Claude")
    else:
        model = models.resolve("offline")
        log.warning("ANTHROPIC_API_KEY is not set: answering with the %s", OFFLINE_NOTICE)
    return Agent(name=DEFAULT_AGENT, model=model)
