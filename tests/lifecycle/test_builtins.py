"""Built-ins: context compaction (CMP-*), recent window, redaction, model fallback, quota,
each from Python and from config."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update

from pai.v1 import admin_service_pb2 as apb
from pai.v1 import thread_service_pb2 as tpb
from pai_grpc.config import ConfigError, Settings
from pai_grpc.domain import (
    FinishStepChunk,
    ModelMessage,
    StepStreamChunk,
    TextDeltaChunk,
    TextEndChunk,
    TextStartChunk,
    Usage,
)
from pai_grpc.errors import ModelError
from pai_grpc.lifecycle import (
    ContextCompactor,
    ContextNext,
    FacadeClosed,
    ModelFallback,
    Quota,
    RecentWindow,
    RedactSecrets,
    ResolveModelContextInput,
    lifecycle,
)
from pai_grpc.lifecycle.internal import ComposedLifecycle
from pai_grpc.models import ModelCall, ScriptedModel, text_step
from pai_grpc.server._scope import DEV_SCOPE
from storage import ThreadPatch, WriteSet
from storage._schema import runs as runs_table
from tests.lifecycle.harness import Harness, harness


def texts(messages: list[ModelMessage]) -> list[str]:
    out = []
    for m in messages:
        if isinstance(m.content, str):
            out.append(m.content)
        else:
            out.append(" ".join(getattr(p, "text", "") for p in m.content))
    return out


class SummaryModel:
    """A summary model that can run a side effect while it 'thinks'."""

    provider = "scripted"
    model_id = "summary"

    def __init__(self, during: Callable[[], Awaitable[None]] | None = None) -> None:
        self.calls: list[ModelCall] = []
        self.during = during

    async def stream(self, call: ModelCall) -> AsyncIterator[StepStreamChunk]:
        self.calls.append(call)
        if self.during is not None:
            await self.during()
        return _replay(text_step(f"SUMMARY-{len(self.calls)}"))


async def _replay(chunks: list[StepStreamChunk]) -> AsyncIterator[StepStreamChunk]:
    for chunk in chunks:
        yield chunk


class Probe:
    """An inner resolver recording what it receives on every step."""

    def __init__(self) -> None:
        self.bases: list[list[str]] = []
        self.private: list[dict[str, Any]] = []

    async def resolve(self, i: ResolveModelContextInput, next: ContextNext) -> list[ModelMessage]:
        self.private.append(await i.thread.private_metadata.get())
        base = await next()
        self.bases.append(texts(base))
        return base


async def chat(h: Harness, thread_id: str, turns: int) -> None:
    """``turns`` more user turns, numbered on from the turns already there."""
    start = sum(1 for m in await h.messages(thread_id) if m.message.role == "user")
    for n in range(start, start + turns):
        _, done = await h.ask(f"u{n}", thread_id)
        assert done.status == "completed", done.run


@pytest.mark.rule("CMP-01")
async def test_compaction_commits_from_the_durable_base_then_calls_next_base_once(
    database_url: str, hooks_mode: str
) -> None:
    summarizer = SummaryModel()
    compactor = ContextCompactor(summarizer, max_messages=4, keep_recent=2)  # type: ignore[arg-type]
    probe = Probe()
    hooks = [compactor, lifecycle("probe", resolve_model_context=probe.resolve)]
    agent_model = ScriptedModel(lambda call: f"a{len(agent_model.calls)}")
    async with harness(database_url, hooks, model=agent_model, mode=hooks_mode) as h:
        thread_id = await h.thread()
        await chat(h, thread_id, 2)  # 4 context messages: not yet
        assert summarizer.calls == []
        await chat(h, thread_id, 1)  # the third step sees 5 > 4: compact
        assert len(summarizer.calls) == 1
        # Folded at a user-turn boundary: u0 and its answer; u1's turn is kept whole.
        folded = texts(summarizer.calls[0].messages)[0]
        assert "u0" in folded
        assert "a1" in folded
        assert "u1" not in folded
        # Committed before the inner resolver ran, visible to it on the same step.
        state = probe.private[-1]["compaction"]
        durable = await h.messages(thread_id)
        assert state["boundaries"][-1]["through_message_id"] == durable[1].message.id
        summary = "Summary of the earlier conversation:\nSUMMARY-1"
        assert probe.bases[-1] == [summary, "u1", "a2", "u2"]
        assert len(probe.bases) == 3  # next(base) exactly once per step
        assert texts(agent_model.calls[-1].messages) == probe.bases[-1]
        record = await h.thread_record(thread_id)
        assert record.private_metadata["compaction"]["boundaries"][0]["summary"] == "SUMMARY-1"
        # The next compaction folds the previous summary with the newer turn.
        await chat(h, thread_id, 1)
        assert len(summarizer.calls) == 2
        again = texts(summarizer.calls[1].messages)[0]
        assert "Previous summary:\nSUMMARY-1" in again
        assert "u1" in again
        assert "u0" not in again
        assert probe.bases[-1] == [summary.replace("1", "2"), "u2", "a3", "u3"]
        stack = (await h.thread_record(thread_id)).private_metadata["compaction"]["boundaries"]
        assert [b["summary"] for b in stack] == ["SUMMARY-1", "SUMMARY-2"]


@pytest.mark.rule("CMP-02")
async def test_compaction_state_is_cleared_when_context_eligibility_changes(
    database_url: str, hooks_mode: str
) -> None:
    compactor = ContextCompactor(SummaryModel(), max_messages=4, keep_recent=2)  # type: ignore[arg-type]
    async with harness(database_url, [compactor], model=ScriptedModel(["a"]), mode=hooks_mode) as h:
        thread_id = await h.thread()
        await chat(h, thread_id, 3)
        record = await h.thread_record(thread_id)
        assert record.private_metadata["compaction"]["boundaries"]
        ids = [m.message.id for m in await h.messages(thread_id)]

        # A transcript-only rewrite leaves what the model sees alone: the stack stays.
        await h.admin.UpdateMessageVisibility(
            apb.UpdateMessageVisibilityRequest(
                thread_id=thread_id, message_ids=[ids[0]], transcript=False
            )
        )
        assert (await h.thread_record(thread_id)).private_metadata["compaction"]["boundaries"]

        # A context rewrite clears the stack and the usage anchor in its own write.
        before = await h.thread_record(thread_id)
        await h.admin.UpdateMessageVisibility(
            apb.UpdateMessageVisibilityRequest(
                thread_id=thread_id, message_ids=[ids[1]], context=False
            )
        )
        after = await h.thread_record(thread_id)
        assert after.version == before.version + 1
        assert after.private_metadata["compaction"] == {"boundaries": [], "usage_anchor": None}

        # So does a regeneration.
        await chat(h, thread_id, 2)
        assert (await h.thread_record(thread_id)).private_metadata["compaction"]["boundaries"]
        stored = await h.messages(thread_id)
        first_answer = next(m for m in stored if m.message.role == "assistant")
        response = await h.srv.threads.Regenerate(
            tpb.RegenerateRequest(thread_id=thread_id, message_id=first_answer.message.id)
        )
        assert response.removed_message_ids
        await h.finish(response.run.run_id)  # one retained message: no new compaction
        state = (await h.thread_record(thread_id)).private_metadata["compaction"]
        assert state == {"boundaries": [], "usage_anchor": None}


@pytest.mark.rule("CMP-02")
async def test_usage_anchor_is_recorded_and_invalidated(database_url: str, hooks_mode: str) -> None:
    compactor = ContextCompactor(SummaryModel(), max_messages=50, keep_recent=2, max_tokens=10_000)  # type: ignore[arg-type]
    model = ScriptedModel([text_step("a", usage=Usage(input_tokens=1234))])
    async with harness(database_url, [compactor], model=model, mode=hooks_mode) as h:
        thread_id, _ = await h.ask("hello")
        state = (await h.thread_record(thread_id)).private_metadata["compaction"]
        assert state["usage_anchor"]["input_tokens"] == 1234
        ids = [m.message.id for m in await h.messages(thread_id)]
        await h.admin.UpdateMessageVisibility(
            apb.UpdateMessageVisibilityRequest(
                thread_id=thread_id, message_ids=[ids[0]], context=False
            )
        )
        state = (await h.thread_record(thread_id)).private_metadata["compaction"]
        assert state["usage_anchor"] is None


@pytest.mark.rule("CMP-03")
async def test_a_summary_does_not_commit_over_changed_private_metadata(
    database_url: str, hooks_mode: str
) -> None:
    h_ref: list[Harness] = []
    thread_ref: list[str] = []

    async def concurrent_rewrite() -> None:
        # As a history rewrite would: reset the compactor's state while it summarises.
        await h_ref[0].store.commit(
            WriteSet(
                scope=DEV_SCOPE,
                thread_id=thread_ref[0],
                thread=ThreadPatch(
                    private_metadata={
                        "compaction": {"boundaries": [], "usage_anchor": None},
                        "reset": 1,
                    }
                ),
            )
        )

    summarizer = SummaryModel(during=concurrent_rewrite)
    compactor = ContextCompactor(summarizer, max_messages=4, keep_recent=2)  # type: ignore[arg-type]
    probe = Probe()
    hooks = [compactor, lifecycle("probe", resolve_model_context=probe.resolve)]
    async with harness(database_url, hooks, model=ScriptedModel(["a"]), mode=hooks_mode) as h:
        h_ref.append(h)
        thread_id = await h.thread()
        thread_ref.append(thread_id)
        await chat(h, thread_id, 3)
        assert len(summarizer.calls) == 1
        assert compactor.summaries == 0
        record = await h.thread_record(thread_id)
        assert record.private_metadata == {
            "compaction": {"boundaries": [], "usage_anchor": None},
            "reset": 1,
        }
        # The step went on from the stored state: the full durable context.
        assert probe.bases[-1] == ["u0", "a", "u1", "a", "u2"]


@pytest.mark.rule("CMP-03")
async def test_a_summary_does_not_commit_after_the_lease_is_lost(
    database_url: str, hooks_mode: str
) -> None:
    h_ref: list[Harness] = []
    outcome: list[BaseException] = []
    settled = asyncio.Event()

    async def steal_lease() -> None:
        store = h_ref[0].store
        await store.run_in_transaction(
            lambda c: c.execute(
                update(runs_table)
                .where(runs_table.c.status == "running")
                .values(lease_owner="another-runner", lease_epoch=runs_table.c.lease_epoch + 1)
            )
        )

    class Recording(ContextCompactor):
        async def resolve_model_context(
            self, i: ResolveModelContextInput, next: ContextNext
        ) -> list[ModelMessage]:
            try:
                return await super().resolve_model_context(i, next)
            except BaseException as e:
                outcome.append(e)
                settled.set()
                raise

    summarizer = SummaryModel()
    compactor = Recording(summarizer, max_messages=4, keep_recent=2)  # type: ignore[arg-type]
    async with harness(database_url, [compactor], model=ScriptedModel(["a"]), mode=hooks_mode) as h:
        h_ref.append(h)
        thread_id = await h.thread()
        await chat(h, thread_id, 2)
        summarizer.during = steal_lease
        await h.send(thread_id, "u2")
        await asyncio.wait_for(settled.wait(), 10)
        assert isinstance(outcome[0], FacadeClosed)
        assert outcome[0].reason == "LEASE_LOST"
        record = await h.thread_record(thread_id)
        assert "compaction" not in record.private_metadata


async def test_recent_window_keeps_the_newest_messages_without_orphaned_tool_results(
    database_url: str,
) -> None:
    model = ScriptedModel(["a"])
    async with harness(database_url, [RecentWindow(3)], model=model) as h:
        thread_id = await h.thread()
        await chat(h, thread_id, 3)
        assert texts(model.calls[-1].messages) == ["u1", "a", "u2"]


async def test_redaction_is_canonical_and_never_splits_a_secret(database_url: str) -> None:
    secret = "sk-ant-" + "x" * 30
    # The secret arrives split across deltas, as a provider may send it.
    chunks = [
        TextStartChunk(id="t"),
        TextDeltaChunk(id="t", text=f"your key is {secret[:12]}"),
        TextDeltaChunk(id="t", text=f"{secret[12:]} keep it safe"),
        TextEndChunk(id="t"),
        FinishStepChunk(finish_reason="stop"),
    ]
    model = ScriptedModel([chunks, "next"])
    async with harness(database_url, [RedactSecrets()], model=model) as h:
        thread_id, done = await h.ask("what is my key?")
        assert secret not in done.text
        assert done.text == "your key is [REDACTED] keep it safe"
        assert await h.transcript(thread_id) == [
            ("user", "what is my key?"),
            ("assistant", "your key is [REDACTED] keep it safe"),
        ]
        await h.ask("again", thread_id)
        assert all(secret not in t for t in texts(model.calls[-1].messages))


async def test_model_fallback_routes_a_failing_call(database_url: str) -> None:
    primary = ScriptedModel([ModelError("overloaded", reason="PROVIDER_OVERLOADED")])
    backup = ScriptedModel(["from the backup"])
    fallback = ModelFallback(backup)
    async with harness(database_url, [fallback], model=primary) as h:
        _, done = await h.ask("hi")
        assert done.status == "completed"
        assert done.text == "from the backup"
        assert fallback.fallbacks == 1
        assert len(backup.calls) == 1


async def test_model_fallback_leaves_unlisted_failures_alone(database_url: str) -> None:
    primary = ScriptedModel([ModelError("bad request", reason="PROVIDER_INVALID_REQUEST")])
    backup = ScriptedModel(["never"])
    fallback = ModelFallback(backup, reasons=["PROVIDER_OVERLOADED"])
    async with harness(database_url, [fallback], model=primary) as h:
        _, done = await h.ask("hi")
        assert done.status == "failed"
        assert done.run.reason == "PROVIDER_INVALID_REQUEST"
        assert backup.calls == []


async def test_quota_blocks_runs_beyond_the_limit(database_url: str) -> None:
    model = ScriptedModel(["answer"])
    async with harness(database_url, [Quota(2, message="Limit reached.")], model=model) as h:
        thread_id = await h.thread()
        await chat(h, thread_id, 2)
        _, done = await h.ask("one more", thread_id)
        assert done.status == "completed"
        assert done.outcome == "blocked"
        assert done.run.reason == "QUOTA_EXCEEDED"
        assert (await h.transcript(thread_id))[-1] == ("assistant", "Limit reached.")
        assert len(model.calls) == 2
        record = await h.thread_record(thread_id)
        assert record.private_metadata["quota"]["runs"] == 2
        # The counter is private: the client-visible head does not carry it.
        head = (await h.srv.threads.GetThread(tpb.GetThreadRequest(thread_id=thread_id))).thread
        assert "quota" not in head.metadata


async def test_builtins_from_config(tmp_path: Path) -> None:
    from pai_grpc._agents_setup import load_agents

    config = tmp_path / "pai.toml"
    config.write_text(
        """
