"""Just enough HTTP/1.1 for the fakes: read a request, write a response (keep-alive)."""

from __future__ import annotations

import asyncio
import http
from dataclasses import dataclass

#: Reason phrases the standard library does not know.
_EXTRA_PHRASES = {529: "Overloaded"}
_MAX_HEAD = 64 * 1024
LAST_CHUNK = b"0\r\n\r\n"


@dataclass(frozen=True)
class HttpRequest:
    """One parsed request; header names are lower-case."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes


async def read_request(reader: asyncio.StreamReader, prefix: bytes = b"") -> HttpRequest | None:
    """Read one request (``Content-Length`` body); ``None`` when the peer sent none.

    ``prefix``: its first bytes, already read from ``reader``.
    """
    try:
        head = prefix + await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        return None
    if len(head) > _MAX_HEAD:
        return None
    request_line, *header_lines = head.decode("latin-1").split("\r\n")
    method, path, _version = [*request_line.split(" ", 2), "", ""][:3]
    headers: dict[str, str] = {}
    for line in header_lines:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0") or "0")
    try:
        body = await reader.readexactly(length) if length else b""
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    return HttpRequest(method, path, headers, body)


def response_head(status: int, headers: list[tuple[str, str]]) -> bytes:
    """The status line and headers of a response (the connection stays open after it)."""
    try:
        phrase = http.HTTPStatus(status).phrase
    except ValueError:
        phrase = _EXTRA_PHRASES.get(status, "Unknown")
    lines = [f"HTTP/1.1 {status} {phrase}"]
    lines += [f"{name}: {value}" for name, value in [*headers, ("connection", "keep-alive")]]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def chunk(data: bytes) -> bytes:
    """``data`` as one chunk of a ``transfer-encoding: chunked`` body."""
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"
