"""transform_step_stream and application data (TSS-01..05), through the public API.

The transform's output is canonical: it is what streams live, what is stored,
what ListMessages shows and what the next model call sees. Application data is
only written through ``ui_data.write()`` and must be a fixed point of its
registered schema (transient data included). ``abort()`` stops the step as a
structured policy decision; a throwing transform is a runtime failure.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator
from typing import Any

import pytest
from google.protobuf import json_format
from pydantic import BaseModel

from pai_grpc.domain import (
    AssistantModelMessage,
    DataChunk,
    DataPart,
    FinishChunk,
    FinishStepChunk,
    ModelTextPart,
    SourceChunk,
    StartChunk,
    StartStepChunk,
    StepStreamChunk,
    TextDeltaChunk,
    TextEndChunk,
    TextPart,
    TextStartChunk,
    ToolCallChunk,
    UrlSource,
)
from pai_grpc.lifecycle import (
    AgentContract,
    AssistantResponse,
    Block,
    ModelCallPatch,
    ModelStepRequest,
    ModelStepStreamResult,
    Respond,
    StepAbort,
    TransformStepStreamInput,
    lifecycle,
)
from pai_grpc.models import ModelCall, ScriptedModel
from tests.lifecycle.harness import Finished, Harness, harness
from tests.runtime.support import collect

# ---- helpers ----------------------------------------------------------------------


def chunk_events(done: Finished, kind: str) -> list[Any]:
    """The streamed chunks of one kind (e.g. ``text_delta``), as protos."""
    return [
        getattr(e.chunk, kind)
        for e in done.events
        if e.WhichOneof("event") == "chunk" and e.chunk.WhichOneof("chunk") == kind
    ]


def streamed_json(done: Finished) -> str:
    """Every streamed event, serialised (to assert a value never went out)."""
    return "\n".join(json_format.MessageToJson(e) for e in done.events)


async def assistant_parts(h: Harness, thread_id: str) -> list[list[Any]]:
    """The stored parts of every assistant message."""
    return [m.message.parts for m in await h.messages(thread_id) if m.message.role == "assistant"]


def model_texts(call: ModelCall) -> list[str]:
    """Assistant text the provider received in one call."""
    return [
        part.text
        for message in call.messages
        if isinstance(message, AssistantModelMessage)
        for part in message.content
        if isinstance(part, ModelTextPart)
    ]


def redact(i: TransformStepStreamInput) -> AsyncIterator[StepStreamChunk]:
    """A canonical output policy: 'secret' never leaves the step."""

    async def gen() -> AsyncIterator[StepStreamChunk]:
        assert i.stream is not None
        async for chunk in i.stream:
            if isinstance(chunk, TextDeltaChunk):
                chunk = chunk.model_copy(update={"text": chunk.text.replace("secret", "[gone]")})
            yield chunk

    return gen()


def emitting(*extra: Any, where: str = "before") -> Any:
    """A transform that yields ``extra`` chunks around the model's stream."""

    def transform(i: TransformStepStreamInput) -> AsyncIterator[StepStreamChunk]:
        async def gen() -> AsyncIterator[StepStreamChunk]:
            assert i.stream is not None
            if where == "before":
                for chunk in extra:
                    yield chunk
            async for chunk in i.stream:
                yield chunk

        return gen()

    return transform


def writing(*chunks: Any) -> Any:
    """A transform that writes ``chunks`` through ui_data before the model's first chunk."""

    def transform(i: TransformStepStreamInput) -> AsyncIterator[StepStreamChunk]:
        async def gen() -> AsyncIterator[StepStreamChunk]:
            assert i.stream is not None
            assert i.ui_data is not None
            for chunk in chunks:
                i.ui_data.write(chunk)
            async for chunk in i.stream:
                yield chunk

        return gen()

    return transform


def assert_failed_with_nothing_committed(
    done: Finished, transcript: list[tuple[str, str]], reason: str
) -> None:
    assert done.status == "failed"
    assert done.outcome == "failed"
    assert done.run.error.reason == reason
    assert transcript == [("user", "hi")]


