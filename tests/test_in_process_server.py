"""The package's in-process test server (``pai_grpc.testing``) answers its own stubs at once."""

from __future__ import annotations

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from pai_grpc._wire import channel
from pai_grpc.testing import serve_in_process
from tests.processes import free_port
from tests.runtime.support import new_thread


async def test_a_server_on_a_port_a_stopped_one_had_is_not_refused(sqlite_url: str) -> None:
    """A client channel left open to a server that went away keeps retrying its
    address, backing off; grpc shared that subchannel with every later channel
    to the same address and options. A server started on the same port was
    then refused to its own stubs until the backoff ended: a test in CI failed
    with UNAVAILABLE "Connection refused" on its first call.
    """
    port = free_port()
    left_open = channel(f"127.0.0.1:{port}")
    try:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await health_pb2_grpc.HealthStub(left_open).Check(
                health_pb2.HealthCheckRequest(), timeout=5
            )
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        async with serve_in_process(sqlite_url, address=f"127.0.0.1:{port}") as srv:
            assert srv.app.port == port
            assert (await new_thread(srv)).startswith("thr_")
    finally:
        await left_open.close()