[agents.helper]
model = "offline"

[[agents.helper.lifecycle]]
kind = "quota"
max_runs = 5

[[agents.helper.lifecycle]]
kind = "compaction"
model = "offline"
max_messages = 30
keep_recent = 6

[[agents.helper.lifecycle]]
kind = "recent_window"
messages = 12

[[agents.helper.lifecycle]]
kind = "redact_secrets"

[[agents.helper.lifecycle]]
kind = "model_fallback"
model = "offline"

[[agents.helper.lifecycle]]
kind = "python"
ref = "pai_grpc.lifecycle:RecentWindow"
options = { messages = 4 }

[agents.helper.contract]
thread_metadata = { type = "object", properties = { title = { type = "string" } } }
ui_data = { progress = { type = "object", required = ["pct"] } }
"""
    )
    settings = Settings(config_path=str(config), offline_chunk_delay=0)
    settings.load_file(config)
    agents, _ = await load_agents(settings)
    agent = agents.resolve("helper")
    assert isinstance(agent.lifecycle, ComposedLifecycle)
    parts = agent.lifecycle.parts
    assert [type(p).__name__ for p in parts] == [
        "Quota",
        "ContextCompactor",
        "RecentWindow",
        "RedactSecrets",
        "ModelFallback",
        "RecentWindow",
    ]
    assert parts[0].max_runs == 5  # type: ignore[attr-defined]
    assert parts[5].messages == 4  # type: ignore[attr-defined]
    assert set(agent.contract.ui_data) == {"progress"}


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ('kind = "nope"', "unknown kind"),
        ('kind = "quota"\nmax_runs = 0', "max_runs"),
        ('kind = "python"\nref = "no.such.module:x"', "cannot load"),
        ('kind = "model_fallback"\nmodel = "nowhere:model"', "model_fallback"),
    ],
)
async def test_bad_lifecycle_config_fails_at_start_up(
    tmp_path: Path, entry: str, message: str
) -> None:

    config = tmp_path / "pai.toml"
    config.write_text(
        f'[agents.helper]\nmodel = "offline"\n\n[[agents.helper.lifecycle]]\n{entry}\n'
    )
    settings = Settings(config_path=str(config), offline_chunk_delay=0)
    with pytest.raises(ConfigError, match=message):
        await _start_up(settings, config)


async def test_a_bad_contract_schema_fails_at_start_up(tmp_path: Path) -> None:
    from pai_grpc._agents_setup import load_agents

    config = tmp_path / "pai.toml"
    config.write_text(
        '[agents.helper]\nmodel = "offline"\n\n[agents.helper.contract]\nthread_metadata = { type = 12 }\n'
    )
    settings = Settings(config_path=str(config), offline_chunk_delay=0)
    settings.load_file(config)
    with pytest.raises(ConfigError, match="not a valid JSON Schema"):
        await load_agents(settings)


async def _start_up(settings: Settings, config: Path) -> None:
    """What a process does at start-up: read the file, then connect what it declares.

    A mistake is refused by whichever of the two first notices it.
    """
    from pai_grpc._agents_setup import load_agents

    settings.load_file(config)
    await load_agents(settings)
