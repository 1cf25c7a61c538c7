"""The remote lifecycle adapter: an AgentLifecycle that calls a LifecyclePluginService.

Remote and in-process hooks compose in one chain, in the configured order.
``connect()`` calls Describe at start-up; only the phases the plugin
declares are ever called (REM-01). Middleware phases run as bidirectional
streams: the plugin asks the runtime for ``next()`` and answers; in
around_model_call a plugin may hand the provider stream back untouched so its
chunks never cross the wire twice.

Failure policy per plugin and phase (DESIGN.md section 7, after Envoy
ext_proc): a timeout (default 1 s) on every wait for the plugin, and a
failure mode. ``closed`` fails the run with HOOK_TIMEOUT / HOOK_UNAVAILABLE /
HOOK_PROTOCOL_ERROR; ``open`` skips the hook for the rest of the step, counts
it and marks it on the run record. A stream transform fails open only before
its first chunk went downstream (the chunks it already consumed are replayed).
Errors a hook raised itself fail the run whatever the mode (CMPS-04); which
outcome gets which reason is in ``_errors.py`` (and the README, "Remote
plugins"). After ``backoff_after`` consecutive plugin failures the adapter
backs off: calls fail at once with HOOK_UNAVAILABLE while a probe
health-checks the plugin every ``health_interval``; SERVING ends the back-off,
which otherwise doubles (from ``backoff_initial`` up to ``backoff_max``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypeVar

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from pai.v1 import chunks_pb2, lifecycle_pb2, runs_pb2
from pai.v1 import lifecycle_plugin_service_pb2 as pb
from pai.v1 import lifecycle_plugin_service_pb2_grpc as pb_grpc
from pai_grpc.convert import (
    after_step_result_from_proto,
    after_tool_result_result_from_proto,
    before_tool_call_result_from_proto,
    chunk_from_proto,
    chunk_to_proto,
    history_rewrite_patch_from_proto,
    history_rewrite_to_proto,
    lifecycle_message_to_proto,
    model_call_patch_from_proto,
    model_messages_from_proto,
    model_messages_to_proto,
    model_step_request_to_proto,
    phase_from_proto,
    prepare_model_step_result_from_proto,
    prepare_run_result_from_proto,
    run_initiator_to_proto,
    run_operation_to_proto,
    step_abort_from_proto,
    step_summary_to_proto,
    struct_to_proto,
    timestamp_to_proto,
    tool_entry_to_proto,
    tool_info_to_proto,
    tool_result_to_proto,
    value_to_proto,
)
from pai_grpc.domain import DataChunk, ModelMessage, StepStreamChunk
from pai_grpc.errors import ModelError, PaiError
from pai_grpc.lifecycle import (
    PHASES,
    AfterStepInput,
    AfterStepResult,
    AfterToolResultInput,
    AfterToolResultResult,
    AgentLifecycle,
    BeforeToolCallInput,
    BeforeToolCallResult,
    ContextNext,
    HistoryRewritePatch,
    HistoryRewrittenInput,
    LifecycleBase,
    ModelCallNext,
    ModelStepRequest,
    ModelStepStreamResult,
    PrepareHistoryRewriteInput,
    PrepareModelStepInput,
    PrepareModelStepResult,
    PrepareRunInput,
    PrepareRunResult,
    ResolveModelContextInput,
    TransformStepStreamInput,
    apply_patch,
    current_report,
)
from pai_grpc.models import LanguageModel, ModelRegistry, model_name
from pai_grpc.plugins._errors import (
    HookFailure,
    HookProtocolError,
    HookTimeout,
    HookUnavailable,
    classify,
    hook_error,
)
from pai_grpc.plugins._host import Grant, HookHost
from storage import check_strict_json

log = logging.getLogger("pai_grpc.plugins")

T = TypeVar("T")
FailureMode = Literal["closed", "open"]
DEFAULT_TIMEOUT = 1.0
#: Upstream chunks read ahead of the plugin before the runtime waits for it (backpressure).
MAX_OUTBOX = 256


class PluginConfigError(Exception):
    """A plugin is unreachable or misdescribed at start-up (never silently open)."""


@dataclass(frozen=True)
class PhasePolicy:
    """Timeout (seconds) and failure mode of one phase."""

    timeout: float = DEFAULT_TIMEOUT
    failure_mode: FailureMode = "closed"


@dataclass
class PluginConfig:
    """How to reach a plugin and how to treat its failures.

    Attributes:
        address: ``host:port`` of the LifecyclePluginService.
        name: Diagnostics name (default: the name the plugin describes).
        timeout: Default per-phase timeout in seconds.
        failure_mode: Default failure mode (``closed`` or ``open``).
        phases: Per-phase overrides; every key must be a phase the plugin declares.
        only: Call only these of the declared phases (default: all declared).
        backoff_after: Consecutive failures before the adapter backs off.
        backoff_initial: First back-off, doubled per failed health check.
        backoff_max: Longest back-off.
        health_interval: How often a backed-off plugin is health-checked; a
            SERVING answer ends the back-off early.
    """

    address: str
    name: str | None = None
    timeout: float = DEFAULT_TIMEOUT
    failure_mode: FailureMode = "closed"
    phases: dict[str, PhasePolicy] = field(default_factory=dict)
    only: frozenset[str] | None = None
    backoff_after: int = 3
    backoff_initial: float = 1.0
    backoff_max: float = 30.0
    health_interval: float = 1.0

    def __post_init__(self) -> None:
        for phase in [*self.phases, *(self.only or ())]:
            if phase not in PHASES:
                raise PluginConfigError(f"unknown lifecycle phase {phase!r}")
        policies = [(self.timeout, self.failure_mode)]
        policies += [(p.timeout, p.failure_mode) for p in self.phases.values()]
        for timeout, mode in policies:
            if mode not in ("closed", "open"):
                raise PluginConfigError(f"failure_mode must be closed or open, not {mode!r}")
            if not timeout > 0:
                raise PluginConfigError("timeouts must be positive")


class _Skip:
    """A hook that failed open: behave as if it returned no decision."""


SKIP = _Skip()


class _Downstream(Exception):
    """An error raised by the runtime's own next(): it passes through untouched."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


