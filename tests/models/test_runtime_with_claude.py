"""The runtime on the real anthropic SDK against the fake Messages API server."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from pai.v1 import run_service_pb2, runs_pb2
from pai_grpc.fakes import (
    FakeAnthropic,
    midstream_error,
    reply,
    text_block,
    thinking_block,
    tool_use_block,
)
from pai_grpc.models.anthropic import AnthropicModel
from pai_grpc.runtime import DEFAULT_AGENT, Agent, AgentRegistry
from pai_grpc.testing import serve_in_process
from pai_grpc.tools import tool
from tests.processes import free_port
from tests.runtime.support import collect, kinds, new_thread, send, transcript, wait_run

API_KEY = "sk-ant-test"


class City(BaseModel):
    city: str


@tool(description="Weather in a city")
async def weather(value: City) -> dict[str, Any]:
    return {"city": value.city, "celsius": 19}


@pytest.mark.rule("RT-05")
@pytest.mark.rule("RT-07")
async def test_a_tool_round_trip_with_claude(database_url: str) -> None:
    async with FakeAnthropic(api_key=API_KEY) as fake:
        fake.script(
            reply(
                thinking_block("I should look it up", signature="sig-1"),
                tool_use_block("toolu_1", "weather", {"city": "Oslo"}),
                stop_reason="tool_use",
            ),
            reply(text_block("It is 19 degrees in Oslo."), stop_reason="end_turn"),
        )
        model = AnthropicModel("claude-sonnet-5-5", api_key=API_KEY, base_url=fake.base_url)
        agents = AgentRegistry([Agent(name=DEFAULT_AGENT, model=model, tools=[weather])])
        try:
            async with serve_in_process(database_url, agents=agents) as srv:
                thread_id = await new_thread(srv)
                handle = await send(srv, thread_id, "Weather in Oslo?")
                events = await collect(srv, handle.run_id)
                assert kinds(events)[-1] == "status:completed"
                assert {"reasoning_delta", "tool_input_delta", "tool_call", "tool_result"} <= set(
                    kinds(events)
                )
                run = await wait_run(srv, handle.run_id)
                assert run.step_count == 2
                assert run.usage.output_tokens > 0
                assert await transcript(srv, thread_id) == [
                    ("user", "Weather in Oslo?"),
                    ("assistant", ""),
                    ("assistant", "It is 19 degrees in Oslo."),
                ]
        finally:
            await model.aclose()
        first, second = (r.body for r in fake.requests)
        assert first["tools"][0]["name"] == "weather"
        assert first["tools"][0]["input_schema"]["required"] == ["city"]
        replay = second["messages"]
        assert [m["role"] for m in replay] == ["user", "assistant", "user"]
        thinking, tool_use = replay[1]["content"]
        # Reasoning is replayed to the API unchanged, with its signature.
        assert thinking == {
            "type": "thinking",
            "thinking": "I should look it up",
            "signature": "sig-1",
        }
        assert tool_use["type"] == "tool_use"
        assert tool_use["input"] == {"city": "Oslo"}
        (result,) = replay[2]["content"]
        assert result["type"] == "tool_result"
        assert result["tool_use_id"] == "toolu_1"
        assert "19" in str(result["content"])


async def test_an_overloaded_stream_fails_the_run_with_the_provider_reason(
    database_url: str,
) -> None:
    async with FakeAnthropic(api_key=API_KEY) as fake:
        fake.script(midstream_error("overloaded_error", "Overloaded", after_events=3))
        model = AnthropicModel(
            "claude-sonnet-5-5", api_key=API_KEY, base_url=fake.base_url, max_retries=0
        )
        agents = AgentRegistry([Agent(name=DEFAULT_AGENT, model=model)])
        try:
            async with serve_in_process(database_url, agents=agents) as srv:
                thread_id = await new_thread(srv)
                handle = await send(srv, thread_id, "hi")
                run = await wait_run(srv, handle.run_id)
                assert run.status == runs_pb2.RUN_STATUS_FAILED
                assert run.error.reason == "PROVIDER_OVERLOADED"
                assert "Overloaded" in run.error.message
                got = await srv.runs.GetRun(run_service_pb2.GetRunRequest(run_id=handle.run_id))
                assert got.run.step_count == 0
                assert await transcript(srv, thread_id) == [("user", "hi")]
        finally:
            await model.aclose()
        assert len(fake.requests) == 1  # never retried once the stream had started


@pytest.mark.slow
async def test_serve_answers_with_claude_when_an_api_key_is_set(tmp_path: Path) -> None:
    exe = [sys.executable, "-m", "pai_grpc.cli"]
    async with FakeAnthropic(api_key=API_KEY) as fake:
        fake.script(reply(text_block("Hello from the fake Claude.")))
        address = f"127.0.0.1:{free_port()}"
        env = {
            **os.environ,
            "PAI_DATABASE_URL": f"sqlite:///{tmp_path / 'claude.db'}",
            "PAI_ADDRESS": address,
            "ANTHROPIC_API_KEY": API_KEY,
            "ANTHROPIC_BASE_URL": fake.base_url,
        }
        import asyncio

        migrate = await asyncio.create_subprocess_exec(*exe, "migrate", env=env)
        assert await migrate.wait() == 0
        log = (tmp_path / "serve.log").open("wb")
        server = await asyncio.create_subprocess_exec(
            *exe, "serve", env=env, stdout=log, stderr=log
        )
        try:
            deadline = time.monotonic() + 30
            while True:
                health = await asyncio.create_subprocess_exec(
                    *exe, "health", "--address", address, env=env
                )
                if await health.wait() == 0:
                    break
                assert time.monotonic() < deadline, (tmp_path / "serve.log").read_text()
                await asyncio.sleep(0.2)
            chat = await asyncio.create_subprocess_exec(
                *exe, "chat", "--address", address, "hello", env=env,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            )  # fmt: skip
            out, err = await chat.communicate()
            assert chat.returncode == 0, err.decode()
            assert "Hello from the fake Claude." in out.decode()
            assert "offline" not in out.decode()
        finally:
            server.terminate()
            await server.wait()
            log.close()
        assert fake.requests[0].body["model"] == "claude-sonnet-5-5"
        assert "ANTHROPIC_API_KEY is set" in (tmp_path / "serve.log").read_text()