class HoldingModel:
    """A provider whose stream never ends by itself; records when it is closed."""

    provider = "test"
    model_id = "holding"

    def __init__(self) -> None:
        self.calls: list[ModelCall] = []
        self.closed = asyncio.Event()
        self.sent: list[str] = []

    async def stream(self, call: ModelCall) -> AsyncIterator[StepStreamChunk]:
        self.calls.append(call)
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[StepStreamChunk]:
        try:
            yield TextStartChunk(id="t0")
            for word in ("partial ", "unsafe ", "output "):
                self.sent.append(word)
                yield TextDeltaChunk(id="t0", text=word)
            await asyncio.Event().wait()  # a provider that keeps the step open
            yield TextEndChunk(id="t0")
        finally:
            self.closed.set()


def abort_on(word: str, decision: StepAbort) -> Any:
    """A streamed output guardrail: abort() once ``word`` shows up."""

    def transform(i: TransformStepStreamInput) -> AsyncIterator[StepStreamChunk]:
        async def gen() -> AsyncIterator[StepStreamChunk]:
            assert i.stream is not None
            assert i.abort is not None
            async for chunk in i.stream:
                if isinstance(chunk, TextDeltaChunk) and word in chunk.text:
                    await i.abort(decision)
                yield chunk

        return gen()

    return transform


# ---- TSS-01 -----------------------------------------------------------------------


@pytest.mark.rule("TSS-01")
async def test_transformed_stream_is_what_streams_is_stored_and_is_seen_later(
    database_url: str, hooks_mode: str
) -> None:
    model = ScriptedModel(["the secret is safe", "noted"])
    hooks = lifecycle("redact", transform_step_stream=redact)
    async with harness(database_url, hooks, model=model, mode=hooks_mode) as h:
        thread_id, done = await h.ask("tell me")
        assert done.status == "completed"
        # Live: only the transformed text went out.
        assert done.text == "the [gone] is safe"
        assert "secret" not in streamed_json(done)
        # The durable event log (a replay after the run ended) holds the same.
        replay = await collect(h.srv, done.run.id)
        assert (
            "".join(
                e.chunk.text_delta.text
                for e in replay
                if e.WhichOneof("event") == "chunk" and e.chunk.WhichOneof("chunk") == "text_delta"
            )
            == "the [gone] is safe"
        )
        # Stored message and the client snapshot.
        parts = await assistant_parts(h, thread_id)
        assert [p.text for p in parts[0] if isinstance(p, TextPart)] == ["the [gone] is safe"]
        assert await h.transcript(thread_id) == [
            ("user", "tell me"),
            ("assistant", "the [gone] is safe"),
        ]
        # Later model context.
        await h.ask("and now?", thread_id)
        assert model_texts(model.calls[1]) == ["the [gone] is safe"]
        assert "secret" not in repr(model.calls[1].messages)


@pytest.mark.rule("TSS-01")
async def test_hook_authored_chunks_are_canonical_too(database_url: str, hooks_mode: str) -> None:
    def append_note(i: TransformStepStreamInput) -> AsyncIterator[StepStreamChunk]:
        async def gen() -> AsyncIterator[StepStreamChunk]:
            assert i.stream is not None
            async for chunk in i.stream:
                if isinstance(chunk, FinishStepChunk):
                    yield TextStartChunk(id="note")
                    yield TextDeltaChunk(id="note", text="[checked]")
                    yield TextEndChunk(id="note")
                yield chunk

        return gen()

    model = ScriptedModel(["answer", "second"])
    async with harness(
        database_url,
        lifecycle("note", transform_step_stream=append_note),
        model=model,
        mode=hooks_mode,
    ) as h:
        thread_id, done = await h.ask("q")
        assert done.text == "answer[checked]"
        parts = (await assistant_parts(h, thread_id))[0]
        assert [p.text for p in parts if isinstance(p, TextPart)] == ["answer", "[checked]"]
        await h.ask("again", thread_id)
        assert model_texts(model.calls[1]) == ["answer", "[checked]"]


# ---- TSS-02 -----------------------------------------------------------------------


STATUS = {"type": "object", "properties": {"phase": {"type": "string"}}, "required": ["phase"]}