@dataclass
class _Circuit:
    failures: int = 0
    open_until: float = 0.0
    backoff: float = 0.0


class RemoteLifecycle(AgentLifecycle):
    """Lifecycle hooks hosted by a LifecyclePluginService."""

    def __init__(
        self,
        config: PluginConfig,
        host: HookHost,
        *,
        models: Mapping[str, LanguageModel] | None = None,
        registry: ModelRegistry | None = None,
    ) -> None:
        self.config = config
        self.host = host
        #: The plugin's name in diagnostics, failure records and errors.
        self.plugin: str = config.name or config.address
        self.name = self.plugin
        self._models = dict(models or {})
        self._registry = registry
        self._declared: frozenset[str] = frozenset()
        self._channel: grpc.aio.Channel | None = None
        self._stub: pb_grpc.LifecyclePluginServiceStub | None = None
        self._health: health_pb2_grpc.HealthStub | None = None
        self._circuit = _Circuit()
        self._probe: asyncio.Task[None] | None = None
        self._batches = False

    # ---- lifecycle of the adapter --------------------------------------------

    async def connect(self, *, timeout: float = 5.0) -> RemoteLifecycle:
        """Describe the plugin; fail (PluginConfigError) if it is unreachable or misdescribed."""
        await self.host.start()
        self._channel = grpc.aio.insecure_channel(self.config.address)
        self._stub = pb_grpc.LifecyclePluginServiceStub(self._channel)
        self._health = health_pb2_grpc.HealthStub(self._channel)
        try:
            described = await self._stub.Describe(pb.DescribeRequest(), timeout=timeout)
        except grpc.aio.AioRpcError as e:
            await self.close()
            raise PluginConfigError(
                f"lifecycle plugin at {self.config.address} is unreachable at start-up: "
                f"{e.code().name} {e.details() or ''}".strip()
            ) from e
        declared: set[str] = set()
        for value in described.phases:
            try:
                declared.add(phase_from_proto(value))
            except ValueError as e:
                await self.close()
                raise PluginConfigError(
                    f"lifecycle plugin at {self.config.address} declares an unknown phase: {e}"
                ) from e
        self.plugin = self.config.name or described.name or self.config.address
        self.name = self.plugin
        wanted = set(self.config.phases) | set(self.config.only or ())
        missing = sorted(wanted - declared)
        if missing:
            await self.close()
            raise PluginConfigError(
                f"lifecycle plugin {self.plugin!r} does not implement {missing} "
                f"(it declares {sorted(declared)})"
            )
        only = self.config.only
        self._declared = frozenset(declared if only is None else declared & only)
        self._batches = described.accepts_chunk_batches
        log.info(
            "lifecycle plugin %s at %s: %s",
            self.plugin,
            self.config.address,
            sorted(self._declared),
        )
        return self

    async def close(self) -> None:
        """Close the channel and stop health probes."""
        if self._probe is not None:
            self._probe.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._probe
            self._probe = None
        if self._channel is not None:
            await self._channel.close()
            self._channel = None

    def phases(self) -> frozenset[str]:
        """The declared phases (only these are ever called)."""
        return self._declared

    def policy(self, phase: str) -> PhasePolicy:
        """The effective policy of ``phase``."""
        return self.config.phases.get(
            phase, PhasePolicy(self.config.timeout, self.config.failure_mode)
        )

    def register_models(self, models: Mapping[str, LanguageModel] | list[LanguageModel]) -> None:
        """Models a plugin may route to by ``provider:model_id``."""
        if isinstance(models, Mapping):
            self._models.update(models)
        else:
            self._models.update({model_name(m): m for m in models})

    # ---- plumbing ------------------------------------------------------------

    @property
    def stub(self) -> pb_grpc.LifecyclePluginServiceStub:
        """The plugin stub (after connect)."""
        if self._stub is None:
            raise HookUnavailable(self.plugin, "connect", "the plugin is not connected")
        return self._stub

    def _resolver(self, current: LanguageModel | None = None) -> Callable[[str], LanguageModel]:
        def resolve(name: str) -> LanguageModel:
            if current is not None and name == model_name(current):
                return current
            if name in self._models:
                return self._models[name]
            if self._registry is not None:
                return self._registry.resolve(name)
            raise ValueError(f"unknown model {name!r}")

        return resolve

    def _context(
        self,
        phase: str,
        input: Any,
        *,
        thread_id: str,
        history: Any = None,
    ) -> tuple[str, lifecycle_pb2.HookContext]:
        base = input if isinstance(input, LifecycleBase) else None
        grant = Grant(
            thread_id=thread_id,
            phase=phase,
            thread=base.thread if base is not None else None,
            run=base.run if base is not None else None,
            history=history,
        )
        token = self.host.grant(grant) if base is not None else ""
        ctx = lifecycle_pb2.HookContext(
            capability_token=token,
            host_target=self.host.target if token else "",
            thread_id=thread_id,
        )
        _set_runtime_context(ctx, getattr(input, "runtime_context", None))
        if base is not None:
            run = base.run
            info = lifecycle_pb2.LifecycleRunInfo(
                run_id=run.run_id,
                thread_id=run.thread_id,
                initiator=run_initiator_to_proto(run.initiator),
                execution=runs_pb2.RunExecution(
                    operation=run_operation_to_proto(run.execution.operation)
                ),
            )
            if run.started_at is not None:
                info.start_time.CopyFrom(timestamp_to_proto(run.started_at))
            if run.execution.started_at is not None:
                info.execution.start_time.CopyFrom(timestamp_to_proto(run.execution.started_at))
            ctx.run.CopyFrom(info)
        step = getattr(input, "step", None)
        if step is not None and hasattr(step, "step_id"):
            ctx.step.CopyFrom(
                lifecycle_pb2.LifecycleStepInfo(step_id=step.step_id, index=step.index)
            )
        return token, ctx

    def _check_circuit(self, phase: str) -> None:
        if self._circuit.open_until > time.monotonic():
            raise HookUnavailable(self.plugin, phase, "backing off after repeated failures")

    def _succeeded(self) -> None:
        self._circuit.failures = 0

    def _failed(self) -> None:
        circuit = self._circuit
        circuit.failures += 1
        if circuit.failures >= self.config.backoff_after and circuit.open_until <= time.monotonic():
            circuit.backoff = min(
                max(circuit.backoff * 2, self.config.backoff_initial), self.config.backoff_max
            )
            circuit.open_until = time.monotonic() + circuit.backoff
            log.warning("lifecycle plugin %s: backing off for %.1fs", self.plugin, circuit.backoff)
            if self._probe is None or self._probe.done():
                self._probe = asyncio.create_task(self._health_probe())

    async def check_health(self) -> bool:
        """Health-check the plugin once; a SERVING answer ends any back-off."""
        try:
            assert self._health is not None
            reply = await self._health.Check(health_pb2.HealthCheckRequest(), timeout=1.0)
            serving = bool(reply.status == health_pb2.HealthCheckResponse.SERVING)
        except grpc.aio.AioRpcError as e:
            # A plugin without health checking answers UNIMPLEMENTED: it is up.
            serving = bool(e.code() == grpc.StatusCode.UNIMPLEMENTED)
        if serving and self._circuit.open_until:
            self._circuit = _Circuit()
            log.info("lifecycle plugin %s is serving again", self.plugin)
        return serving

    async def _health_probe(self) -> None:
        """While backed off, health-check the plugin; close the circuit once it serves."""
        while self._circuit.open_until > 0:
            wait = min(self.config.health_interval, self._circuit.open_until - time.monotonic())
            await asyncio.sleep(max(0.05, wait))
            if await self.check_health():
                return
            if self._circuit.open_until <= time.monotonic():
                self._circuit.backoff = min(self._circuit.backoff * 2, self.config.backoff_max)
                self._circuit.open_until = time.monotonic() + self._circuit.backoff

    def _skipping(self, phase: str, step_id: str) -> bool:
        report = current_report.get()
        return report is not None and report.skipping(self.plugin, phase, step_id)

    def _handle(self, phase: str, failure: BaseException, step_id: str) -> _Skip:
        """Apply the failure policy: raise (closed) or record and skip (open)."""
        if isinstance(failure, HookFailure):
            self._failed()
            if self.policy(phase).failure_mode == "open":
                log.warning("%s (failing open)", failure.message)
                report = current_report.get()
                if report is not None:
                    report.record(self.plugin, phase, failure.reason, step_id)
                return SKIP
        raise failure

    async def _unary(
        self,
        phase: str,
        call: Callable[..., Awaitable[Any]],
        build: Callable[[lifecycle_pb2.HookContext], Any],
        parse: Callable[[Any], T],
        input: Any,
        *,
        thread_id: str,
    ) -> T | _Skip:
        step_id = _step_id(input)
        if self._skipping(phase, step_id):
            return SKIP
        token, ctx = self._context(phase, input, thread_id=thread_id)
        try:
            self._check_circuit(phase)
            try:
                response = await call(build(ctx), timeout=self.policy(phase).timeout)
            except grpc.aio.AioRpcError as e:
                raise classify(e, self.plugin, phase) from None
            if response is None:
                # grpc.aio hands back None for bytes that do not parse as the reply.
                raise HookProtocolError(self.plugin, phase, UNDECODABLE)
            try:
                parsed = parse(response)
            except (ValueError, TypeError) as e:
                raise HookProtocolError(self.plugin, phase, f"malformed reply: {e}") from e
            self._succeeded()
            return parsed
        except PaiError as failure:
            return self._handle(phase, failure, step_id)
        finally:
            if token:
                self.host.revoke(token)

    async def _read(self, call: Any, phase: str) -> Any:
        """The plugin's next message within the phase's timeout."""
        try:
            message = await asyncio.wait_for(call.read(), self.policy(phase).timeout)
        except TimeoutError:
            raise HookTimeout(self.plugin, phase, "no answer within the timeout") from None
        except grpc.aio.AioRpcError as e:
            raise classify(e, self.plugin, phase, stream=True) from None
        return _received(message, self.plugin, phase)

    # ---- unary phases --------------------------------------------------------

    async def prepare_run(self, input: PrepareRunInput) -> PrepareRunResult | None:
        """prepare_run over the wire."""

        def build(ctx: lifecycle_pb2.HookContext) -> pb.PrepareRunRequest:
            request = pb.PrepareRunRequest(context=ctx, input=value_to_proto(input.input))
            if input.latest_user_message is not None:
                request.latest_user_message.CopyFrom(
                    lifecycle_message_to_proto(input.latest_user_message)
                )
            return request

        result = await self._unary(
            "prepare_run",
            self.stub.PrepareRun,
            build,
            lambda r: prepare_run_result_from_proto(r, self._resolver()),
            input,
            thread_id=input.run.thread_id,
        )
        return None if isinstance(result, _Skip) else result

    async def prepare_model_step(
        self, input: PrepareModelStepInput
    ) -> PrepareModelStepResult | None:
        """prepare_model_step over the wire."""
        assert input.input is not None
        request = input.input
        result = await self._unary(
            "prepare_model_step",
            self.stub.PrepareModelStep,
            lambda ctx: pb.PrepareModelStepRequest(
                context=ctx, input=model_step_request_to_proto(request)
            ),
            lambda r: prepare_model_step_result_from_proto(r, self._resolver(request.model)),
            input,
            thread_id=input.run.thread_id,
        )
        return None if isinstance(result, _Skip) else result

    def _tool_request(self, kind: Any, input: BeforeToolCallInput, ctx: Any) -> Any:
        assert input.tool is not None
        assert input.entry is not None
        request = kind(
            context=ctx,
            tool=tool_info_to_proto(input.tool),
            tool_call_id=input.tool_call_id,
            entry=tool_entry_to_proto(input.entry),
            suspend_history=[value_to_proto(v) for v in input.suspend_history],
            input=value_to_proto(input.input),
        )
        return request

    async def before_tool_call(self, input: BeforeToolCallInput) -> BeforeToolCallResult | None:
        """before_tool_call over the wire."""
        result = await self._unary(
            "before_tool_call",
            self.stub.BeforeToolCall,
            lambda ctx: self._tool_request(pb.BeforeToolCallRequest, input, ctx),
            before_tool_call_result_from_proto,
            input,
            thread_id=input.run.thread_id,
        )
        return None if isinstance(result, _Skip) else result

    async def after_tool_result(self, input: AfterToolResultInput) -> AfterToolResultResult | None:
        """after_tool_result over the wire."""

        def build(ctx: lifecycle_pb2.HookContext) -> pb.AfterToolResultRequest:
            request = self._tool_request(pb.AfterToolResultRequest, input, ctx)
            assert input.result is not None
            request.result.CopyFrom(tool_result_to_proto(input.result))
            return request  # type: ignore[no-any-return]

        result = await self._unary(
            "after_tool_result",
            self.stub.AfterToolResult,
            build,
            after_tool_result_result_from_proto,
            input,
            thread_id=input.run.thread_id,
        )
        return None if isinstance(result, _Skip) else result

    async def after_step(self, input: AfterStepInput) -> AfterStepResult | None:
        """after_step over the wire."""
        assert input.step is not None
        assert input.request is not None
        step, request = input.step, input.request
        result = await self._unary(
            "after_step",
            self.stub.AfterStep,
            lambda ctx: pb.AfterStepRequest(
                context=ctx,
                step=step_summary_to_proto(step),
                request=model_step_request_to_proto(request),
            ),
            after_step_result_from_proto,
            input,
            thread_id=input.run.thread_id,
        )
        return None if isinstance(result, _Skip) else result

    async def prepare_history_rewrite(
        self, input: PrepareHistoryRewriteInput
    ) -> HistoryRewritePatch | None:
        """prepare_history_rewrite over the wire (no facade: it runs outside any run)."""
        result = await self._unary(
            "prepare_history_rewrite",
            self.stub.PrepareHistoryRewrite,
            lambda ctx: pb.PrepareHistoryRewriteRequest(
                context=ctx,
                rewrite=history_rewrite_to_proto(input.rewrite),
                metadata=struct_to_proto(input.metadata),
                private_metadata=struct_to_proto(input.private_metadata),
            ),
            history_rewrite_patch_from_proto,
            input,
            thread_id=input.thread_id,
        )
        return None if isinstance(result, _Skip) else result

    async def history_rewritten(self, input: HistoryRewrittenInput) -> None:
        """history_rewritten over the wire (best effort)."""
        await self._unary(
            "history_rewritten",
            self.stub.HistoryRewritten,
            lambda ctx: pb.HistoryRewrittenRequest(
                context=ctx, rewrite=history_rewrite_to_proto(input.rewrite)
            ),
            lambda r: None,
            input,
            thread_id=input.thread_id,
        )

    # ---- resolve_model_context: a bidirectional stream -------------------------

    async def resolve_model_context(
        self, input: ResolveModelContextInput, next: ContextNext
    ) -> list[ModelMessage]:
        """The plugin asks for next() / next(base) and answers with the context."""
        phase = "resolve_model_context"
        step_id = _step_id(input)
        if self._skipping(phase, step_id):
            return await next()
        token, ctx = self._context(
            phase, input, thread_id=input.run.thread_id, history=input.history
        )
        call = self.stub.ResolveModelContext()
        try:
            self._check_circuit(phase)
            start = pb.ResolveModelContextStart(context=ctx)
            if input.history is not None and input.history.through is not None:
                start.through.CopyFrom(lifecycle_message_to_proto(input.history.through))
            await _write(call, pb.ResolveModelContextRequest(start=start), self.plugin, phase)
            while True:
                reply = await self._read(call, phase)
                match reply.WhichOneof("message"):
                    case "next":
                        base = None
                        if reply.next.HasField("base"):
                            base = _parse(
                                lambda: model_messages_from_proto(reply.next.base.messages),  # noqa: B023 (called at once)
                                self.plugin,
                                phase,
                            )
                        try:
                            result = await (next(base) if base is not None else next())
                        except Exception as e:
                            raise _Downstream(e) from e
                        await _write(
                            call,
                            pb.ResolveModelContextRequest(
                                next_result=pb.ContextNextResult(
                                    messages=model_messages_to_proto(result)
                                )
                            ),
                            self.plugin,
                            phase,
                        )
                    case "failed":
                        raise hook_error(
                            reply.failed.reason,
                            reply.failed.message,
                            plugin=self.plugin,
                            phase=phase,
                        )
                    case "result":
                        messages = _parse(
                            lambda: model_messages_from_proto(reply.result.messages),  # noqa: B023 (called at once)
                            self.plugin,
                            phase,
                        )
                        self._succeeded()
                        return messages
                    case other:
                        raise HookProtocolError(self.plugin, phase, f"unexpected message {other!r}")
        except _Downstream as e:
            raise e.error from None
        except PaiError as failure:
            self._handle(phase, failure, step_id)
            return await next()  # failing open: as if the hook were absent
        finally:
            call.cancel()
            if token:
                self.host.revoke(token)

    # ---- around_model_call: next(patch), pass-through or transform ------------------

    async def around_model_call(
        self, request: ModelStepRequest, next: ModelCallNext
    ) -> ModelStepStreamResult:
        """The plugin may call next(patch), then pass the stream through or transform it."""
        phase = "around_model_call"
        step_id = f"step-{request.step_index}-{request.run_id}"
        if self._skipping(phase, step_id):
            return await next()
        # around_model_call's input is the request; the facade is not part of it.
        token, ctx = "", lifecycle_pb2.HookContext(thread_id=request.thread_id)
        _set_runtime_context(ctx, request.runtime_context)
        call = self.stub.AroundModelCall()
        attempts: list[ModelStepStreamResult] = []
        handed_off = False
        try:
            self._check_circuit(phase)
            await _write(
                call,
                pb.AroundModelCallRequest(
                    start=pb.AroundModelCallStart(
                        context=ctx, request=model_step_request_to_proto(request)
                    )
                ),
                self.plugin,
                phase,
            )
            while True:
                reply = await self._read(call, phase)
                kind = reply.WhichOneof("message")
                if kind == "next":
                    patch = None
                    if reply.next.HasField("patch"):
                        patch = _parse(
                            functools.partial(
                                model_call_patch_from_proto,
                                reply.next.patch,
                                self._resolver(request.model),
                            ),
                            self.plugin,
                            phase,
                        )
                    try:
                        attempt = await (next(patch) if patch is not None else next())
                    except ModelError as e:
                        # A setup failure: the plugin may fall back (AMC-03).
                        await _write(
                            call,
                            pb.AroundModelCallRequest(
                                next_failed=pb.ModelCallFailed(reason=e.reason, message=e.message)
                            ),
                            self.plugin,
                            phase,
                        )
                        continue
                    except Exception as e:
                        raise _Downstream(e) from e
                    attempts.append(attempt)
                    effective = apply_patch(request, patch) if patch is not None else request
                    await _write(
                        call,
                        pb.AroundModelCallRequest(
                            next_started=pb.ModelCallStarted(
                                request=model_step_request_to_proto(effective)
                            )
                        ),
                        self.plugin,
                        phase,
                    )
                    if reply.next.mode == pb.STREAM_MODE_TRANSFORM:
                        handed_off = True
                        return ModelStepStreamResult(
                            stream=self._duplex(call, attempt.stream, phase, step_id, token)
                        )
                elif kind == "failed":
                    raise hook_error(
                        reply.failed.reason, reply.failed.message, plugin=self.plugin, phase=phase
                    )
                elif kind == "pass_through":
                    chosen = self._chosen(attempts, reply.pass_through, "pass_through")
                    self._succeeded()
                    # The attempt's own result, untouched: the runtime identifies its
                    # source request. The provider stream never crosses the wire.
                    return chosen
                elif kind == "subscribe":
                    chosen = self._chosen(attempts, reply.subscribe, "subscribe")
                    handed_off = True
                    return ModelStepStreamResult(
                        stream=self._duplex(call, chosen.stream, phase, step_id, token)
                    )
                elif kind in ("chunk", "end"):
                    # An answer without next (e.g. a cache hit): the plugin's chunks are the step.
                    handed_off = True
                    return ModelStepStreamResult(
                        stream=self._duplex(call, None, phase, step_id, token, first=reply)
                    )
                else:
                    raise HookProtocolError(self.plugin, phase, f"unexpected message {kind!r}")
        except _Downstream as e:
            raise e.error from None
        except PaiError as failure:
            self._handle(phase, failure, step_id)
            return attempts[-1] if attempts else await next()
        finally:
            if not handed_off:
                call.cancel()

    def _chosen(
        self,
        attempts: list[ModelStepStreamResult],
        message: pb.PassThrough | pb.StreamSubscribe,
        kind: str,
    ) -> ModelStepStreamResult:
        """The attempt a pass_through / subscribe names (unset: the latest)."""
        if not attempts:
            raise HookProtocolError(self.plugin, "around_model_call", f"{kind} before next()")
        if not message.HasField("attempt"):
            return attempts[-1]
        index = int(message.attempt)
        if index >= len(attempts):
            raise HookProtocolError(
                self.plugin, "around_model_call", f"{kind} names unknown attempt {index}"
            )
        return attempts[index]

    # ---- transform_step_stream: chunks in, chunks out --------------------------

    def transform_step_stream(
        self, input: TransformStepStreamInput
    ) -> AsyncIterator[StepStreamChunk]:
        """Chunks flow to the plugin and back; ui data and abort come back as messages."""
        assert input.stream is not None
        return self._transform(input, input.stream)

    async def _transform(
        self, input: TransformStepStreamInput, upstream: AsyncIterator[StepStreamChunk]
    ) -> AsyncIterator[StepStreamChunk]:
        phase = "transform_step_stream"
        step_id = _step_id(input)
        if self._skipping(phase, step_id):
            async for chunk in upstream:
                yield chunk
            return
        token, ctx = self._context(phase, input, thread_id=input.run.thread_id)
        call = self.stub.TransformStepStream()
        try:
            self._check_circuit(phase)
            start = pb.TransformStepStreamStart(context=ctx)
            if input.input is not None:
                start.input.CopyFrom(model_step_request_to_proto(input.input))
            await _write(call, pb.TransformStepStreamRequest(start=start), self.plugin, phase)
        except PaiError as failure:
            call.cancel()
            if token:
                self.host.revoke(token)
            self._handle(phase, failure, step_id)
            async for chunk in upstream:
                yield chunk
            return

        async def on_reply(reply: Any) -> list[StepStreamChunk]:
            match reply.WhichOneof("message"):
                case "chunk":
                    return [_parse(lambda: chunk_from_proto(reply.chunk), self.plugin, phase)]
                case "batch":
                    return _parse(
                        lambda: [chunk_from_proto(c) for c in reply.batch.chunks],
                        self.plugin,
                        phase,
                    )
                case "ui_data":
                    data = _parse(
                        lambda: chunk_from_proto(chunks_pb2.StepStreamChunk(data=reply.ui_data)),
                        self.plugin,
                        phase,
                    )
                    assert isinstance(data, DataChunk)
                    assert input.ui_data is not None
                    try:
                        input.ui_data.write(data)
                    except Exception as e:
                        raise _Downstream(e) from e
                    return []
                case "failed":
                    raise hook_error(
                        reply.failed.reason, reply.failed.message, plugin=self.plugin, phase=phase
                    )
                case "abort":
                    abort = _parse(lambda: step_abort_from_proto(reply.abort), self.plugin, phase)
                    assert input.abort is not None
                    try:
                        await input.abort(abort)
                    except Exception as e:
                        raise _Downstream(e) from e
                    return []
                case other:
                    raise HookProtocolError(self.plugin, phase, f"unexpected message {other!r}")

        async for chunk in self._exchange(
            call, upstream, phase, step_id, token, chunk_type=pb.TransformStepStreamRequest,
            on_reply=on_reply, batches=self._batches,
        ):  # fmt: skip
            yield chunk

    def _duplex(
        self,
        call: Any,
        upstream: AsyncIterator[StepStreamChunk] | None,
        phase: str,
        step_id: str,
        token: str,
        *,
        first: Any = None,
    ) -> AsyncIterator[StepStreamChunk]:
        """around_model_call in transform mode: downstream chunks out, result chunks back."""

        async def on_reply(reply: Any) -> list[StepStreamChunk]:
            if reply.WhichOneof("message") == "chunk":
                return [_parse(lambda: chunk_from_proto(reply.chunk), self.plugin, phase)]
            if reply.WhichOneof("message") == "failed":
                raise hook_error(
                    reply.failed.reason, reply.failed.message, plugin=self.plugin, phase=phase
                )
            raise HookProtocolError(
                self.plugin, phase, f"unexpected message {reply.WhichOneof('message')!r}"
            )

        return self._exchange(
            call,
            upstream,
            phase,
            step_id,
            token,
            chunk_type=pb.AroundModelCallRequest,
            on_reply=on_reply,
            first=first,
        )

    async def _exchange(
        self,
        call: Any,
        upstream: AsyncIterator[StepStreamChunk] | None,
        phase: str,
        step_id: str,
        token: str,
        *,
        chunk_type: Any,
        on_reply: Callable[[Any], Awaitable[list[StepStreamChunk]]],
        first: Any = None,
        batches: bool = False,
    ) -> AsyncIterator[StepStreamChunk]:
        """Pump ``upstream`` to the plugin while yielding what it sends back.

        Writes are pipelined: while one write is in flight, further upstream
        chunks queue up and go out together (as one ChunkBatch to plugins that
        accept them). Until the first chunk goes downstream, consumed upstream
        chunks are kept so failing open can replay them; after that a failure
        is fatal. The timeout applies while the plugin owes an answer (the
        upstream has ended and everything was written).
        """
        timeout = self.policy(phase).timeout
        replay: list[StepStreamChunk] = []  # consumed, not yet answered downstream
        outbox: list[StepStreamChunk] = []  # consumed, not yet written
        emitted = False
        up: asyncio.Future[StepStreamChunk] | None = None
        upstream_done = upstream is None
        end_sent = upstream is None
        writable = True
        writing: asyncio.Future[bool] | None = None
        read: asyncio.Future[Any] | None = None
        pending_first = first
        failure: PaiError | None = None
        if upstream is None:
            with contextlib.suppress(Exception):
                await call.done_writing()
        try:
            while True:
                if pending_first is not None:
                    reply, pending_first = pending_first, None
                else:
                    if (
                        up is None
                        and not upstream_done
                        and writable
                        and len(outbox) < MAX_OUTBOX
                        and upstream is not None
                    ):
                        up = asyncio.ensure_future(anext(upstream))
                    if writing is None and writable:
                        if outbox:
                            if batches and len(outbox) > 1:
                                message = chunk_type(
                                    batch=pb.ChunkBatch(chunks=[chunk_to_proto(c) for c in outbox])
                                )
                                outbox.clear()
                            else:
                                message = chunk_type(chunk=chunk_to_proto(outbox.pop(0)))
                            writing = asyncio.ensure_future(_send(call, message))
                        elif upstream_done and not end_sent:
                            end_sent = True
                            writing = asyncio.ensure_future(_send_end(call, chunk_type))
                    if read is None:
                        read = asyncio.ensure_future(call.read())
                    waits: set[asyncio.Future[Any]] = {read}
                    if up is not None:
                        waits.add(up)
                    if writing is not None:
                        waits.add(writing)
                    owed = up is None and writing is None and not outbox
                    done, _ = await asyncio.wait(
                        waits,
                        timeout=timeout if owed else None,
                        return_when=asyncio.FIRST_COMPLETED,
                    )
                    if not done:
                        raise HookTimeout(self.plugin, phase, "no answer within the timeout")
                    if writing is not None and writing in done:
                        # A failed write: the plugin stopped reading (it answered or
                        # failed); its reply, read next, says which.
                        writable = writing.result()
                        writing = None
                    if up is not None and up in done:
                        try:
                            chunk = up.result()
                        except StopAsyncIteration:
                            upstream_done = True
                        except Exception as e:
                            raise _Downstream(e) from e
                        else:
                            if not emitted:
                                replay.append(chunk)
                            outbox.append(chunk)
                        up = None
                    if read not in done:
                        continue
                    try:
                        reply = read.result()
                    except grpc.aio.AioRpcError as e:
                        raise classify(e, self.plugin, phase, stream=True) from None
                    finally:
                        read = None
                    reply = _received(reply, self.plugin, phase)
                kind = reply.WhichOneof("message")
                if kind == "end":
                    self._succeeded()
                    return
                if kind in ("abort", "failed"):
                    # A terminal answer: half-close (nothing more is written), so the
                    # plugin can end the call without racing our writes.
                    with contextlib.suppress(Exception):
                        await call.done_writing()
                for out in await on_reply(reply):
                    emitted = True
                    replay.clear()
                    yield out
        except _Downstream as e:
            raise e.error from None
        except PaiError as e:
            if emitted or not isinstance(e, HookFailure):
                if isinstance(e, HookFailure):
                    self._failed()
                raise
            failure = e
        finally:
            for pending in (read, writing):
                if pending is not None:
                    pending.cancel()
            call.cancel()
            if token:
                self.host.revoke(token)
            if failure is None and up is not None and not up.done():
                # Stop the upstream read in flight, so the provider stream can close.
                up.cancel()
                with contextlib.suppress(BaseException):
                    await up
        # Failing open before anything went downstream: replay what the plugin consumed.
        assert failure is not None
        self._handle(phase, failure, step_id)
        for chunk in replay:
            yield chunk
        if upstream is None or upstream_done:
            return
        if up is not None:
            try:
                yield await up
            except StopAsyncIteration:
                return
        async for chunk in upstream:
            yield chunk


