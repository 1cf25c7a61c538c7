"""Shared fixtures: storage URLs, in-process servers, rich-status helpers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from pai_grpc.testing import InProcessServer, serve_in_process


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A fresh SQLite database file per test."""
    return f"sqlite:///{tmp_path / 'pai.db'}"


@pytest.fixture
async def server(sqlite_url: str) -> AsyncIterator[InProcessServer]:
    """An in-process server with the offline model (no delays)."""
    async with serve_in_process(sqlite_url) as srv:
        yield srv


def rich_status(err: grpc.aio.AioRpcError) -> tuple[grpc.StatusCode, str, list[tuple[str, str]]]:
    """(code, ErrorInfo.reason, [(field, description)...]) of a failed call."""
    status = rpc_status.from_call(err)  # type: ignore[arg-type]
    assert status is not None, f"no rich status on {err.code()}: {err.details()}"
    reason = ""
    violations: list[tuple[str, str]] = []
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            assert info.domain == "pai.v1"
            reason = info.reason
        elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            violations += [(v.field, v.description) for v in bad.field_violations]
    assert reason, "every error carries ErrorInfo"
    return err.code(), reason, violations
