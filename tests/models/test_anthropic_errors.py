"""Anthropic failures become ModelError with a stable reason; retries happen only before the stream."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anthropic
import httpx2
import pytest

from pai_grpc.domain import ModelSettings, StepStreamChunk, TextDeltaChunk, TextStartChunk
from pai_grpc.errors import ModelError
from pai_grpc.fakes import (
    DEFAULT_MESSAGE_ID,
    FakeAnthropic,
    disconnect,
    http_error,
    midstream_error,
    reply,
    text_block,
    truncated,
)
from pai_grpc.models import ModelCall
from pai_grpc.models.anthropic import (
    PROVIDER_AUTH_ERROR,
    PROVIDER_BAD_REQUEST,
    PROVIDER_CONNECTION_ERROR,
    PROVIDER_ERROR,
    PROVIDER_OVERLOADED,
    PROVIDER_RATE_LIMITED,
    PROVIDER_STREAM_TRUNCATED,
    AnthropicModel,
    anthropic_model_from_env,
)
from tests.models._support import API_KEY, MODEL_ID, collect, finish_step, user_call
from tests.processes import free_port

B0 = f"{DEFAULT_MESSAGE_ID}:0"
#: A retry-after the SDK honours, so retried tests do not back off for real.
FAST = 0.001


@pytest.fixture
async def retrying_model(fake: FakeAnthropic) -> AsyncIterator[AnthropicModel]:
    async with AnthropicModel(
        MODEL_ID, api_key=API_KEY, base_url=fake.base_url, max_retries=2, timeout=10
    ) as model:
        yield model


async def fail(
    model: AnthropicModel, call: ModelCall | None = None
) -> tuple[ModelError, list[StepStreamChunk]]:
    """The ModelError a step ends with, and the chunks that came before it."""
    chunks: list[StepStreamChunk] = []

    async def run() -> None:
        stream = await model.stream(call or user_call())
        async for chunk in stream:
            chunks.append(chunk)

    with pytest.raises(ModelError) as info:
        await run()
    return info.value, chunks


async def test_connection_refused_is_a_retryable_connection_error() -> None:
    async with AnthropicModel(
        MODEL_ID, api_key=API_KEY, base_url=f"http://127.0.0.1:{free_port()}", max_retries=0
    ) as model:
        error, _ = await fail(model)

    assert (error.reason, error.retryable) == (PROVIDER_CONNECTION_ERROR, True)
    assert isinstance(error.__cause__, anthropic.APIConnectionError)


async def test_a_rate_limit_is_retried_by_the_sdk_then_succeeds(
    fake: FakeAnthropic, retrying_model: AnthropicModel
) -> None:
    fake.script(
        http_error(429, "rate_limit_error", "slow down", retry_after=FAST),
        reply(text_block("ok", chunks=["ok"])),
    )

    chunks = await collect(retrying_model)

    assert chunks[1] == TextDeltaChunk(id=B0, text="ok")
    assert [r.headers["x-stainless-retry-count"] for r in fake.requests] == ["0", "1"]


async def test_a_rate_limit_that_outlasts_the_retries_is_rate_limited(
    fake: FakeAnthropic, retrying_model: AnthropicModel
) -> None:
    fake.script(
        http_error(429, "rate_limit_error", "Number of requests exceeded", retry_after=FAST)
    )

    error, _ = await fail(retrying_model)

    assert (error.reason, error.retryable) == (PROVIDER_RATE_LIMITED, True)
    assert "Number of requests exceeded" in error.message
    assert len(fake.requests) == 3
    assert isinstance(error.__cause__, anthropic.RateLimitError)


async def test_the_settings_retries_override_the_clients(
    fake: FakeAnthropic, model: AnthropicModel
) -> None:
    fake.script(http_error(429, "rate_limit_error", "slow down", retry_after=FAST), reply())

    chunks = await collect(model, user_call(settings=ModelSettings(max_retries=1)))

    assert chunks == [finish_step()]
    assert len(fake.requests) == 2


async def test_an_overloaded_api_is_overloaded(fake: FakeAnthropic, model: AnthropicModel) -> None:
    fake.script(http_error(529, "overloaded_error", "Overloaded"))

    error, _ = await fail(model)

    assert (error.reason, error.retryable) == (PROVIDER_OVERLOADED, True)
    assert isinstance(error.__cause__, anthropic.OverloadedError)


async def test_an_overloaded_error_mid_stream_is_overloaded_and_never_retried(
    fake: FakeAnthropic, retrying_model: AnthropicModel
) -> None:
    # message_start, ping, content_block_start, one text delta, then the error.
    fake.script(midstream_error("overloaded_error", "Overloaded", after_events=4), reply())

    error, chunks = await fail(retrying_model)

    assert (error.reason, error.retryable) == (PROVIDER_OVERLOADED, True)
    assert chunks == [TextStartChunk(id=B0), TextDeltaChunk(id=B0, text="Hello")]
    # The SDK raises a plain APIStatusError carrying the 200 of the stream.
    cause = error.__cause__
    assert type(cause) is anthropic.APIStatusError
    assert (cause.status_code, cause.type) == (200, "overloaded_error")
    assert len(fake.requests) == 1


@pytest.mark.parametrize(
    ("status", "error_type", "reason", "retryable"),
    [
        (400, "invalid_request_error", PROVIDER_BAD_REQUEST, False),
        (401, "authentication_error", PROVIDER_AUTH_ERROR, False),
        (403, "permission_error", PROVIDER_AUTH_ERROR, False),
        (404, "not_found_error", PROVIDER_ERROR, False),
        (500, "api_error", PROVIDER_ERROR, True),
    ],
)
async def test_http_errors_map_to_reasons_with_the_providers_message(
    fake: FakeAnthropic,
    model: AnthropicModel,
    status: int,
    error_type: str,
    reason: str,
    retryable: bool,
) -> None:
    fake.script(http_error(status, error_type, f"the {error_type} message"))

    error, _ = await fail(model)

    assert (error.reason, error.retryable) == (reason, retryable)
    assert f"the {error_type} message" in error.message
    assert f"status {status}" in error.message


async def test_a_wrong_api_key_is_an_auth_error(fake: FakeAnthropic) -> None:
    fake.script(reply())
    async with AnthropicModel(MODEL_ID, api_key="wrong", base_url=fake.base_url) as model:
        error, _ = await fail(model)

    assert (error.reason, error.retryable) == (PROVIDER_AUTH_ERROR, False)
    assert "invalid x-api-key" in error.message
    assert len(fake.requests) == 1


async def test_a_bad_request_is_not_retried(
    fake: FakeAnthropic, retrying_model: AnthropicModel
) -> None:
    fake.script(http_error(400, "invalid_request_error", "messages: roles must alternate"))

    error, _ = await fail(retrying_model)

    assert error.reason == PROVIDER_BAD_REQUEST
    assert "messages: roles must alternate" in error.message
    assert len(fake.requests) == 1


async def test_a_stream_without_message_stop_is_truncated(
    fake: FakeAnthropic, retrying_model: AnthropicModel
) -> None:
    fake.script(truncated(turn=reply(text_block("cut", chunks=["cut"]))))

    error, chunks = await fail(retrying_model)

    assert (error.reason, error.retryable) == (PROVIDER_STREAM_TRUNCATED, True)
    # Everything up to message_delta arrived, but no finish-step.
    assert [c.type for c in chunks] == ["text-start", "text-delta", "text-end"]
    assert len(fake.requests) == 1


async def test_an_abrupt_disconnect_is_a_connection_error_and_never_retried(
    fake: FakeAnthropic, retrying_model: AnthropicModel
) -> None:
    fake.script(disconnect(after_events=3), reply())

    error, chunks = await fail(retrying_model)

    assert (error.reason, error.retryable) == (PROVIDER_CONNECTION_ERROR, True)
    assert chunks == [TextStartChunk(id=B0)]
    assert isinstance(error.__cause__, httpx2.RemoteProtocolError)
    assert len(fake.requests) == 1


async def test_a_response_slower_than_the_timeout_is_a_connection_error(
    fake: FakeAnthropic,
) -> None:
    fake.script(reply(headers_delay=1))
    async with AnthropicModel(
        MODEL_ID, api_key=API_KEY, base_url=fake.base_url, max_retries=0, timeout=0.2
    ) as model:
        error, _ = await fail(model)

    assert (error.reason, error.retryable) == (PROVIDER_CONNECTION_ERROR, True)
    assert isinstance(error.__cause__, anthropic.APITimeoutError)


async def test_a_stalled_stream_times_out_as_a_connection_error(fake: FakeAnthropic) -> None:
    fake.script(reply(text_block("a b"), delay=1))
    async with AnthropicModel(
        MODEL_ID, api_key=API_KEY, base_url=fake.base_url, max_retries=2, timeout=0.2
    ) as model:
        error, _ = await fail(model)

    assert (error.reason, error.retryable) == (PROVIDER_CONNECTION_ERROR, True)
    assert isinstance(error.__cause__, httpx2.ReadTimeout)
    assert len(fake.requests) == 1


def test_the_environment_must_hold_an_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)

    with pytest.raises(ModelError) as info:
        anthropic_model_from_env(MODEL_ID)

    assert info.value.reason == PROVIDER_AUTH_ERROR
