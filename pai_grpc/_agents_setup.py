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
                                            # a key a phase leaves unset is the plugin's
    tls = { ca_file = "ca.pem", cert_file = "me.crt", key_file = "me.key" }  # optional mTLS
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
    tls = { cert_file = "host.crt", key_file = "host.key" }   # optional, as [tls]

    [tools.pick_color]                      # a client tool: the client submits its result
    kind = "client"
    description = "Ask the user to pick a color"
    input_schema = { type = "object", properties = { palette = { type = "array" } } }

    [tool_servers.search]                   # remote backend tools (ToolService)
    address = "127.0.0.1:7000"
    approval = ["lookup"]                   # these ask a human before running
    tls = { ca_file = "ca.pem", cert_file = "me.crt", key_file = "me.key" }  # optional mTLS

Without agents, a default agent answers with Claude when ANTHROPIC_API_KEY is
set and with the clearly labelled offline stand-in otherwise.

The file is validated as a whole by :mod:`pai_grpc._config_file` (unknown keys
and wrong types are refused there); this module turns the typed tables into
agents, tools, plugins and the hook host.
"""

from __future__ import annotations

import importlib
import logging
import os
from dataclasses import dataclass, field
from typing import Protocol

from pai_grpc._config_file import (
    AgentTable,
    CompactionHook,
    ContractTable,
    LifecycleEntry,
    ModelFallbackHook,
    PluginHook,
    PythonHook,
    QuotaHook,
    RecentWindowHook,
    RedactSecretsHook,
)
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
)
from pai_grpc.lifecycle.internal import contract_from_config
from pai_grpc.models import OFFLINE_NOTICE, ModelRegistry, UnknownModel
from pai_grpc.plugins import HookHost, PhasePolicy, PluginConfig, PluginConfigError, RemoteLifecycle
from pai_grpc.runtime import DEFAULT_AGENT, Agent, AgentRegistry
from pai_grpc.telemetry import Telemetry
from pai_grpc.tools import Tool, client_tool
from pai_grpc.toolservice import RemoteToolError, RemoteToolServer

log = logging.getLogger("pai_grpc")

#: The model the default agent uses when an API key is configured.
DEFAULT_CLAUDE = "anthropic:claude-sonnet-5-5"


async def _tool_servers(
    settings: Settings, telemetry: Telemetry | None
) -> tuple[dict[str, Tool], list[RemoteToolServer]]:
    tools: dict[str, Tool] = {}
    servers: list[RemoteToolServer] = []
    for name, table in settings.file.tool_servers.items():
        tls = table.tls.settings() if table.tls is not None else None
        server = RemoteToolServer(
            name, table.address, timeout=table.timeout, tls=tls, telemetry=telemetry
        )
        try:
            listed = await server.connect()
        except RemoteToolError as e:
            raise ConfigError(f"tool server {name!r} is unreachable at start-up: {e}") from e
        servers.append(server)
        approval = set(table.approval)
        for remote in listed:
            remote.approval = remote.name in approval
            tools[remote.name] = remote
        log.info("tool server %s at %s: %s", name, table.address, ", ".join(t.name for t in listed))
    return tools, servers


def _declared_tools(settings: Settings) -> dict[str, Tool]:
    return {
        name: client_tool(
            name, description=table.description, input_schema=dict(table.input_schema)
        )
        for name, table in settings.file.tools.items()
    }


class Closable(Protocol):
    """Something load_agents opened that the process closes at exit."""

    async def close(self) -> None:
        """Release it."""
        ...


def plugin_config(table: PluginHook) -> PluginConfig:
    """The adapter's config of a ``kind = "plugin"`` entry.

    A phase override inherits the plugin-level ``timeout_ms`` / ``failure_mode``
    for every key it leaves unset.
    """
    return PluginConfig(
        address=table.address,
        name=table.name,
        timeout=table.timeout_ms / 1000,
        failure_mode=table.failure_mode,
        phases={
            phase: PhasePolicy(
                timeout=(p.timeout_ms if p.timeout_ms is not None else table.timeout_ms) / 1000,
                failure_mode=p.failure_mode or table.failure_mode,
            )
            for phase, p in table.phases.items()
        },
        only=frozenset(table.only) if table.only is not None else None,
        tls=table.tls.settings() if table.tls is not None else None,
    )


@dataclass
class _Plugins:
    """Remote lifecycle plugins of the config and the one hook host they share."""

    settings: Settings
    models: ModelRegistry
    telemetry: Telemetry | None = None
    host: HookHost | None = None
    pending: list[tuple[str, RemoteLifecycle]] = field(default_factory=list)

    def plugin(self, agent: str, table: PluginHook) -> RemoteLifecycle:
        if self.host is None:
            conf = self.settings.file.hook_host
            tls = conf.tls.settings() if conf.tls is not None else None
            self.host = HookHost(
                conf.address, advertise=conf.advertise, tls=tls, telemetry=self.telemetry
            )
        remote = RemoteLifecycle(
            plugin_config(table), self.host, registry=self.models, telemetry=self.telemetry
        )
        self.pending.append((agent, remote))
        return remote


async def load_agents(
    settings: Settings,
    *,
    extra_tools: list[Tool] | None = None,
    telemetry: Telemetry | None = None,
) -> tuple[AgentRegistry, list[Closable]]:
    """Build the configured agents (connecting tool servers and plugins) or the default agent.

    Returns the registry and what was opened (tool servers, lifecycle plugins,
    the hook host), for the process to close at exit. With a traced
    ``telemetry``, calls to tool servers and plugins carry the run's
    ``traceparent`` and the hook host continues it. An unreachable or
    misdescribed plugin fails here, at start-up (never silently open).
    """
    models = ModelRegistry(offline_chunk_delay=settings.offline_chunk_delay)
    available = {t.name: t for t in extra_tools or []}
    available.update(_declared_tools(settings))
    remote, tool_servers = await _tool_servers(settings, telemetry)
    servers: list[Closable] = list(tool_servers)
    available.update(remote)
    agents: list[Agent] = []
    plugins = _Plugins(settings, models, telemetry)
    try:
        for name, table in settings.file.agents.items():
            agents.append(_agent(name, table, models, available, plugins))
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
    try:
        registry = AgentRegistry(agents, default=settings.file.default_agent or None)
    except ValueError as e:
        raise ConfigError(str(e)) from e
    return registry, servers


def _agent(
    name: str,
    table: AgentTable,
    models: ModelRegistry,
    available: dict[str, Tool],
    plugins: _Plugins,
) -> Agent:
    try:
        model = models.resolve(table.model)
    except UnknownModel as e:
        raise ConfigError(f"[agents.{name}] model: {e}") from e
    missing = [t for t in table.tools if t not in available]
    if missing:
        raise ConfigError(f"[agents.{name}] unknown tools: {', '.join(missing)}")
    return Agent(
        name=name,
        model=model,
        lifecycle=_lifecycle(name, table.lifecycle, models, plugins),
        contract=_contract(name, table.contract),
        instructions=table.instructions,
        max_steps=table.max_steps,
        model_settings=ModelSettings.model_validate(
            table.model_settings.model_dump(exclude_unset=True)
        ),
        provider_options=dict(table.provider_options),
        tools=[available[t] for t in table.tools],
    )


def _contract(agent: str, table: ContractTable) -> AgentContract:
    try:
        return contract_from_config(table.model_dump(exclude_unset=True))
    except (ValueError, TypeError) as e:
        raise ConfigError(f"[agents.{agent}.contract]: {e}") from e


def _lifecycle(
    agent: str, entries: list[LifecycleEntry], models: ModelRegistry, plugins: _Plugins
) -> AgentLifecycle | None:
    """The agent's hooks from ``[[agents.<name>.lifecycle]]`` entries, composed in order."""
    parts: list[AgentLifecycle] = []
    for i, entry in enumerate(entries):
        where = f"[[agents.{agent}.lifecycle]] #{i + 1} ({entry.kind})"
        try:
            if isinstance(entry, PluginHook):
                parts.append(plugins.plugin(agent, entry))
            else:
                parts.append(_hook(entry, models, where))
        except ConfigError:
            raise
        except (TypeError, ValueError, UnknownModel, PluginConfigError) as e:
            raise ConfigError(f"{where}: {e}") from e
    return compose_lifecycle(*parts) if parts else None


