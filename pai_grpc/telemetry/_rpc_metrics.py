"""A grpc.aio server interceptor recording RPC durations and open streams.

It records the OpenTelemetry semantic convention ``rpc.server.duration``
(seconds, by ``rpc.service``, ``rpc.method`` and ``rpc.grpc.status_code``),
exported to Prometheus as ``rpc_server_duration_seconds``, and counts open
StreamRun / WatchThread calls in ``pai.active_streams``. Only registered
methods are recorded, so an unknown method name cannot add series.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from opentelemetry import metrics

from pai_grpc.telemetry._core import Telemetry
from pai_grpc.telemetry._metrics import Metrics, metrics_for

__all__ = ["RpcMetricsInterceptor", "rpc_interceptors"]

#: The server-streaming calls that follow a run or a thread live.
STREAM_METHODS = frozenset({"/pai.v1.RunService/StreamRun", "/pai.v1.ThreadService/WatchThread"})

Continuation = Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler | None]]


def _code(context: Any, error: BaseException | None) -> int:
    """The status code the call ended with."""
    if isinstance(error, asyncio.CancelledError):
        return int(grpc.StatusCode.CANCELLED.value[0])
    code = context.code()
    if isinstance(code, grpc.StatusCode):
        return int(code.value[0])
    if isinstance(code, int):
        return code
    if error is not None and not isinstance(error, grpc.aio.AbortError):
        return int(grpc.StatusCode.UNKNOWN.value[0])
    return int(grpc.StatusCode.OK.value[0])


class RpcMetricsInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Times every registered RPC of the server it is installed on."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics
        metrics.active_streams.add(0)  # the gauge exists before any stream
        #: method -> (its handler, the wrapped one): wrapped once, not per call.
        self._wrapped: dict[str, tuple[Any, Any]] = {}

    async def intercept_service(
        self, continuation: Continuation, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler | None:
        """Wrap the method's handler (its behaviour is unchanged)."""
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        full = handler_call_details.method
        cached = self._wrapped.get(full)
        if cached is not None and cached[0] is handler:
            return cached[1]
        wrapped = self._wrap(full, handler)
        self._wrapped[full] = (handler, wrapped)
        return wrapped

    def _wrap(self, full: str, handler: Any) -> Any:
        service, _, method = full.lstrip("/").rpartition("/")
        duration = self._metrics.rpc_server_duration
        streams = self._metrics.active_streams if full in STREAM_METHODS else None
        by_code: dict[int, dict[str, str | int]] = {}

        def done(started: float, context: Any, error: BaseException | None) -> None:
            code = _code(context, error)
            attributes = by_code.get(code)
            if attributes is None:
                attributes = by_code[code] = {
                    "rpc.system": "grpc",
                    "rpc.service": service,
                    "rpc.method": method,
                    "rpc.grpc.status_code": code,
                }
            duration.record(time.perf_counter() - started, attributes)

        if handler.response_streaming:
            inner_stream = handler.unary_stream or handler.stream_stream

            async def streaming(request: Any, context: Any) -> AsyncIterator[Any]:
                started = time.perf_counter()
                error: BaseException | None = None
                if streams is not None:
                    streams.add(1)
                try:
                    async for response in inner_stream(request, context):
                        yield response
                except BaseException as e:
                    error = e
                    raise
                finally:
                    if streams is not None:
                        streams.add(-1)
                    done(started, context, error)

            async def writing(request: Any, context: Any) -> None:
                # A handler that writes with context.write() rather than yielding.
                started = time.perf_counter()
                error: BaseException | None = None
                if streams is not None:
                    streams.add(1)
                try:
                    await inner_stream(request, context)
                except BaseException as e:
                    error = e
                    raise
                finally:
                    if streams is not None:
                        streams.add(-1)
                    done(started, context, error)

            wrapped = streaming if inspect.isasyncgenfunction(inner_stream) else writing
            if handler.unary_stream is not None:
                return grpc.unary_stream_rpc_method_handler(
                    wrapped,
                    request_deserializer=handler.request_deserializer,
                    response_serializer=handler.response_serializer,
                )
            return grpc.stream_stream_rpc_method_handler(
                wrapped,
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )

        inner_unary = handler.unary_unary or handler.stream_unary

        async def unary(request: Any, context: Any) -> Any:
            started = time.perf_counter()
            error: BaseException | None = None
            try:
                return await inner_unary(request, context)
            except BaseException as e:
                error = e
                raise
            finally:
                done(started, context, error)

        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                unary,
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return grpc.stream_unary_rpc_method_handler(
            unary,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )


def rpc_interceptors(telemetry: Telemetry) -> list[grpc.aio.ServerInterceptor]:
    """The metric interceptors of a server (none when metrics go nowhere)."""
    if isinstance(telemetry.meter_provider, metrics.NoOpMeterProvider):
        return []
    return [RpcMetricsInterceptor(metrics_for(telemetry))]
