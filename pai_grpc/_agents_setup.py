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

    [[agents.assistant.lifecycle]]          # hooks, composed in order (first is outermost)
    kind = "quota"                          # quota | recent_window | compaction |
    max_runs = 100                          #   redact_secrets | model_fallback | python
    [[agents.assistant.lifecycle]]
    kind = "compaction"
    model = "anthropic:claude-haiku-4-5"    # writes the summaries
    max_messages = 40
    keep_recent = 10
    [[agents.assistant.lifecycle]]
    kind = "plugin"                         # a LifecyclePluginService, any language
    address = "127.0.0.1:7070"
    timeout_ms = 1000                       # per phase (default 1000)
    failure_mode = "closed"                 # closed: the run fails; open: skip the hook
    phases = { transform_step_stream = { timeout_ms = 3000, failure_mode = "open" } }
    [[agents.assistant.lifecycle]]
    kind = "python"                         # your own AgentLifecycle
    ref = "my_app.hooks:make_guard"         # an instance, a class or a factory
    options = { strict = true }             # passed to the class or factory

    [agents.assistant.contract]             # JSON Schemas of metadata bags and data parts
    thread_metadata = { type = "object", properties = { title = { type = "string" } } }
    ui_data = { progress = { type = "object", required = ["pct"] } }

    [hook_host]                             # HookHostService for remote hooks
    address = "127.0.0.1:0"                 # where it listens
    advertise = ""                          # what plugins dial, when not the bound address

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

import importlib
import logging
import os
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import ValidationError

from pai_grpc.config import ConfigError, Settings
from pai_grpc.domain import ModelSettings
from pai_grpc.lifecycle import (
    AgentContract,
    AgentLifecycle,
    ContextCompactor,
    ModelFallback,
    Quota,
    RecentWindow,
    RedactSecrets,
    compose_lifecycle,
    contract_from_config,
)
from pai_grpc.models import OFFLINE_NOTICE, ModelRegistry, UnknownModel
from pai_grpc.plugins import HookHost, PhasePolicy, PluginConfig, PluginConfigError, RemoteLifecycle
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


class Closable(Protocol):
    """Something load_agents opened that the process closes at exit."""

    async def close(self) -> None:
        """Release it."""
        ...


@dataclass
class _Plugins:
    """Remote lifecycle plugins of the config and the one hook host they share."""

    settings: Settings
    models: ModelRegistry
    host: HookHost | None = None
    pending: list[tuple[str, RemoteLifecycle]] = field(default_factory=list)

    def plugin(self, agent: str, table: dict[str, Any], where: str) -> RemoteLifecycle:
        if self.host is None:
            conf = _table(self.settings.raw.get("hook_host"), "[hook_host]")
            unknown = sorted(set(conf) - {"address", "advertise"})
            if unknown:
                raise ConfigError(f"[hook_host]: unknown keys {unknown}")
            self.host = HookHost(
                str(conf.get("address", "127.0.0.1:0")), advertise=str(conf.get("advertise", ""))
            )
        address = table.pop("address", None)
        if not isinstance(address, str) or not address:
            raise ConfigError(f"{where}: a plugin needs an address")
        phases = _table(table.pop("phases", None), f"{where}.phases")
        only = table.pop("only", None)
        config = PluginConfig(
            address=address,
            name=table.pop("name", None),
            timeout=float(table.pop("timeout_ms", 1000)) / 1000,
            failure_mode=table.pop("failure_mode", "closed"),
            phases={
                phase: PhasePolicy(
                    timeout=float(_table(p, f"{where}.phases.{phase}").get("timeout_ms", 1000))
                    / 1000,
                    failure_mode=_table(p, f"{where}.phases.{phase}").get("failure_mode", "closed"),
                )
                for phase, p in phases.items()
            },
            only=frozenset(only) if only is not None else None,
        )
        if table:
            raise ConfigError(f"{where}: unknown keys {sorted(table)}")
        remote = RemoteLifecycle(config, self.host, registry=self.models)
        self.pending.append((agent, remote))
        return remote


