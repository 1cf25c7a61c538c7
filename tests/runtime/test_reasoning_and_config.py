"""Reasoning pruning (RSN), model selection (RT-06) and agents/tools from the config file."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pai.v1 import thread_service_pb2 as tpb
from pai_grpc.config import ConfigError, Settings
from pai_grpc.domain import (
    AssistantModelMessage,
    ModelFilePart,
    ModelMessage,
    ModelReasoningPart,
    ModelTextPart,
    ReasoningDeltaChunk,
    ReasoningEndChunk,
    ReasoningStartChunk,
    StepStreamChunk,
    UserModelMessage,
)
from pai_grpc.models import (
    ModelCall,
    ScriptedModel,
    StrippedPrefix,
    _prune,
    prune_reasoning,
    text_step,
    tool_call_step,
)
from pai_grpc.models._messages import REASONING_FILE_KEY
from pai_grpc.runtime import DEFAULT_AGENT, Agent, AgentRegistry
from pai_grpc.testing import serve_in_process
from pai_grpc.tools import ToolContext, tool
from pai_grpc.toolservice import serve_tools
from tests.runtime.support import lines_run, new_thread, send, wait_run


def thinking(text: str, then: list[StepStreamChunk]) -> list[StepStreamChunk]:
    return [
        ReasoningStartChunk(id="r"),
        ReasoningDeltaChunk(id="r", text=text),
        ReasoningDeltaChunk(id="r", text="", provider_metadata={"anthropic": {"signature": "sig"}}),
        ReasoningEndChunk(id="r"),
        *then,
    ]


def reasoning_texts(call: ModelCall) -> list[str]:
    return [
        p.text
        for m in call.messages
        if isinstance(m, AssistantModelMessage)
        for p in m.content
        if isinstance(p, ModelReasoningPart)
    ]


@pytest.mark.rule("RSN-01")
@pytest.mark.rule("RSN-02")
@pytest.mark.rule("RSN-04")
async def test_reasoning_of_earlier_turns_is_pruned_and_the_current_turn_keeps_it(
    database_url: str,
) -> None:
    def script(call: ModelCall) -> list[StepStreamChunk]:
        turn = sum(isinstance(m, UserModelMessage) for m in call.messages)
        has_result = any(m.role == "tool" for m in call.messages[-1:])
        if turn == 1 and not has_result:
            return thinking("turn one plan", tool_call_step(("c1", "lookup", {})))
        return thinking(f"turn {turn} final", text_step(f"answer {turn}"))

    from pydantic import BaseModel

    class Empty(BaseModel):
        pass

    @tool()
    async def lookup(value: Empty, ctx: ToolContext) -> str:
        return "found"

    model = ScriptedModel(script)
    agents = AgentRegistry([Agent(name=DEFAULT_AGENT, model=model, tools=[lookup])])
    async with serve_in_process(database_url, agents=agents) as srv:
        thread_id = await new_thread(srv)
        await wait_run(srv, (await send(srv, thread_id, "first")).run_id)
        # Within turn one the tool step's reasoning is replayed (RSN-02).
        assert reasoning_texts(model.calls[1]) == ["turn one plan"]
        await wait_run(srv, (await send(srv, thread_id, "second")).run_id)
        # Turn two: turn one's reasoning is gone from the provider request (RSN-01) ...
        assert reasoning_texts(model.calls[2]) == []
        assert any(
            isinstance(p, ModelTextPart) and p.text == "answer 1"
            for m in model.calls[2].messages
            if isinstance(m, AssistantModelMessage)
            for p in m.content
        )
        # ... but stored messages keep it (RSN-04).
        page = await srv.store.list_messages("default", thread_id, view="all")
        stored = [
            p.get("text") for m in page.items for p in m.parts if p.get("type") == "reasoning"
        ]  # type: ignore[union-attr]
        assert stored == ["turn one plan", "turn 1 final", "turn 2 final"]


@pytest.mark.rule("RSN-03")
def test_without_a_user_message_reasoning_is_kept() -> None:
    assistant = AssistantModelMessage(
        content=[ModelReasoningPart(text="why"), ModelTextPart(text="hi")]
    )
    assert prune_reasoning([assistant]) == [assistant]
    user = UserModelMessage(content=[ModelTextPart(text="q")])
    only_reasoning = AssistantModelMessage(content=[ModelReasoningPart(text="x")])
    # Empty after pruning -> dropped; the current turn (after the user) untouched.
    assert prune_reasoning([only_reasoning, assistant, user, assistant]) == [
        AssistantModelMessage(content=[ModelTextPart(text="hi")]),
        user,
        assistant,
    ]


def _pruned_by_definition(messages: list[ModelMessage]) -> list[ModelMessage]:
    """RSN-01..03 read literally: the oracle for the pruning's fast path."""

    def reasoning(part: object) -> bool:
        return isinstance(part, ModelReasoningPart) or (
            isinstance(part, ModelFilePart)
            and bool((part.provider_options or {}).get(REASONING_FILE_KEY))
        )

    users = [i for i, m in enumerate(messages) if isinstance(m, UserModelMessage)]
    if not users:
        return list(messages)
    out: list[ModelMessage] = []
    for i, message in enumerate(messages):
        if i < users[-1] and isinstance(message, AssistantModelMessage):
            kept = [p for p in message.content if not reasoning(p)]
            if not kept:
                continue
            message = AssistantModelMessage(content=kept)
        out.append(message)
    return out


