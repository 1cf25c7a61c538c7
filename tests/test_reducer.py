"""The step reducer: canonical chunks -> message parts (AI SDK stream semantics)."""

from __future__ import annotations

import json

import pytest

from pai_grpc.domain import (
    DataChunk,
    DataPart,
    DocumentSource,
    FileChunk,
    FilePart,
    FinishStepChunk,
    ReasoningDeltaChunk,
    ReasoningEndChunk,
    ReasoningPart,
    ReasoningStartChunk,
    SourceChunk,
    SourceDocumentPart,
    SourceUrlPart,
    StartStepChunk,
    StepStartPart,
    TextDeltaChunk,
    TextEndChunk,
    TextPart,
    TextStartChunk,
    ToolApprovalRequestChunk,
    ToolCallChunk,
    ToolErrorChunk,
    ToolInputDeltaChunk,
    ToolInputEndChunk,
    ToolInputStartChunk,
    ToolOutputDeniedChunk,
    ToolPart,
    ToolResultChunk,
    UrlSource,
    Usage,
)
from pai_grpc.runtime import StepReducer, StreamProtocolError


def reduce(*chunks: object) -> StepReducer:
    r = StepReducer()
    for c in chunks:
        r.apply(c)  # type: ignore[arg-type]
    return r


def test_text_blocks_keep_their_boundaries_and_interleave() -> None:
    r = reduce(
        StartStepChunk(),
        TextStartChunk(id="a"),
        TextStartChunk(id="b"),
        TextDeltaChunk(id="a", text="Hel"),
        TextDeltaChunk(id="b", text="other"),
        TextDeltaChunk(id="a", text="lo"),
        TextEndChunk(id="a", provider_metadata={"p": {"x": 1}}),
    )
    parts = r.finalize()
    assert parts[0] == StepStartPart()
    assert parts[1] == TextPart(text="Hello", state="done", provider_metadata={"p": {"x": 1}})
    # b never ended: finalize closes it
    assert parts[2] == TextPart(text="other", state="done")


@pytest.mark.rule("TSS-05")
@pytest.mark.parametrize(
    "chunk",
    [TextDeltaChunk(id="x", text="a"), TextEndChunk(id="x"), ReasoningDeltaChunk(id="x", text="")],
)
def test_a_delta_or_end_without_start_is_a_protocol_error(chunk: object) -> None:
    with pytest.raises(StreamProtocolError):
        reduce(TextStartChunk(id="other"), chunk)


def test_reasoning_accumulates_signature_metadata() -> None:
    r = reduce(
        ReasoningStartChunk(id="r"),
        ReasoningDeltaChunk(id="r", text="think"),
        ReasoningDeltaChunk(id="r", text="", provider_metadata={"anthropic": {"signature": "sig"}}),
        ReasoningEndChunk(id="r"),
    )
    assert r.finalize() == [
        ReasoningPart(
            text="think", state="done", provider_metadata={"anthropic": {"signature": "sig"}}
        )
    ]


def test_tool_part_advances_through_its_states() -> None:
    r = reduce(
        ToolInputStartChunk(id="c1", tool_name="weather"),
        ToolInputDeltaChunk(id="c1", delta='{"city":'),
    )
    assert r.parts[0] == ToolPart(tool_call_id="c1", tool_name="weather", state="input-streaming")
    r.apply(ToolInputDeltaChunk(id="c1", delta='"Oslo"}'))
    assert isinstance(r.parts[0], ToolPart)
    assert r.parts[0].input == {"city": "Oslo"}
    r.apply(ToolInputEndChunk(id="c1"))
    r.apply(ToolCallChunk(tool_call_id="c1", tool_name="weather", input={"city": "Oslo"}))
    assert r.parts[0].state == "input-available"  # type: ignore[union-attr]
    r.apply(ToolResultChunk(tool_call_id="c1", tool_name="weather", output={"t": 3}))
    assert r.parts[0] == ToolPart(
        tool_call_id="c1",
        tool_name="weather",
        state="output-available",
        input={"city": "Oslo"},
        output={"t": 3},
    )
    assert [c.tool_call_id for c in r.tool_calls] == ["c1"]


