"""The TOML config file as typed, closed models, parsed once at the edge.

Every table is a pydantic model with ``extra="forbid"`` and strict types, so a
misspelt key (``max_step = 2``) or a value of the wrong type stops the process
at start-up with a message naming the file, the table and the key, instead of
being silently ignored. :func:`load_config_file` is the only reader of the
file; everything inward (``Settings``, ``load_agents``) sees these models.

The configuration reference (``docs/configuration.md``) is generated from these
models by :mod:`pai_grpc._config_reference`; each field's ``description`` is its meaning.
"""

from __future__ import annotations

import difflib
import re
import tomllib
import types
import typing
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, TypeAlias, Union

from pydantic import BaseModel, Field, ValidationError, field_validator
from pydantic_core import ErrorDetails

from pai_grpc._config_auth import AuthTable
from pai_grpc._config_http import HttpTable
from pai_grpc._config_limits import LimitsTable
from pai_grpc._config_metrics import MetricsTable
from pai_grpc._config_retention import RetentionTable
from pai_grpc._config_table import Table
from pai_grpc._config_telemetry import TelemetryTable
from pai_grpc._config_tls import ClientTlsTable, ServerTable, ServerTlsTable


class ConfigError(Exception):
    """The configuration is invalid; the message says where and why."""


#: Lifecycle phases a plugin's policy can be overridden for (pipeline order;
#: tests check this equals ``pai_grpc.lifecycle.PHASES``, which this light
#: module does not import).
PhaseName: TypeAlias = Literal[
    "prepare_run",
    "resolve_model_context",
    "prepare_history_rewrite",
    "history_rewritten",
    "prepare_model_step",
    "around_model_call",
    "transform_step_stream",
    "before_tool_call",
    "after_tool_result",
    "after_step",
]
FailureMode: TypeAlias = Literal["closed", "open"]
#: A free-form table handed on as is (JSON Schemas, provider options, hook options).
JsonTable: TypeAlias = dict[str, Any]


class RunnerTable(Table):
    """How runs are executed."""

    concurrency: int = Field(32, ge=1, description="Executions one runner holds at once.")
    lease_seconds: float = Field(
        30.0, gt=0, description="Run lease length; heartbeats come every third of it."
    )
    grace_seconds: float = Field(
        10.0, ge=0, description="How long SIGTERM waits for in-flight work (drain)."
    )


class OfflineTable(Table):
    """The labelled offline stand-in model."""

    chunk_delay: float = Field(
        0.02, ge=0, description="Pause in seconds between words of the offline stand-in model."
    )


class MemoryTable(Table):
    """Byte bounds of what the server keeps in memory."""

    run_event_buffer_bytes: int = Field(
        1_048_576,
        ge=1,
        description="Bytes of live events kept in memory per executing run for StreamRun; "
        "older events are read from the durable log.",
    )
    context_cache_bytes: int = Field(
        67_108_864,
        ge=1,
        description="Total bytes of the per-thread context cache (least recently used "
        "threads are evicted first).",
    )


class HookHostTable(Table):
    """The HookHostService remote lifecycle plugins call back."""

    address: str = Field("127.0.0.1:0", description="`HOST:PORT` it listens on.")
    advertise: str = Field("", description="The address plugins dial, when not the bound address.")
    tls: ServerTlsTable | None = Field(
        None, description="TLS of the HookHostService port (keys as `[tls]`)."
    )


class ModelSettingsTable(Table):
    """Portable generation settings (mirrors ``pai_grpc.domain.ModelSettings``)."""

    max_output_tokens: int | None = Field(None, description="Output token ceiling.")
    temperature: float | None = Field(None, description="Sampling temperature.")
    top_p: float | None = Field(None, description="Nucleus sampling mass.")
    top_k: int | None = Field(None, description="Sample among the k likeliest tokens.")
    stop_sequences: list[str] | None = Field(None, description="Strings that end the output.")
    seed: int | None = Field(None, description="Sampling seed, where the provider supports it.")
    presence_penalty: float | None = Field(None, description="Presence penalty.")
    frequency_penalty: float | None = Field(None, description="Frequency penalty.")
    max_retries: int | None = Field(None, description="Provider call retries.")


