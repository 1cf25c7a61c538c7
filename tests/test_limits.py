"""Per-scope limits: the Send rate (token bucket per process) and active runs (in the database)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from pai.v1 import parts_pb2, run_service_pb2
from pai.v1 import thread_service_pb2 as tpb
from pai_grpc.config import ConfigError, Settings
from pai_grpc.domain import StepStreamChunk
from pai_grpc.errors import ResourceExhausted
from pai_grpc.models import ModelCall, ScriptedModel
from pai_grpc.runtime import DEFAULT_AGENT, Agent, AgentRegistry, ScopeQuotas
from pai_grpc.testing import InProcessServer, serve_in_process

A = (("authorization", "Bearer tok-a"),)
B = (("authorization", "Bearer tok-b"),)
TOKENS = {"tok-a": "scope-a", "tok-b": "scope-b"}


def text(s: str) -> parts_pb2.MessagePart:
    return parts_pb2.MessagePart(text=parts_pb2.TextPart(text=s))


def exhausted(err: grpc.aio.AioRpcError) -> tuple[str, dict[str, str], float]:
    """(ErrorInfo reason, ErrorInfo metadata, RetryInfo delay in seconds) of a refusal."""
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, err.details()
    status = rpc_status.from_call(err)  # type: ignore[arg-type]
    assert status is not None
    reason, metadata, delay = "", {}, -1.0
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            assert info.domain == "pai.v1"
            reason, metadata = info.reason, dict(info.metadata)
        elif detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            retry = error_details_pb2.RetryInfo()
            detail.Unpack(retry)
            delay = retry.retry_delay.ToTimedelta().total_seconds()
    return reason, metadata, delay


async def new_thread(srv: InProcessServer, who: tuple[tuple[str, str], ...]) -> str:
    created = await srv.threads.CreateThread(tpb.CreateThreadRequest(), metadata=who)
    return str(created.thread.id)


async def send(srv: InProcessServer, thread_id: str, who: tuple[tuple[str, str], ...]) -> str:
    sent = await srv.threads.Send(
        tpb.SendRequest(thread_id=thread_id, parts=[text("hi")]), metadata=who
    )
    return str(sent.run.run_id)


async def finished(srv: InProcessServer, run_id: str, who: tuple[tuple[str, str], ...]) -> None:
    """Read the run's stream to its end (the run is then no longer active)."""
    async for _ in srv.runs.StreamRun(
        run_service_pb2.StreamRunRequest(run_id=run_id), metadata=who, timeout=20
    ):
        pass


class GatedModel:
    """Answers only once the gate opens, so its runs stay running until then."""

    provider = "scripted"
    model_id = "gated"

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self._inner = ScriptedModel(["done"])

    async def stream(self, call: ModelCall) -> AsyncIterator[StepStreamChunk]:
        await self.gate.wait()
        return await self._inner.stream(call)


# ---- the Send rate ---------------------------------------------------------


async def test_a_scope_over_its_send_rate_is_told_when_to_retry(database_url: str) -> None:
    # One token every 20 s: the refusal cannot depend on how fast this machine is.
    async with serve_in_process(
        database_url,
        tokens=TOKENS,
        sends_per_second=0.05,
        send_burst=2,
        max_active_runs_per_scope=0,
        embedded_runner=False,
    ) as srv:
        first, second = await new_thread(srv, A), await new_thread(srv, A)
        await send(srv, first, A)
        await send(srv, second, A)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await send(srv, second, A)
        reason, metadata, delay = exhausted(refused.value)
        assert reason == "SEND_RATE_EXCEEDED"
        assert metadata == {"sends_per_second": "0.05", "send_burst": "2"}
        assert 0 < delay <= 20
        # Nothing was written: the thread holds just the first Send's run.
        listed = await srv.runs.ListRuns(
            run_service_pb2.ListRunsRequest(thread_id=second), metadata=A
        )
        assert len(listed.runs) == 1
        # Another scope has its own bucket.
        other = await new_thread(srv, B)
        await send(srv, other, B)
        await send(srv, other, B)


