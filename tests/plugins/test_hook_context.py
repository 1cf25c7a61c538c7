"""HookContext: the runtime's adapter and the plugin SDK share one converter."""

from __future__ import annotations

from datetime import UTC, datetime

from pai_grpc.convert import HookCall, HookRun, hook_context_from_proto, hook_context_to_proto
from pai_grpc.lifecycle import Execution, StepInfo


def test_a_hook_call_round_trips() -> None:
    started = datetime(2026, 1, 2, 3, 4, 5, 6000, tzinfo=UTC)
    call = HookCall(
        thread_id="thr_1",
        capability_token="tok",
        host_target="127.0.0.1:1",
        run=HookRun(
            run_id="run_1",
            thread_id="thr_1",
            initiator="trigger",
            started_at=started,
            execution=Execution(operation="resume", started_at=started),
        ),
        step=StepInfo("stp_1", 2),
        runtime_context={"tenant": "a", "n": 1},
    )
    assert hook_context_from_proto(hook_context_to_proto(call)) == call


def test_a_call_without_facade_carries_no_run_or_step() -> None:
    call = HookCall(thread_id="thr_1")
    ctx = hook_context_to_proto(call)
    assert not ctx.HasField("run")
    assert not ctx.HasField("step")
    assert not ctx.HasField("runtime_context")
    assert hook_context_from_proto(ctx) == call