class ContractTable(Table):
    """JSON Schemas of an agent's metadata bags and application data parts."""

    thread_metadata: JsonTable | None = Field(None, description="Schema of thread metadata.")
    thread_private_metadata: JsonTable | None = Field(
        None, description="Schema of private thread metadata."
    )
    run_metadata: JsonTable | None = Field(None, description="Schema of run metadata.")
    run_private_metadata: JsonTable | None = Field(
        None, description="Schema of private run metadata."
    )
    message_metadata: JsonTable | None = Field(None, description="Schema of message metadata.")
    message_private_metadata: JsonTable | None = Field(
        None, description="Schema of private message metadata."
    )
    ui_data: dict[str, JsonTable] = Field(
        default_factory=dict,
        description="Application data parts (`data-<name>`): name -> JSON Schema.",
    )


class PhasePolicyTable(Table):
    """One phase's policy of a plugin; unset keys inherit the plugin's."""

    timeout_ms: float | None = Field(
        None, gt=0, description="Timeout of this phase (default: the plugin's `timeout_ms`)."
    )
    failure_mode: FailureMode | None = Field(
        None, description="Failure mode of this phase (default: the plugin's `failure_mode`)."
    )


class PluginHook(Table):
    """A remote LifecyclePluginService, any language."""

    kind: Literal["plugin"]
    address: str = Field(min_length=1, description="`HOST:PORT` of the plugin.")
    name: str | None = Field(
        None, description="Diagnostics name (default: the name the plugin describes)."
    )
    timeout_ms: float = Field(1000, gt=0, description="Per-phase timeout in milliseconds.")
    failure_mode: FailureMode = Field(
        "closed",
        description="`closed`: a failed plugin call fails the run (HOOK_TIMEOUT, "
        "HOOK_UNAVAILABLE, HOOK_PROTOCOL_ERROR); `open`: the hook is skipped and the "
        "failure counted on the run.",
    )
    phases: dict[PhaseName, PhasePolicyTable] = Field(
        default_factory=dict,
        description="Per-phase overrides of `timeout_ms` / `failure_mode` (a key an override "
        "leaves unset is inherited from the plugin); keys are phases the plugin declares.",
    )
    only: list[PhaseName] | None = Field(
        None, description="Call only these of the declared phases (default: all declared)."
    )
    tls: ClientTlsTable | None = Field(None, description="TLS of the channel to the plugin.")


class QuotaHook(Table):
    """A per-thread run quota (prepare_run guardrail)."""

    kind: Literal["quota"]
    max_runs: int = Field(ge=1, description="Runs allowed per thread (per window).")
    window_seconds: float | None = Field(
        None, gt=0, description="The count resets after this long (default: never)."
    )
    message: str = Field(
        "This conversation has reached its usage limit.",
        description="The assistant's answer once the quota is used up.",
    )
    key: str = Field("quota", description="Private-metadata key holding the count.")
    name: str = Field("quota", description="Hook name in diagnostics.")


class RecentWindowHook(Table):
    """Keep only the newest model messages of the context."""

    kind: Literal["recent_window"]
    messages: int = Field(20, ge=1, description="Model messages kept.")
    name: str = Field("recent_window", description="Hook name in diagnostics.")


class CompactionHook(Table):
    """Summarise older context once it grows past a threshold."""

    kind: Literal["compaction"]
    model: str = Field("offline", description="The model that writes the summaries.")
    max_messages: int = Field(
        40, ge=2, description="Compact when more context messages follow the last boundary."
    )
    max_tokens: int | None = Field(
        None, ge=1, description="Also compact when the estimated context tokens exceed this."
    )
    keep_recent: int = Field(10, ge=1, description="Context messages kept verbatim.")
    key: str = Field("compaction", description="Private-metadata key holding its state.")
    instructions: str | None = Field(
        None, description="Instructions of the summary call (default: built-in ones)."
    )
    name: str = Field("compaction", description="Hook name in diagnostics.")