@pytest.mark.rule("TSS-02")
async def test_ui_data_write_is_streamed_and_stored_through_the_reducer(
    database_url: str, hooks_mode: str
) -> None:
    hooks = lifecycle(
        "status",
        transform_step_stream=writing(DataChunk(name="status", id="s1", data={"phase": "ok"})),
    )
    contract = AgentContract(ui_data={"status": STATUS})
    async with harness(database_url, hooks, contract=contract, mode=hooks_mode) as h:
        thread_id, done = await h.ask("hi")
        assert done.status == "completed"
        (data,) = chunk_events(done, "data")
        assert data.name == "status"
        assert json_format.MessageToDict(data.data) == {"phase": "ok"}
        parts = (await assistant_parts(h, thread_id))[0]
        assert [p for p in parts if isinstance(p, DataPart)] == [
            DataPart(name="status", id="s1", data={"phase": "ok"})
        ]


@pytest.mark.rule("TSS-02")
@pytest.mark.parametrize(
    ("written", "reason"),
    [
        # Only registered data schemas are accepted.
        (DataChunk(name="unregistered", data={"phase": "ok"}), "CONTRACT_VIOLATION"),
        # Anything but a data chunk: no tools, sources or text through the data path.
        (
            ToolCallChunk(tool_call_id="c1", tool_name="weather", input={}),
            "HOOK_INVALID_DECISION",
        ),
        (
            SourceChunk(id="s", source=UrlSource(url="https://example.com")),
            "HOOK_INVALID_DECISION",
        ),
        (TextDeltaChunk(id="t0", text="sneaky"), "HOOK_INVALID_DECISION"),
        ({"type": "data", "name": "status", "data": {"phase": "ok"}}, "HOOK_INVALID_DECISION"),
    ],
    ids=["unregistered", "tool", "source", "text", "dict"],
)
async def test_ui_data_write_accepts_only_registered_data(
    database_url: str, hooks_mode: str, written: Any, reason: str
) -> None:
    hooks = lifecycle("writer", transform_step_stream=writing(written))
    contract = AgentContract(ui_data={"status": STATUS})
    async with harness(database_url, hooks, contract=contract, mode=hooks_mode) as h:
        thread_id, done = await h.ask("hi")
        assert_failed_with_nothing_committed(done, await h.transcript(thread_id), reason)
        assert chunk_events(done, "data") == []
        assert chunk_events(done, "tool_call") == []
        assert chunk_events(done, "source") == []
        assert "sneaky" not in done.text


@pytest.mark.rule("TSS-02")
@pytest.mark.parametrize(
    "chunk",
    [
        DataChunk(name="status", data={"phase": "ok"}),
        StartChunk(),
        StartStepChunk(),
        FinishChunk(),
    ],
    ids=["data", "start", "start-step", "finish"],
)
async def test_the_stream_itself_cannot_carry_data_or_framing(
    database_url: str, hooks_mode: str, chunk: StepStreamChunk
) -> None:
    hooks = lifecycle("bypass", transform_step_stream=emitting(chunk))
    contract = AgentContract(ui_data={"status": STATUS})
    async with harness(database_url, hooks, contract=contract, mode=hooks_mode) as h:
        thread_id, done = await h.ask("hi")
        assert_failed_with_nothing_committed(
            done, await h.transcript(thread_id), "HOOK_INVALID_DECISION"
        )
        assert chunk_events(done, "data") == []
        assert chunk_events(done, "start") == []


# ---- TSS-03 -----------------------------------------------------------------------


class Progress(BaseModel):
    percent: int
    label: str = "working"


COUNT = {
    "type": "object",
    "properties": {"n": {"type": "number"}},
    "required": ["n"],
    "additionalProperties": False,
}


