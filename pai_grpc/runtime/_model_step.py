"""The model call of one step and the canonical step stream's own rules.

around_model_call wraps the provider attempts (AMC-*); the attempt whose
stream is returned decides the request and the tools that may execute
(TV-05). The chunk rules (TSS-02, TSS-05, TV-02) apply to whatever a
transform composition emits.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import Any, get_args

from pai_grpc.domain import StepStreamChunk, ToolCallChunk
from pai_grpc.errors import ModelError
from pai_grpc.lifecycle import (
    AbortSignal,
    AgentLifecycle,
    InvalidDecision,
    ModelStepRequest,
    ModelStepStreamResult,
)
from pai_grpc.lifecycle.internal import Effective, missing_text_id
from pai_grpc.models import prune_reasoning
from storage import InvalidJson, check_strict_json

#: Chunk types a transform may not emit: run framing, and data (only through ui_data).
_FRAMING = frozenset({"start", "finish", "start-step", "data"})


@dataclass(frozen=True)
class CalledModel:
    """around_model_call's outcome: the step stream and the request it answers."""

    stream: AsyncIterator[StepStreamChunk]
    #: The effective request the provider received for this stream (see _source_of).
    request: ModelStepRequest


@dataclass(frozen=True)
class _Attempt:
    """One successful provider attempt of the current step."""

    result: ModelStepStreamResult
    #: The request as sent: after every patch and reasoning pruning.
    request: ModelStepRequest
    #: The tool names snapshotted when the attempt began (TV-05).
    tools: frozenset[str]


class ModelCaller:
    """around_model_call, outermost first, down to the provider attempts of each step.

    It keeps the step's attempts to tell which one a returned stream came
    from, and the provider streams to close when the step ends.
    """

    def __init__(self, lifecycle: AgentLifecycle | None) -> None:
        #: The composed hooks, only when around_model_call is one of their phases.
        self._lifecycle = lifecycle
        #: Provider streams opened in the current step (closed when it ends).
        self._provider_streams: list[AsyncIterator[StepStreamChunk]] = []
        #: The tools that may execute in the current step (the source attempt's, TV-05).
        self.advertised: frozenset[str] | None = None
        #: The successful provider attempts of the current step, in order.
        self._attempts: list[_Attempt] = []

    async def call(self, request: ModelStepRequest) -> CalledModel:
        """around_model_call, outermost first, down to the provider attempt.

        Returns the stream the wrappers returned with the request it answers:
        the effective request of the attempt it came from, as the provider
        received it (after every patch and reasoning pruning).
        """
        self.advertised = None
        self._attempts = []
        if self._lifecycle is None:
            called = await self._attempt(request)
        else:

            async def leaf(effective: Effective | None = None) -> ModelStepStreamResult:
                return await self._attempt(effective.request if effective is not None else request)

            called = await self._lifecycle.around_model_call(request, leaf)
        return self._source_of(called, request)

    def _source_of(self, called: ModelStepStreamResult, request: ModelStepRequest) -> CalledModel:
        """The attempt whose stream ``called`` is; its request and tools are authoritative.

        A stream returned unchanged (or re-wrapped in a new result) is that
        attempt's; with a single successful attempt there is no other source.
        A newly wrapped stream after several successful attempts cannot be
        traced: PAI fails closed and keeps only tools every attempt advertised
        (TV-05), reporting the latest attempt's request narrowed to them, so
        hooks, telemetry and the executor agree on the tool list.
        """
        attempts = self._attempts
        source = next(
            (a for a in attempts if a.result is called or a.result.stream is called.stream),
            attempts[0] if len(attempts) == 1 else None,
        )
        if source is not None:
            self.advertised = source.tools
            return CalledModel(stream=called.stream, request=source.request)
        if not attempts:
            # Answered without a provider call (e.g. a cache hit): nothing was sent.
            return CalledModel(stream=called.stream, request=request)
        allowed = frozenset.intersection(*(a.tools for a in attempts))
        latest = attempts[-1].request
        self.advertised = allowed
        narrowed = replace(latest, tools=[t for t in latest.tools if t.name in allowed])
        return CalledModel(stream=called.stream, request=narrowed)

    async def _attempt(self, request: ModelStepRequest) -> ModelStepStreamResult:
        """One provider attempt: resolves once the stream is constructed (AMC-03)."""
        # The request as sent: the tool list snapshotted when the attempt begins
        # (later mutation of the hook's list cannot widen what may execute, TV-05),
        # and reasoning pruned for the attempt only; history and the hooks that
        # run before the call keep the full context (RSN-04).
        sent = replace(
            request, tools=list(request.tools), messages=prune_reasoning(request.messages)
        )
        stream = await request.model.stream(sent.to_call())
        self._provider_streams.append(stream)
        signals = list(request.attempt_signals)
        if request.timeout is not None:
            signals.append(AbortSignal.timeout(request.timeout))
        if signals:
            stream = _abortable(stream, AbortSignal.any(*signals))
        result = ModelStepStreamResult(stream=stream)
        self._attempts.append(
            _Attempt(result=result, request=sent, tools=frozenset(t.name for t in sent.tools))
        )
        return result

    async def close_streams(self) -> None:
        """Stop every provider attempt of the step (cancel, abort, error, early end)."""
        for provider in self._provider_streams:
            await close_stream(provider)
        self._provider_streams.clear()


