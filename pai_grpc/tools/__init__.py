"""Tools: backend (Python or remote ToolService) and client tools, with suspend/resume."""

from pai_grpc.tools._remote import RemoteToolError, RemoteToolServer, ToolServicer, serve_tools
from pai_grpc.tools._tool import (
    InitialEntry,
    ResumeEntry,
    Tool,
    ToolContext,
    ToolDenied,
    ToolEntry,
    ToolFailed,
    ToolSuspended,
    client_tool,
    tool,
)
from pai_grpc.tools._validate import InvalidToolInput, parse_input

__all__ = [
    "InitialEntry",
    "InvalidToolInput",
    "RemoteToolError",
    "RemoteToolServer",
    "ResumeEntry",
    "Tool",
    "ToolContext",
    "ToolDenied",
    "ToolEntry",
    "ToolFailed",
    "ToolServicer",
    "ToolSuspended",
    "client_tool",
    "parse_input",
    "serve_tools",
    "tool",
]