def _set_runtime_context(ctx: lifecycle_pb2.HookContext, value: Any) -> None:
    """Send the runtime context when it can cross the wire (a strict-JSON object)."""
    if isinstance(value, dict):
        with contextlib.suppress(Exception):
            check_strict_json(value, path="runtime_context")
            ctx.runtime_context.CopyFrom(struct_to_proto(value))


def _step_id(input: Any) -> str:
    step = getattr(input, "step", None)
    if step is not None and hasattr(step, "step_id"):
        return str(step.step_id)
    run = getattr(input, "run", None)
    return f"episode-{run.run_id}" if run is not None else "outside-run"


#: Why a reply grpc.aio could not deserialize is refused.
UNDECODABLE = "the reply does not decode as the phase's response message"


def _received(message: Any, plugin: str, phase: str) -> Any:
    """A message read from a plugin's stream, or the failure its absence means."""
    if message is grpc.aio.EOF:
        # Not a protocol error: grpc core may report the same early end as INTERNAL
        # "Internal error from Core" (grpc/grpc#36066), which is HOOK_UNAVAILABLE.
        raise HookUnavailable(plugin, phase, "the plugin ended the stream without its answer")
    if message is None:
        raise HookProtocolError(plugin, phase, UNDECODABLE)
    if message.WhichOneof("message") is None:
        raise HookProtocolError(plugin, phase, "a reply with no message set")
    return message


