"""The scripted model's held step: a run stays mid-step until the test releases it."""

from __future__ import annotations

import asyncio

from pai_grpc.domain import FinishStepChunk, TextDeltaChunk, TextEndChunk, TextStartChunk
from pai_grpc.models import HeldStep, ModelCall, ScriptedModel, text_step


async def test_a_held_step_streams_its_first_deltas_then_waits_for_its_release() -> None:
    release = asyncio.Event()
    model = ScriptedModel([HeldStep("one two three", release, streamed=2)])
    stream = await model.stream(ModelCall(messages=[]))
    first = [await anext(stream) for _ in range(3)]
    assert [type(c) for c in first] == [TextStartChunk, TextDeltaChunk, TextDeltaChunk]
    assert [c.text for c in first[1:]] == ["one ", "two "]  # type: ignore[attr-defined]
    pending = asyncio.ensure_future(anext(stream))
    for _ in range(20):
        await asyncio.sleep(0)
    assert not pending.done()  # held: nothing more until the release
    release.set()
    rest = [await pending, *[c async for c in stream]]
    assert [type(c) for c in rest] == [TextDeltaChunk, TextEndChunk, FinishStepChunk]
    assert first + rest == text_step("one two three")


async def test_a_released_step_streams_straight_through() -> None:
    release = asyncio.Event()
    release.set()
    model = ScriptedModel(lambda call: HeldStep("hi there", release))
    stream = await model.stream(ModelCall(messages=[]))
    assert [c async for c in stream] == text_step("hi there")