@pytest.mark.rule("TSS-03")
@pytest.mark.parametrize("transient", [False, True], ids=["stored", "transient"])
@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("progress", {"percent": 5}),  # parsing adds the default: not a fixed point
        ("progress", {"percent": "5", "label": "x"}),  # parsing coerces: not a fixed point
        ("progress", {"percent": 5, "label": "x", "extra": 1}),  # parsing drops a key
        ("progress", {"label": "x"}),  # invalid
        ("count", {"n": "five"}),  # invalid (JSON Schema)
        ("count", {"n": math.nan}),  # valid for the schema, but not strict JSON
    ],
    ids=["default", "coerced", "dropped", "invalid", "json-schema", "nan"],
)
async def test_data_must_be_a_fixed_point_of_its_schema(
    database_url: str, hooks_mode: str, name: str, data: Any, transient: bool
) -> None:
    written = DataChunk(name=name, data=data, transient=transient)
    hooks = lifecycle("writer", transform_step_stream=writing(written))
    contract = AgentContract(ui_data={"progress": Progress, "count": COUNT})
    async with harness(database_url, hooks, contract=contract, mode=hooks_mode) as h:
        thread_id, done = await h.ask("hi")
        assert done.status == "failed"
        nan = data.get("n") != data.get("n")
        # NaN is not strict JSON: in process the hook's write fails the hook;
        # remotely the plugin SDK cannot encode it, so the answer is an invalid decision.
        expected = (
            "CONTRACT_VIOLATION"
            if not nan
            else "HOOK_INVALID_DECISION"
            if hooks_mode == "remote"
            else "HOOK_FAILED"
        )
        assert done.run.error.reason == expected, done.run.error
        assert await h.transcript(thread_id) == [("user", "hi")]
        assert chunk_events(done, "data") == []


@pytest.mark.rule("TSS-03")
async def test_a_boolean_coerced_to_a_number_is_not_a_fixed_point(
    database_url: str, hooks_mode: str
) -> None:
    written = DataChunk(name="progress", data={"percent": True, "label": "x"})
    hooks = lifecycle("writer", transform_step_stream=writing(written))
    contract = AgentContract(ui_data={"progress": Progress})
    async with harness(database_url, hooks, contract=contract, mode=hooks_mode) as h:
        thread_id, done = await h.ask("hi")
        assert done.status == "failed"
        assert done.run.error.reason == "CONTRACT_VIOLATION"
        assert await h.transcript(thread_id) == [("user", "hi")]


@pytest.mark.rule("TSS-03")
async def test_fixed_point_data_passes_and_transient_data_is_streamed_not_stored(
    database_url: str, hooks_mode: str
) -> None:
    hooks = lifecycle(
        "writer",
        transform_step_stream=writing(
            DataChunk(name="progress", id="p", data={"percent": 5, "label": "x"}),
            DataChunk(name="count", data={"n": 1.5}, transient=True),
        ),
    )
    contract = AgentContract(ui_data={"progress": Progress, "count": COUNT})
    async with harness(database_url, hooks, contract=contract, mode=hooks_mode) as h:
        thread_id, done = await h.ask("hi")
        assert done.status == "completed"
        streamed = chunk_events(done, "data")
        assert [(d.name, d.transient) for d in streamed] == [("progress", False), ("count", True)]
        parts = (await assistant_parts(h, thread_id))[0]
        assert [p for p in parts if isinstance(p, DataPart)] == [
            DataPart(name="progress", id="p", data={"percent": 5, "label": "x"})
        ]


# ---- TSS-04 -----------------------------------------------------------------------


@pytest.mark.rule("TSS-04")
async def test_abort_cancels_the_provider_and_commits_nothing(
    database_url: str, hooks_mode: str
) -> None:
    model = HoldingModel()
    guard = lifecycle("guard", transform_step_stream=abort_on("unsafe", StepAbort("UNSAFE")))
    async with harness(database_url, guard, model=model, mode=hooks_mode) as h:  # type: ignore[arg-type]
        thread_id, done = await h.ask("hi")
        assert model.closed.is_set()  # the provider stream was cancelled
        if hooks_mode == "in-process":
            assert model.sent == ["partial ", "unsafe "]  # nothing more was pulled from it
        else:
            # A remote transform is pipelined: the runtime may read ahead one chunk.
            assert model.sent[:2] == ["partial ", "unsafe "]
        # A structured policy stop: blocked by default, not a failure.
        assert done.status == "completed"
        assert done.outcome == "blocked"
        assert done.run.reason == "UNSAFE"
        assert not done.run.HasField("error") or done.run.error.reason == ""
        assert "abort" in done.kinds
        # Nothing of the partial step was committed.
        assert await h.transcript(thread_id) == [("user", "hi")]
        assert [m.message.role for m in await h.messages(thread_id)] == ["user"]
        run = await h.run_record(done.run.id)
        assert run.step_count == 0


