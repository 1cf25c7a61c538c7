"""The HTTP port: the API over Connect and gRPC-Web, and the web console.

One ASGI application, served by hypercorn in the server's own event loop
(so it shares the one runtime, store and runner with the gRPC port):

- ``/pai.v1.<Service>/<Method>``: the Connect protocol (JSON or binary
  protobuf, unary and server streaming) and gRPC-Web.
- ``/console/``: the static console (plain HTML and ES modules) that calls
  the Connect JSON protocol with ``fetch``.
- ``OPTIONS`` preflights and ``Access-Control-*`` headers only for the origins
  listed in ``[http] cors_origins`` (the console is same-origin and needs none).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import mimetypes
import socket
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from pathlib import Path
from typing import Any

from connectrpc.server import ConnectASGIApplication

log = logging.getLogger("pai_grpc.http")

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

CONSOLE_DIR = Path(__file__).resolve().parent.parent / "console"
CONSOLE_PATH = "/console/"
_ALLOW_HEADERS = (
    "authorization, content-type, connect-protocol-version, connect-timeout-ms, "
    "grpc-timeout, x-grpc-web, x-user-agent"
)
_EXPOSE_HEADERS = "grpc-status, grpc-message, grpc-status-details-bin"
#: Console pages must not be framed or load scripts from elsewhere (a pasted
#: token lives in the page's sessionStorage).
_CONSOLE_HEADERS = [
    (b"content-security-policy", b"default-src 'self'; frame-ancestors 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"cache-control", b"no-cache"),
]


def _console_files() -> dict[str, Path]:
    """The console's files by URL path, fixed at start (no path ever reaches the disk)."""
    if not CONSOLE_DIR.is_dir():
        return {}
    files = {
        CONSOLE_PATH + p.name: p
        for p in CONSOLE_DIR.iterdir()
        if p.is_file() and p.suffix in (".html", ".js", ".css")
    }
    if CONSOLE_PATH + "index.html" in files:
        files[CONSOLE_PATH] = files[CONSOLE_PATH + "index.html"]
    return files


async def _respond(
    send: Send, status: int, body: bytes, headers: Iterable[tuple[bytes, bytes]] = ()
) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-length", str(len(body)).encode()), *headers],
        }
    )
    await send({"type": "http.response.body", "body": body})


class HttpApp:
    """The ASGI application of the HTTP port (routing, CORS, console files)."""

    def __init__(
        self,
        services: list[ConnectASGIApplication[Any]],
        *,
        cors_origins: Iterable[str] = (),
        console: bool = True,
    ) -> None:
        self._services = {app.path + "/": app for app in services}
        self._origins = frozenset(cors_origins)
        self._console = _console_files() if console else {}
        self._calls: set[asyncio.Task[Any]] = set()

    def cancel_calls(self) -> list[asyncio.Task[Any]]:
        """Cancel the API calls in flight (a drain's end); return their tasks.

        A cancelled stream still ends with a Connect end frame (code
        ``canceled``), so its client resumes after the last seq it received.
        """
        calls = list(self._calls)
        for task in calls:
            task.cancel()
        return calls

    def _cors(self, scope: Scope) -> list[tuple[bytes, bytes]]:
        origin = next((v for k, v in scope.get("headers", ()) if k == b"origin"), None)
        if origin is None or not ({"*", origin.decode("latin-1")} & self._origins):
            return []
        return [
            (b"access-control-allow-origin", origin),
            (b"access-control-expose-headers", _EXPOSE_HEADERS.encode()),
            (b"vary", b"origin"),
        ]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Route one ASGI call."""
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        path: str = scope["path"]
        cors = self._cors(scope)
        if scope["method"] == "OPTIONS":
            if not cors:
                await _respond(send, 405, b"")
                return
            await _respond(
                send,
                204,
                b"",
                [
                    *cors,
                    (b"access-control-allow-methods", b"POST, GET, OPTIONS"),
                    (b"access-control-allow-headers", _ALLOW_HEADERS.encode()),
                    (b"access-control-max-age", b"600"),
                ],
            )
            return
        service = self._services.get(path[: path.rfind("/") + 1]) if path.count("/") == 2 else None
        if service is not None:
            task = asyncio.current_task()
            assert task is not None
            self._calls.add(task)
            try:
                await service(scope, receive, _with_headers(send, cors) if cors else send)
            finally:
                self._calls.discard(task)
            return
        if path in ("/", "/console"):
            await _respond(send, 308, b"", [(b"location", CONSOLE_PATH.encode())])
            return
        file = self._console.get(path)
        if file is None or scope["method"] not in ("GET", "HEAD"):
            await _respond(send, 404, b"not found", [(b"content-type", b"text/plain")])
            return
        kind = mimetypes.guess_type(file.name)[0] or "application/octet-stream"
        body = await asyncio.to_thread(file.read_bytes)
        await _respond(
            send,
            200,
            body if scope["method"] == "GET" else b"",
            [(b"content-type", f"{kind}; charset=utf-8".encode()), *_CONSOLE_HEADERS],
        )

    @staticmethod
    async def _lifespan(receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return


def _with_headers(send: Send, extra: list[tuple[bytes, bytes]]) -> Send:
    async def wrapped(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", ()), *extra]}
        await send(message)

    return wrapped


def _bind(address: str) -> socket.socket:
    """A listening socket on ``HOST:PORT`` (port 0 picks a free one)."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, int(port)))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


