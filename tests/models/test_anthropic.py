"""The Anthropic provider, driven through the real SDK against the fake Messages API.

Stream mapping (raw SSE events -> canonical chunks) and the provider seam:
``stream()`` resolves once the response headers arrived, chunks follow, and
closing the stream early aborts the HTTP response.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import anthropic
import pytest

from pai_grpc.domain import (
    DocumentSource,
    ReasoningDeltaChunk,
    ReasoningEndChunk,
    ReasoningStartChunk,
    SourceChunk,
    TextDeltaChunk,
    TextEndChunk,
    TextStartChunk,
    ToolCallChunk,
    ToolInputDeltaChunk,
    ToolInputEndChunk,
    ToolInputStartChunk,
    ToolResultChunk,
    UrlSource,
    Usage,
)
from pai_grpc.fakes import (
    DEFAULT_MESSAGE_ID,
    FakeAnthropic,
    char_citation,
    events_turn,
    page_citation,
    redacted_thinking_block,
    reply,
    server_tool_use_block,
    text_block,
    thinking_block,
    tool_use_block,
    url_citation,
    web_search_result,
    web_search_result_block,
)
from pai_grpc.models import LanguageModel
from pai_grpc.models.anthropic import AnthropicModel, anthropic_model_from_env
from tests.models._support import API_KEY, MODEL_ID, collect, finish_step, user_call

B0 = f"{DEFAULT_MESSAGE_ID}:0"
B1 = f"{DEFAULT_MESSAGE_ID}:1"


async def test_the_model_is_a_language_model() -> None:
    async with AnthropicModel(MODEL_ID, api_key=API_KEY) as model:
        assert isinstance(model, LanguageModel)
        assert (model.provider, model.model_id) == ("anthropic", MODEL_ID)


async def test_text_streams_as_text_chunks_then_finish_step(
    fake: FakeAnthropic, model: AnthropicModel
) -> None:
    fake.script(reply(text_block("Hello there", chunks=["Hel", "lo", " there"])))

    assert await collect(model) == [
        TextStartChunk(id=B0),
        TextDeltaChunk(id=B0, text="Hel"),
        TextDeltaChunk(id=B0, text="lo"),
        TextDeltaChunk(id=B0, text=" there"),
        TextEndChunk(id=B0),
        finish_step(),
    ]


async def test_thinking_streams_as_reasoning_with_the_signature_as_metadata(
    fake: FakeAnthropic, model: AnthropicModel
) -> None:
    fake.script(
        reply(
            thinking_block("Let me think", signature="sig-abc", chunks=["Let me", " think"]),
            text_block("42", chunks=["42"]),
        )
    )

    assert await collect(model) == [
        ReasoningStartChunk(id=B0),
        ReasoningDeltaChunk(id=B0, text="Let me"),
        ReasoningDeltaChunk(id=B0, text=" think"),
        ReasoningDeltaChunk(
            id=B0, text="", provider_metadata={"anthropic": {"signature": "sig-abc"}}
        ),
        ReasoningEndChunk(id=B0),
        TextStartChunk(id=B1),
        TextDeltaChunk(id=B1, text="42"),
        TextEndChunk(id=B1),
        finish_step(),
    ]


async def test_redacted_thinking_is_reasoning_carrying_the_redacted_data(
    fake: FakeAnthropic, model: AnthropicModel
) -> None:
    fake.script(reply(redacted_thinking_block("EncryptedBlob==")))

    assert await collect(model) == [
        ReasoningStartChunk(
            id=B0, provider_metadata={"anthropic": {"redactedData": "EncryptedBlob=="}}
        ),
        ReasoningEndChunk(id=B0),
        finish_step(),
    ]


async def test_tool_input_streams_in_fragments_and_empty_fragments_are_skipped(
    fake: FakeAnthropic, model: AnthropicModel
) -> None:
    fragments = ["", '{"ci', "", 'ty": "Os', 'lo"}']
    fake.script(
        reply(
            tool_use_block("toolu_1", "weather", fragments=fragments),
            stop_reason="tool_use",
        )
    )

    assert await collect(model) == [
        ToolInputStartChunk(id="toolu_1", tool_name="weather"),
        ToolInputDeltaChunk(id="toolu_1", delta='{"ci'),
        ToolInputDeltaChunk(id="toolu_1", delta='ty": "Os'),
        ToolInputDeltaChunk(id="toolu_1", delta='lo"}'),
        ToolInputEndChunk(id="toolu_1"),
        ToolCallChunk(tool_call_id="toolu_1", tool_name="weather", input={"city": "Oslo"}),
        finish_step("tool-calls", "tool_use"),
    ]


async def test_a_tool_call_without_input_text_has_empty_object_input(
    fake: FakeAnthropic, model: AnthropicModel
) -> None:
    fake.script(reply(tool_use_block("toolu_2", "now", fragments=[""]), stop_reason="tool_use"))

    chunks = await collect(model)

    assert chunks[:3] == [
        ToolInputStartChunk(id="toolu_2", tool_name="now"),
        ToolInputEndChunk(id="toolu_2"),
        ToolCallChunk(tool_call_id="toolu_2", tool_name="now", input={}),
    ]


async def test_unparsable_tool_input_is_an_invalid_tool_call(
    fake: FakeAnthropic, model: AnthropicModel
) -> None:
    fake.script(
        reply(tool_use_block("toolu_3", "weather", fragments=['{"city": ']), stop_reason="tool_use")
    )

    chunks = await collect(model)

    call = chunks[3]
    assert isinstance(call, ToolCallChunk)
    assert (call.tool_call_id, call.tool_name, call.input, call.invalid) == (
        "toolu_3",
        "weather",
        None,
        True,
    )
    assert call.error_text is not None
    assert call.error_text.startswith("Invalid JSON in tool input")
    assert chunks[2] == ToolInputEndChunk(id="toolu_3")


async def test_server_tool_use_and_its_result_are_provider_executed(
    fake: FakeAnthropic, model: AnthropicModel
) -> None:
    results = [web_search_result("https://example.com/oslo", "Oslo weather")]
    fake.script(
        reply(
            server_tool_use_block("srvtoolu_1", "web_search", {"query": "oslo weather"}),
            web_search_result_block("srvtoolu_1", results),
            text_block("Sunny", chunks=["Sunny"]),
        )
    )

    chunks = await collect(model)

    assert chunks[0] == ToolInputStartChunk(
        id="srvtoolu_1", tool_name="web_search", provider_executed=True
    )
    assert chunks[3:6] == [
        ToolInputEndChunk(id="srvtoolu_1"),
        ToolCallChunk(
            tool_call_id="srvtoolu_1",
            tool_name="web_search",
            input={"query": "oslo weather"},
            provider_executed=True,
        ),
        ToolResultChunk(
            tool_call_id="srvtoolu_1",
            tool_name="web_search",
            input={"query": "oslo weather"},
            output=results,
            provider_executed=True,
        ),
    ]
    assert chunks[6] == TextStartChunk(id=f"{DEFAULT_MESSAGE_ID}:2")


async def test_citations_become_url_and_document_sources_with_stable_ids(
    fake: FakeAnthropic, model: AnthropicModel
) -> None:
    web = url_citation("https://example.com/a", "Example A", cited_text="a")
    pdf = page_citation("Annual report", start_page=3, end_page=4)
    txt = char_citation(None)
    fake.script(reply(text_block("Cited.", chunks=["Cited."], citations=[web, pdf, txt])))

    chunks = await collect(model)

    assert chunks[1:4] == [
        SourceChunk(
            id=f"{B0}:source:0",
            source=UrlSource(url="https://example.com/a", title="Example A"),
            provider_metadata={"anthropic": web},
        ),
        SourceChunk(
            id=f"{B0}:source:1",
            source=DocumentSource(media_type="application/pdf", title="Annual report"),
            provider_metadata={"anthropic": pdf},
        ),
        SourceChunk(
            id=f"{B0}:source:2",
            source=DocumentSource(media_type="text/plain", title="Untitled document"),
            provider_metadata={"anthropic": txt},
        ),
    ]
    assert chunks[4] == TextDeltaChunk(id=B0, text="Cited.")


async def test_usage_counts_cache_tokens_and_message_delta_usage_is_cumulative(
    fake: FakeAnthropic, model: AnthropicModel
) -> None:
    start_usage = {
        "input_tokens": 5,
        "cache_creation_input_tokens": 100,
        "cache_read_input_tokens": 200,
        "output_tokens": 1,
    }
    message: dict[str, Any] = {
        "id": "msg_usage",
        "type": "message",
        "role": "assistant",
        "model": "claude-fake-2",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": start_usage,
    }
    fake.script(
        events_turn(
            ("message_start", {"type": "message_start", "message": message}),
            # Two deltas: each repeats the running totals, so the last one wins.
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": None},
                    "usage": {"output_tokens": 10},
                },
            ),
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": "max_tokens", "stop_sequence": None},
                    "usage": {
                        "output_tokens": 25,
                        "input_tokens": 7,
                        "cache_read_input_tokens": None,
                    },
                },
            ),
            ("message_stop", {"type": "message_stop"}),
        )
    )

    (finish,) = await collect(model)

    assert finish.type == "finish-step"
    assert finish.usage == Usage(
        input_tokens=307,
        output_tokens=25,
        total_tokens=332,
        cache_read_tokens=200,
        cache_write_tokens=100,
    )
    assert (finish.finish_reason, finish.raw_finish_reason) == ("length", "max_tokens")
    assert finish.provider_metadata == {
        "anthropic": {
            "usage": {
                "input_tokens": 7,
                "cache_creation_input_tokens": 100,
                "cache_read_input_tokens": 200,
                "output_tokens": 25,
            },
            "stop_sequence": None,
        }
    }
    assert finish.response is not None
    assert (finish.response.id, finish.response.model_id) == ("msg_usage", "claude-fake-2")


async def test_thinking_tokens_are_reported_as_reasoning_tokens(
    fake: FakeAnthropic, model: AnthropicModel
) -> None:
    usage = {"output_tokens": 40, "output_tokens_details": {"thinking_tokens": 30}}
    fake.script(reply(usage=usage))

    (finish,) = await collect(model)

    assert finish.type == "finish-step"
    assert finish.usage.reasoning_tokens == 30


@pytest.mark.parametrize(
    ("stop_reason", "finish_reason"),
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("pause_turn", "stop"),
        ("max_tokens", "length"),
        ("model_context_window_exceeded", "length"),
        ("tool_use", "tool-calls"),
        ("refusal", "content-filter"),
        ("a_future_reason", "other"),
    ],
)
async def test_stop_reasons_map_to_finish_reasons(
    fake: FakeAnthropic, model: AnthropicModel, stop_reason: str, finish_reason: str
) -> None:
    fake.script(
        reply(
            stop_reason=stop_reason, stop_sequence="END" if stop_reason == "stop_sequence" else None
        )
    )

    (finish,) = await collect(model)

    assert finish.type == "finish-step"
    assert (finish.finish_reason, finish.raw_finish_reason) == (finish_reason, stop_reason)
    assert finish.provider_metadata is not None
    expected_sequence = "END" if stop_reason == "stop_sequence" else None
    assert finish.provider_metadata["anthropic"]["stop_sequence"] == expected_sequence


async def test_unknown_events_and_blocks_are_ignored(
    fake: FakeAnthropic, model: AnthropicModel
) -> None:
    turn = reply(text_block("ok", chunks=["ok"]))
    unknown = [
        ("future_event", {"type": "future_event", "x": 1}),
        (
            "content_block_start",
            {"type": "content_block_start", "index": 5, "content_block": {"type": "hologram"}},
        ),
        (
            "content_block_delta",
            {"type": "content_block_delta", "index": 5, "delta": {"type": "hologram_delta"}},
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": 5}),
    ]
    fake.script(events_turn(*turn.events[:2], *unknown, *turn.events[2:]))

    assert await collect(model) == [
        TextStartChunk(id=B0),
        TextDeltaChunk(id=B0, text="ok"),
        TextEndChunk(id=B0),
        finish_step(),
    ]


# --- the seam: construction, consumption, early close -------------------------


@pytest.mark.rule("AMC-03")
async def test_stream_resolves_before_the_body_is_consumed(
    fake: FakeAnthropic, model: AnthropicModel
) -> None:
    fake.script(reply(text_block("late", chunks=["late"]), first_event_delay=0.5))

    stream = await model.stream(user_call())
    # Resolved with the request accepted and not one event sent yet (AMC-03).
    assert len(fake.requests) == 1
    assert fake.requests[0].events_sent == 0

    first = await stream.__anext__()
    assert fake.requests[0].events_sent >= 1
    rest = [chunk async for chunk in stream]
    assert first == TextStartChunk(id=B0)
    assert rest[-1] == finish_step()


async def test_consecutive_steps_reuse_the_providers_connection(
    fake: FakeAnthropic, model: AnthropicModel
) -> None:
    """A step read to its end hands the connection back to the SDK's pool.

    The body ends right after ``message_stop``; closing the response before
    reading that end dropped the connection, so every step paid a new TCP
    (and, against the real API, TLS) handshake before its first token.
    """
    fake.script(reply(text_block("Hi there", chunks=["Hi", " there"])))
    for _ in range(3):
        stream = await model.stream(user_call())
        chunks = [chunk async for chunk in stream]
        assert chunks[-1] == finish_step()
    assert [(r.connection, r.client_closed) for r in fake.requests] == [(1, False)] * 3


async def test_a_body_that_does_not_end_after_message_stop_costs_the_connection_not_the_step(
    fake: FakeAnthropic, model: AnthropicModel
) -> None:
    fake.script(replace(reply(text_block("Hi", chunks=["Hi"])), ending="stall"))
    stream = await model.stream(user_call())

    async def read() -> list[Any]:
        return [chunk async for chunk in stream]

    # The step ends (after the adapter waited RELEASE_SECONDS for the body's end),
    # and the connection is dropped: the server saw the client leave.
    chunks = await asyncio.wait_for(read(), 5)
    assert chunks[-1] == finish_step()
    record = fake.requests[0]
    await asyncio.wait_for(record.done.wait(), 5)
    assert record.client_closed


async def test_closing_the_stream_early_aborts_the_http_response(
    fake: FakeAnthropic, model: AnthropicModel
) -> None:
    words = " ".join(f"w{i}" for i in range(50))
    fake.script(reply(text_block(words), delay=0.02))

    stream = await model.stream(user_call())
    assert await stream.__anext__() == TextStartChunk(id=B0)
    assert await stream.__anext__() == TextDeltaChunk(id=B0, text="w0")
    await stream.aclose()

    record = fake.requests[0]
    await asyncio.wait_for(record.done.wait(), 5)
    assert record.client_closed
    assert record.events_sent < 10
    with pytest.raises(StopAsyncIteration):
        await stream.__anext__()


async def test_closing_an_unread_stream_aborts_the_http_response(
    fake: FakeAnthropic, model: AnthropicModel
) -> None:
    fake.script(reply(text_block("never read"), first_event_delay=5))

    async with await model.stream(user_call()):
        pass

    record = fake.requests[0]
    await asyncio.wait_for(record.done.wait(), 2)
    assert (record.client_closed, record.events_sent) == (True, 0)


async def test_cancelling_the_reader_aborts_the_http_response(
    fake: FakeAnthropic, model: AnthropicModel
) -> None:
    fake.script(reply(text_block("slow"), first_event_delay=5))
    stream = await model.stream(user_call())

    reader = asyncio.create_task(stream.__anext__())
    await asyncio.sleep(0.05)
    reader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reader

    record = fake.requests[0]
    await asyncio.wait_for(record.done.wait(), 2)
    assert (record.client_closed, record.events_sent) == (True, 0)


async def test_the_stream_ends_after_the_finish_step(
    fake: FakeAnthropic, model: AnthropicModel
) -> None:
    fake.script(reply(text_block("x", chunks=["x"])))
    stream = await model.stream(user_call())

    chunks = [chunk async for chunk in stream]

    assert chunks[-1].type == "finish-step"
    assert not any(c.type in ("start", "start-step", "finish") for c in chunks)
    with pytest.raises(StopAsyncIteration):
        await stream.__anext__()


# --- construction -------------------------------------------------------------


async def test_a_given_client_is_used_and_left_open(fake: FakeAnthropic) -> None:
    client = anthropic.AsyncAnthropic(api_key=API_KEY, base_url=fake.base_url, max_retries=0)
    fake.script(reply(text_block("hi", chunks=["hi"])))
    async with AnthropicModel(MODEL_ID, client=client) as model:
        assert model.client is client
        assert (await collect(model))[-1] == finish_step()
    assert not client.is_closed()
    await client.close()


async def test_a_client_and_credentials_are_exclusive() -> None:
    async with anthropic.AsyncAnthropic(api_key=API_KEY) as client:
        with pytest.raises(ValueError, match="either client"):
            AnthropicModel(MODEL_ID, client=client, api_key=API_KEY)


async def test_the_model_is_built_from_the_environment(
    fake: FakeAnthropic, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.base_url)
    fake.script(reply(text_block("env", chunks=["env"])))

    async with anthropic_model_from_env(MODEL_ID, max_retries=0) as model:
        assert (await collect(model))[1] == TextDeltaChunk(id=B0, text="env")
    assert fake.requests[0].headers["authorization"] == f"Bearer {API_KEY}"
