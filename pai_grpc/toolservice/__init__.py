"""The ToolService edge: remote backend tools over gRPC.

:class:`RemoteToolServer` is the runtime's client of a tool server declared
by address; :func:`serve_tools` hosts Python :class:`~pai_grpc.tools.Tool`
objects as a ToolService. Both convert through :mod:`pai_grpc.convert`, which
is why they live outside :mod:`pai_grpc.tools` (the conversion layer depends
on the tools' domain types, never the other way round).
"""

from pai_grpc._wire import ServerTls
from pai_grpc.toolservice._client import RemoteToolError, RemoteToolServer
from pai_grpc.toolservice._server import ToolServicer, serve_tools

__all__ = ["RemoteToolError", "RemoteToolServer", "ServerTls", "ToolServicer", "serve_tools"]
