"""Helpers of the identity tests: config files, signed and forged tokens, refused calls."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
import jwt

from pai.v1 import admin_service_pb2 as apb
from pai.v1 import admin_service_pb2_grpc
from pai.v1 import thread_service_pb2 as tpb
from pai_grpc._config_file import ConfigFile, load_config_file
from pai_grpc.testing import InProcessServer, serve_in_process
from tests.conftest import rich_status

ISSUER = "https://issuer.example"
AUDIENCE = "pai"

Metadata = tuple[tuple[str, str], ...]


def bearer(token: str) -> Metadata:
    """``authorization: Bearer <token>`` metadata."""
    return (("authorization", f"Bearer {token}"),)


def claims(**overrides: Any) -> dict[str, Any]:
    """Valid claims for scope ``tenant-a``; a None override drops that claim."""
    now = int(time.time())
    base: dict[str, Any] = {
        "iss": ISSUER,
        "aud": AUDIENCE,
        "sub": "alice",
        "iat": now,
        "exp": now + 300,
        "pai_scope": "tenant-a",
    }
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not None}


def sign(key: Any, kid: str | None, alg: str = "RS256", **overrides: Any) -> str:
    """A token signed with ``key`` (a private key or an HMAC secret)."""
    headers = {"kid": kid} if kid else None
    return jwt.encode(claims(**overrides), key, algorithm=alg, headers=headers)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def forge(header: dict[str, Any], payload: dict[str, Any], secret: bytes | None) -> str:
    """A token PyJWT would refuse to make: ``alg=none``, or HMAC over an arbitrary secret."""
    signing_input = _b64(json.dumps(header).encode()) + "." + _b64(json.dumps(payload).encode())
    signature = (
        b"" if secret is None else hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
    )
    return signing_input + "." + _b64(signature)


def config_file(path: Path, text: str) -> ConfigFile:
    """The TOML ``text`` written to ``path`` and read back as the service reads it."""
    path.write_text(text)
    return load_config_file(path)


@asynccontextmanager
async def serve_with_config(
    database_url: str, config: ConfigFile, **settings: Any
) -> AsyncIterator[InProcessServer]:
    """An in-process server whose ``[auth]`` (and the rest) comes from ``config``."""
    async with serve_in_process(database_url, file=config, **settings) as srv:
        yield srv


async def refused(call: Any) -> tuple[grpc.StatusCode, str, str]:
    """(code, ErrorInfo.reason, details) of a call that must fail."""
    try:
        await call
    except grpc.aio.AioRpcError as e:
        code, reason, _ = rich_status(e)
        return code, reason, e.details() or ""
    raise AssertionError("the call succeeded")


async def create_thread(srv: InProcessServer, metadata: Metadata) -> str:
    """A new thread's id, created by the caller of ``metadata``."""
    response = await srv.threads.CreateThread(tpb.CreateThreadRequest(), metadata=metadata)
    return str(response.thread.id)


async def listed(srv: InProcessServer, metadata: Metadata) -> list[str]:
    """The ids of the threads the caller of ``metadata`` sees."""
    response = await srv.threads.ListThreads(tpb.ListThreadsRequest(), metadata=metadata)
    return [str(t.id) for t in response.threads]


def private_metadata(channel: grpc.aio.Channel, thread_id: str, metadata: Metadata) -> Any:
    """An AdminService call (GetThreadPrivateMetadata) as the caller of ``metadata``."""
    stub = admin_service_pb2_grpc.AdminServiceStub(channel)
    return stub.GetThreadPrivateMetadata(
        apb.GetThreadPrivateMetadataRequest(thread_id=thread_id), metadata=metadata
    )
