"""Tool definitions: backend tools (Python or remote), client tools, suspend/resume.

A backend tool's ``execute(input, ctx)`` returns its output. It fails on
purpose with ``ctx.fail(...)`` (source ``fail``) — any other exception is a
``throw``. Human approval and data collection are ``ctx.suspend(...)``: the
run waits on a pending action, and the tool is executed again with
``ctx.entry`` of type ``resume`` carrying the human's answer (TH-05).
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn, TypeAlias, TypeVar, get_type_hints

from pydantic import BaseModel

from pai_grpc.domain import (
    InitialEntry,
    JsonObject,
    JsonValue,
    ResumeEntry,
    SuspendKind,
    ToolEntry,
    ToolManifestEntry,
    ToolSourceName,
)


class ToolFailed(Exception):
    """Raised by ``ctx.fail``: a deliberate, model-visible failure (source ``fail``)."""

    def __init__(self, message: str, data: JsonValue = None) -> None:
        super().__init__(message)
        self.message = message
        self.data = data


class ToolSuspended(Exception):
    """Raised by ``ctx.suspend``: the run waits for a human (approval or data)."""

    def __init__(self, name: str, kind: SuspendKind, request: JsonValue) -> None:
        super().__init__(f"suspended at {name!r}")
        self.name = name
        self.kind = kind
        self.request = request


class ToolDenied(Exception):
    """Raised by ``ctx.deny``: the approval was refused (the part becomes output-denied)."""

    def __init__(self, reason: str | None = None) -> None:
        super().__init__(reason or "denied")
        self.reason = reason


@dataclass
class ToolContext:
    """What a tool sees of its call."""

    run_id: str
    thread_id: str
    tool_call_id: str
    tool_name: str
    entry: ToolEntry = field(default_factory=InitialEntry)
    #: The requests of earlier suspends of this call, oldest first.
    suspend_history: list[JsonValue] = field(default_factory=list)

    def fail(self, message: str, data: JsonValue = None) -> NoReturn:
        """Fail deliberately with a model-visible message."""
        raise ToolFailed(message, data)

    def suspend(
        self, request: JsonValue, *, kind: SuspendKind = "approval", name: str | None = None
    ) -> NoReturn:
        """Wait for a human: ``kind`` approval (approve/deny) or data (a value)."""
        raise ToolSuspended(name or kind, kind, request)

    def deny(self, reason: str | None = None) -> NoReturn:
        """Report that the human refused the approval."""
        raise ToolDenied(reason)

    @property
    def resumed(self) -> ResumeEntry | None:
        """The resume entry, when this execution follows a resolved suspend."""
        return self.entry if isinstance(self.entry, ResumeEntry) else None


Execute: TypeAlias = Callable[[Any, ToolContext], Awaitable[JsonValue]]


@dataclass
class Tool:
    """A tool an agent can call.

    Attributes:
        name: Name the model uses.
        description: What the tool does (shown to the model).
        input_schema: JSON Schema of the input.
        execute: Backend implementation; ``None`` makes it a client tool (the
            client submits the result through ResolvePendingAction).
        input_model: A pydantic model the input is parsed into before ``execute``.
        approval: Ask a human before executing (a built-in suspend).
        concurrent: May run at the same time as the step's other tool calls.
        source: Where it runs, as hooks see it.
        output_schema: JSON Schema outputs must satisfy; synthetic outputs
            (a before_tool_call skip, a client's or operator's result) are
            checked against it too (TH-02).
    """

    name: str
    description: str = ""
    input_schema: JsonObject = field(default_factory=lambda: {"type": "object"})
    execute: Execute | None = None
    input_model: type[BaseModel] | None = None
    approval: bool = False
    concurrent: bool = True
    source: ToolSourceName = "backend"
    output_schema: JsonObject | None = None
    #: The compiled JSON Schema validator (built on first use).
    validator: Any = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.execute is None:
            self.source = "client"

    @property
    def is_client(self) -> bool:
        """Whether the client executes this tool."""
        return self.execute is None

    def manifest(self) -> ToolManifestEntry:
        """The tool as advertised to the model."""
        return ToolManifestEntry(
            name=self.name,
            description=self.description,
            input_schema=self.input_schema,
            source=self.source,
        )


F = TypeVar("F", bound=Callable[..., Awaitable[Any]])


def tool(
    *, name: str | None = None, description: str | None = None, approval: bool = False
) -> Callable[[Callable[..., Awaitable[Any]]], Tool]:
    """Make a backend tool of an async function ``f(input: Model, ctx: ToolContext)``.

    The input schema comes from the pydantic model annotating the first
    parameter; the description defaults to the docstring.
    """
    # Resolve string annotations in the scope that applies the decorator too,
    # so models defined inside functions work with `from __future__ import annotations`.
    caller_locals = dict(sys._getframe(1).f_locals)

    def wrap(fn: Callable[..., Awaitable[Any]]) -> Tool:
        hints = get_type_hints(fn, localns=caller_locals)
        params = list(inspect.signature(fn).parameters)
        model = hints.get(params[0]) if params else None
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            raise TypeError(f"{fn.__name__}: the first parameter must be a pydantic model")
        takes_ctx = len(params) > 1

        async def execute(value: Any, ctx: ToolContext) -> JsonValue:
            result = await (fn(value, ctx) if takes_ctx else fn(value))
            if isinstance(result, BaseModel):
                out: JsonValue = result.model_dump(mode="json")
                return out
            return result

        return Tool(
            name=name or fn.__name__,
            description=description or inspect.getdoc(fn) or "",
            input_schema=model.model_json_schema(),
            execute=execute,
            input_model=model,
            approval=approval,
        )

    return wrap


def client_tool(
    name: str,
    *,
    description: str = "",
    input_schema: JsonObject | None = None,
    output_schema: JsonObject | None = None,
) -> Tool:
    """A tool the client executes (the run waits for its result)."""
    return Tool(
        name=name,
        description=description,
        input_schema=input_schema or {"type": "object"},
        execute=None,
        output_schema=output_schema,
    )
