"""Fixtures for the model providers: the fake Anthropic server and a model wired to it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from pai_grpc.fakes import FakeAnthropic
from pai_grpc.models.anthropic import AnthropicModel
from tests.models._support import API_KEY, MODEL_ID


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    async with FakeAnthropic(api_key=API_KEY) as server:
        yield server


@pytest.fixture
async def model(fake: FakeAnthropic) -> AsyncIterator[AnthropicModel]:
    # No SDK retries unless a test asks for them: a retry without retry-after
    # backs off for at least a third of a second.
    async with AnthropicModel(
        MODEL_ID, api_key=API_KEY, base_url=fake.base_url, max_retries=0, timeout=10
    ) as m:
        yield m
