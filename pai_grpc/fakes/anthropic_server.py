"""A fake Anthropic Messages API on loopback, for driving the real SDK in tests.

``POST /v1/messages`` answers with scripted turns in the real SSE format
(``event:`` / ``data:`` lines over a chunked ``text/event-stream`` body), or
with the complete ``Message`` JSON when the request does not ask to stream::

    async with FakeAnthropic(api_key="test-key") as fake:
        fake.script(http_error(429, "rate_limit_error", "slow down", retry_after=0.001),
                    reply(text_block("Hello")))
        client = anthropic.AsyncAnthropic(api_key="test-key", base_url=fake.base_url)
        ...
        assert len(fake.requests) == 2

Each request consumes the next scripted turn and the last turn repeats; with
nothing scripted the server answers 400 ``invalid_request_error``. Every
request that reaches the server is recorded in :attr:`FakeAnthropic.requests`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import TypeAlias

from pai_grpc.fakes._anthropic_message import message_from_events
from pai_grpc.fakes._anthropic_turns import (
    DEFAULT_DELTA_USAGE,
    DEFAULT_MESSAGE_ID,
    DEFAULT_MODEL,
    DEFAULT_START_USAGE,
    ContentBlock,
    HttpErrorTurn,
    JsonObject,
    SseEvent,
    StreamTurn,
    Turn,
    char_citation,
    disconnect,
    error_body,
    events_turn,
    http_error,
    midstream_error,
    page_citation,
    redacted_thinking_block,
    reply,
    server_tool_result_block,
    server_tool_use_block,
    text_block,
    thinking_block,
    tool_use_block,
    truncated,
    url_citation,
    web_search_result,
    web_search_result_block,
)
from pai_grpc.fakes._http import LAST_CHUNK, chunk, read_request, response_head

__all__ = [
    "DEFAULT_DELTA_USAGE",
    "DEFAULT_MESSAGE_ID",
    "DEFAULT_MODEL",
    "DEFAULT_START_USAGE",
    "ContentBlock",
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
]

# Status of a non-streaming answer to a turn that fails mid-stream.
_ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "rate_limit_error": 429,
    "overloaded_error": 529,
}


@dataclass
class RecordedRequest:
    """A request the fake received, and how its answer went.

    Attributes:
        method: HTTP method.
        path: Request path, e.g. ``/v1/messages``.
        headers: Request headers, names lower-case.
        body: The parsed JSON body (``{}`` when it was not JSON).
        events_sent: SSE events written so far.
        client_closed: The client closed the connection before the answer ended.
        done: Set when the server finished with the request (any way).
        connection: The connection it came on, numbered from 1 in the order
            they were opened (a client's pool reuses them, as with the real API).
    """

    method: str
    path: str
    headers: dict[str, str]
    body: JsonObject
    events_sent: int = 0
    connection: int = 0
    client_closed: bool = False
    done: asyncio.Event = field(default_factory=asyncio.Event, repr=False, compare=False)

    @property
    def stream(self) -> bool:
        """Whether the request asked for a streamed answer."""
        return self.body.get("stream") is True


TurnSource: TypeAlias = Turn | Callable[[RecordedRequest], Turn]


class FakeAnthropic:
    """An asyncio HTTP/1.1 server on ``127.0.0.1:0`` that mimics the Messages API.

    Args:
        api_key: When set, requests must carry it (``x-api-key`` or
            ``Authorization: Bearer``) or get 401 ``authentication_error``.
        host: Interface to listen on.
    """

    def __init__(self, *, api_key: str | None = None, host: str = "127.0.0.1") -> None:
        self._api_key = api_key
        self._host = host
        self._port = 0
        self._server: asyncio.Server | None = None
        self._turns: list[TurnSource] = []
        self._served = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._connections = 0
        self._stopping = False
        self.requests: list[RecordedRequest] = []

    @property
    def base_url(self) -> str:
        """The origin to give the SDK as ``base_url`` (without ``/v1``)."""
        if self._server is None:
            raise RuntimeError("FakeAnthropic is not started")
        return f"http://{self._host}:{self._port}"

    def script(self, *turns: TurnSource) -> None:
        """Answer the next requests with ``turns``, one each; the last one repeats.

        A turn may be a function of the :class:`RecordedRequest`. Scripting
        again starts over with the new turns.
        """
        self._turns = list(turns)
        self._served = 0

    async def start(self) -> None:
        """Start listening."""
        self._stopping = False
        self._server = await asyncio.start_server(self._handle, self._host, 0)
        self._port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Stop listening and drop open connections."""
        if self._server is None:
            return
        self._server.close()
        self._stopping = True
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    async def __aenter__(self) -> FakeAnthropic:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    # --- one connection ------------------------------------------------------

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        # Keep-alive, as the real API: the SDK's pool sends the next request on
        # the same connection; it closes after an aborted answer or a client's
        # ``connection: close``.
        self._connections += 1
        connection = self._connections
        prefix: bytes | None = b""
        try:
            while prefix is not None:
                prefix = await self._one(reader, writer, prefix, connection)
        except asyncio.CancelledError:
            # stop() ends idle keep-alive connections: end quietly (asyncio logs
            # a connection handler that ends cancelled as an error).
            if not self._stopping:
                raise
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
            if task is not None:
                self._tasks.discard(task)

    async def _one(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        prefix: bytes,
        connection: int,
    ) -> bytes | None:
        """Answer one request; the start of the next one, or None when the connection ends."""
        record: RecordedRequest | None = None
        eof: asyncio.Task[bytes] | None = None
        try:
            request = await read_request(reader, prefix)
            if request is None:
                return None
            record = RecordedRequest(
                request.method,
                request.path,
                request.headers,
                _parse_json(request.body),
                connection=connection,
            )
            self.requests.append(record)
            # The client sends nothing while it waits for the answer, so a read
            # that returns tells that it closed the connection.
            eof = asyncio.ensure_future(reader.read(1))
            await self._answer(writer, record, request.body, eof)
            if (
                record.client_closed
                or writer.transport.is_closing()
                or request.headers.get("connection", "").lower() == "close"
            ):
                return None
            # The answer is complete: what the read got (nothing, unless the
            # client already sent its next request) begins the next request.
            eof.cancel()
            # wait(), not await: this task's own cancellation (stop()) must not be swallowed.
            await asyncio.wait({eof})
            if eof.cancelled():
                return b""
            try:
                return eof.result() or None
            except ConnectionError:  # reset after a complete answer
                return None
        except ConnectionError:
            if record is not None:
                record.client_closed = True
            return None
        finally:
            if eof is not None and not eof.done():
                eof.cancel()
                with contextlib.suppress(asyncio.CancelledError, ConnectionError):
                    await eof
            if record is not None:
                record.done.set()

    async def _answer(
        self,
        writer: asyncio.StreamWriter,
        record: RecordedRequest,
        raw_body: bytes,
        eof: asyncio.Task[bytes],
    ) -> None:
        if record.method != "POST" or record.path.split("?")[0] != "/v1/messages":
            return await _send_json(writer, 404, error_body("not_found_error", "Not found"))
        if not self._authorized(record.headers):
            body = error_body("authentication_error", "invalid x-api-key")
            return await _send_json(writer, 401, body)
        problem = _invalid(record.body, raw_body)
        if problem:
            return await _send_json(writer, 400, error_body("invalid_request_error", problem))
        turn = self._next_turn(record)
        if turn is None:
            message = "FakeAnthropic: no turn is scripted"
            return await _send_json(writer, 400, error_body("invalid_request_error", message))
        if not await _pause(turn.headers_delay, eof):
            record.client_closed = True
            return None
        if isinstance(turn, HttpErrorTurn):
            return await _send_json(writer, turn.status, turn.body, list(turn.headers))
        if not record.stream:
            return await _send_unstreamed(writer, turn)
        await self._send_stream(writer, record, turn, eof)
        return None

    def _authorized(self, headers: dict[str, str]) -> bool:
        if self._api_key is None:
            return True
        return (
            headers.get("x-api-key") == self._api_key
            or headers.get("authorization") == f"Bearer {self._api_key}"
        )

    def _next_turn(self, record: RecordedRequest) -> Turn | None:
        if not self._turns:
            return None
        source = self._turns[min(self._served, len(self._turns) - 1)]
        self._served += 1
        return source(record) if callable(source) else source

    async def _send_stream(
        self,
        writer: asyncio.StreamWriter,
        record: RecordedRequest,
        turn: StreamTurn,
        eof: asyncio.Task[bytes],
    ) -> None:
        headers = [
            ("content-type", "text/event-stream; charset=utf-8"),
            ("cache-control", "no-cache"),
            ("request-id", f"req_fake_{len(self.requests)}"),
            ("transfer-encoding", "chunked"),
        ]
        writer.write(response_head(200, headers))
        await writer.drain()
        events = list(turn.sent_events())
        if turn.ending == "error" and turn.error is not None:
            events.append(SseEvent("error", turn.error))
        for number, event in enumerate(events):
            if not await _pause(turn.first_event_delay if number == 0 else turn.delay, eof):
                record.client_closed = True
                return
            writer.write(chunk(event.encode()))
            await writer.drain()
            record.events_sent += 1
        if turn.ending == "disconnect":
            # No terminating chunk: the client sees an incomplete body.
            writer.transport.abort()
            return
        if turn.ending == "stall":
            # No terminating chunk either, and no end: only the client leaving ends it.
            with contextlib.suppress(ConnectionError):
                await eof
            record.client_closed = True
            return
        writer.write(LAST_CHUNK)
        await writer.drain()


async def _pause(seconds: float, eof: asyncio.Task[bytes]) -> bool:
    """Wait ``seconds`` unless the client goes away; ``False`` when it did."""
    if seconds > 0 and not eof.done():
        await asyncio.wait({eof}, timeout=seconds)
    return not eof.done()


async def _send_json(
    writer: asyncio.StreamWriter,
    status: int,
    body: JsonObject,
    headers: list[tuple[str, str]] | None = None,
) -> None:
    data = json.dumps(body).encode()
    head = [
        ("content-type", "application/json"),
        ("content-length", str(len(data))),
        ("request-id", str(body.get("request_id", "req_fake"))),
        *(headers or []),
    ]
    writer.write(response_head(status, head) + data)
    await writer.drain()


async def _send_unstreamed(writer: asyncio.StreamWriter, turn: StreamTurn) -> None:
    if turn.ending == "error" and turn.error is not None:
        status = _ERROR_STATUS.get(str(turn.error["error"]["type"]), 500)
        return await _send_json(writer, status, turn.error)
    if turn.ending in ("truncate", "disconnect"):
        # An unstreamed answer cannot stop half-way: drop the connection.
        writer.transport.abort()
        return None
    return await _send_json(writer, 200, message_from_events(turn.events))


def _parse_json(body: bytes) -> JsonObject:
    try:
        value = json.loads(body) if body else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _invalid(body: JsonObject, raw_body: bytes) -> str | None:
    if not body:
        return "request body must be a JSON object" if raw_body else "request body is empty"
    missing = [name for name in ("model", "max_tokens", "messages") if name not in body]
    return f"{missing[0]}: Field required" if missing else None
