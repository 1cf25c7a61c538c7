"""The fake Anthropic server itself: wire format, routing, auth, scripting, unstreamed answers."""

from __future__ import annotations

import anthropic
import httpx2
import pytest

import pai_grpc.fakes
import pai_grpc.models.anthropic
from pai_grpc.fakes import (
    FakeAnthropic,
    RecordedRequest,
    StreamTurn,
    reply,
    text_block,
    thinking_block,
    tool_use_block,
)
from tests.models._support import API_KEY, MODEL_ID

REQUEST = {"model": MODEL_ID, "max_tokens": 16, "messages": [{"role": "user", "content": "Hi"}]}


def test_public_api() -> None:
    assert set(pai_grpc.models.anthropic.__all__) == {
        "DEFAULT_MAX_TOKENS",
        "PROVIDER_AUTH_ERROR",
        "PROVIDER_BAD_REQUEST",
        "PROVIDER_CONNECTION_ERROR",
        "PROVIDER_ERROR",
        "PROVIDER_OVERLOADED",
        "PROVIDER_RATE_LIMITED",
        "PROVIDER_STREAM_TRUNCATED",
        "AnthropicModel",
        "AnthropicStepStream",
        "anthropic_model_from_env",
    }
    assert set(pai_grpc.fakes.__all__) == {
        "ContentBlock",
        "DEFAULT_DELTA_USAGE",
        "DEFAULT_MESSAGE_ID",
        "DEFAULT_MODEL",
        "DEFAULT_START_USAGE",
        "FakeAnthropic",
        "HttpErrorTurn",
        "RecordedRequest",
        "SseEvent",
        "StreamTurn",
        "Turn",
        "TurnSource",
        "char_citation",
        "disconnect",
        "error_body",
        "events_turn",
        "http_error",
        "midstream_error",
        "page_citation",
        "redacted_thinking_block",
        "reply",
        "server_tool_result_block",
        "server_tool_use_block",
        "text_block",
        "thinking_block",
        "tool_use_block",
        "truncated",
        "url_citation",
        "web_search_result",
        "web_search_result_block",
    }
    assert all(hasattr(pai_grpc.fakes, name) for name in pai_grpc.fakes.__all__)