def test_the_send_bucket_refills_at_the_rate_up_to_the_burst() -> None:
    now = [100.0]
    quotas = ScopeQuotas(sends_per_second=1.0, send_burst=2, clock=lambda: now[0])
    quotas.take_send("s")
    quotas.take_send("s")
    with pytest.raises(ResourceExhausted) as refused:
        quotas.take_send("s")
    assert refused.value.reason == "SEND_RATE_EXCEEDED"
    assert refused.value.retry_after == pytest.approx(1.0)
    now[0] += 0.25
    with pytest.raises(ResourceExhausted) as again:
        quotas.take_send("s")
    assert again.value.retry_after == pytest.approx(0.75)
    now[0] += 0.75
    quotas.take_send("s")  # exactly one token came back
    now[0] += 60  # a long quiet spell refills the burst, no more
    quotas.take_send("s")
    quotas.take_send("s")
    with pytest.raises(ResourceExhausted):
        quotas.take_send("s")
    ScopeQuotas(sends_per_second=0, clock=lambda: now[0]).take_send("s")  # 0: no limit


# ---- active runs per scope -------------------------------------------------


async def test_a_scope_holding_its_active_runs_cannot_start_more(database_url: str) -> None:
    model = GatedModel()
    agents = AgentRegistry([Agent(name=DEFAULT_AGENT, model=model)])
    async with serve_in_process(
        database_url,
        agents=agents,
        tokens=TOKENS,
        max_active_runs_per_scope=1,
        sends_per_second=0,
    ) as srv:
        busy, idle = await new_thread(srv, A), await new_thread(srv, A)
        running = await send(srv, busy, A)
        for attempt in (
            send(srv, idle, A),
            send(srv, busy, A),  # a queued run counts too
            srv.threads.Trigger(tpb.TriggerRequest(thread_id=idle), metadata=A),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await attempt
            reason, metadata, delay = exhausted(refused.value)
            assert reason == "TOO_MANY_ACTIVE_RUNS"
            assert metadata == {"max_active_runs_per_scope": "1", "active_runs": "1"}
            assert delay > 0
        listed = await srv.runs.ListRuns(
            run_service_pb2.ListRunsRequest(thread_id=idle), metadata=A
        )
        assert list(listed.runs) == []
        # Another scope is not affected.
        elsewhere = await send(srv, await new_thread(srv, B), B)
        # Once the run ends the scope may start another.
        model.gate.set()
        await finished(srv, running, A)
        await finished(srv, elsewhere, B)
        await finished(srv, await send(srv, idle, A), A)


async def test_the_active_run_quota_holds_for_concurrent_sends(database_url: str) -> None:
    # No runner: every run stays queued (active), so exactly the quota's worth start.
    async with serve_in_process(
        database_url,
        tokens=TOKENS,
        max_active_runs_per_scope=3,
        sends_per_second=0,
        embedded_runner=False,
    ) as srv:
        threads = [await new_thread(srv, A) for _ in range(12)]
        outcomes = await asyncio.gather(*(send(srv, t, A) for t in threads), return_exceptions=True)
        refused = [o for o in outcomes if isinstance(o, grpc.aio.AioRpcError)]
        assert len(outcomes) - len(refused) == 3, outcomes
        assert {exhausted(e)[0] for e in refused} == {"TOO_MANY_ACTIVE_RUNS"}


async def test_zero_disables_the_active_run_quota(database_url: str) -> None:
    async with serve_in_process(
        database_url, max_active_runs_per_scope=0, sends_per_second=0, embedded_runner=False
    ) as srv:
        for _ in range(3):
            await send(srv, await new_thread(srv, ()), ())


# ---- configuration ---------------------------------------------------------


def test_limits_come_from_the_config_file(tmp_path: Path) -> None:
    config = tmp_path / "pai.toml"
    config.write_text("[limits]\nmax_active_runs_per_scope = 5\nsends_per_second = 2.5\n")
    settings = Settings(config_path=str(config))
    settings.load_file(config)
    assert settings.max_active_runs_per_scope == 5
    assert settings.sends_per_second == 2.5
    assert settings.send_burst == 100  # the default stays
    assert Settings().max_active_runs_per_scope == 1000  # generous defaults
    config.write_text("[limits]\nsends_per_second = -1\n")
    with pytest.raises(ConfigError, match="sends_per_second"):
        Settings().load_file(config)