class HttpServer:
    """Serves an ASGI application with hypercorn inside the running event loop.

    The port is bound at construction, so an address that cannot be bound
    fails before anything else of the process starts.

    Raises:
        OSError: the address cannot be bound.
    """

    def __init__(
        self,
        address: str,
        *,
        cors_origins: Iterable[str] = (),
        console: bool = True,
        tls: Any = None,
    ) -> None:
        self._cors_origins = list(cors_origins)
        self._console = console
        self._app: HttpApp | None = None
        self._tls = tls
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._sock: socket.socket | None = _bind(address)
        self.port: int = self._sock.getsockname()[1]

    def close(self) -> None:
        """Release the port of a server that was never started."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def cancel_calls(self) -> list[asyncio.Task[Any]]:
        """End the API calls in flight now (streams end with ``canceled``)."""
        return self._app.cancel_calls() if self._app is not None else []

    def serve(self, services: list[ConnectASGIApplication[Any]]) -> None:
        """The API services this port serves (before :meth:`start`)."""
        self._app = HttpApp(services, cors_origins=self._cors_origins, console=self._console)

    async def start(self) -> int:
        """Start serving on the bound port; return it."""
        from hypercorn.asyncio import serve
        from hypercorn.config import Config

        sock, self._sock = self._sock, None
        assert sock is not None, "started twice"
        assert self._app is not None, "serve() names the services first"
        config = Config()
        # hypercorn owns the descriptor from here on (and closes it at shutdown).
        config.bind = [f"fd://{sock.detach()}"]
        config.accesslog = None
        config.errorlog = log
        config.graceful_timeout = 1.0
        if self._tls is not None:
            config.certfile = self._tls.cert_file
            config.keyfile = self._tls.key_file
            if self._tls.client_ca_file:
                import ssl

                config.ca_certs = self._tls.client_ca_file
                config.verify_mode = (
                    ssl.CERT_REQUIRED if self._tls.require_client_cert else ssl.CERT_OPTIONAL
                )
        self._task = asyncio.create_task(
            serve(self._app, config, shutdown_trigger=self._stop.wait),  # type: ignore[arg-type]
            name="http port",
        )
        return self.port

    async def stop(self, timeout: float = 2.0) -> None:
        """End the calls still open, then stop serving (within ``timeout`` seconds).

        The gRPC port has drained by now (runs finished or handed back), so
        what is left are streams of waiting runs and watches: they end with
        ``canceled`` and their clients resume elsewhere. Ending them here,
        before the server closes its connections, lets every connection close
        on its own instead of being cut.
        """
        self.close()
        if self._task is None:
            return
        calls = self.cancel_calls()
        if calls:  # their end frames go out before the connections close
            await asyncio.wait(calls, timeout=timeout)
        self._stop.set()
        try:
            await asyncio.wait_for(asyncio.shield(self._task), timeout)
        except TimeoutError:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task


__all__ = ["CONSOLE_DIR", "HttpApp", "HttpServer"]
