"""Failure policy of remote hooks (REM-03): timeouts, failure modes, protocol errors,
plugins that are down, back-off, and misconfiguration at start-up."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from pai.v1 import run_service_pb2, runs_pb2
from pai_grpc.config import ConfigError, Settings
from pai_grpc.lifecycle.internal import ComposedLifecycle
from pai_grpc.models import ScriptedModel
from pai_grpc.plugins import (
    HookHost,
    PhasePolicy,
    PluginConfig,
    PluginConfigError,
    RemoteLifecycle,
)
from pai_grpc.runtime import DEFAULT_AGENT, Agent, AgentRegistry
from pai_grpc.testing import InProcessServer, serve_in_process
from tests.plugins.fakes import Behaviour, Running, serve_fake
from tests.runtime.support import collect, new_thread, send, transcript

pytestmark = pytest.mark.rule("REM-03")


@contextlib.asynccontextmanager
async def runtime_with(
    database_url: str, address: str, *, model: Any = None, **config: Any
) -> AsyncIterator[tuple[InProcessServer, RemoteLifecycle]]:
    host = HookHost()
    remote = RemoteLifecycle(PluginConfig(address=address, **config), host)
    await remote.connect()
    agent = Agent(
        name=DEFAULT_AGENT, model=model or ScriptedModel(["hello world"]), lifecycle=remote
    )
    try:
        async with serve_in_process(database_url, agents=AgentRegistry([agent])) as srv:
            yield srv, remote
    finally:
        await remote.close()
        await host.close()


async def run_once(srv: InProcessServer, text: str = "hi") -> tuple[runs_pb2.Run, str]:
    thread_id = await new_thread(srv)
    handle = await send(srv, thread_id, text)
    await collect(srv, handle.run_id)
    run = (await srv.runs.GetRun(run_service_pb2.GetRunRequest(run_id=handle.run_id))).run
    return run, thread_id


def failures(run: runs_pb2.Run) -> list[tuple[str, str, str, int]]:
    return [(f.plugin, f.phase, f.reason, f.count) for f in run.hook_failures]


@pytest.fixture
async def fake() -> AsyncIterator[Running]:
    running = await serve_fake(Behaviour())
    yield running
    await running.stop()


async def test_a_slow_hook_fails_closed_with_hook_timeout(database_url: str, fake: Running) -> None:
    fake.behaviour.prepare_model_step = "sleep"
    async with runtime_with(database_url, fake.address, timeout=0.2) as (srv, _):
        run, thread_id = await run_once(srv)
        assert await transcript(srv, thread_id) == [("user", "hi")]
    assert run.status == runs_pb2.RUN_STATUS_FAILED
    assert run.error.reason == "HOOK_TIMEOUT"
    assert "fake" in run.error.message
    assert "prepare_model_step" in run.error.message


async def test_a_slow_hook_fails_open_skipped_counted_and_marked(
    database_url: str, fake: Running
) -> None:
    fake.behaviour.prepare_model_step = "sleep"
    async with runtime_with(
        database_url,
        fake.address,
        phases={"prepare_model_step": PhasePolicy(timeout=0.2, failure_mode="open")},
    ) as (srv, _):
        run, thread_id = await run_once(srv)
        assert run.status == runs_pb2.RUN_STATUS_COMPLETED
        assert failures(run) == [("fake", "prepare_model_step", "HOOK_TIMEOUT", 1)]
        assert (await transcript(srv, thread_id))[-1] == ("assistant", "hello world")


async def test_a_wrong_reply_is_a_protocol_error(database_url: str, fake: Running) -> None:
    fake.behaviour.prepare_run = "wrong"
    async with runtime_with(database_url, fake.address) as (srv, _):
        run, _ = await run_once(srv)
    assert run.status == runs_pb2.RUN_STATUS_FAILED
    assert run.error.reason == "HOOK_PROTOCOL_ERROR"
    assert "prepare_run" in run.error.message


async def test_a_malformed_patch_is_a_protocol_error_and_may_fail_open(
    database_url: str, fake: Running
) -> None:
    fake.behaviour.prepare_model_step = "wrong"
    async with runtime_with(database_url, fake.address) as (srv, _):
        run, _ = await run_once(srv)
        assert (run.status, run.error.reason) == (runs_pb2.RUN_STATUS_FAILED, "HOOK_PROTOCOL_ERROR")
    async with runtime_with(database_url, fake.address, failure_mode="open") as (srv, _):
        run, _ = await run_once(srv)
        assert run.status == runs_pb2.RUN_STATUS_COMPLETED
        assert failures(run) == [("fake", "prepare_model_step", "HOOK_PROTOCOL_ERROR", 1)]


async def test_a_pass_through_before_next_is_a_protocol_error(
    database_url: str, fake: Running
) -> None:
    fake.behaviour.around = "pass_before_next"
    async with runtime_with(database_url, fake.address) as (srv, _):
        run, _ = await run_once(srv)
    assert (run.status, run.error.reason) == (runs_pb2.RUN_STATUS_FAILED, "HOOK_PROTOCOL_ERROR")
    assert "around_model_call" in run.error.message


async def test_a_stream_ended_early_is_always_hook_unavailable(
    database_url: str, fake: Running
) -> None:
    # The plugin ends the call (status OK) without `end` while the runtime still writes:
    # grpc.aio reports that as EOF or as INTERNAL "Internal error from Core"
    # (grpc/grpc#36066), and both get the one reason, run after run.
    fake.behaviour.transform = "close_early"
    async with runtime_with(database_url, fake.address, backoff_after=10_000) as (srv, _):
        for _ in range(5):
            run, thread_id = await run_once(srv)
            assert (run.status, run.error.reason) == (
                runs_pb2.RUN_STATUS_FAILED,
                "HOOK_UNAVAILABLE",
            ), run.error.message
            assert "transform_step_stream" in run.error.message
            assert await transcript(srv, thread_id) == [("user", "hi")]


@pytest.mark.parametrize("batches", [False, True], ids=["chunks", "batches"])
async def test_a_transform_fails_open_only_before_its_first_chunk(
    database_url: str, fake: Running, batches: bool
) -> None:
    fake.behaviour.batches = batches
    # Before anything went downstream: the consumed chunks are replayed untouched.
    fake.behaviour.transform = "close_early"
    async with runtime_with(database_url, fake.address, failure_mode="open") as (srv, _):
        run, thread_id = await run_once(srv)
        assert run.status == runs_pb2.RUN_STATUS_COMPLETED
        assert (await transcript(srv, thread_id))[-1] == ("assistant", "hello world")
        assert failures(run) == [("fake", "transform_step_stream", "HOOK_UNAVAILABLE", 1)]
    # After its first chunk went downstream: output cannot be unsent, so the run fails.
    fake.behaviour.transform = "fail_after_first"
    async with runtime_with(database_url, fake.address, failure_mode="open") as (srv, _):
        run, thread_id = await run_once(srv)
        assert run.status == runs_pb2.RUN_STATUS_FAILED
        assert run.error.reason == "HOOK_UNAVAILABLE"
        assert await transcript(srv, thread_id) == [("user", "hi")]


async def test_a_plugin_that_is_down(database_url: str) -> None:
    fake = await serve_fake(Behaviour())
    async with runtime_with(database_url, fake.address) as (srv, _):
        await fake.stop()
        run, _ = await run_once(srv)
        assert (run.status, run.error.reason) == (runs_pb2.RUN_STATUS_FAILED, "HOOK_UNAVAILABLE")
    fake = await serve_fake(Behaviour())
    async with runtime_with(database_url, fake.address, failure_mode="open") as (srv, _):
        await fake.stop()
        run, thread_id = await run_once(srv)
        assert run.status == runs_pb2.RUN_STATUS_COMPLETED
        assert (await transcript(srv, thread_id))[-1] == ("assistant", "hello world")
        # Each phase failed open once in the step, then was skipped for its rest.
        assert {(p, r, n) for _, p, r, n in failures(run)} == {
            ("prepare_run", "HOOK_UNAVAILABLE", 1),
            ("prepare_model_step", "HOOK_UNAVAILABLE", 1),
            ("around_model_call", "HOOK_UNAVAILABLE", 1),
            ("transform_step_stream", "HOOK_UNAVAILABLE", 1),
        }


async def test_repeated_failures_back_off_until_the_plugin_is_healthy(
    database_url: str, fake: Running
) -> None:
    fake.behaviour.slow = True
    async with runtime_with(
        database_url,
        fake.address,
        timeout=0.1,
        failure_mode="open",
        backoff_after=2,
        backoff_initial=60.0,
        health_interval=60.0,
    ) as (srv, remote):
        run, _ = await run_once(srv)  # prepare_run and prepare_model_step time out: back off
        assert fake.behaviour.calls == ["prepare_run", "prepare_model_step"]
        run, _ = await run_once(srv)
        # Backed off: the plugin is not called at all; every phase is skipped as unavailable.
        assert fake.behaviour.calls == ["prepare_run", "prepare_model_step"]
        assert run.status == runs_pb2.RUN_STATUS_COMPLETED
        assert {(p, r, n) for _, p, r, n in failures(run)} == {
            ("prepare_run", "HOOK_UNAVAILABLE", 1),
            ("prepare_model_step", "HOOK_UNAVAILABLE", 1),
            ("around_model_call", "HOOK_UNAVAILABLE", 1),
            ("transform_step_stream", "HOOK_UNAVAILABLE", 1),
        }
        # A SERVING health check ends the back-off; calls flow again.
        fake.behaviour.slow = False
        assert await remote.check_health()
        run, _ = await run_once(srv)
        assert run.status == runs_pb2.RUN_STATUS_COMPLETED
        assert failures(run) == []
        assert len(fake.behaviour.calls) == 6


async def test_an_unreachable_plugin_fails_at_start_up() -> None:
    host = HookHost()
    remote = RemoteLifecycle(PluginConfig(address="127.0.0.1:1"), host)
    with pytest.raises(PluginConfigError, match="unreachable at start-up"):
        await remote.connect(timeout=1.0)
    await host.close()


async def test_a_misdescribed_plugin_fails_at_start_up(fake: Running) -> None:
    host = HookHost()
    remote = RemoteLifecycle(
        PluginConfig(address=fake.address, phases={"after_step": PhasePolicy()}), host
    )
    with pytest.raises(PluginConfigError, match="does not implement"):
        await remote.connect()
    with pytest.raises(PluginConfigError, match="unknown lifecycle phase"):
        PluginConfig(address=fake.address, only=frozenset({"before_everything"}))
    with pytest.raises(PluginConfigError, match="failure_mode"):
        PluginConfig(address=fake.address, failure_mode="maybe")  # type: ignore[arg-type]
    await host.close()


async def test_plugins_from_config_and_their_misconfiguration(
    tmp_path: Path, fake: Running
) -> None:
    from pai_grpc._agents_setup import load_agents

    def load(entry: str) -> Settings:
        config = tmp_path / "pai.toml"
        config.write_text(
            f'[agents.helper]\nmodel = "offline"\n\n[[agents.helper.lifecycle]]\n{entry}\n'
        )
        settings = Settings(config_path=str(config), offline_chunk_delay=0)
        settings.load_file(config)
        return settings

    good = load(
        f'kind = "plugin"\naddress = "{fake.address}"\ntimeout_ms = 250\n'
        'phases = { transform_step_stream = { timeout_ms = 3000, failure_mode = "open" } }'
    )
    agents, opened = await load_agents(good)
    composed = agents.resolve("helper").lifecycle
    assert isinstance(composed, ComposedLifecycle)
    remote = composed.parts[0]
    assert isinstance(remote, RemoteLifecycle)
    assert remote.phases() == {
        "prepare_run",
        "prepare_model_step",
        "around_model_call",
        "transform_step_stream",
    }
    assert remote.policy("prepare_run") == PhasePolicy(timeout=0.25, failure_mode="closed")
    assert remote.policy("transform_step_stream") == PhasePolicy(timeout=3.0, failure_mode="open")
    for item in reversed(opened):
        await item.close()

    for entry, message in [
        ('kind = "plugin"\naddress = "127.0.0.1:1"', "unreachable"),
        (
            f'kind = "plugin"\naddress = "{fake.address}"\nonly = ["after_step"]',
            "does not implement",
        ),
        (f'kind = "plugin"\naddress = "{fake.address}"\nretries = 3', "retries: unknown key"),
        ('kind = "plugin"', "address: required key is missing"),
    ]:
        with pytest.raises(ConfigError, match=message):
            await load_agents(load(entry))


async def test_chunks_ready_together_travel_as_one_batch(fake: Running, tmp_path: Path) -> None:
    from pai_grpc.models import text_step

    fake.behaviour.batches = True
    # A zero-latency provider: the whole step is ready at once, so it is read ahead
    # without returning to the event loop and written as one message (a chunk read
    # per loop turn sent batches of 1-2 chunks).
    words = "one two three four five six seven eight nine ten"
    model = ScriptedModel([text_step(words)])
    async with runtime_with(f"sqlite:///{tmp_path / 'b.db'}", fake.address, model=model) as (
        srv,
        _,
    ):
        run, thread_id = await run_once(srv)
        assert run.status == runs_pb2.RUN_STATUS_COMPLETED
        assert (await transcript(srv, thread_id))[-1] == ("assistant", words)
    batches = [c for c in fake.behaviour.calls if c.startswith("batch:")]
    assert batches == [f"batch:{len(text_step(words))}"]


# ---- the line between the hook's own errors and plugin failures ---------------------------

#: (behaviour field, value, phase): replies that cannot be used, in unary and stream phases.
UNUSABLE_REPLIES = [
    ("prepare_model_step", "garbage", "prepare_model_step"),
    ("around", "garbage", "around_model_call"),
    ("around", "unset", "around_model_call"),
    ("transform", "garbage", "transform_step_stream"),
    ("transform", "unset", "transform_step_stream"),
]


@pytest.mark.parametrize("mode", ["closed", "open"])
@pytest.mark.parametrize(("field", "value", "phase"), UNUSABLE_REPLIES)
async def test_an_undecodable_or_empty_reply_is_a_protocol_error_under_the_failure_mode(
    database_url: str, fake: Running, mode: str, field: str, value: str, phase: str
) -> None:
    setattr(fake.behaviour, field, value)
    async with runtime_with(database_url, fake.address, failure_mode=mode) as (srv, _):
        run, thread_id = await run_once(srv)
        if mode == "closed":
            assert (run.status, run.error.reason) == (
                runs_pb2.RUN_STATUS_FAILED,
                "HOOK_PROTOCOL_ERROR",
            )
            assert phase in run.error.message
            assert "AttributeError" not in run.error.message
        else:
            assert run.status == runs_pb2.RUN_STATUS_COMPLETED
            assert failures(run) == [("fake", phase, "HOOK_PROTOCOL_ERROR", 1)]
            assert (await transcript(srv, thread_id))[-1] == ("assistant", "hello world")


#: Statuses a plugin may end a call with; none of them carries the hook's own error.
STATUSES = [
    grpc.StatusCode.INTERNAL,
    grpc.StatusCode.UNKNOWN,
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.UNIMPLEMENTED,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.DEADLINE_EXCEEDED,
]

#: (behaviour field, value, phase, unary): a status at each kind of point in a call.
STATUS_POINTS = [
    ("prepare_model_step", "status", "prepare_model_step", True),
    ("around", "status", "around_model_call", False),
    ("transform", "status_at_start", "transform_step_stream", False),
    # While the runtime still writes chunks: grpc core may report INTERNAL "Internal
    # error from Core" in place of the plugin's status (grpc/grpc#36066).
    ("transform", "status_midstream", "transform_step_stream", False),
]


def status_reason(code: grpc.StatusCode, unary: bool) -> str:
    """The one reason a plugin's status maps to (README, "Remote plugins")."""
    if unary and code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return "HOOK_TIMEOUT"
    return "HOOK_UNAVAILABLE"


