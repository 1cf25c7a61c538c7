"""Remote lifecycle plugins: hooks hosted by LifecyclePluginService services in any language.

* :class:`RemoteLifecycle` — the runtime's adapter (an AgentLifecycle that calls a plugin);
* :class:`HookHost` — HookHostService, the thread facade for remote hooks, behind
  capability tokens;
* :func:`serve_plugin` — the Python plugin SDK: host any AgentLifecycle as a plugin.
"""

from pai_grpc.plugins._adapter import (
    DEFAULT_TIMEOUT,
    PhasePolicy,
    PluginConfig,
    PluginConfigError,
    RemoteLifecycle,
)
from pai_grpc.plugins._errors import HookFailure, HookProtocolError, HookTimeout, HookUnavailable
from pai_grpc.plugins._host import Grant, HookHost
from pai_grpc.plugins._sdk import ModelRef, PluginServer, PluginServicer, serve_plugin

__all__ = [
    "DEFAULT_TIMEOUT",
    "Grant",
    "HookFailure",
    "HookHost",
    "HookProtocolError",
    "HookTimeout",
    "HookUnavailable",
    "ModelRef",
    "PhasePolicy",
    "PluginConfig",
    "PluginConfigError",
    "PluginServer",
    "PluginServicer",
    "RemoteLifecycle",
    "serve_plugin",
]
