"""Models shipped for tests and offline use: a scripted model and the offline stand-in."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import TypeAlias

from pai_grpc.domain import (
    FinishStepChunk,
    JsonValue,
    ModelMessage,
    ResponseInfo,
    StepStreamChunk,
    TextDeltaChunk,
    TextEndChunk,
    TextStartChunk,
    ToolCallChunk,
    ToolInputDeltaChunk,
    ToolInputEndChunk,
    ToolInputStartChunk,
    Usage,
    UserModelMessage,
)
from pai_grpc.errors import ModelError
from pai_grpc.models._protocol import ModelCall


@dataclass(frozen=True)
class HeldStep:
    """A scripted reply that stops mid-stream until ``release`` is set.

    It streams its text start and first ``streamed`` deltas, waits for
    ``release``, then streams the rest. Tests that act while a run is in the
    middle of a step (cancel it, queue behind it, steer it) hold it there
    instead of racing a chunk delay, which a loaded machine can lose.
    """

    text: str
    release: asyncio.Event
    streamed: int = 1


#: One scripted step: a reply text, an explicit chunk list, a held reply, or an error to raise.
ScriptStep: TypeAlias = str | Sequence[StepStreamChunk] | HeldStep | ModelError
Script: TypeAlias = Sequence[ScriptStep] | Callable[[ModelCall], ScriptStep]


def text_step(
    text: str,
    *,
    block_id: str = "t0",
    usage: Usage | None = None,
    words: bool = True,
) -> list[StepStreamChunk]:
    """Chunks of a step that answers ``text`` (one delta per word when ``words``)."""
    pieces = _split_words(text) if words else [text]
    chunks: list[StepStreamChunk] = [TextStartChunk(id=block_id)]
    chunks += [TextDeltaChunk(id=block_id, text=p) for p in pieces if p]
    chunks.append(TextEndChunk(id=block_id))
    chunks.append(
        FinishStepChunk(
            usage=usage or Usage(input_tokens=1, output_tokens=max(1, len(pieces))),
            finish_reason="stop",
        )
    )
    return chunks


def tool_call_step(*calls: tuple[str, str, JsonValue], text: str = "") -> list[StepStreamChunk]:
    """Chunks of a step that calls tools: ``(tool_call_id, tool_name, input)`` each."""
    chunks: list[StepStreamChunk] = text_step(text)[:-1] if text else []
    for call_id, name, value in calls:
        raw = json.dumps(value)
        chunks += [
            ToolInputStartChunk(id=call_id, tool_name=name),
            ToolInputDeltaChunk(id=call_id, delta=raw[: len(raw) // 2]),
            ToolInputDeltaChunk(id=call_id, delta=raw[len(raw) // 2 :]),
            ToolInputEndChunk(id=call_id),
            ToolCallChunk(tool_call_id=call_id, tool_name=name, input=value),
        ]
    chunks.append(
        FinishStepChunk(usage=Usage(input_tokens=1, output_tokens=1), finish_reason="tool-calls")
    )
    return chunks


def _split_words(text: str) -> list[str]:
    out: list[str] = []
    word = ""
    for ch in text:
        word += ch
        if ch == " ":
            out.append(word)
            word = ""
    if word:
        out.append(word)
    return out


def last_user_text(messages: Sequence[ModelMessage]) -> str:
    """The text of the newest user message ("" when there is none)."""
    for message in reversed(messages):
        if isinstance(message, UserModelMessage):
            return "".join(p.text for p in message.content if p.type == "text")
    return ""


class ScriptedModel:
    """A model that replays a script, for fast deterministic tests.

    The script is a sequence of steps consumed one per call (the last step
    repeats when it runs out), or a function of the call. Every call is
    recorded in :attr:`calls` so tests can assert what the model received.
    """

    def __init__(
        self,
        script: Script,
        *,
        provider: str = "scripted",
        model_id: str = "scripted",
        chunk_delay: float = 0.0,
        first_chunk_delay: float = 0.0,
        record_calls: bool = True,
    ) -> None:
        self._script = script
        self._provider = provider
        self._model_id = model_id
        self._chunk_delay = chunk_delay
        self._first_chunk_delay = first_chunk_delay
        #: Whether :attr:`calls` keeps every call (a serving model must not:
        #: each call holds the thread's whole context).
        self._record_calls = record_calls
        self._count = 0
        self.calls: list[ModelCall] = []

    @property
    def provider(self) -> str:
        """Provider name."""
        return self._provider

    @property
    def model_id(self) -> str:
        """Model id."""
        return self._model_id

    def _next_step(self, call: ModelCall) -> ScriptStep:
        if callable(self._script):
            return self._script(call)
        steps = list(self._script)
        if not steps:
            raise ModelError("the script is empty", reason="SCRIPT_EXHAUSTED")
        index = len(self.calls) if self._record_calls else self._count
        return steps[min(index - 1, len(steps) - 1)]

    async def stream(self, call: ModelCall) -> AsyncIterator[StepStreamChunk]:
        """Start one scripted step."""
        self._count += 1
        if self._record_calls:
            self.calls.append(call)
        step = self._next_step(call)
        if isinstance(step, ModelError):
            raise step
        if isinstance(step, HeldStep):
            # The text start and the first deltas, then the hold.
            return self._emit(text_step(step.text), hold=(step.streamed + 1, step.release))
        chunks = text_step(step) if isinstance(step, str) else list(step)
        return self._emit(chunks)

    async def _emit(
        self, chunks: list[StepStreamChunk], hold: tuple[int, asyncio.Event] | None = None
    ) -> AsyncIterator[StepStreamChunk]:
        if self._first_chunk_delay:
            await asyncio.sleep(self._first_chunk_delay)
        for i, chunk in enumerate(chunks):
            if hold is not None and i == hold[0]:
                await hold[1].wait()
            if self._chunk_delay:
                await asyncio.sleep(self._chunk_delay)
            yield chunk


OFFLINE_NOTICE = "offline stand-in model (set ANTHROPIC_API_KEY to answer with Claude)"


class OfflineModel(ScriptedModel):
    """The clearly labelled stand-in ``serve`` uses when no API key is configured.

    It echoes the user's message so the whole pipeline (commit, runner,
    stream, persistence) can be exercised without network access.
    """

    def __init__(self, *, chunk_delay: float = 0.02) -> None:
        super().__init__(
            self._reply,
            provider="offline",
            model_id="stand-in",
            chunk_delay=chunk_delay,
            record_calls=False,
        )

    @staticmethod
    def _reply(call: ModelCall) -> list[StepStreamChunk]:
        said = last_user_text(call.messages) or "(no user message)"
        return [
            *text_step(f"[{OFFLINE_NOTICE}] You said: {said}")[:-1],
            FinishStepChunk(
                usage=Usage(input_tokens=0, output_tokens=0),
                finish_reason="stop",
                response=ResponseInfo(id="offline", model_id="stand-in"),
            ),
        ]