@pytest.mark.rule("TSS-04")
async def test_abort_with_a_replacement_commits_only_the_replacement(
    database_url: str, hooks_mode: str
) -> None:
    model = HoldingModel()
    decision = StepAbort(
        "UNSAFE", message="redacted", replacement=AssistantResponse.text("I can't share that.")
    )
    guard = lifecycle("guard", transform_step_stream=abort_on("unsafe", decision))
    async with harness(database_url, guard, model=model, mode=hooks_mode) as h:  # type: ignore[arg-type]
        thread_id, done = await h.ask("hi")
        assert model.closed.is_set()
        assert (done.status, done.outcome, done.run.reason) == ("completed", "blocked", "UNSAFE")
        assert await h.transcript(thread_id) == [
            ("user", "hi"),
            ("assistant", "I can't share that."),
        ]
        parts = (await assistant_parts(h, thread_id))[0]
        assert "partial" not in repr(parts)


@pytest.mark.rule("TSS-04")
async def test_abort_may_fail_the_run_deliberately(database_url: str, hooks_mode: str) -> None:
    model = HoldingModel()
    guard = lifecycle(
        "guard",
        transform_step_stream=abort_on("unsafe", StepAbort("BROKEN", outcome="failed")),
    )
    async with harness(database_url, guard, model=model, mode=hooks_mode) as h:  # type: ignore[arg-type]
        thread_id, done = await h.ask("hi")
        assert model.closed.is_set()
        assert (done.status, done.outcome, done.run.reason) == ("failed", "failed", "BROKEN")
        assert done.run.error.reason == "BROKEN"
        assert await h.transcript(thread_id) == [("user", "hi")]


@pytest.mark.rule("TSS-04")
async def test_a_throwing_transform_is_a_runtime_failure_not_an_abort(
    database_url: str, hooks_mode: str
) -> None:
    model = HoldingModel()

    def explode(i: TransformStepStreamInput) -> AsyncIterator[StepStreamChunk]:
        async def gen() -> AsyncIterator[StepStreamChunk]:
            assert i.stream is not None
            async for chunk in i.stream:
                if isinstance(chunk, TextDeltaChunk) and "unsafe" in chunk.text:
                    raise RuntimeError("guard crashed")
                yield chunk

        return gen()

    async with harness(
        database_url,
        lifecycle("guard", transform_step_stream=explode),
        model=model,  # type: ignore[arg-type]
        mode=hooks_mode,
    ) as h:
        thread_id, done = await h.ask("hi")
        assert model.closed.is_set()
        assert_failed_with_nothing_committed(done, await h.transcript(thread_id), "HOOK_FAILED")
        assert "guard crashed" in done.run.error.message
        assert done.run.reason == "HOOK_FAILED"


# ---- TSS-05 -----------------------------------------------------------------------


@pytest.mark.rule("TSS-05")
@pytest.mark.parametrize(
    "chunks",
    [
        [TextStartChunk(id=""), TextDeltaChunk(id="", text="x"), TextEndChunk(id="")],
        [TextStartChunk(id="n"), TextDeltaChunk(id="", text="x"), TextEndChunk(id="n")],
        [TextStartChunk(id="n"), TextDeltaChunk(id="n", text="x"), TextEndChunk(id="")],
        [TextDeltaChunk.model_construct(text="x")],  # no id at all
    ],
    ids=["start", "delta", "end", "missing"],
)
async def test_text_chunks_need_ids(
    database_url: str, hooks_mode: str, chunks: list[StepStreamChunk]
) -> None:
    hooks = lifecycle("ids", transform_step_stream=emitting(*chunks))
    async with harness(database_url, hooks, mode=hooks_mode) as h:
        thread_id, done = await h.ask("hi")
        assert_failed_with_nothing_committed(
            done, await h.transcript(thread_id), "HOOK_INVALID_DECISION"
        )
        assert "text id" in done.run.error.message


class LookAlike(BaseModel):
    """Shaped like a text delta, but not one of the canonical chunk types."""

    type: str = "text-delta"
    id: str = "t0"
    text: str = "x"


async def test_a_chunk_look_alike_is_an_invalid_decision(
    database_url: str, hooks_mode: str
) -> None:
    hooks = lifecycle("look-alike", transform_step_stream=emitting(LookAlike()))
    async with harness(database_url, hooks, mode=hooks_mode) as h:
        thread_id, done = await h.ask("hi")
        # In process the runtime refuses it; a plugin cannot even put it on the wire.
        reason = "HOOK_FAILED" if hooks_mode == "remote" else "HOOK_INVALID_DECISION"
        assert_failed_with_nothing_committed(done, await h.transcript(thread_id), reason)
        if hooks_mode != "remote":
            assert "not a step chunk" in done.run.error.message


