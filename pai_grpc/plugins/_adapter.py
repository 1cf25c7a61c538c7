"""The remote lifecycle adapter: an AgentLifecycle that calls a LifecyclePluginService.

Remote and in-process hooks compose in one chain, in the configured order.
``connect()`` calls Describe at start-up; only the phases the plugin
declares are ever called (REM-01). The unary phases are here; the streaming
ones (middleware, as bidirectional streams) are in ``_streaming.py``.

Failure policy per plugin and phase (docs/plugin-protocol.md, "Failure semantics"; after Envoy
ext_proc): a timeout (default 1 s) on every wait for the plugin, and a
failure mode. ``closed`` fails the run with HOOK_TIMEOUT / HOOK_UNAVAILABLE /
HOOK_PROTOCOL_ERROR; ``open`` skips the hook for the rest of the step, counts
it and marks it on the run record. A stream transform fails open only before
its first chunk went downstream (the chunks it already consumed are replayed).
Errors a hook raised itself fail the run whatever the mode (CMPS-04); which
outcome gets which reason is in ``_errors.py`` (and the README, "Remote
plugins"). After repeated plugin failures the adapter backs off
(``_backoff.py``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, TypeVar

import grpc
from grpc_health.v1 import health_pb2_grpc

from pai.v1 import lifecycle_pb2
from pai.v1 import lifecycle_plugin_service_pb2 as pb
from pai.v1 import lifecycle_plugin_service_pb2_grpc as pb_grpc
from pai_grpc._wire import TlsError, channel
from pai_grpc.convert import (
    HookCall,
    HookRun,
    after_step_result_from_proto,
    after_tool_result_result_from_proto,
    before_tool_call_result_from_proto,
    history_rewrite_patch_from_proto,
    history_rewrite_to_proto,
    hook_context_to_proto,
    lifecycle_message_to_proto,
    model_step_request_to_proto,
    phase_from_proto,
    prepare_model_step_result_from_proto,
    prepare_run_result_from_proto,
    step_summary_to_proto,
    struct_to_proto,
    tool_entry_to_proto,
    tool_info_to_proto,
    tool_result_to_proto,
    value_to_proto,
)
from pai_grpc.domain import ModelMessage, StepStreamChunk
from pai_grpc.errors import PaiError
from pai_grpc.lifecycle import (
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
    StepInfo,
    TransformStepStreamInput,
)
from pai_grpc.lifecycle.internal import current_report, hook_failed_open
from pai_grpc.models import LanguageModel, ModelRegistry, model_name
from pai_grpc.plugins import _streaming
from pai_grpc.plugins._backoff import Backoff
from pai_grpc.plugins._calls import (
    SKIP,
    UNDECODABLE,
    Skip,
    received,
    sendable_runtime_context,
    step_id_of,
)
from pai_grpc.plugins._config import PhasePolicy, PluginConfig, PluginConfigError
from pai_grpc.plugins._errors import (
    HookProtocolError,
    HookTimeout,
    HookUnavailable,
    PluginFailure,
    classify,
)
from pai_grpc.plugins._host import ContextNextGrant, Grant, HookHost
from pai_grpc.telemetry import Telemetry, current_run, tracing

log = logging.getLogger("pai_grpc.plugins")

T = TypeVar("T")


class RemoteLifecycle(AgentLifecycle):
    """Lifecycle hooks hosted by a LifecyclePluginService."""

    def __init__(
        self,
        config: PluginConfig,
        host: HookHost,
        *,
        models: Mapping[str, LanguageModel] | None = None,
        registry: ModelRegistry | None = None,
        telemetry: Telemetry | None = None,
    ) -> None:
        self.config = config
        #: Traced processes send ``traceparent`` with every hook call.
        self.telemetry = telemetry
        self.host = host
        #: The plugin's name in diagnostics, failure records and errors.
        self.plugin: str = config.name or config.address
        self.name = self.plugin
        self._models = dict(models or {})
        self._registry = registry
        self._declared: frozenset[str] = frozenset()
        self._channel: grpc.aio.Channel | None = None
        self._stub: pb_grpc.LifecyclePluginServiceStub | None = None
        #: The circuit breaker: backs off from a plugin that keeps failing.
        self.backoff = Backoff(config)
        #: Whether the plugin accepts chunk batches (it says so in Describe).
        self.accepts_batches = False
        #: Whether next() is evaluated before resolve_model_context's stream opens
        #: and sent with its start (the plugin declares it in Describe).
        self.prefetch_model_context = False
        #: Whether resolve_model_context is one unary call (ResolveModelContextUnary)
        #: rather than a stream (the plugin declares it in Describe).
        self.unary_model_context = False

    # ---- lifecycle of the adapter --------------------------------------------

    async def connect(self, *, timeout: float = 5.0) -> RemoteLifecycle:
        """Describe the plugin; fail (PluginConfigError) if it is unreachable or misdescribed."""
        await self.host.start()
        try:
            self._channel = channel(
                self.config.address,
                self.config.tls,
                interceptors=tracing.client_interceptors(self.telemetry),
            )
        except TlsError as e:
            raise PluginConfigError(f"lifecycle plugin at {self.config.address}: {e}") from e
        self._stub = pb_grpc.LifecyclePluginServiceStub(self._channel)
        self.backoff.health = health_pb2_grpc.HealthStub(self._channel)
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
        self.backoff.plugin = self.plugin
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
        self.accepts_batches = described.accepts_chunk_batches
        self.prefetch_model_context = described.prefetch_model_context
        self.unary_model_context = described.unary_model_context
        log.info(
            "lifecycle plugin %s at %s: %s",
            self.plugin,
            self.config.address,
            sorted(self._declared),
        )
        return self

    async def close(self) -> None:
        """Close the channel and stop health probes."""
        await self.backoff.close()
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

    def resolver(self, current: LanguageModel | None = None) -> Callable[[str], LanguageModel]:
        """How a ``provider:model_id`` the plugin names becomes a model (``current`` first)."""

        def resolve(name: str) -> LanguageModel:
            if current is not None and name == model_name(current):
                return current
            if name in self._models:
                return self._models[name]
            if self._registry is not None:
                return self._registry.resolve(name)
            raise ValueError(f"unknown model {name!r}")

        return resolve

    def hook_context(
        self,
        phase: str,
        input: Any,
        *,
        thread_id: str,
        history: Any = None,
        context_next: ContextNextGrant | None = None,
    ) -> tuple[str, lifecycle_pb2.HookContext]:
        """A hook call's capability token (granted on the host) and its HookContext."""
        base = input if isinstance(input, LifecycleBase) else None
        grant = Grant(
            thread_id=thread_id,
            phase=phase,
            thread=base.thread if base is not None else None,
            run=base.run if base is not None else None,
            history=history,
            context_next=context_next,
        )
        token = self.host.grant(grant) if base is not None else ""
        step = getattr(input, "step", None)
        ctx = hook_context_to_proto(
            HookCall(
                thread_id=thread_id,
                capability_token=token,
                host_target=self.host.target if token else "",
                run=HookRun.of(base.run) if base is not None else None,
                step=StepInfo(step.step_id, step.index)
                if step is not None and hasattr(step, "step_id")
                else None,
                runtime_context=sendable_runtime_context(getattr(input, "runtime_context", None)),
            )
        )
        return token, ctx

    async def check_health(self) -> bool:
        """Health-check the plugin once; a SERVING answer ends any back-off."""
        return await self.backoff.check_health()

    def skipping(self, phase: str, step_id: str) -> bool:
        """Whether ``phase`` failed open earlier in this step (then it is skipped)."""
        report = current_report.get()
        return report is not None and report.skipping(self.plugin, phase, step_id)

    def handle_failure(self, phase: str, failure: BaseException, step_id: str) -> Skip:
        """Apply the failure policy: raise (closed) or record and skip (open)."""
        if isinstance(failure, PluginFailure):
            self.backoff.failed()
            run = current_run.get()
            if run is not None:
                labels = {"plugin": self.plugin, "phase": phase, "reason": failure.reason}
                run.metrics.hook_failures.add(1, labels)
            if self.policy(phase).failure_mode == "open":
                log.warning("%s (failing open)", failure.message)
                tracing.hook_failed_open(failure.reason)
                hook_failed_open(self.plugin, phase, failure.reason)
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
    ) -> T | Skip:
        step_id = step_id_of(input)
        if self.skipping(phase, step_id):
            return SKIP
        token, ctx = self.hook_context(phase, input, thread_id=thread_id)
        try:
            self.backoff.check(phase)
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
            self.backoff.succeeded()
            return parsed
        except PaiError as failure:
            return self.handle_failure(phase, failure, step_id)
        finally:
            if token:
                self.host.revoke(token)

    async def read_reply(self, call: Any, phase: str) -> Any:
        """The plugin's next message within the phase's timeout."""
        try:
            # asyncio.timeout, not wait_for: no task per read (every streamed hook reads).
            async with asyncio.timeout(self.policy(phase).timeout):
                message = await call.read()
        except TimeoutError:
            raise HookTimeout(self.plugin, phase, "no answer within the timeout") from None
        except grpc.aio.AioRpcError as e:
            raise classify(e, self.plugin, phase, stream=True) from None
        return received(message, self.plugin, phase)

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
            lambda r: prepare_run_result_from_proto(r, self.resolver()),
            input,
            thread_id=input.run.thread_id,
        )
        return None if isinstance(result, Skip) else result

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
            lambda r: prepare_model_step_result_from_proto(r, self.resolver(request.model)),
            input,
            thread_id=input.run.thread_id,
        )
        return None if isinstance(result, Skip) else result

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
        return None if isinstance(result, Skip) else result

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
        return None if isinstance(result, Skip) else result

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
        return None if isinstance(result, Skip) else result

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
        return None if isinstance(result, Skip) else result

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

    # ---- streaming phases (see _streaming.py) ----------------------------------

    async def resolve_model_context(
        self, input: ResolveModelContextInput, next: ContextNext
    ) -> list[ModelMessage]:
        """The plugin asks for next() / next(base) and answers with the context.

        With ``prefetch_model_context`` the plugin receives next()'s result with
        the call's start message instead of asking for it.
        """
        return await _streaming.resolve_model_context(self, input, next)

    async def around_model_call(
        self, request: ModelStepRequest, next: ModelCallNext
    ) -> ModelStepStreamResult:
        """The plugin may call next(patch), then pass the stream through or transform it."""
        return await _streaming.around_model_call(self, request, next)

    def transform_step_stream(
        self, input: TransformStepStreamInput
    ) -> AsyncIterator[StepStreamChunk]:
        """Chunks flow to the plugin and back; ui data and abort come back as messages."""
        return _streaming.transform_step_stream(self, input)


__all__ = ["RemoteLifecycle"]