class RedactSecretsHook(Table):
    """Redact secrets from text and reasoning as a canonical transform."""

    kind: Literal["redact_secrets"]
    patterns: list[str] | None = Field(
        None,
        description="Regular expressions of secrets (default: common API keys, cloud keys, "
        "tokens and private keys).",
    )
    replacement: str = Field("[REDACTED]", description="What a secret is replaced with.")
    name: str = Field("redact_secrets", description="Hook name in diagnostics.")


class ModelFallbackHook(Table):
    """Call a fallback model when the primary fails before producing output."""

    kind: Literal["model_fallback"]
    model: str = Field(description="The fallback model (`provider:model_id` or `offline`).")
    reasons: list[str] | None = Field(
        None, description="Error reasons that fall back (default: any)."
    )
    name: str = Field("model_fallback", description="Hook name in diagnostics.")


class PythonHook(Table):
    """Your own ``AgentLifecycle``, imported from Python."""

    kind: Literal["python"]
    ref: str = Field(
        description="`module:attribute`: an AgentLifecycle instance, a class or a factory."
    )
    options: JsonTable = Field(
        default_factory=dict, description="Keyword arguments of the class or factory."
    )

    @field_validator("ref")
    @classmethod
    def _module_attribute(cls, ref: str) -> str:
        module, _, attr = ref.partition(":")
        if not module or not attr:
            raise ValueError("ref must be 'module:attribute'")
        return ref


LifecycleEntry: TypeAlias = Annotated[
    PluginHook
    | QuotaHook
    | RecentWindowHook
    | CompactionHook
    | RedactSecretsHook
    | ModelFallbackHook
    | PythonHook,
    Field(discriminator="kind"),
]


class AgentTable(Table):
    """One agent."""

    model: str = Field(
        "offline",
        description="`provider:model_id` (e.g. `anthropic:claude-sonnet-5-5`) or "
        "`offline`, the labelled offline stand-in.",
    )
    instructions: str = Field("", description="System instructions.")
    max_steps: int = Field(8, ge=1, description="Model-step ceiling per execution episode.")
    tools: list[str] = Field(
        default_factory=list,
        description="Tool names: `[tools.*]`, tools of `[tool_servers.*]`, or Python tools.",
    )
    model_settings: ModelSettingsTable = Field(
        default_factory=ModelSettingsTable, description="Portable generation settings."
    )
    provider_options: JsonTable = Field(
        default_factory=dict,
        description="Provider-specific options by provider name, passed through as is.",
    )
    lifecycle: list[LifecycleEntry] = Field(
        default_factory=list,
        description="Hooks, composed in order (the first is outermost).",
    )
    contract: ContractTable = Field(
        default_factory=ContractTable, description="JSON Schemas the agent's data must match."
    )


class ToolTable(Table):
    """A client tool (the client submits its result)."""

    kind: Literal["client"] = Field(
        "client",
        description="Only `client`: backend tools come from `[tool_servers]` (any language) "
        "or Python.",
    )
    description: str = Field("", description="What the model is told the tool does.")
    input_schema: JsonTable = Field(
        default_factory=lambda: {"type": "object"},
        description="JSON Schema of the tool's input.",
    )

    @field_validator("kind", mode="before")
    @classmethod
    def _client_only(cls, kind: object) -> object:
        if kind != "client":
            raise ValueError(
                f"kind {kind!r}: config declares client tools; backend tools come from "
                "[tool_servers] (any language) or Python"
            )
        return kind


class ToolServerTable(Table):
    """A remote ToolService with backend tools."""

    address: str = Field(min_length=1, description="`HOST:PORT` of the ToolService.")
    timeout: float = Field(30.0, gt=0, description="Seconds a tool call may take.")
    approval: list[str] = Field(
        default_factory=list, description="Its tools that ask a human before running."
    )
    tls: ClientTlsTable | None = Field(
        None, description="TLS of the channel to the server (keys as a plugin hook's `tls`)."
    )


