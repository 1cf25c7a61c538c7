"""Helpers shared by the model tests."""

from __future__ import annotations

from typing import Any

from pai_grpc.domain import (
    FinishReason,
    FinishStepChunk,
    JsonObject,
    ModelTextPart,
    ResponseInfo,
    StepStreamChunk,
    Usage,
    UserModelMessage,
)
from pai_grpc.fakes import DEFAULT_MESSAGE_ID, DEFAULT_MODEL
from pai_grpc.models import ModelCall
from pai_grpc.models.anthropic import AnthropicModel

API_KEY = "sk-ant-test"
MODEL_ID = "claude-test-model"

#: The usage a default ``reply()`` reports, raw and canonical.
RAW_USAGE: JsonObject = {
    "input_tokens": 10,
    "cache_creation_input_tokens": 0,
    "cache_read_input_tokens": 0,
    "output_tokens": 5,
}
USAGE = Usage(
    input_tokens=10, output_tokens=5, total_tokens=15, cache_read_tokens=0, cache_write_tokens=0
)


def user_call(text: str = "Hi", **kwargs: Any) -> ModelCall:
    """A call with one user message."""
    return ModelCall(messages=[UserModelMessage(content=[ModelTextPart(text=text)])], **kwargs)


async def collect(model: AnthropicModel, call: ModelCall | None = None) -> list[StepStreamChunk]:
    """Every chunk of one step."""
    stream = await model.stream(call or user_call())
    return [chunk async for chunk in stream]


def finish_step(
    finish_reason: FinishReason = "stop",
    raw_finish_reason: str | None = "end_turn",
    *,
    usage: Usage = USAGE,
    raw_usage: JsonObject | None = None,
    stop_sequence: str | None = None,
) -> FinishStepChunk:
    """The finish-step chunk a default ``reply()`` ends with."""
    return FinishStepChunk(
        usage=usage,
        finish_reason=finish_reason,
        raw_finish_reason=raw_finish_reason,
        provider_metadata={
            "anthropic": {"usage": raw_usage or RAW_USAGE, "stop_sequence": stop_sequence}
        },
        response=ResponseInfo(id=DEFAULT_MESSAGE_ID, model_id=DEFAULT_MODEL),
    )
