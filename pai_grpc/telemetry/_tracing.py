"""Traces: a span per RPC, per run execution, step, model call, tool call and hook call.

The trace of a run starts with the RPC that accepted it (Send, or any other
run-creating mutation): its W3C ``traceparent`` is stored with the run, and
every execution of the run, in whichever process claims it, is a span
``run <agent>`` whose parent is that stored context. A span cannot be started
in one process and ended in another, so a run recovered after a lost lease is
a second execution span in the same trace, with a ``pai.run.recovered`` event
and a link to the stored context.

Inside an execution, the runtime opens child spans through the helpers here
(:func:`step_span`, :func:`model_span`, :func:`tool_span`, :func:`hook_span`).
They use the tracer of the execution running in the current task (a context
variable set by :func:`execution_span`), so code below the executor (tool
phase, hook composition, remote plugin adapter) needs no telemetry plumbing,
and outside an execution they record nothing. Model and tool spans follow the
OpenTelemetry GenAI semantic conventions (``chat <model>``, ``execute_tool
<name>``, ``gen_ai.*`` attributes).
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from pai_grpc._config_file import ConfigError
from pai_grpc._config_telemetry import TelemetryTable

if TYPE_CHECKING:  # the package imports this module: no import back at run time
    # The SDK is imported where a provider is built: with traces off (the
    # default) a serving process never loads it.
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider, sampling

    from pai_grpc.config import Settings
    from pai_grpc.telemetry._core import Telemetry

__all__ = [
    "RECOVERED_EVENT",
    "client_interceptors",
    "current_traceparent",
    "execution_span",
    "hook_failed_open",
    "hook_span",
    "model_result",
    "model_span",
    "run_ended",
    "server_interceptors",
    "step_span",
    "tool_outcome",
    "tool_span",
    "tracer_provider_from_settings",
    "traces_enabled",
]

#: The span event an execution that recovers a run from a lost one carries.
RECOVERED_EVENT = "pai.run.recovered"

_PROPAGATOR = TraceContextTextMapPropagator()
#: The version-00 ``traceparent`` :func:`current_traceparent` writes.
_OWN_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")

#: The tracer of the run execution running in this task (None outside executions).
_execution_tracer: ContextVar[trace.Tracer | None] = ContextVar(
    "pai_execution_tracer", default=None
)


def traces_enabled(telemetry: Telemetry | None) -> bool:
    """Whether ``telemetry`` records traces (a provider other than the no-op one)."""
    return telemetry is not None and not isinstance(
        telemetry.tracer_provider, trace.NoOpTracerProvider
    )


# ---- gRPC: a server span per call, traceparent on outgoing calls -----------------


def _recording(tracer_provider: trace.TracerProvider | None) -> trace.TracerProvider | None:
    """``tracer_provider`` (None: the global one), or None when it cannot record.

    Interceptors over a provider that records nothing still cost every call
    their machinery (grpc.aio runs each intercepted client call as extra
    tasks); without a provider installed there are none. A global provider
    must therefore be installed before the channel or server is built.
    """
    provider = tracer_provider if tracer_provider is not None else trace.get_tracer_provider()
    if isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider)):
        return None
    return provider


def server_interceptors(
    telemetry: Telemetry | None = None, *, tracer_provider: trace.TracerProvider | None = None
) -> list[Any]:
    """The aio server interceptors: a span per call continuing the caller's ``traceparent``.

    Pass the process's ``telemetry`` (its RPC metrics are recorded by the same
    interceptor; a process that records neither gets none); or a
    ``tracer_provider`` directly (the plugin SDK, where ``None`` means the
    globally installed provider). Health checks get no span: balancers and
    probes would drown the traces.
    """
    from opentelemetry import metrics as otel_metrics

    from pai_grpc.telemetry._core import INSTRUMENTATION_NAME
    from pai_grpc.telemetry._metrics import metrics_for
    from pai_grpc.telemetry._rpc_server import ServerTelemetryInterceptor

    if telemetry is None:
        provider = _recording(tracer_provider)
        if provider is None:
            return []
        return [ServerTelemetryInterceptor(provider.get_tracer(INSTRUMENTATION_NAME), None)]
    tracer = telemetry.tracer() if traces_enabled(telemetry) else None
    recorded = not isinstance(telemetry.meter_provider, otel_metrics.NoOpMeterProvider)
    if tracer is None and not recorded:
        return []
    return [ServerTelemetryInterceptor(tracer, metrics_for(telemetry) if recorded else None)]


def client_interceptors(
    telemetry: Telemetry | None = None, *, tracer_provider: trace.TracerProvider | None = None
) -> list[Any]:
    """The aio client interceptors: a client span per call, ``traceparent`` in its metadata.

    Arguments as in :func:`server_interceptors`; an untraced process gets none.
    """
    from opentelemetry.instrumentation.grpc import aio_client_interceptors, filters

    if telemetry is not None:
        if not traces_enabled(telemetry):
            return []
        tracer_provider = telemetry.tracer_provider
    tracer_provider = _recording(tracer_provider)
    if tracer_provider is None:
        return []
    interceptors: list[Any] = aio_client_interceptors(
        tracer_provider=tracer_provider, filter_=filters.negate(filters.health_check())
    )
    return interceptors


# ---- the trace context stored with a run ----------------------------------------


def current_traceparent() -> str | None:
    """The W3C ``traceparent`` of the current span, or None when there is none."""
    # Formatted here rather than through the propagator's inject (a carrier
    # dict and a context lookup per call): this runs on every accepted run.
    span_context = trace.get_current_span().get_span_context()
    if not span_context.is_valid:
        return None
    return (
        f"00-{span_context.trace_id:032x}-{span_context.span_id:016x}"
        f"-{int(span_context.trace_flags):02x}"
    )


def _stored_context(traceparent: str | None) -> trace.SpanContext | None:
    """The span context a run's stored ``traceparent`` names (None if it names none).

    The runtime wrote it (:func:`current_traceparent`), so the common shape is
    parsed directly; anything else goes through the W3C propagator, which
    knows every version's rules.
    """
    if not traceparent:
        return None
    match = _OWN_TRACEPARENT.fullmatch(traceparent)
    if match is not None:
        trace_id, span_id = int(match[1], 16), int(match[2], 16)
        if trace_id == 0 or span_id == 0:
            return None
        return trace.SpanContext(
            trace_id, span_id, is_remote=True, trace_flags=trace.TraceFlags(int(match[3], 16))
        )
    ctx = _PROPAGATOR.extract({"traceparent": traceparent})
    span_context = trace.get_current_span(ctx).get_span_context()
    return span_context if span_context.is_valid else None


# ---- run executions ---------------------------------------------------------------


@contextmanager
def execution_span(
    telemetry: Telemetry,
    *,
    run_id: str,
    thread_id: str,
    agent: str,
    attempt: int,
    trace_context: str | None,
    recovered: bool,
) -> Iterator[Span]:
    """The span of one execution of a run, continuing the run's stored trace context.

    A recovered execution (an earlier attempt was lost or handed back) carries
    the ``pai.run.recovered`` event and a link to the stored context. The
    execution's child spans use this telemetry's tracer for as long as the
    block runs.
    """
    if not traces_enabled(telemetry):
        # Untraced: no span, and the execution's child spans are skipped outright.
        yield trace.INVALID_SPAN
        return
    tracer = telemetry.tracer()
    stored = _stored_context(trace_context)
    # Without a stored context the execution is a trace of its own: never a child
    # of whatever RPC happened to hand the run to this runner.
    parent = (
        trace.set_span_in_context(trace.NonRecordingSpan(stored))
        if stored is not None
        else otel_context.Context()
    )
    attributes: dict[str, Any] = {
        "pai.run.id": run_id,
        "pai.thread.id": thread_id,
        "pai.agent": agent,
        "pai.run.attempt": attempt,
    }
    links = [Link(stored, {"pai.link": "run_accepted"})] if recovered and stored else []
    span = tracer.start_span(
        f"run {agent}",
        context=parent,
        kind=SpanKind.INTERNAL,
        attributes=attributes,
        links=links,
        record_exception=False,
        set_status_on_exception=False,
    )
    if recovered:
        span.add_event(RECOVERED_EVENT, {"pai.run.previous_attempt": attempt - 1})
    with _Current(span):
        token = _execution_tracer.set(tracer)
        try:
            yield span
        finally:
            _execution_tracer.reset(token)


def run_ended(span: Span, status: str, reason: str | None = None) -> None:
    """Record how an execution ended (a run status, or handed_back / lease_lost)."""
    span.set_attribute("pai.run.status", status)
    if reason:
        span.set_attribute("pai.run.reason", reason)
    if status == "failed":
        span.set_status(Status(StatusCode.ERROR, reason or "failed"))


# ---- spans inside an execution ----------------------------------------------------


class _Current:
    """Make ``span`` the current span for a block and end it after.

    What ``start_as_current_span`` does, without its two generator-based
    context managers and its exception bookkeeping (the callers record
    failures themselves): this runs for every span of every run.
    """

    __slots__ = ("_span", "_token")

    def __init__(self, span: Span) -> None:
        self._span = span
        self._token: object = None

    def __enter__(self) -> None:
        self._token = otel_context.attach(trace.set_span_in_context(self._span))

    def __exit__(self, *exc: object) -> None:
        self._span.end()
        otel_context.detach(self._token)  # type: ignore[arg-type]


@contextmanager
def _child(
    name: str,
    attributes: dict[str, Any],
    *,
    expected: tuple[type[BaseException], ...] = (),
    kind: SpanKind = SpanKind.INTERNAL,
    outcome_key: str | None = None,
) -> Iterator[Span]:
    """A child span of the current execution; ``expected`` exceptions are not errors.

    With ``outcome_key`` a failure also sets ``<key>.outcome = "error"`` and
    ``<key>.failure_reason`` (the error's reason, or its type).
    """
    tracer = _execution_tracer.get()
    if tracer is None:
        yield trace.INVALID_SPAN
        return
    span = tracer.start_span(
        name,
        kind=kind,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    )
    with _Current(span):
        try:
            yield span
        except BaseException as e:
            # Control flow (the episode ending, cancellation) is not a failure of the span.
            if not isinstance(e, (*expected, asyncio.CancelledError, GeneratorExit)):
                reason = str(getattr(e, "reason", None) or type(e).__name__)
                span.record_exception(e)
                span.set_status(Status(StatusCode.ERROR, f"{type(e).__name__}: {e}"))
                span.set_attribute("error.type", reason)
                if outcome_key is not None:
                    span.set_attribute(f"{outcome_key}.outcome", "error")
                    span.set_attribute(f"{outcome_key}.failure_reason", reason)
            raise


def step_span(index: int, step_id: str, *, expected: tuple[type[BaseException], ...] = ()) -> Any:
    """The span ``pai.step`` of one step (model call, tools, after_step, transition)."""
    return _child("pai.step", {"pai.step.index": index, "pai.step.id": step_id}, expected=expected)


def model_span(provider: str, model_id: str) -> Any:
    """The span ``chat <model>`` of one model call, streamed to its end (GenAI conventions)."""
    return _child(
        f"chat {model_id}",
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.system": provider,
            "gen_ai.provider.name": provider,
            "gen_ai.request.model": model_id,
        },
        kind=SpanKind.CLIENT,
    )


def model_result(
    span: Span,
    *,
    model_id: str,
    input_tokens: int | None,
    output_tokens: int | None,
    finish_reasons: Sequence[str],
    error: str | None = None,
) -> None:
    """Record a model call's outcome: the model that answered, token usage, finish reasons.

    ``error`` is the reason of an error the stream ended with.
    """
    if error is not None:
        span.set_status(Status(StatusCode.ERROR, error))
        span.set_attribute("error.type", error)
    span.set_attribute("gen_ai.response.model", model_id)
    if input_tokens is not None:
        span.set_attribute("gen_ai.usage.input_tokens", input_tokens)
    if output_tokens is not None:
        span.set_attribute("gen_ai.usage.output_tokens", output_tokens)
    if finish_reasons:
        span.set_attribute("gen_ai.response.finish_reasons", list(finish_reasons))


def tool_span(name: str, call_id: str) -> Any:
    """The span ``execute_tool <name>`` of one tool execution (GenAI conventions)."""
    return _child(
        f"execute_tool {name}",
        {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": call_id,
        },
    )


def tool_outcome(span: Span, outcome: str, message: str | None = None) -> None:
    """Record a tool call's outcome: ``success``, ``error``, ``denied`` or ``suspended``."""
    span.set_attribute("pai.tool.outcome", outcome)
    if outcome == "error":
        span.set_status(Status(StatusCode.ERROR, message or "tool error"))
        span.set_attribute("error.type", "tool_error")


def hook_span(phase: str, hook: str) -> Any:
    """The span ``pai.hook <phase>`` of one hook call (in-process or a remote plugin)."""
    return _child(
        f"pai.hook {phase}",
        {"pai.hook.phase": phase, "pai.hook.name": hook, "pai.hook.outcome": "ok"},
        outcome_key="pai.hook",
    )


def hook_failed_open(reason: str) -> None:
    """Mark the current hook span: its plugin failed and the hook was skipped (fail open)."""
    if _execution_tracer.get() is None:
        return  # outside an execution the current span is no hook's
    span = trace.get_current_span()
    span.set_attribute("pai.hook.outcome", "failed_open")
    span.set_attribute("pai.hook.failure_reason", reason)


# ---- the process's tracer provider, from the [telemetry] table and OTEL_* ------------


def _setting(table: TelemetryTable, key: str, env: Mapping[str, str], *variables: str) -> Any:
    """A key the file sets, else the first OTEL_* variable set, else the key's default."""
    if key in table.model_fields_set:
        return getattr(table, key)
    for variable in variables:
        if env.get(variable):
            return env[variable].strip()
    return getattr(table, key)


def _sampler(name: str, arg: float | None) -> sampling.Sampler:
    from opentelemetry.sdk.trace import sampling

    ratio = 1.0 if arg is None else arg
    samplers: dict[str, sampling.Sampler] = {
        "always_on": sampling.ALWAYS_ON,
        "always_off": sampling.ALWAYS_OFF,
        "traceidratio": sampling.TraceIdRatioBased(ratio),
        "parentbased_always_on": sampling.ParentBased(sampling.ALWAYS_ON),
        "parentbased_always_off": sampling.ParentBased(sampling.ALWAYS_OFF),
        "parentbased_traceidratio": sampling.ParentBased(sampling.TraceIdRatioBased(ratio)),
    }
    if name not in samplers:
        raise ConfigError(f"[telemetry] sampler: unknown sampler {name!r}; use one of {samplers}")
    return samplers[name]


def tracer_provider_from_settings(
    settings: Settings | TelemetryTable, env: Mapping[str, str] | None = None
) -> TracerProvider | None:
    """The SDK tracer provider the ``[telemetry]`` table (and ``OTEL_*``) asks for.

    ``None`` when traces are not exported (``traces_exporter = "none"``, the
    default): the process then records through the no-op provider. The caller
    shuts the provider down at exit, which flushes the spans still queued.
    """
    table = settings if isinstance(settings, TelemetryTable) else settings.file.telemetry
    env = os.environ if env is None else env
    exporter_name = str(_setting(table, "traces_exporter", env, "OTEL_TRACES_EXPORTER"))
    # OTEL_TRACES_EXPORTER may list several; the first one is used.
    exporter_name = exporter_name.split(",")[0].strip().lower()
    if exporter_name in ("none", ""):
        return None
    service = str(_setting(table, "service_name", env, "OTEL_SERVICE_NAME"))
    sampler_name = str(_setting(table, "sampler", env, "OTEL_TRACES_SAMPLER")).lower()
    raw_arg = _setting(table, "sampler_arg", env, "OTEL_TRACES_SAMPLER_ARG")
    try:
        arg = None if raw_arg is None else float(raw_arg)
    except ValueError:
        raise ConfigError(f"OTEL_TRACES_SAMPLER_ARG: not a number: {raw_arg!r}") from None
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        ConsoleSpanExporter,
        SimpleSpanProcessor,
    )

    from pai_grpc.telemetry._jsonl import JsonLinesSpanExporter

    provider = TracerProvider(
        resource=Resource.create({"service.name": service}),
        sampler=_sampler(sampler_name, arg),
    )
    processor: SpanProcessor
    if exporter_name == "otlp":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        endpoint = str(
            _setting(
                table,
                "otlp_endpoint",
                env,
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "OTEL_EXPORTER_OTLP_ENDPOINT",
            )
        )
        processor = BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint or None))
    elif exporter_name == "console":
        processor = BatchSpanProcessor(ConsoleSpanExporter())
    elif exporter_name == "jsonl":
        # Written span by span: a debugging aid whose file is complete even when
        # the process is killed.
        processor = SimpleSpanProcessor(JsonLinesSpanExporter(table.traces_file))
    else:
        raise ConfigError(
            f"[telemetry] traces_exporter: unknown exporter {exporter_name!r}; "
            "use none, otlp, console or jsonl"
        )
    provider.add_span_processor(processor)
    return provider