async def test_a_stream_is_chunked_server_sent_events(fake: FakeAnthropic) -> None:
    fake.script(reply(text_block("Hi", chunks=["Hi"])))

    async with httpx2.AsyncClient(base_url=fake.base_url) as http:
        response = await http.post(
            "/v1/messages", json={**REQUEST, "stream": True}, headers={"x-api-key": API_KEY}
        )

    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["transfer-encoding"] == "chunked"
    assert response.text.startswith('event: message_start\ndata: {"type":"message_start"')
    names = [
        line.removeprefix("event: ")
        for line in response.text.splitlines()
        if line.startswith("event:")
    ]
    assert names == [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert response.text.endswith('data: {"type":"message_stop"}\n\n')


@pytest.mark.parametrize(
    "headers",
    [{"x-api-key": API_KEY}, {"authorization": f"Bearer {API_KEY}"}],
    ids=["x-api-key", "bearer"],
)
async def test_both_credential_headers_are_accepted(
    fake: FakeAnthropic, headers: dict[str, str]
) -> None:
    fake.script(reply())

    async with httpx2.AsyncClient(base_url=fake.base_url) as http:
        response = await http.post("/v1/messages", json=REQUEST, headers=headers)

    assert response.status_code == 200


async def test_a_wrong_key_gets_the_apis_authentication_error(fake: FakeAnthropic) -> None:
    fake.script(reply())

    async with httpx2.AsyncClient(base_url=fake.base_url) as http:
        response = await http.post("/v1/messages", json=REQUEST, headers={"x-api-key": "nope"})

    assert response.status_code == 401
    assert response.json()["error"] == {
        "type": "authentication_error",
        "message": "invalid x-api-key",
    }


async def test_other_routes_are_not_found_and_requests_are_recorded(fake: FakeAnthropic) -> None:
    async with httpx2.AsyncClient(base_url=fake.base_url) as http:
        response = await http.get("/v1/models", headers={"x-api-key": API_KEY})

    assert response.status_code == 404
    assert response.json()["error"]["type"] == "not_found_error"
    assert [(r.method, r.path) for r in fake.requests] == [("GET", "/v1/models")]


async def test_without_a_script_requests_are_bad_requests(fake: FakeAnthropic) -> None:
    async with httpx2.AsyncClient(base_url=fake.base_url) as http:
        response = await http.post("/v1/messages", json=REQUEST, headers={"x-api-key": API_KEY})

    assert response.status_code == 400
    assert "no turn is scripted" in response.json()["error"]["message"]


async def test_turns_are_consumed_in_order_and_the_last_repeats(fake: FakeAnthropic) -> None:
    def echo(request: RecordedRequest) -> StreamTurn:
        return reply(text_block(f"you sent {request.body['messages'][0]['content']}"))

    fake.script(reply(text_block("first")), echo)
    client = anthropic.AsyncAnthropic(api_key=API_KEY, base_url=fake.base_url, max_retries=0)
    async with client:
        texts = []
        for _ in range(3):
            message = await client.messages.create(
                model=MODEL_ID, max_tokens=16, messages=[{"role": "user", "content": "Hi"}]
            )
            block = message.content[0]
            assert block.type == "text"
            texts.append(block.text)

    assert texts == ["first", "you sent Hi", "you sent Hi"]


async def test_an_unstreamed_request_gets_the_complete_message(fake: FakeAnthropic) -> None:
    fake.script(
        reply(
            thinking_block("Hmm", signature="sig"),
            text_block("Hello there"),
            tool_use_block("toolu_1", "weather", {"city": "Oslo"}),
            stop_reason="tool_use",
            usage={"output_tokens": 12},
        )
    )
    client = anthropic.AsyncAnthropic(api_key=API_KEY, base_url=fake.base_url, max_retries=0)
    async with client:
        message = await client.messages.create(
            model=MODEL_ID, max_tokens=16, messages=[{"role": "user", "content": "Hi"}]
        )

    assert message.to_dict(mode="json")["content"] == [
        {"type": "thinking", "thinking": "Hmm", "signature": "sig"},
        {"type": "text", "text": "Hello there"},
        {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Oslo"}},
    ]
    assert (message.stop_reason, message.usage.input_tokens, message.usage.output_tokens) == (
        "tool_use",
        10,
        12,
    )
    assert not fake.requests[0].stream


async def test_the_sdk_keeps_its_connection_alive_across_requests(fake: FakeAnthropic) -> None:
    """As with the real API: consecutive requests of one client share a connection."""
    fake.script(reply(text_block("Hi", chunks=["H", "i"])))
    async with anthropic.AsyncAnthropic(
        api_key=API_KEY, base_url=fake.base_url, max_retries=0
    ) as client:
        for _ in range(2):
            stream = await client.messages.create(**REQUEST, stream=True)
            assert [e.type async for e in stream][-1] == "message_stop"
        message = await client.messages.create(**REQUEST)
        assert message.content[0].type == "text"
    assert [(r.stream, r.connection, r.client_closed) for r in fake.requests] == [
        (True, 1, False),
        (True, 1, False),
        (False, 1, False),
    ]


async def test_a_stream_the_client_abandons_closes_its_connection(fake: FakeAnthropic) -> None:
    fake.script(reply(text_block("Hello there", chunks=["Hello", " there"]), delay=0.05))
    async with anthropic.AsyncAnthropic(
        api_key=API_KEY, base_url=fake.base_url, max_retries=0
    ) as client:
        stream = await client.messages.create(**REQUEST, stream=True)
        assert (await anext(stream)).type == "message_start"
        await stream.close()
        await fake.requests[0].done.wait()
        stream = await client.messages.create(**REQUEST, stream=True)
        assert [e.type async for e in stream][-1] == "message_stop"
    first, second = fake.requests
    assert (first.connection, first.client_closed) == (1, True)
    assert (second.connection, second.client_closed) == (2, False)


async def test_a_client_asking_to_close_gets_a_new_connection_next_time(
    fake: FakeAnthropic,
) -> None:
    fake.script(reply(text_block("Hi")))
    async with httpx2.AsyncClient(base_url=fake.base_url) as http:
        for _ in range(2):
            response = await http.post(
                "/v1/messages",
                json=REQUEST,
                headers={"x-api-key": API_KEY, "connection": "close"},
            )
            assert response.status_code == 200
    assert [r.connection for r in fake.requests] == [1, 2]
