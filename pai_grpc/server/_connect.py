"""The pai.v1 services over Connect and gRPC-Web: the gRPC servicers, adapted.

Each Connect method calls the very servicer method the gRPC port calls, with
a :class:`CallContext` standing in for ``grpc.aio.ServicerContext``. So the
scope (the same :class:`ScopeResolver` reads the ``authorization`` header),
the validation, the limits and the errors are the gRPC port's, not a copy:
the servicer's guard ends a failed call with ``abort_with_status`` and the
context raises it as a :class:`ConnectError` with the same code, message and
details (ErrorInfo, RetryInfo, BadRequest as ``google.protobuf.Any``).
"""

from __future__ import annotations

import contextlib
import ipaddress
import re
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from typing import Any, NoReturn, cast

import grpc
from connectrpc.code import Code
from connectrpc.errors import ConnectError, ErrorDetail
from connectrpc.server import ConnectASGIApplication
from google.protobuf import descriptor_pool, message_factory
from google.rpc import status_pb2
from protobuf.wkt import Any as WireAny

from pai.v1 import admin_service_connect, run_service_connect, thread_service_connect
from pai_grpc.server._admin import AdminService
from pai_grpc.server._decode import PRE_ENCODED
from pai_grpc.server._runs import RunService
from pai_grpc.server._threads import ThreadService

#: The trailing metadata key of a rich status (google.rpc.Status, serialized).
STATUS_DETAILS_KEY = "grpc-status-details-bin"
#: Request headers that are transport framing, not call metadata.
_TRANSPORT_HEADERS = frozenset(
    {"content-type", "content-length", "connect-protocol-version", "connect-timeout-ms", "host"}
)


def connect_error(status: Any) -> ConnectError:
    """The Connect error of a ``grpc.Status``: same code, message and rich details."""
    code = status.code if isinstance(status.code, grpc.StatusCode) else grpc.StatusCode.UNKNOWN
    details: list[ErrorDetail] = []
    for key, value in status.trailing_metadata or ():
        if key == STATUS_DETAILS_KEY:
            rich = status_pb2.Status.FromString(value)
            details = [
                ErrorDetail(WireAny(type_url=d.type_url, value=d.value)) for d in rich.details
            ]
    return ConnectError(Code[code.name], status.details or "", details)


def _peer(client_address: str | None) -> str:
    """A gRPC-style peer string (``ipv4:1.2.3.4:5``) of an HTTP client address."""
    if not client_address:
        return ""
    host, _, port = client_address.rpartition(":")
    try:
        ip = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return client_address
    return f"ipv4:{ip}:{port}" if ip.version == 4 else f"ipv6:[{ip}]:{port}"


class CallContext:
    """What the servicers use of ``grpc.aio.ServicerContext``, for one HTTP call.

    The metadata is the request's headers (lower-case, as gRPC has them), so
    ``authorization: Bearer …`` reaches the same identity sources. There is no
    TLS client certificate here (``auth_context`` is empty): mTLS identities
    are a gRPC-port feature.
    """

    def __init__(self, headers: Mapping[str, str], client_address: str | None) -> None:
        self._metadata = tuple(
            (name.lower(), value)
            for name, value in headers.items()
            if name.lower() not in _TRANSPORT_HEADERS
        )
        self._peer = _peer(client_address)
        self._code: Any = None

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        """The request headers as gRPC metadata."""
        return self._metadata

    def peer(self) -> str:
        """The client's address (``ipv4:…`` / ``ipv6:[…]:…``)."""
        return self._peer

    def auth_context(self) -> dict[str, list[bytes]]:
        """No transport identity on the HTTP port."""
        return {}

    def set_code(self, code: Any) -> None:
        """Remember the status code (the guard sets it before aborting)."""
        self._code = code

    def code(self) -> Any:
        """The status code set so far (None: OK)."""
        return self._code

    async def abort_with_status(self, status: Any) -> NoReturn:
        """End the call: raise the status as a Connect error."""
        raise connect_error(status)

    async def abort(self, code: Any, details: str = "") -> NoReturn:
        """End the call with a plain status."""
        raise ConnectError(Code[code.name], details)


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


async def _messages(
    responses: AsyncGenerator[Any, None], parse: Callable[[bytes], Any]
) -> AsyncIterator[Any]:
    """A servicer's stream with pre-encoded responses (``bytes``) parsed into messages."""
    async with contextlib.aclosing(responses) as stream:
        async for response in stream:
            yield parse(response) if isinstance(response, bytes) else response


class ConnectAdapter:
    """One servicer exposed with the Connect service Protocol's snake_case methods.

    ``get_run(request, ctx)`` calls ``servicer.GetRun(request, CallContext)``;
    a server-streaming method returns the servicer's async iterator, with the
    responses it pre-encoded for the gRPC port (StreamRun) parsed back into
    messages, which the Connect codecs (JSON or binary) serialize themselves.
    """

    def __init__(self, servicer: Any, service_name: str) -> None:
        service = descriptor_pool.Default().FindServiceByName(service_name)
        self._methods: dict[str, Callable[..., Any]] = {
            _snake(m.name): getattr(servicer, m.name) for m in service.methods
        }
        self._parsers: dict[str, Callable[[bytes], Any]] = {
            _snake(m.name): message_factory.GetMessageClass(m.output_type).FromString
            for m in service.methods
            if f"/{service_name}/{m.name}" in PRE_ENCODED
        }

    def __getattr__(self, name: str) -> Callable[..., Any]:
        try:
            method = self._methods[name]
        except KeyError:
            raise AttributeError(name) from None

        parse = self._parsers.get(name)

        def call(request: Any, ctx: Any) -> Any:
            out = method(request, CallContext(ctx.request_headers, ctx.client_address))
            return out if parse is None else _messages(out, parse)

        return call


def connect_applications(
    threads: ThreadService, runs: RunService, admin: AdminService
) -> list[ConnectASGIApplication[Any]]:
    """The Connect/gRPC-Web ASGI applications of the three API services."""
    return [
        thread_service_connect.ThreadServiceASGIApplication(
            cast(Any, ConnectAdapter(threads, "pai.v1.ThreadService"))
        ),
        run_service_connect.RunServiceASGIApplication(
            cast(Any, ConnectAdapter(runs, "pai.v1.RunService"))
        ),
        admin_service_connect.AdminServiceASGIApplication(
            cast(Any, ConnectAdapter(admin, "pai.v1.AdminService"))
        ),
    ]


__all__ = [
    "CallContext",
    "ConnectAdapter",
    "connect_applications",
    "connect_error",
]