class ConfigFile(Table):
    """The whole TOML config file."""

    default_agent: str | None = Field(
        None,
        description="The agent of threads that name none (default: the first agent in the file).",
    )
    auth: AuthTable = Field(
        default_factory=AuthTable, description="Identities and the scopes they get."
    )
    runner: RunnerTable = Field(default_factory=RunnerTable, description="Run execution.")
    offline: OfflineTable = Field(
        default_factory=OfflineTable, description="The offline stand-in model."
    )
    memory: MemoryTable = Field(default_factory=MemoryTable, description="Memory bounds.")
    tls: ServerTlsTable | None = Field(None, description="TLS of the API port (default: none).")
    server: ServerTable = Field(
        default_factory=ServerTable,
        description="Keepalive and connection age of the API port, and the event loop.",
    )
    limits: LimitsTable = Field(default_factory=LimitsTable, description="Per-scope limits.")
    retention: RetentionTable = Field(
        default_factory=RetentionTable, description="Bounded storage growth (the sweeper)."
    )
    metrics: MetricsTable = Field(default_factory=MetricsTable, description="Metrics export.")
    http: HttpTable = Field(
        default_factory=HttpTable, description="The HTTP port (Connect, gRPC-Web, console)."
    )
    hook_host: HookHostTable = Field(
        default_factory=HookHostTable, description="The HookHostService for remote plugins."
    )
    agents: dict[str, AgentTable] = Field(
        default_factory=dict,
        description="Agents by name (without any: a default agent answers with Claude when "
        "ANTHROPIC_API_KEY is set, else with the offline stand-in).",
    )
    tools: dict[str, ToolTable] = Field(default_factory=dict, description="Client tools by name.")
    tool_servers: dict[str, ToolServerTable] = Field(
        default_factory=dict, description="Remote tool servers by name."
    )
    telemetry: TelemetryTable = Field(default_factory=TelemetryTable, description="Traces.")


def load_config_file(path: Path) -> ConfigFile:
    """Read and validate ``path``, or raise :class:`ConfigError` naming file, table and key."""
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError as e:
        raise ConfigError(f"config file {path} does not exist") from e
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"config file {path}: {e}") from e
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML: {e}") from e
    return parse_config(data, str(path))


def parse_config(data: dict[str, Any], source: str) -> ConfigFile:
    """Validate parsed TOML; ``source`` names the file in error messages."""
    try:
        return ConfigFile.model_validate(data)
    except ValidationError as e:
        lines = [f"{source}: {describe_error(err)}" for err in e.errors(include_url=False)]
        raise ConfigError("\n".join(lines)) from None


# ---- error messages ----------------------------------------------------------

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _key(part: str) -> str:
    return part if _BARE_KEY.fullmatch(part) else f'"{part}"'


def describe_error(err: ErrorDetails) -> str:
    """``[table] key: what is wrong`` for one validation error."""
    loc = list(err["loc"])
    kind = err["type"]
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        # The ``kind`` of a lifecycle entry: the location is the entry itself.
        tag = (err.get("ctx") or {}).get("tag")
        kinds = ", ".join(tag for m in _models_of(_unwrap(LifecycleEntry)) for tag in _kind_tags(m))
        message = f"unknown kind {tag!r}" if tag else "required key is missing"
        return f"{_table_name(loc)} kind: {message}; use one of {kinds}"
    if loc and loc[-1] == "[key]":  # a dict key outside its Literal (a phase name)
        loc.pop()
    strs = [i for i, p in enumerate(loc) if isinstance(p, str)]
    if not strs:
        return f"(top level): {_message(err, [])}"
    cut = strs[-1]
    key = _key(str(loc[cut])) + "".join(f"[{p}]" for p in loc[cut + 1 :])
    table = loc[:cut]
    return f"{_table_name(table)}{_tail(table)}{key}: {_message(err, table)}"


def _table_name(table: Sequence[str | int]) -> str:
    """``[a.b]``, or ``[[a.b.lifecycle]] #n (kind)`` inside an array of tables."""
    if not table:
        return "(top level)"
    for i, part in enumerate(table):
        if isinstance(part, int):
            head = ".".join(_key(str(p)) for p in table[:i])
            tag = table[i + 1] if i + 1 < len(table) else None
            return f"[[{head}]] #{part + 1}" + (f" ({tag})" if isinstance(tag, str) else "")
    return "[" + ".".join(_key(str(p)) for p in table) + "]"