def _hook(entry: LifecycleEntry, models: ModelRegistry, where: str) -> AgentLifecycle:
    # Only the keys the file sets: the built-ins' own defaults apply to the rest.
    options = entry.model_dump(exclude_unset=True, exclude={"kind", "model"})
    match entry:
        case RecentWindowHook():
            return RecentWindow(**options)
        case RedactSecretsHook():
            return RedactSecrets(**options)
        case QuotaHook():
            return Quota(**options)
        case ModelFallbackHook():
            return ModelFallback(models.resolve(entry.model), **options)
        case CompactionHook():
            return ContextCompactor(models.resolve(entry.model), **options)
        case PythonHook():
            return _python_hook(entry, where)
    raise ConfigError(f"{where}: not a built-in hook")


def _python_hook(entry: PythonHook, where: str) -> AgentLifecycle:
    module_name, _, attr = entry.ref.partition(":")
    try:
        target = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"{where}: cannot load {entry.ref!r}: {e}") from e
    hook = target if isinstance(target, AgentLifecycle) else target(**entry.options)
    if not isinstance(hook, AgentLifecycle):
        raise ConfigError(f"{where}: {entry.ref!r} did not give an AgentLifecycle")
    return hook


def _default_agent(models: ModelRegistry) -> Agent:
    if os.environ.get("ANTHROPIC_API_KEY"):
        model = models.resolve(os.environ.get("PAI_MODEL", DEFAULT_CLAUDE))
        log.info("ANTHROPIC_API_KEY is set: the default agent answers with Claude")
    else:
        model = models.resolve("offline")
        log.warning("ANTHROPIC_API_KEY is not set: answering with the %s", OFFLINE_NOTICE)
    return Agent(name=DEFAULT_AGENT, model=model)