def _parse(fn: Callable[[], T], plugin: str, phase: str) -> T:
    try:
        return fn()
    except (ValueError, TypeError) as e:
        raise HookProtocolError(plugin, phase, f"malformed message: {e}") from e


async def _send_end(call: Any, chunk_type: Any) -> bool:
    """The upstream ended: say so and half-close."""
    ok = await _send(call, chunk_type(end=pb.StreamEnd()))
    with contextlib.suppress(Exception):
        await call.done_writing()
    return ok


async def _send(call: Any, message: Any) -> bool:
    """Write to a stream the plugin may already have finished; False if it has."""
    try:
        await call.write(message)
    except (grpc.aio.AioRpcError, asyncio.InvalidStateError, RuntimeError):
        return False
    return True


async def _write(call: Any, message: Any, plugin: str, phase: str) -> None:
    try:
        await call.write(message)
    except grpc.aio.AioRpcError as e:
        raise classify(e, plugin, phase, stream=True) from None
    except (asyncio.InvalidStateError, RuntimeError) as e:
        raise HookUnavailable(plugin, phase, f"the stream closed: {e}") from e


__all__ = [
    "DEFAULT_TIMEOUT",
    "PhasePolicy",
    "PluginConfig",
    "PluginConfigError",
    "RemoteLifecycle",
    "replace",
]
