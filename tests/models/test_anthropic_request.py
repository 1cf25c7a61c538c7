"""ModelCall -> Messages API request, asserted on the JSON the fake server received."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from pai_grpc.domain import (
    AssistantModelMessage,
    ErrorJsonOutput,
    ErrorTextOutput,
    ExecutionDeniedOutput,
    JsonOutput,
    ModelFilePart,
    ModelMessage,
    ModelReasoningPart,
    ModelSettings,
    ModelTextPart,
    ModelToolCallPart,
    ModelToolResultPart,
    SystemModelMessage,
    TextOutput,
    ToolChoice,
    ToolManifestEntry,
    ToolModelMessage,
    UserModelMessage,
)
from pai_grpc.errors import ModelError
from pai_grpc.fakes import FakeAnthropic, redacted_thinking_block, reply, text_block, thinking_block
from pai_grpc.models import ModelCall
from pai_grpc.models.anthropic import DEFAULT_MAX_TOKENS, PROVIDER_BAD_REQUEST, AnthropicModel
from tests.models._support import MODEL_ID, collect, user_call

WEATHER = ToolManifestEntry(
    name="weather",
    description="Weather for a city",
    input_schema={"type": "object", "properties": {"city": {"type": "string"}}},
)


def user(text: str) -> UserModelMessage:
    return UserModelMessage(content=[ModelTextPart(text=text)])


def assistant(*parts: Any) -> AssistantModelMessage:
    return AssistantModelMessage(content=list(parts))


async def sent(fake: FakeAnthropic, model: AnthropicModel, call: ModelCall) -> dict[str, Any]:
    """The body of the request ``call`` produced."""
    fake.script(reply())
    await collect(model, call)
    return fake.requests[-1].body


async def sent_messages(
    fake: FakeAnthropic, model: AnthropicModel, *messages: ModelMessage
) -> list[dict[str, Any]]:
    body = await sent(fake, model, ModelCall(messages=list(messages)))
    result: list[dict[str, Any]] = body["messages"]
    return result


async def test_a_minimal_call(fake: FakeAnthropic, model: AnthropicModel) -> None:
    body = await sent(fake, model, user_call("Hello"))

    assert body == {
        "model": MODEL_ID,
        "max_tokens": DEFAULT_MAX_TOKENS,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Hello"}]}],
        "stream": True,
    }
    assert DEFAULT_MAX_TOKENS == 4096


async def test_instructions_and_system_messages_become_system_blocks(
    fake: FakeAnthropic, model: AnthropicModel
) -> None:
    call = ModelCall(
        instructions=[SystemModelMessage(content="You are terse."), SystemModelMessage(content="")],
        messages=[SystemModelMessage(content="Today is Monday."), user("Hi")],
    )

    body = await sent(fake, model, call)

    assert body["system"] == [
        {"type": "text", "text": "You are terse."},
        {"type": "text", "text": "Today is Monday."},
    ]
    assert [m["role"] for m in body["messages"]] == ["user"]


async def test_tools_and_provider_tools(fake: FakeAnthropic, model: AnthropicModel) -> None:
    web_search = {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}
    bare = ToolManifestEntry(name="now")
    call = user_call(tools=[WEATHER, bare], provider_tools={"web_search": web_search})

    body = await sent(fake, model, call)

    assert body["tools"] == [
        {
            "name": "weather",
            "description": "Weather for a city",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
        {"name": "now", "input_schema": {"type": "object"}},
        web_search,
    ]
    assert "tool_choice" not in body


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        (ToolChoice(mode="auto"), {"type": "auto"}),
        (ToolChoice(mode="required"), {"type": "any"}),
        (ToolChoice(mode="tool", tool_name="weather"), {"type": "tool", "name": "weather"}),
        (ToolChoice(mode="none"), {"type": "none"}),
    ],
)
async def test_tool_choice(
    fake: FakeAnthropic, model: AnthropicModel, choice: ToolChoice, expected: dict[str, Any]
) -> None:
    body = await sent(fake, model, user_call(tools=[WEATHER], tool_choice=choice))

    assert body["tool_choice"] == expected


async def test_without_tools_neither_tools_nor_tool_choice_are_sent(
    fake: FakeAnthropic, model: AnthropicModel
) -> None:
    body = await sent(fake, model, user_call(tool_choice=ToolChoice(mode="required")))

    assert "tools" not in body
    assert "tool_choice" not in body


async def test_disable_parallel_tool_use_goes_into_tool_choice(
    fake: FakeAnthropic, model: AnthropicModel
) -> None:
    options = {"anthropic": {"disable_parallel_tool_use": True}}
    body = await sent(fake, model, user_call(tools=[WEATHER], provider_options=options))

    assert body["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}
    assert "disable_parallel_tool_use" not in body


@pytest.mark.rule("RT-06")
async def test_portable_settings_are_spread_into_the_request(
    fake: FakeAnthropic, model: AnthropicModel
) -> None:
    settings = ModelSettings(
        max_output_tokens=512,
        temperature=0.2,
        top_p=0.9,
        top_k=40,
        stop_sequences=["END"],
        seed=7,
        presence_penalty=0.5,
    )

    body = await sent(fake, model, user_call(settings=settings))

    assert {
        k: body[k] for k in ("max_tokens", "temperature", "top_p", "top_k", "stop_sequences")
    } == {
        "max_tokens": 512,
        "temperature": 0.2,
        "top_p": 0.9,
        "top_k": 40,
        "stop_sequences": ["END"],
    }
    # Anthropic has no seed or penalties: they are not sent.
    assert not {"seed", "presence_penalty", "frequency_penalty"} & body.keys()


@pytest.mark.rule("RT-06")
async def test_provider_options_are_passed_separately_from_settings(
    fake: FakeAnthropic, model: AnthropicModel
) -> None:
    options = {
        "anthropic": {
            "thinking": {"type": "enabled", "budget_tokens": 1024},
            "metadata": {"user_id": "u-1"},
            "service_tier": "standard_only",
            # Portable settings are not provider options: these never override them.
            "temperature": 1.0,
            "max_tokens": 1,
        },
        "openai": {"top_p": 0.1, "seed": 3},
    }
    call = user_call(settings=ModelSettings(temperature=0.3), provider_options=options)

    body = await sent(fake, model, call)

    assert body["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    assert body["metadata"] == {"user_id": "u-1"}
    assert body["service_tier"] == "standard_only"
    assert (body["temperature"], body["max_tokens"]) == (0.3, DEFAULT_MAX_TOKENS)
    assert not {"top_p", "seed", "openai"} & body.keys()


@pytest.mark.rule("RT-06")
async def test_settings_do_not_leak_into_a_call_without_them(
    fake: FakeAnthropic, model: AnthropicModel
) -> None:
    options = {"anthropic": {"thinking": {"type": "adaptive"}}}

    body = await sent(fake, model, user_call(provider_options=options))

    assert body["thinking"] == {"type": "adaptive"}
    assert not {"temperature", "top_p", "top_k", "stop_sequences"} & body.keys()


async def test_cache_control_marks_the_last_system_block_and_the_last_message(
    fake: FakeAnthropic, model: AnthropicModel
) -> None:
    ephemeral = {"type": "ephemeral"}
    call = ModelCall(
        instructions=[SystemModelMessage(content="one"), SystemModelMessage(content="two")],
        messages=[user("first"), assistant(ModelTextPart(text="answer")), user("second")],
        provider_options={"anthropic": {"cache_control": ephemeral}},
    )

    body = await sent(fake, model, call)

    assert body["system"] == [
        {"type": "text", "text": "one"},
        {"type": "text", "text": "two", "cache_control": ephemeral},
    ]
    assert body["messages"][0]["content"] == [{"type": "text", "text": "first"}]
    assert body["messages"][-1]["content"] == [
        {"type": "text", "text": "second", "cache_control": ephemeral}
    ]
    assert "cache_control" not in body


async def test_part_level_cache_control(fake: FakeAnthropic, model: AnthropicModel) -> None:
    ttl = {"type": "ephemeral", "ttl": "1h"}
    message = UserModelMessage(
        content=[
            ModelTextPart(
                text="big document", provider_options={"anthropic": {"cache_control": ttl}}
            ),
            ModelTextPart(text="question"),
        ]
    )

    (sent_message,) = await sent_messages(fake, model, message)

    assert sent_message["content"][0] == {
        "type": "text",
        "text": "big document",
        "cache_control": ttl,
    }


async def test_consecutive_messages_of_one_role_are_merged(
    fake: FakeAnthropic, model: AnthropicModel
) -> None:
    call_part = ModelToolCallPart(
        tool_call_id="toolu_1", tool_name="weather", input={"city": "Oslo"}
    )
    result = ModelToolResultPart(
        tool_call_id="toolu_1", tool_name="weather", output=TextOutput(value="sunny")
    )

    messages = await sent_messages(
        fake,
        model,
        user("one"),
        user("two"),
        assistant(ModelTextPart(text="Checking."), call_part),
        ToolModelMessage(content=[result]),
        user("thanks"),
    )

    assert messages == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Oslo"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"},
                {"type": "text", "text": "thanks"},
            ],
        },
    ]


async def test_tool_results_become_tool_result_blocks(
    fake: FakeAnthropic, model: AnthropicModel
) -> None:
    def result(call_id: str, output: Any) -> ModelToolResultPart:
        return ModelToolResultPart(tool_call_id=call_id, tool_name="t", output=output)

    tool_message = ToolModelMessage(
        content=[
            result("a", TextOutput(value="plain")),
            result("b", JsonOutput(value={"temp": 21})),
            result("c", ErrorTextOutput(value="boom")),
            result("d", ErrorJsonOutput(value={"code": 7})),
            result("e", ExecutionDeniedOutput(reason="not allowed")),
            result("f", ExecutionDeniedOutput()),
        ]
    )

    messages = await sent_messages(
        fake, model, user("go"), assistant(ModelTextPart(text="ok")), tool_message
    )

    assert messages[-1]["content"] == [
        {"type": "tool_result", "tool_use_id": "a", "content": "plain"},
        {"type": "tool_result", "tool_use_id": "b", "content": '{"temp": 21}'},
        {"type": "tool_result", "tool_use_id": "c", "content": "boom", "is_error": True},
        {"type": "tool_result", "tool_use_id": "d", "content": '{"code": 7}', "is_error": True},
        {"type": "tool_result", "tool_use_id": "e", "content": "not allowed", "is_error": True},
        {
            "type": "tool_result",
            "tool_use_id": "f",
            "content": "Tool execution denied.",
            "is_error": True,
        },
    ]


async def test_streamed_reasoning_is_replayed_with_its_signature_unchanged(
    fake: FakeAnthropic, model: AnthropicModel
) -> None:
    signature = "EqQBCkYIARgCIkB/sig+with/odd==chars"
    fake.script(
        reply(
            thinking_block("Think first.", signature=signature),
            redacted_thinking_block("RedactedBlob=="),
            text_block("Answer."),
        )
    )
    chunks = await collect(model)
    # What the runtime keeps of the reasoning: the text and the chunks' metadata.
    signed = next(c for c in chunks if c.type == "reasoning-delta" and c.provider_metadata)
    redacted = next(c for c in chunks if c.type == "reasoning-start" and c.provider_metadata)
    assert signed.type == "reasoning-delta"
    assert redacted.type == "reasoning-start"
    history = assistant(
        ModelReasoningPart(text="Think first.", provider_options=signed.provider_metadata),
        ModelReasoningPart(text="", provider_options=redacted.provider_metadata),
        ModelTextPart(text="Answer."),
    )

    messages = await sent_messages(fake, model, user("q"), history, user("next"))

    assert messages[1]["content"] == [
        {"type": "thinking", "thinking": "Think first.", "signature": signature},
        {"type": "redacted_thinking", "data": "RedactedBlob=="},
        {"type": "text", "text": "Answer."},
    ]


async def test_reasoning_without_a_signature_is_not_replayed(
    fake: FakeAnthropic, model: AnthropicModel
) -> None:
    history = assistant(
        ModelReasoningPart(text="someone else's thoughts"), ModelTextPart(text="Hi")
    )

    messages = await sent_messages(fake, model, user("q"), history, user("next"))

    assert messages[1]["content"] == [{"type": "text", "text": "Hi"}]


async def test_server_tool_calls_and_results_are_replayed_inline(
    fake: FakeAnthropic, model: AnthropicModel
) -> None:
    results = [
        {
            "type": "web_search_result",
            "url": "https://x.test",
            "title": "X",
            "encrypted_content": "e",
        }
    ]
    history = assistant(
        ModelToolCallPart(
            tool_call_id="srvtoolu_1",
            tool_name="web_search",
            input={"query": "x"},
            provider_executed=True,
        ),
        ModelToolResultPart(
            tool_call_id="srvtoolu_1", tool_name="web_search", output=JsonOutput(value=results)
        ),
        ModelTextPart(text="Found it."),
    )

    messages = await sent_messages(fake, model, user("search"), history, user("more"))

    assert messages[1]["content"] == [
        {
            "type": "server_tool_use",
            "id": "srvtoolu_1",
            "name": "web_search",
            "input": {"query": "x"},
        },
        {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": results},
        {"type": "text", "text": "Found it."},
    ]


async def test_a_final_assistant_message_loses_trailing_whitespace(
    fake: FakeAnthropic, model: AnthropicModel
) -> None:
    messages = await sent_messages(
        fake, model, user("q"), assistant(ModelTextPart(text="The answer is "))
    )

    assert messages[-1] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "The answer is"}],
    }


async def test_files_become_image_and_document_blocks(
    fake: FakeAnthropic, model: AnthropicModel
) -> None:
    png = base64.b64encode(b"\x89PNG fake image").decode()
    message = UserModelMessage(
        content=[
            ModelFilePart(media_type="image/png", data=f"data:image/png;base64,{png}"),
            ModelFilePart(media_type="image/jpeg", data="https://img.test/cat.jpg"),
            ModelFilePart(
                media_type="application/pdf",
                data="https://docs.test/report.pdf",
                filename="report.pdf",
            ),
            ModelFilePart(
                media_type="text/plain",
                data="data:text/plain,hello%20world",
                provider_options={"anthropic": {"citations": {"enabled": True}}},
            ),
            ModelTextPart(text="Describe these."),
        ]
    )

    (sent_message,) = await sent_messages(fake, model, message)

    assert sent_message["content"] == [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}},
        {"type": "image", "source": {"type": "url", "url": "https://img.test/cat.jpg"}},
        {
            "type": "document",
            "source": {"type": "url", "url": "https://docs.test/report.pdf"},
            "title": "report.pdf",
        },
        {
            "type": "document",
            "source": {"type": "text", "media_type": "text/plain", "data": "hello world"},
            "citations": {"enabled": True},
        },
        {"type": "text", "text": "Describe these."},
    ]


async def test_an_unsupported_file_fails_before_any_request(
    fake: FakeAnthropic, model: AnthropicModel
) -> None:
    message = UserModelMessage(
        content=[ModelFilePart(media_type="audio/wav", data="data:audio/wav;base64,AAAA")]
    )

    with pytest.raises(ModelError) as info:
        await model.stream(ModelCall(messages=[message]))

    assert info.value.reason == PROVIDER_BAD_REQUEST
    assert fake.requests == []