def json_call(chunk: StepStreamChunk) -> StepStreamChunk:
    """A tool call with non-JSON input becomes an invalid call without it (TV-02).

    Its input is left out of everything durable (the chunk log and the
    message), so persistence cannot fail; the model sees a tool-input error.
    """
    if not isinstance(chunk, ToolCallChunk):
        return chunk
    try:
        check_strict_json(chunk.input, path="input")
    except InvalidJson as e:
        return chunk.model_copy(
            update={
                "input": None,
                "invalid": True,
                "error_text": f"invalid input for tool {chunk.tool_name}: {e}",
            }
        )
    return chunk


def without_nul(chunk: StepStreamChunk) -> StepStreamChunk:
    """Model text holding U+0000 (which no backend stores) gets U+FFFD in its place.

    A model is outside input like a tool: its stray NUL must not stall the run
    at commit. Only the chunk's own strings are scanned (deltas, ids, error text).
    """
    fields = _FIELDS.get(type(chunk))
    if fields is None:
        # Asked of the class on every chunk, pydantic's model_fields cost more than the scan.
        fields = _FIELDS[type(chunk)] = tuple(type(chunk).model_fields)
    # Nearly every chunk is clean: find that without building the update (0.5 us, not 0.85).
    for name in fields:
        value = getattr(chunk, name)
        if isinstance(value, str) and "\x00" in value:
            break
    else:
        return chunk
    update = {
        name: value.replace("\x00", "\ufffd")
        for name in fields
        if isinstance(value := getattr(chunk, name), str) and "\x00" in value
    }
    return chunk.model_copy(update=update) if update else chunk


#: Chunk class -> its field names.
_FIELDS: dict[type, tuple[str, ...]] = {}


#: Every arm of the canonical chunk union (``StepStreamChunk`` is an annotated union).
_CHUNK_CLASSES: tuple[type, ...] = get_args(get_args(StepStreamChunk)[0])
_CHUNK_CLASS_SET = frozenset(_CHUNK_CLASSES)


def check_chunk(chunk: Any) -> None:
    """The canonical stream's own rules (TSS-02, TSS-05).

    A chunk that passes is an instance of one arm of the chunk union, so the
    event carrying it needs no validation of its own.
    """
    kind = getattr(chunk, "type", None)
    # The exact class first: isinstance against the union's 24 classes asks
    # pydantic's ABC metaclass of each one before the chunk's own.
    if (
        type(chunk) not in _CHUNK_CLASS_SET and not isinstance(chunk, _CHUNK_CLASSES)
    ) or not isinstance(kind, str):
        raise InvalidDecision(
            "transform_step_stream", "transform_step_stream", f"not a step chunk: {chunk!r}"
        )
    if kind in _FRAMING:
        detail = (
            "application data is written through ui_data.write()"
            if kind == "data"
            else f"{kind} chunks are emitted by the runtime"
        )
        raise InvalidDecision("transform_step_stream", "transform_step_stream", detail)
    if problem := missing_text_id(chunk):
        raise InvalidDecision("transform_step_stream", "transform_step_stream", problem)


async def iterate(chunks: list[StepStreamChunk]) -> AsyncIterator[StepStreamChunk]:
    """A fixed list of chunks as a step stream (a hook-authored response)."""
    for chunk in chunks:
        yield chunk


async def close_stream(stream: Any) -> None:
    """Close an async iterator if it can be closed; its errors are not the step's."""
    aclose = getattr(stream, "aclose", None)
    if aclose is not None:
        with contextlib.suppress(Exception):
            await aclose()


async def _abortable(
    stream: AsyncIterator[StepStreamChunk], signal: AbortSignal
) -> AsyncIterator[StepStreamChunk]:
    """The provider stream, stopped when an attempt signal fires (AMC-04)."""
    aborted = asyncio.ensure_future(signal.wait())
    step: asyncio.Future[StepStreamChunk] | None = None
    try:
        while True:
            step = asyncio.ensure_future(anext(stream))
            done, _ = await asyncio.wait({step, aborted}, return_when=asyncio.FIRST_COMPLETED)
            if step in done:
                try:
                    chunk = step.result()
                except StopAsyncIteration:
                    return
                yield chunk
                continue
            raise ModelError(
                f"the model call was aborted by its attempt signal ({signal.reason})",
                reason=signal.reason or "MODEL_CALL_ABORTED",
            )
    finally:
        aborted.cancel()
        # The provider's in-flight read runs in its own task: stop it too, whether
        # the attempt signal fired or the runtime cancelled/stopped the step.
        if step is not None and not step.done():
            step.cancel()
            with contextlib.suppress(BaseException):
                await step
        await close_stream(stream)


__all__ = [
    "CalledModel",
    "ModelCaller",
    "check_chunk",
    "close_stream",
    "iterate",
    "json_call",
    "without_nul",
]
