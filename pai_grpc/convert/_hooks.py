"""A remote hook call's context (``pai.v1.HookContext``): built by the runtime, read by plugins.

The runtime's adapter converts with :func:`hook_context_to_proto`, the
plugin SDK with :func:`hook_context_from_proto`; the decoded form is
:class:`HookCall` (the run's identity without its metadata clients, which
each side provides itself).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from pai.v1 import lifecycle_pb2, runs_pb2
from pai_grpc.convert._json import (
    optional_timestamp_from_proto,
    struct_from_proto,
    struct_to_proto,
    timestamp_to_proto,
)
from pai_grpc.convert._lifecycle import step_info_from_proto, step_info_to_proto
from pai_grpc.convert._runs import (
    run_initiator_from_proto,
    run_initiator_to_proto,
    run_operation_from_proto,
    run_operation_to_proto,
)
from pai_grpc.domain import JsonObject, RunInitiator
from pai_grpc.lifecycle import Execution, RunFacade, StepInfo


@dataclass(frozen=True)
class HookRun:
    """The stable identity of the run a hook runs in (LC-02)."""

    run_id: str
    thread_id: str
    initiator: RunInitiator
    started_at: datetime | None
    execution: Execution

    @classmethod
    def of(cls, run: RunFacade) -> HookRun:
        """The identity of a run facade."""
        return cls(run.run_id, run.thread_id, run.initiator, run.started_at, run.execution)


@dataclass(frozen=True)
class HookCall:
    """What a remote hook call carries besides its phase's input."""

    thread_id: str
    #: The HookHostService capability token (empty: no facade in this call).
    capability_token: str = ""
    #: Where the plugin reaches HookHostService with the token.
    host_target: str = ""
    run: HookRun | None = None
    step: StepInfo | None = None
    #: The runtime context, when it can cross the wire (a strict-JSON object).
    runtime_context: JsonObject | None = None


def hook_context_to_proto(call: HookCall) -> lifecycle_pb2.HookContext:
    """Convert to ``pai.v1.HookContext``."""
    ctx = lifecycle_pb2.HookContext(
        capability_token=call.capability_token,
        host_target=call.host_target,
        thread_id=call.thread_id,
    )
    if call.runtime_context is not None:
        ctx.runtime_context.CopyFrom(struct_to_proto(call.runtime_context))
    run = call.run
    if run is not None:
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
    if call.step is not None:
        ctx.step.CopyFrom(step_info_to_proto(call.step))
    return ctx


def hook_context_from_proto(ctx: lifecycle_pb2.HookContext) -> HookCall:
    """Convert a ``pai.v1.HookContext`` (an unset ``run`` or ``step`` is ``None``)."""
    run = None
    if ctx.HasField("run"):
        info = ctx.run
        run = HookRun(
            run_id=info.run_id,
            thread_id=info.thread_id,
            initiator=run_initiator_from_proto(info.initiator),
            started_at=optional_timestamp_from_proto(info, "start_time"),
            execution=Execution(
                operation=run_operation_from_proto(info.execution.operation),
                started_at=optional_timestamp_from_proto(info.execution, "start_time"),
            ),
        )
    return HookCall(
        thread_id=ctx.thread_id,
        capability_token=ctx.capability_token,
        host_target=ctx.host_target,
        run=run,
        step=step_info_from_proto(ctx.step) if ctx.HasField("step") else None,
        runtime_context=struct_from_proto(ctx.runtime_context)
        if ctx.HasField("runtime_context")
        else None,
    )