async def load_agents(
    settings: Settings, *, extra_tools: list[Tool] | None = None
) -> tuple[AgentRegistry, list[Closable]]:
    """Build the configured agents (connecting tool servers and plugins) or the default agent.

    Returns the registry and what was opened (tool servers, lifecycle plugins,
    the hook host), for the process to close at exit. An unreachable or
    misdescribed plugin fails here, at start-up (never silently open).
    """
    models = ModelRegistry(offline_chunk_delay=settings.offline_chunk_delay)
    available = {t.name: t for t in extra_tools or []}
    available.update(_declared_tools(settings))
    remote, tool_servers = await _tool_servers(settings)
    servers: list[Closable] = list(tool_servers)
    available.update(remote)
    agents: list[Agent] = []
    plugins = _Plugins(settings, models)
    try:
        for name, table in _table(settings.raw.get("agents"), "[agents]").items():
            agents.append(
                _agent(name, _table(table, f"[agents.{name}]"), models, available, plugins)
            )
        if plugins.host is not None:
            servers.append(plugins.host)
        by_name = {a.name: a for a in agents}
        for agent_name, plugin in plugins.pending:
            plugin.register_models([by_name[agent_name].model])
            try:
                await plugin.connect()
            except PluginConfigError as e:
                raise ConfigError(f"[agents.{agent_name}] lifecycle plugin: {e}") from e
            servers.append(plugin)
    except BaseException:
        for server in reversed(servers):
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
    name: str,
    table: dict[str, Any],
    models: ModelRegistry,
    available: dict[str, Tool],
    plugins: _Plugins,
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
        lifecycle=_lifecycle(name, table.get("lifecycle"), models, plugins),
        contract=_contract(name, table.get("contract")),
        instructions=str(table.get("instructions", "")),
        max_steps=int(table.get("max_steps", 8)),
        model_settings=model_settings,
        provider_options=_table(table.get("provider_options"), f"[agents.{name}].provider_options"),
        tools=[available[t] for t in wanted],
    )


def _contract(agent: str, raw: Any) -> AgentContract:
    try:
        return contract_from_config(_table(raw, f"[agents.{agent}.contract]"))
    except (ValueError, TypeError) as e:
        raise ConfigError(f"[agents.{agent}.contract]: {e}") from e


def _lifecycle(
    agent: str, raw: Any, models: ModelRegistry, plugins: _Plugins
) -> AgentLifecycle | None:
    """The agent's hooks from ``[[agents.<name>.lifecycle]]`` entries, composed in order."""
    if raw is None:
        return None
    if not isinstance(raw, list):
        raise ConfigError(f"[agents.{agent}] lifecycle must be an array of tables")
    parts: list[AgentLifecycle] = []
    for i, entry in enumerate(raw):
        where = f"[[agents.{agent}.lifecycle]] #{i + 1}"
        table = dict(_table(entry, where))
        kind = table.pop("kind", None)
        try:
            if kind == "plugin":
                parts.append(plugins.plugin(agent, table, where))
            else:
                parts.append(_hook(kind, table, models, where))
        except ConfigError:
            raise
        except (TypeError, ValueError, UnknownModel, PluginConfigError) as e:
            raise ConfigError(f"{where} ({kind}): {e}") from e
    return compose_lifecycle(*parts) if parts else None


def _hook(kind: Any, table: dict[str, Any], models: ModelRegistry, where: str) -> AgentLifecycle:
    match kind:
        case "recent_window":
            return RecentWindow(**table)
        case "redact_secrets":
            return RedactSecrets(**table)
        case "quota":
            return Quota(**table)
        case "model_fallback":
            return ModelFallback(models.resolve(str(table.pop("model", ""))), **table)
        case "compaction":
            return ContextCompactor(models.resolve(str(table.pop("model", "offline"))), **table)
        case "python":
            return _python_hook(table, where)
    raise ConfigError(
        f"{where}: unknown kind {kind!r}; use plugin, quota, recent_window, compaction, "
        "redact_secrets, model_fallback or python"
    )


def _python_hook(table: dict[str, Any], where: str) -> AgentLifecycle:
    ref = table.get("ref")
    if not isinstance(ref, str) or ":" not in ref:
        raise ConfigError(f"{where}: ref must be 'module:attribute'")
    module_name, _, attr = ref.partition(":")
    try:
        target = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"{where}: cannot load {ref!r}: {e}") from e
    options = _table(table.get("options"), f"{where}.options")
    hook = target if isinstance(target, AgentLifecycle) else target(**options)
    if not isinstance(hook, AgentLifecycle):
        raise ConfigError(f"{where}: {ref!r} did not give an AgentLifecycle")
    return hook


def _default_agent(models: ModelRegistry) -> Agent:
    if os.environ.get("ANTHROPIC_API_KEY"):
        model = models.resolve(os.environ.get("PAI_MODEL", DEFAULT_CLAUDE))
        log.info("ANTHROPIC_API_KEY is set: the default agent answers with Claude")
    else:
        model = models.resolve("offline")
        log.warning("ANTHROPIC_API_KEY is not set: answering with the %s", OFFLINE_NOTICE)
    return Agent(name=DEFAULT_AGENT, model=model)