_PARTS = st.sampled_from(
    [
        ModelTextPart(text="t"),
        ModelReasoningPart(text="r"),
        ModelFilePart(media_type="text/plain", data="f"),
        ModelFilePart(
            media_type="text/plain", data="rf", provider_options={REASONING_FILE_KEY: True}
        ),
    ]
)
_MESSAGES = st.lists(
    st.one_of(
        st.builds(UserModelMessage, content=st.lists(st.just(ModelTextPart(text="q")), min_size=1)),
        st.builds(AssistantModelMessage, content=st.lists(_PARTS, min_size=1, max_size=4)),
    ),
    max_size=12,
)


@pytest.mark.rule("RSN-01")
@given(_MESSAGES)
def test_pruning_is_the_rule_read_literally(messages: list[ModelMessage]) -> None:
    assert prune_reasoning(messages) == _pruned_by_definition(messages)


@pytest.mark.rule("RSN-01")
@given(_MESSAGES, _MESSAGES, _MESSAGES, st.sampled_from(["none", "insert", "replace", "delete"]))
def test_pruning_a_cached_context_is_the_rule_read_literally(
    cached: list[ModelMessage],
    committed: list[ModelMessage],
    overlay: list[ModelMessage],
    hook: str,
) -> None:
    """The cache strips each message once; the step's request may follow it and change it."""
    prefix = StrippedPrefix()
    prefix.extend(cached)
    snapshot = prefix.listed()
    prefix.extend(committed)  # the thread grows after the snapshot was taken
    messages = snapshot.plus(overlay)
    # A hook may change the list in place before the provider attempt.
    if hook == "insert":
        messages.insert(0, AssistantModelMessage(content=[ModelReasoningPart(text="h")]))
    elif hook == "replace" and messages:
        messages[0] = AssistantModelMessage(content=[ModelReasoningPart(text="h")])
    elif hook == "delete" and messages:
        del messages[0]
    assert prune_reasoning(messages) == _pruned_by_definition(list(messages))


def test_pruning_a_cached_context_does_not_look_at_its_history_again() -> None:
    """Per step, the pruning's Python work is the same for a short and a long thread."""

    def turn(i: int) -> list[ModelMessage]:
        return [
            UserModelMessage(content=[ModelTextPart(text=f"q{i}")]),
            AssistantModelMessage(content=[ModelReasoningPart(text="r"), ModelTextPart(text="a")]),
        ]

    def lines(turns: int) -> int:
        prefix = StrippedPrefix()
        prefix.extend([m for i in range(turns) for m in turn(i)])
        request = prefix.listed().plus([UserModelMessage(content=[ModelTextPart(text="now")])])
        pruned: list[ModelMessage] = []
        ran = lines_run(lambda: pruned.extend(prune_reasoning(request)), _prune.__file__)
        assert pruned == _pruned_by_definition(list(request))
        return ran

    # Before, every message before the latest user message was looked at (and
    # rebuilt when it held reasoning) on every step.
    assert lines(500) == lines(5)


