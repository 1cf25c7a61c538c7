"""The Anthropic provider: :class:`AnthropicModel` on the official ``anthropic`` SDK."""

from __future__ import annotations

import asyncio
import collections
import json
import os
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any, cast

import anthropic
import httpx2
from anthropic.types import (
    MessageParam,
    MetadataParam,
    RawMessageStreamEvent,
    TextBlockParam,
    ThinkingConfigParam,
    ToolChoiceParam,
    ToolUnionParam,
)

from pai_grpc.domain import StepStreamChunk
from pai_grpc.errors import ModelError
from pai_grpc.models._protocol import ModelCall
from pai_grpc.models.anthropic._errors import (
    PROVIDER_AUTH_ERROR,
    stream_truncated,
    to_model_error,
)
from pai_grpc.models.anthropic._request import MessagesRequest, build_request
from pai_grpc.models.anthropic._stream import StreamMapper

# Errors that may surface while the body is read; the SDK only converts the
# errors of sending the request.
_STREAM_ERRORS = (anthropic.AnthropicError, httpx2.HTTPError, json.JSONDecodeError)
#: How long a finished step waits for the end of its response body (see
#: AnthropicStepStream._release).
RELEASE_SECONDS = 1.0


class AnthropicModel:
    """A :class:`~pai_grpc.models.LanguageModel` backed by the Anthropic Messages API.

    Each :meth:`stream` call sends one streaming ``messages.create`` request.
    The SDK retries failed attempts (``max_retries``) only until the response
    headers arrive; once the stream is returned nothing is retried.

    Args:
        model_id: The Anthropic model, e.g. ``claude-sonnet-4-6``.
        client: A ready client; when given, the other arguments must be left
            at their defaults and the caller keeps ownership of the client.
        api_key: The API key (the SDK falls back to ``ANTHROPIC_API_KEY``).
        base_url: The API origin without ``/v1`` (the SDK falls back to
            ``ANTHROPIC_BASE_URL``).
        max_retries: Retries of a failed request before its stream starts.
        timeout: Seconds before a request, or a pause in the stream, times out.
    """

    def __init__(
        self,
        model_id: str,
        *,
        client: anthropic.AsyncAnthropic | None = None,
        api_key: str | None = None,
        base_url: str | None = None,
        max_retries: int = 2,
        timeout: float = 600.0,
    ) -> None:
        if client is not None and (api_key is not None or base_url is not None):
            raise ValueError("pass either client or api_key/base_url, not both")
        self._model_id = model_id
        self._owns_client = client is None
        self._client = client or anthropic.AsyncAnthropic(
            api_key=api_key, base_url=base_url, max_retries=max_retries, timeout=timeout
        )

    @property
    def provider(self) -> str:
        """Provider name: ``anthropic``."""
        return "anthropic"

    @property
    def model_id(self) -> str:
        """The Anthropic model id."""
        return self._model_id

    @property
    def client(self) -> anthropic.AsyncAnthropic:
        """The SDK client requests go through."""
        return self._client

    async def stream(self, call: ModelCall) -> AnthropicStepStream:
        """Send the request; resolve once the response headers arrived.

        Raises:
            ModelError: The request failed (after the SDK's retries) or the
                call holds content the API cannot take.
        """
        request = build_request(self._model_id, call)
        client = self._client
        if request.max_retries is not None:
            client = client.with_options(max_retries=request.max_retries)
        try:
            events = await _create(client, request)
        except anthropic.AnthropicError as e:
            raise to_model_error(e) from e
        return AnthropicStepStream(events)

    async def aclose(self) -> None:
        """Close the client if this model created it."""
        if self._owns_client:
            await self._client.close()

    async def __aenter__(self) -> AnthropicModel:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


