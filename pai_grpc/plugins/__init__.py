"""Remote lifecycle plugins, the runtime side: hooks hosted by LifecyclePluginService services.

* :class:`RemoteLifecycle` — the runtime's adapter (an AgentLifecycle that calls a plugin);
* :class:`HookHost` — HookHostService, the thread facade for remote hooks, behind
  capability tokens;
* :class:`PluginFailure` and its kinds — a plugin that could not be used.

The plugin side (what a plugin author imports) is :mod:`pai_grpc.plugin_sdk`.
"""

from pai_grpc.plugins._adapter import RemoteLifecycle
from pai_grpc.plugins._config import DEFAULT_TIMEOUT, PhasePolicy, PluginConfig, PluginConfigError
from pai_grpc.plugins._errors import HookProtocolError, HookTimeout, HookUnavailable, PluginFailure
from pai_grpc.plugins._host import Grant, HookHost

__all__ = [
    "DEFAULT_TIMEOUT",
    "Grant",
    "HookHost",
    "HookProtocolError",
    "HookTimeout",
    "HookUnavailable",
    "PhasePolicy",
    "PluginConfig",
    "PluginConfigError",
    "PluginFailure",
    "RemoteLifecycle",
]