def test_a_long_tool_input_is_parsed_once_not_per_delta(monkeypatch: pytest.MonkeyPatch) -> None:
    """A tool input streams in thousands of deltas (a file a tool writes).

    Each delta used to parse the whole input so far as JSON and copy the
    tool part: work in the square of the input's length (about 5 s of the
    event loop for a 100 KB input in 10,000 deltas). The partial input is
    parsed when the parts are read, as they were before.
    """
    parsed: list[int] = []
    real = json.loads

    def counting(text: str, *args: object, **kwargs: object) -> object:
        parsed.append(len(text))
        return real(text, *args, **kwargs)

    monkeypatch.setattr(json, "loads", counting)
    body = "x" * 20_000
    text = json.dumps({"path": "a.txt", "body": body})
    pieces = [text[i : i + 10] for i in range(0, len(text), 10)]
    r = reduce(ToolInputStartChunk(id="c1", tool_name="write"))
    for piece in pieces[:-1]:
        r.apply(ToolInputDeltaChunk(id="c1", delta=piece))
    # Read mid-stream: the partial input does not parse yet.
    assert r.parts[0] == ToolPart(tool_call_id="c1", tool_name="write", state="input-streaming")
    r.apply(ToolInputDeltaChunk(id="c1", delta=pieces[-1]))
    assert r.parts[0].input == {"path": "a.txt", "body": body}  # type: ignore[union-attr]
    r.apply(ToolInputEndChunk(id="c1"))
    r.apply(
        ToolCallChunk(tool_call_id="c1", tool_name="write", input={"path": "a.txt", "body": body})
    )
    assert r.parts[0].state == "input-available"  # type: ignore[union-attr]
    # Parsed when read (twice here), never per delta.
    assert sum(parsed) <= 3 * len(text)


@pytest.mark.rule("TV-03")
def test_a_result_after_an_invalid_call_is_ignored() -> None:
    r = reduce(
        ToolCallChunk(tool_call_id="c", tool_name="t", invalid=True, error_text="bad input"),
        ToolResultChunk(tool_call_id="c", tool_name="t", output="sneaky"),
        ToolErrorChunk(tool_call_id="c", tool_name="t", error_text="other"),
    )
    (part,) = r.parts
    assert isinstance(part, ToolPart)
    assert part.state == "output-error"
    assert part.error_text == "bad input"
    assert part.output is None


def test_approval_request_and_denial() -> None:
    r = reduce(
        ToolCallChunk(tool_call_id="c", tool_name="delete", input={}),
        ToolApprovalRequestChunk(approval_id="ap1", tool_call_id="c"),
    )
    assert r.parts[0].state == "approval-requested"  # type: ignore[union-attr]
    r.apply(ToolOutputDeniedChunk(tool_call_id="c"))
    part = r.parts[0]
    assert isinstance(part, ToolPart)
    assert part.state == "output-denied"
    assert part.approval is not None
    assert part.approval.approved is False
    with pytest.raises(StreamProtocolError):
        r.apply(ToolOutputDeniedChunk(tool_call_id="unknown"))


def test_sources_files_and_data() -> None:
    r = reduce(
        SourceChunk(id="s1", source=UrlSource(url="https://a.example", title="A")),
        SourceChunk(id="s2", source=DocumentSource(media_type="text/plain", title="Doc")),
        FileChunk(media_type="image/png", url="data:image/png;base64,AA=="),
        DataChunk(name="progress", id="p", data={"pct": 10}),
        DataChunk(name="progress", id="p", data={"pct": 90}),
        DataChunk(name="progress", data={"pct": 1}),
        DataChunk(name="ping", data=1, transient=True),
    )
    assert r.finalize() == [
        SourceUrlPart(source_id="s1", url="https://a.example", title="A"),
        SourceDocumentPart(source_id="s2", media_type="text/plain", title="Doc"),
        FilePart(media_type="image/png", url="data:image/png;base64,AA=="),
        DataPart(name="progress", id="p", data={"pct": 90}),
        DataPart(name="progress", data={"pct": 1}),
    ]


def test_finish_step_records_usage_and_reason() -> None:
    r = reduce(FinishStepChunk(usage=Usage(input_tokens=3), finish_reason="length"))
    assert r.usage == Usage(input_tokens=3)
    assert r.finish_reason == "length"
    assert not r.has_content


def test_text_deltas_fold_into_their_part_in_order_with_metadata_merged() -> None:
    r = StepReducer()
    r.apply(TextStartChunk(id="t"))
    r.apply(ReasoningStartChunk(id="r"))
    for i in range(500):
        r.apply(TextDeltaChunk(id="t", text=f"{i},"))
        r.apply(ReasoningDeltaChunk(id="r", text="."))
        if i == 250:
            r.apply(TextDeltaChunk(id="t", text="!", provider_metadata={"p": {"a": 1}}))
    # Mid-stream the parts hold the text so far, still streaming.
    text = r.parts[0]
    assert isinstance(text, TextPart)
    expected = "".join(f"{i}," + ("!" if i == 250 else "") for i in range(500))
    assert (text.text, text.state) == (expected, "streaming")
    r.apply(TextDeltaChunk(id="t", text="end", provider_metadata={"p": {"b": 2}}))
    r.apply(TextEndChunk(id="t"))
    (done, reasoning) = r.finalize()
    assert isinstance(done, TextPart)
    assert isinstance(reasoning, ReasoningPart)
    assert done.text == expected + "end"
    assert done.state == "done"
    assert done.provider_metadata == {"p": {"a": 1, "b": 2}}
    assert reasoning.text == "." * 500
