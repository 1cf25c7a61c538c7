"""Shared fixtures: storage URLs, in-process servers, rich-status helpers."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from pathlib import Path

import asyncpg
import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from pai_grpc.testing import InProcessServer, serve_in_process
from storage import Store, upgrade

#: The PostgreSQL server the suite uses (database `test`, trust auth).
POSTGRES_URL = os.environ.get("PAI_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
_pg_state: dict[str, str | None] = {}


def _asyncpg_dsn(url: str) -> str:
    return url.replace("postgresql+asyncpg://", "postgresql://")


def postgres_problem() -> str | None:
    """Why PostgreSQL is unusable (``None`` when it answers). Checked once per session."""
    if "problem" not in _pg_state:

        async def probe() -> None:
            conn = await asyncpg.connect(_asyncpg_dsn(POSTGRES_URL), timeout=3)
            await conn.close()

        try:
            # A private thread: this may be asked from inside a running event loop.
            with ThreadPoolExecutor(1) as pool:
                pool.submit(asyncio.run, probe()).result()
            _pg_state["problem"] = None
        except Exception as e:  # any failure to connect means "unreachable"
            _pg_state["problem"] = f"{type(e).__name__}: {e}"
    return _pg_state["problem"]


def require_postgres() -> None:
    """Fail in CI, skip loudly elsewhere, when PostgreSQL is unreachable."""
    problem = postgres_problem()
    if problem is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"PostgreSQL at {POSTGRES_URL} is unreachable in CI: {problem}")
    pytest.skip(f"PostgreSQL at {POSTGRES_URL} is UNREACHABLE ({problem}); these tests run in CI")


def pytest_report_header() -> list[str]:
    problem = postgres_problem()
    if problem is None:
        return [f"PostgreSQL: {POSTGRES_URL} (reachable)"]
    mode = "FAILING them (CI)" if os.environ.get("CI") else "SKIPPING them (not CI)"
    return [f"PostgreSQL: {POSTGRES_URL} UNREACHABLE ({problem}); {mode}"]


@asynccontextmanager
async def private_schema() -> AsyncIterator[str]:
    """A private schema in the test database, dropped afterwards (test isolation)."""
    require_postgres()
    name = f"t_{uuid.uuid4().hex[:16]}"
    conn = await asyncpg.connect(_asyncpg_dsn(POSTGRES_URL))
    try:
        await conn.execute(f"CREATE SCHEMA {name}")
        yield name
    finally:
        await conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")
        await conn.close()


@pytest.fixture
async def pg_schema() -> AsyncIterator[str]:
    """A private PostgreSQL schema for one test."""
    async with private_schema() as name:
        yield name


@asynccontextmanager
async def open_store(backend: str, tmp_path: Path, *, migrate: bool = True) -> AsyncIterator[Store]:
    """A provider of ``backend`` (``sqlite`` or ``postgresql``), isolated to this test."""
    if backend == "sqlite":
        provider = Store.open(f"sqlite:///{tmp_path / 'store.db'}")
        try:
            if migrate:
                await upgrade(provider)
            yield provider
        finally:
            await provider.close()
        return
    async with private_schema() as schema:
        provider = Store.open(POSTGRES_URL, schema=schema, pool_size=60)
        try:
            if migrate:
                await upgrade(provider)
            yield provider
        finally:
            await provider.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest) -> str:
    """Each storage backend in turn."""
    return str(request.param)


@pytest.fixture
async def database_url(backend: str, tmp_path: Path) -> AsyncIterator[str]:
    """A database URL of each backend, isolated to this test."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'pai.db'}"
        return
    async with private_schema() as schema:
        yield f"{POSTGRES_URL}?schema={schema}"


@pytest.fixture
async def store(backend: str, tmp_path: Path) -> AsyncIterator[Store]:
    """A migrated provider, once per backend."""
    async with open_store(backend, tmp_path) as provider:
        yield provider


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
