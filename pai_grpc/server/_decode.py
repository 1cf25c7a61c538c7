"""Requests that cannot be stored are answered before a servicer sees them.

grpcio applies a method's ``request_deserializer`` inside its core; when it
raises (corrupt wire format, invalid UTF-8, a ``google.protobuf.Struct``
nested beyond the parser's 100-level limit) the client gets UNKNOWN with the
``DecodeError`` text and no ErrorInfo. :func:`add_guarded` registers a
generated service with every handler's deserializer wrapped: a request that
fails to decode, or whose strings hold U+0000 (which PostgreSQL cannot
store, so no backend accepts it), becomes a :class:`Rejected` sentinel that
the wrapped behaviour answers with a rich INVALID_ARGUMENT status.

The same registration gives the methods in :data:`PRE_ENCODED` a response
serializer that sends ``bytes`` as they are: the StreamRun and SendAndStream
servicers yield responses already in wire form (built around the stored
event), and still may yield message objects.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from pai_grpc import errors
from pai_grpc._wire import abort_with
from pai_grpc.server._errors import to_status

#: Reason of a request whose bytes are not a valid message of the method's type.
MALFORMED_REQUEST = "MALFORMED_REQUEST"
#: Reason of a request holding a character no backend can store (U+0000).
INVALID_CHARACTER = "INVALID_CHARACTER"

_NUL = "\x00"

#: Methods whose servicers may yield responses already serialized (``bytes``).
PRE_ENCODED = frozenset({"/pai.v1.RunService/StreamRun", "/pai.v1.ThreadService/SendAndStream"})


@dataclass(frozen=True)
class Rejected:
    """Stands in for a request that was refused while decoding."""

    status: grpc.Status


def _malformed(type_name: str, exc: BaseException) -> Rejected:
    detail = str(exc) or type(exc).__name__
    return Rejected(
        to_status(
            errors.InvalidArgument(
                f"the request is not a valid {type_name}: {detail}",
                [errors.FieldViolation("request", detail)],
                reason=MALFORMED_REQUEST,
            )
        )
    )


def _nul(field: str, what: str) -> Rejected:
    description = f"{what} contains U+0000 (NUL), which cannot be stored"
    return Rejected(
        to_status(
            errors.InvalidArgument.field(field or "request", description, reason=INVALID_CHARACTER)
        )
    )


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _scan_json(value: Message, path: str) -> Rejected | None:
    """Find NUL in a Struct / Value / ListValue, naming it by JSON path (``metadata.k[0]``)."""
    name = value.DESCRIPTOR.full_name
    if name == "google.protobuf.Struct":
        for key, item in value.fields.items():  # type: ignore[attr-defined]
            if _NUL in key:
                return _nul(path, "an object key")
            found = _scan_json(item, _join(path, key))
            if found:
                return found
        return None
    if name == "google.protobuf.ListValue":
        for i, item in enumerate(value.values):  # type: ignore[attr-defined]
            found = _scan_json(item, f"{path}[{i}]")
            if found:
                return found
        return None
    kind = value.WhichOneof("kind")
    if kind == "string_value":
        return _nul(path, "the string") if _NUL in value.string_value else None  # type: ignore[attr-defined]
    if kind in ("struct_value", "list_value"):
        return _scan_json(getattr(value, kind), path)
    return None


_JSON_TYPES = ("google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue")


def find_nul(message: Message, prefix: str = "") -> Rejected | None:
    """The first string (value or key) of ``message`` holding U+0000, as a rejection."""
    if message.DESCRIPTOR.full_name in _JSON_TYPES:
        return _scan_json(message, prefix)
    for field, value in message.ListFields():
        path = _join(prefix, field.name)
        if field.type == FieldDescriptor.TYPE_STRING:
            items = value if field.is_repeated else [value]
            for i, item in enumerate(items):
                if _NUL in item:
                    where = f"{path}[{i}]" if items is value else path
                    return _nul(where, "the string")
        elif field.type == FieldDescriptor.TYPE_MESSAGE and field.message_type is not None:
            if field.message_type.GetOptions().map_entry:
                found = _scan_map(field, value, path)
            elif field.is_repeated:
                found = next(
                    (f for i, m in enumerate(value) if (f := find_nul(m, f"{path}[{i}]"))), None
                )
            else:
                found = find_nul(value, path)
            if found:
                return found
    return None


def _scan_map(field: FieldDescriptor, value: Any, path: str) -> Rejected | None:
    assert field.message_type is not None  # a map field's entry type
    value_field = field.message_type.fields_by_name["value"]
    for key, item in value.items():
        if isinstance(key, str) and _NUL in key:
            return _nul(path, "a map key")
        where = f"{path}[{key}]"
        if value_field.type == FieldDescriptor.TYPE_MESSAGE:
            found = find_nul(item, where)
            if found:
                return found
        elif isinstance(item, str) and _NUL in item:
            return _nul(where, "the string")
    return None


def _deserializer(inner: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    type_name = getattr(getattr(inner, "__self__", None), "DESCRIPTOR", None)
    name = type_name.full_name if type_name is not None else "request"

    def deserialize(data: bytes) -> Any:
        try:
            request = inner(data)
        except Exception as exc:  # DecodeError, or any parser failure: never UNKNOWN
            return _malformed(name, exc)
        if isinstance(request, Message):
            rejected = find_nul(request)
            if rejected is not None:
                return rejected
        return request

    return deserialize


def _pass_through(serialize: Callable[[Any], bytes]) -> Callable[[Any], bytes]:
    """A response serializer that sends pre-encoded ``bytes`` untouched."""

    def serializer(response: Any) -> bytes:
        return response if isinstance(response, bytes) else serialize(response)

    return serializer


def _guard_handler(handler: Any, method: str) -> Any:
    """The same method handler, answering :class:`Rejected` requests with their status."""
    if handler is None:
        return handler
    if method in PRE_ENCODED and handler.response_serializer is not None:
        handler = handler._replace(response_serializer=_pass_through(handler.response_serializer))
    if handler.request_deserializer is None or handler.request_streaming:
        return handler
    deserializer = _deserializer(handler.request_deserializer)
    if handler.response_streaming:
        behavior = handler.unary_stream

        async def stream(request: Any, context: Any) -> AsyncIterator[Any]:
            if isinstance(request, Rejected):
                await abort_with(context, request.status)
                return
            async for item in behavior(request, context):
                yield item

        return handler._replace(request_deserializer=deserializer, unary_stream=stream)
    unary_behavior = handler.unary_unary

    async def unary(request: Any, context: Any) -> Any:
        if isinstance(request, Rejected):
            await abort_with(context, request.status)
        return await unary_behavior(request, context)

    return handler._replace(request_deserializer=deserializer, unary_unary=unary)


class _GuardedHandler(grpc.GenericRpcHandler):  # type: ignore[misc]
    def __init__(self, inner: grpc.GenericRpcHandler) -> None:
        self._inner = inner

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> Any:
        return _guard_handler(
            self._inner.service(handler_call_details), handler_call_details.method
        )


class _GuardingServer:
    """What a generated ``add_*Servicer_to_server`` sees: registers guarded handlers."""

    def __init__(self, server: grpc.aio.Server) -> None:
        self._server = server

    def add_generic_rpc_handlers(self, handlers: tuple[grpc.GenericRpcHandler, ...]) -> None:
        self._server.add_generic_rpc_handlers(tuple(_GuardedHandler(h) for h in handlers))

    def add_registered_method_handlers(self, service: str, handlers: dict[str, Any]) -> None:
        self._server.add_registered_method_handlers(
            service, {name: _guard_handler(h, f"/{service}/{name}") for name, h in handlers.items()}
        )


def add_guarded(
    add_to_server: Callable[[Any, Any], None], servicer: object, server: grpc.aio.Server
) -> None:
    """Register ``servicer`` with ``add_to_server``: rich statuses, pre-encoded responses.

    Undecodable requests get a rich status, and the :data:`PRE_ENCODED`
    methods a pass-through response serializer.
    """
    add_to_server(servicer, _GuardingServer(server))
