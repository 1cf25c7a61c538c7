"""The harness works: a hook-free agent and a prepare_run respond on each backend."""

from __future__ import annotations

import pytest

from pai_grpc.lifecycle import AssistantResponse, Respond, lifecycle
from tests.lifecycle.harness import harness


@pytest.mark.rule("PR-03")
async def test_prepare_run_respond_commits_a_real_message(
    database_url: str, hooks_mode: str
) -> None:
    hooks = lifecycle(
        "cache", prepare_run=lambda i: Respond(AssistantResponse.text("cached answer"))
    )
    async with harness(database_url, hooks, mode=hooks_mode) as h:
        thread_id, done = await h.ask("question")
        assert done.status == "completed"
        assert done.outcome == "completed"
        assert await h.transcript(thread_id) == [
            ("user", "question"),
            ("assistant", "cached answer"),
        ]
        assert h.model.calls == []  # type: ignore[attr-defined]
