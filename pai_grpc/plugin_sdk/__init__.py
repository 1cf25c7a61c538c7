"""The Python plugin SDK: host any AgentLifecycle as a LifecyclePluginService.

::

    from pai_grpc.plugin_sdk import serve_plugin

    server = await serve_plugin(MyGuard(), "0.0.0.0:7070")
    await server.wait()

With ``tls=ServerTls(...)`` the plugin serves TLS (mutual with a client CA),
and ``host_tls=ClientTls(...)`` secures its calls back to HookHostService;
without them, the ``PAI_PLUGIN_TLS_*`` and ``PAI_HOOK_HOST_TLS_*`` environment
variables apply (see :mod:`pai_grpc.plugin_sdk._serve`).

Hooks run exactly as they would in process; their ``thread``, ``run`` and
``history`` are proxies calling the runtime's HookHostService with the
capability token of the current hook call. This package is the plugin side
of the protocol: it loads neither the runtime's server, its executor nor its
plugin adapter (:mod:`pai_grpc.plugins`), nor storage or SQLAlchemy (a hook's
``Page`` and ``VersionConflict`` come from :mod:`pai_grpc.lifecycle`, whose
in-process facade lives in the runtime).
"""

from pai_grpc._wire import ClientTls, ServerTls
from pai_grpc.plugin_sdk._serve import PluginServer, serve_plugin
from pai_grpc.plugin_sdk._servicer import ModelRef, PluginServicer

__all__ = ["ClientTls", "ModelRef", "PluginServer", "PluginServicer", "ServerTls", "serve_plugin"]
