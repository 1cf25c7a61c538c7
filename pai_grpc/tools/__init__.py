"""Tools: backend and client tools, with suspend/resume.

Remote backend tools (a ToolService by address) are in :mod:`pai_grpc.toolservice`.
"""

from pai_grpc.domain import InitialEntry, ResumeEntry, ToolEntry
from pai_grpc.tools._tool import (
    Tool,
    ToolContext,
    ToolDenied,
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
    "ResumeEntry",
    "Tool",
    "ToolContext",
    "ToolDenied",
    "ToolEntry",
    "ToolFailed",
    "ToolSuspended",
    "check_output",
    "client_tool",
    "parse_input",
    "tool",
]