@pytest.mark.parametrize("mode", ["closed", "open"])
@pytest.mark.parametrize(("field", "value", "phase", "unary"), STATUS_POINTS)
async def test_a_status_from_the_plugin_is_a_plugin_failure_under_the_failure_mode(
    database_url: str, fake: Running, mode: str, field: str, value: str, phase: str, unary: bool
) -> None:
    setattr(fake.behaviour, field, value)
    async with runtime_with(
        database_url, fake.address, failure_mode=mode, backoff_after=10_000
    ) as (srv, _):
        for code in STATUSES:
            fake.behaviour.code = code
            # Twice each: the reason for a given status is always the same.
            for _ in range(2):
                run, thread_id = await run_once(srv)
                expected = status_reason(code, unary)
                if mode == "closed":
                    assert (run.status, run.error.reason) == (
                        runs_pb2.RUN_STATUS_FAILED,
                        expected,
                    ), (code, run.error.message)
                    assert phase in run.error.message
                else:
                    assert run.status == runs_pb2.RUN_STATUS_COMPLETED, (code, run.error)
                    assert failures(run) == [("fake", phase, expected, 1)], code
                    assert (await transcript(srv, thread_id))[-1] == ("assistant", "hello world")


@pytest.mark.rule("CMPS-04")
@pytest.mark.parametrize("mode", ["closed", "open"])
async def test_the_hooks_own_error_fails_the_run_whatever_the_failure_mode(
    database_url: str, fake: Running, mode: str
) -> None:
    # Unary: a status carrying ErrorInfo in domain pai.v1. Stream: a HookFailed message.
    fake.behaviour.prepare_model_step = "status"
    fake.behaviour.rich_reason = "HOOK_FAILED"
    async with runtime_with(database_url, fake.address, failure_mode=mode) as (srv, _):
        run, _ = await run_once(srv)
        assert (run.status, run.error.reason) == (runs_pb2.RUN_STATUS_FAILED, "HOOK_FAILED")
        assert failures(run) == []
        fake.behaviour.prepare_model_step = "ok"
        fake.behaviour.transform = "hook_failed"
        run, _ = await run_once(srv)
        assert (run.status, run.error.reason) == (runs_pb2.RUN_STATUS_FAILED, "HOOK_FAILED")
        assert "the hook raised" in run.error.message
        assert failures(run) == []


async def test_a_rich_status_ending_a_stream_is_a_plugin_failure(
    database_url: str, fake: Running
) -> None:
    # Ending a stream with a status may be reported as "Internal error from Core"
    # (grpc/grpc#36066), so on streams only a HookFailed message is the hook's own error.
    fake.behaviour.transform = "status_midstream"
    fake.behaviour.rich_reason = "HOOK_FAILED"
    async with runtime_with(database_url, fake.address, failure_mode="open") as (srv, _):
        run, _ = await run_once(srv)
        assert run.status == runs_pb2.RUN_STATUS_COMPLETED
        assert failures(run) == [("fake", "transform_step_stream", "HOOK_UNAVAILABLE", 1)]