def _tail(table: Sequence[str | int]) -> str:
    """The separator before the key: a sub-table of an array entry is a key prefix."""
    for i, part in enumerate(table):
        if isinstance(part, int):
            rest = [str(p) for p in table[i + 2 :]]
            return " " + "".join(f"{_key(p)}." for p in rest)
    return " "


def _message(err: ErrorDetails, table: Sequence[str | int]) -> str:
    kind = err["type"]
    ctx = err.get("ctx") or {}
    loc = err["loc"]
    if kind == "extra_forbidden":
        names = list(_fields_at(table))
        return "unknown key" + _suggest(str(loc[-1]), names)
    if kind == "missing":
        return "required key is missing"
    if kind in _EXPECTED:
        return f"expected {_EXPECTED[kind]}, got {_toml_type(err.get('input'))}"
    if kind == "value_error" and "error" in ctx:
        return str(ctx["error"])
    if kind == "literal_error":
        choices = re.findall(r"'([^']*)'", str(ctx.get("expected", "")))
        got = err.get("input")
        unknown = "unknown key" if loc and loc[-1] == "[key]" else f"{got!r} is not allowed"
        hint = _suggest(got, choices) if isinstance(got, str) else ""
        return f"{unknown}{hint}; use {ctx.get('expected')}"
    return str(err["msg"])


#: Type errors in TOML's words.
_EXPECTED = {
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "string_type": "a string",
    "bool_type": "a boolean",
    "bool_parsing": "a boolean",
    "list_type": "an array",
    "dict_type": "a table",
    "model_type": "a table",
    "model_attributes_type": "a table",
}


def _toml_type(value: object) -> str:
    """The TOML type of a parsed value, for "expected X, got Y"."""
    for python, name in (
        (bool, "a boolean"),
        (int, "an integer"),
        (float, "a number"),
        (str, "a string"),
        (list, "an array"),
        (dict, "a table"),
    ):
        if isinstance(value, python):
            return name
    return "a date or time" if value is not None else "nothing"


def _suggest(word: str, names: list[str]) -> str:
    close = difflib.get_close_matches(word, names, n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def _fields_at(table: Sequence[str | int]) -> Iterator[str]:
    """The keys the table at ``table`` (a validation location) accepts."""
    model = _model_at(ConfigFile, list(table))
    if model is not None:
        yield from model.model_fields


def _model_at(model: type[BaseModel], loc: list[str | int]) -> type[BaseModel] | None:
    if not loc:
        return model
    field = model.model_fields.get(str(loc[0]))
    if field is None:
        return None
    return _walk(field.annotation, loc[1:])


def _walk(annotation: Any, loc: list[str | int]) -> type[BaseModel] | None:
    annotation = _unwrap(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return _model_at(annotation, loc)
    if not loc:
        return None
    origin = typing.get_origin(annotation)
    if origin in (dict, list):
        return _walk(typing.get_args(annotation)[-1], loc[1:])
    members = _models_of(annotation)
    if members:  # a tagged union: the next location part is the tag
        for member in members:
            if loc[0] in _kind_tags(member):
                return _model_at(member, loc[1:])
    return None


def _unwrap(annotation: Any) -> Any:
    """``X`` from ``Annotated[X, ...]`` and ``X | None``."""
    while typing.get_origin(annotation) is Annotated:
        annotation = typing.get_args(annotation)[0]
    if typing.get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return _unwrap(args[0])
    return annotation


def _models_of(annotation: Any) -> list[type[BaseModel]]:
    if typing.get_origin(annotation) in (Union, types.UnionType):
        return [
            a
            for a in typing.get_args(annotation)
            if isinstance(a, type) and issubclass(a, BaseModel)
        ]
    return []


def _kind_tags(model: type[BaseModel]) -> tuple[str, ...]:
    field = model.model_fields.get("kind")
    if field is None:
        return ()
    return tuple(typing.get_args(_unwrap(field.annotation)))