@pytest.mark.rule("TSS-05")
@pytest.mark.parametrize("phase", ["prepare_run", "prepare_model_step", "abort"])
async def test_text_synthesised_by_lifecycle_responses_has_ids(
    database_url: str, hooks_mode: str, phase: str
) -> None:
    seen: list[StepStreamChunk] = []

    def record(i: TransformStepStreamInput) -> AsyncIterator[StepStreamChunk]:
        async def gen() -> AsyncIterator[StepStreamChunk]:
            assert i.stream is not None
            assert i.abort is not None
            async for chunk in i.stream:
                seen.append(chunk)
                if phase == "abort" and isinstance(chunk, TextDeltaChunk):
                    await i.abort(
                        StepAbort("NOPE", replacement=AssistantResponse.text("replaced text"))
                    )
                yield chunk

        return gen()

    response = AssistantResponse(parts=[TextPart(text="one"), TextPart(text="two")])
    hooks: dict[str, Any] = {"transform_step_stream": record}
    if phase == "prepare_run":
        hooks["prepare_run"] = lambda i: Respond(response)
    elif phase == "prepare_model_step":
        hooks["prepare_model_step"] = lambda i: Block("POLICY", response=response)
    async with harness(database_url, lifecycle("synth", **hooks), mode=hooks_mode) as h:
        thread_id, done = await h.ask("hi")
        assert done.status == "completed"
        text_events = [
            *chunk_events(done, "text_start"),
            *chunk_events(done, "text_delta"),
            *chunk_events(done, "text_end"),
        ]
        assert text_events
        assert all(e.id for e in text_events)
        if phase == "abort":
            assert done.text == "replaced text"  # aborted before "hello" was yielded
            assert await h.transcript(thread_id) == [("user", "hi"), ("assistant", "replaced text")]
        else:
            # The response passed through the output policy, with ids on every text chunk.
            texts = [c for c in seen if c.type in ("text-start", "text-delta", "text-end")]
            assert len(texts) == 6
            assert all(c.id for c in texts)
            ids = [c.id for c in texts]  # type: ignore[attr-defined]
            assert ids[0] == ids[1] == ids[2] != ids[3] == ids[4] == ids[5]
            assert await h.transcript(thread_id) == [("user", "hi"), ("assistant", "onetwo")]


# ---- the transform's input: the attempt whose stream it transforms -------------------


@pytest.mark.rule("CFG-01")
async def test_the_transform_input_is_the_request_of_the_attempt_it_transforms(
    database_url: str, hooks_mode: str
) -> None:
    primary = ScriptedModel(["from the primary"])
    routed = ScriptedModel(["from the routed model"], model_id="routed")
    inputs: list[ModelStepRequest] = []

    async def around(request: ModelStepRequest, next: Any) -> ModelStepStreamResult:
        chosen = await next(ModelCallPatch(model=routed, instructions="CALL"))
        await next(ModelCallPatch(instructions="ABANDONED"))  # started, then dropped
        return chosen  # type: ignore[no-any-return]

    def observe(i: TransformStepStreamInput) -> AsyncIterator[StepStreamChunk]:
        assert i.input is not None
        assert i.stream is not None
        inputs.append(i.input)
        return i.stream

    hooks = lifecycle("route", around_model_call=around, transform_step_stream=observe)
    async with harness(
        database_url, hooks, model=primary, models=[routed], instructions="agent", mode=hooks_mode
    ) as h:
        thread_id, done = await h.ask("hi")
        assert done.status == "completed"
        assert (await h.transcript(thread_id))[-1] == ("assistant", "from the routed model")
    (call,) = routed.calls
    assert [m.content for m in primary.calls[0].instructions] == ["ABANDONED"]
    (request,) = inputs
    assert (request.model.provider, request.model.model_id) == ("scripted", "routed")
    assert [m.content for m in request.instructions] == ["CALL"]
    assert [m.role for m in request.messages] == [m.role for m in call.messages]
