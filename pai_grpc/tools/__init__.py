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
from pai_grpc.tools._validate import InvalidToolInput, InvalidToolOutput, check_output, parse_input

__all__ = [
    "InitialEntry",
    "InvalidToolInput",
    "InvalidToolOutput",
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
    "check_output",
    "client_tool",
    "parse_input",
    "serve_tools",
    "tool",
]