async def _create(
    client: anthropic.AsyncAnthropic, request: MessagesRequest
) -> anthropic.AsyncStream[RawMessageStreamEvent]:
    # The request is built as plain JSON (provider tools and options pass
    # through unchanged), so it is cast to the SDK's TypedDicts only here.
    omit = anthropic.omit
    return await client.messages.create(
        model=request.model,
        max_tokens=request.max_tokens,
        messages=cast("list[MessageParam]", request.messages),
        system=cast("list[TextBlockParam]", request.system) if request.system else omit,
        tools=cast("list[ToolUnionParam]", request.tools) if request.tools else omit,
        tool_choice=(
            cast("ToolChoiceParam", request.tool_choice)
            if request.tool_choice is not None
            else omit
        ),
        thinking=(
            cast("ThinkingConfigParam", request.thinking) if request.thinking is not None else omit
        ),
        metadata=cast("MetadataParam", request.metadata) if request.metadata is not None else omit,
        stop_sequences=request.stop_sequences if request.stop_sequences is not None else omit,
        extra_body=request.extra_body or None,
        stream=True,
    )


class AnthropicStepStream(AsyncIterator[StepStreamChunk]):
    """The chunks of one step, read from an open Messages API stream.

    Ends after the ``finish-step`` chunk of ``message_stop``. Errors while
    reading raise :class:`ModelError`; a stream that ends without
    ``message_stop`` raises ``PROVIDER_STREAM_TRUNCATED``. :meth:`aclose`
    aborts the HTTP response (also before the first chunk was read); so do
    errors and cancellation while reading.
    """

    def __init__(self, events: anthropic.AsyncStream[RawMessageStreamEvent]) -> None:
        self._events = events
        self._mapper = StreamMapper()
        self._pending: collections.deque[StepStreamChunk] = collections.deque()
        self._closed = False

    def __aiter__(self) -> AnthropicStepStream:
        return self

    async def __anext__(self) -> StepStreamChunk:
        while not self._pending:
            if self._closed:
                raise StopAsyncIteration
            try:
                event = await self._events.__anext__()
            except StopAsyncIteration:
                await self.aclose()
                raise stream_truncated() from None
            except _STREAM_ERRORS as e:
                await self.aclose()
                raise to_model_error(e) from e
            except asyncio.CancelledError:
                # A half-read stream cannot be resumed: free the connection.
                await self.aclose()
                raise
            self._pending.extend(self._mapper.feed(_event_json(event)))
            if self._mapper.finished:
                # Nothing follows message_stop: release the connection now
                # rather than when the consumer asks for the next chunk.
                await self._release()
        return self._pending.popleft()

    async def _release(self) -> None:
        """After ``message_stop``: read the end of the body, then close.

        A response read to its end hands its connection back to the client's
        pool; closed before, the connection is dropped and the next step pays
        a new TCP and TLS handshake. The end normally arrives with
        ``message_stop``; one that does not within :data:`RELEASE_SECONDS`
        (or anything after it failing) costs the connection, not the step.
        """
        try:
            async with asyncio.timeout(RELEASE_SECONDS):
                async for _ in self._events:
                    pass
        except (TimeoutError, *_STREAM_ERRORS):
            pass
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        """Abort the HTTP response; later iteration ends the stream."""
        if not self._closed:
            self._closed = True
            await self._events.close()

    async def __aenter__(self) -> AnthropicStepStream:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


def _event_json(event: Any) -> dict[str, Any]:
    # to_dict gives the event as the API sent it; warnings off because loosely
    # built (unknown) events do not match their declared field types.
    if isinstance(event, anthropic.BaseModel):
        return event.to_dict(mode="json", warnings=False)
    return event if isinstance(event, dict) else {}


def anthropic_model_from_env(
    model_id: str, *, max_retries: int = 2, timeout: float = 600.0
) -> AnthropicModel:
    """An :class:`AnthropicModel` configured from ``ANTHROPIC_API_KEY`` / ``ANTHROPIC_BASE_URL``.

    Raises:
        ModelError: ``PROVIDER_AUTH_ERROR`` when ``ANTHROPIC_API_KEY`` is not set.
    """
    api_key = os.environ.get("ANTHROPIC_API_KEY")
    if not api_key:
        raise ModelError("ANTHROPIC_API_KEY is not set", reason=PROVIDER_AUTH_ERROR)
    return AnthropicModel(
        model_id,
        api_key=api_key,
        base_url=os.environ.get("ANTHROPIC_BASE_URL") or None,
        max_retries=max_retries,
        timeout=timeout,
    )