@pytest.mark.rule("RT-06")
async def test_portable_settings_and_provider_options_stay_separate(
    database_url: str, tmp_path: Path
) -> None:
    from pai_grpc._agents_setup import load_agents

    config = tmp_path / "pai.toml"
    config.write_text(
        """
[agents.helper]
model = "offline"
instructions = "Be brief."
model_settings = { max_output_tokens = 256, temperature = 0.3, stop_sequences = ["END"] }
provider_options = { anthropic = { thinking = { type = "enabled", budget_tokens = 512 } } }
"""
    )
    settings = Settings(config_path=str(config), offline_chunk_delay=0)
    settings.load_file(config)
    agents, _ = await load_agents(settings)
    agent = agents.resolve("helper")
    recording = ScriptedModel(["ok"])
    agent.model = recording
    async with serve_in_process(database_url, agents=agents) as srv:
        thread_id = (
            await srv.threads.CreateThread(tpb.CreateThreadRequest(agent="helper"))
        ).thread.id
        await wait_run(srv, (await send(srv, thread_id, "hi")).run_id)
    (call,) = recording.calls
    assert call.settings.max_output_tokens == 256
    assert call.settings.temperature == 0.3
    assert call.settings.stop_sequences == ["END"]
    assert call.provider_options == {
        "anthropic": {"thinking": {"type": "enabled", "budget_tokens": 512}}
    }
    assert [m.content for m in call.instructions] == ["Be brief."]


async def test_config_declares_client_tools_and_remote_tool_servers(tmp_path: Path) -> None:
    from pydantic import BaseModel

    from pai_grpc._agents_setup import load_agents

    class Query(BaseModel):
        q: str

    @tool()
    async def search(value: Query) -> list[str]:
        return [value.q]

    server, port = await serve_tools([search])
    config = tmp_path / "pai.toml"
    config.write_text(
        f"""
default_agent = "researcher"

[agents.researcher]
model = "offline"
tools = ["search", "pick"]

[tools.pick]
kind = "client"
description = "Pick one"
input_schema = {{ type = "object", properties = {{ options = {{ type = "array" }} }} }}

[tool_servers.web]
address = "127.0.0.1:{port}"
approval = ["search"]
"""
    )
    settings = Settings(config_path=str(config))
    settings.load_file(config)
    try:
        agents, servers = await load_agents(settings)
        agent = agents.resolve("")
        assert agent.name == "researcher"
        by_name = agent.tool_map()
        assert by_name["pick"].is_client
        assert by_name["search"].approval
        assert by_name["search"].input_schema["properties"]["q"]["type"] == "string"
        for remote in servers:
            await remote.close()
    finally:
        await server.stop(None)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('[agents.a]\nmodel = "nope:x"\n', "unknown model provider"),
        ('[agents.a]\ntools = ["missing"]\n', "unknown tools"),
        ('[tool_servers.s]\naddress = "127.0.0.1:1"\n', "unreachable"),
        ('[tools.t]\nkind = "backend"\n', "client tools"),
        ('default_agent = "ghost"\n[agents.a]\nmodel = "offline"\n', "ghost"),
    ],
)
async def test_misconfiguration_fails_at_start_up(tmp_path: Path, body: str, message: str) -> None:

    config = tmp_path / "pai.toml"
    config.write_text(body)
    settings = Settings(config_path=str(config))
    with pytest.raises(ConfigError, match=message):
        await _start_up(settings, config)


async def _start_up(settings: Settings, config: Path) -> None:
    """What a process does at start-up: read the file, then connect what it declares.

    A mistake is refused by whichever of the two first notices it.
    """
    from pai_grpc._agents_setup import load_agents

    settings.load_file(config)
    await load_agents(settings)
