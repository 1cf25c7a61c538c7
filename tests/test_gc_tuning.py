"""A serving process takes its startup heap out of the collector's reach once started."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
from collections.abc import Iterator

import pytest

from pai_grpc.config import Settings
from pai_grpc.models import ScriptedModel, text_step
from pai_grpc.runtime import DEFAULT_AGENT, Agent, AgentRegistry
from pai_grpc.server import RunnerProcess
from pai_grpc.testing import migrated_store


@pytest.fixture
def restored_gc() -> Iterator[None]:
    """Give the test process its collector settings back afterwards."""
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


async def test_a_runner_process_freezes_its_startup_heap(
    sqlite_url: str, restored_gc: None
) -> None:
    gc.unfreeze()
    runner = RunnerProcess(
        Settings(database_url=sqlite_url),
        AgentRegistry([Agent(name=DEFAULT_AGENT, model=ScriptedModel([text_step("hi")]))]),
        store=await migrated_store(sqlite_url),
    )
    task = asyncio.create_task(runner.run_until_signal())
    for _ in range(500):
        if gc.get_freeze_count():
            break
        await asyncio.sleep(0.01)
    # Running: what startup loaded is out of the collector's reach.
    assert gc.get_freeze_count() > 10_000
    os.kill(os.getpid(), signal.SIGTERM)  # the process's own shutdown path
    await asyncio.wait_for(task, 10)
