"""The HTTP port: the pai.v1 services over Connect (JSON and binary) and gRPC-Web.

Every call goes through a real hypercorn server in the app's event loop,
beside the gRPC port, with the same scopes, errors and limits.
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import struct
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from cryptography.hazmat.primitives import serialization
from google.protobuf import json_format
from google.rpc import error_details_pb2, status_pb2
from pydantic import BaseModel

from pai.v1 import run_service_pb2, thread_service_pb2
from pai_grpc.models import ScriptedModel, tool_call_step
from pai_grpc.runtime import DEFAULT_AGENT, Agent, AgentRegistry
from pai_grpc.testing import InProcessServer, serve_in_process
from pai_grpc.tools import ToolContext, tool

TOKENS = {"token-a": "acme", "token-b": "globex"}
A = {"authorization": "Bearer token-a"}
B = {"authorization": "Bearer token-b"}


@pytest.fixture
async def http_server(sqlite_url: str) -> AsyncIterator[InProcessServer]:
    async with serve_in_process(
        sqlite_url, http_address="127.0.0.1:0", tokens=dict(TOKENS), sends_per_second=0
    ) as srv:
        yield srv


@pytest.fixture
async def client(http_server: InProcessServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{http_server.app.http_port}", timeout=10
    ) as c:
        yield c


async def call(
    client: httpx.AsyncClient, method: str, body: dict[str, Any], headers: dict[str, str]
) -> httpx.Response:
    return await client.post(
        f"/pai.v1.{method}", json=body, headers={**headers, "connect-protocol-version": "1"}
    )


def error_details(response: httpx.Response) -> dict[str, Any]:
    """ErrorInfo (and BadRequest/RetryInfo) of a Connect error body, decoded."""
    out: dict[str, Any] = {}
    for detail in response.json().get("details", []):
        raw = base64.b64decode(detail["value"] + "===")
        if detail["type"] == "google.rpc.ErrorInfo":
            out["info"] = error_details_pb2.ErrorInfo.FromString(raw)
        elif detail["type"] == "google.rpc.BadRequest":
            out["bad"] = error_details_pb2.BadRequest.FromString(raw)
        elif detail["type"] == "google.rpc.RetryInfo":
            out["retry"] = error_details_pb2.RetryInfo.FromString(raw)
    return out


def envelope(payload: bytes, flags: int = 0) -> bytes:
    return struct.pack(">BI", flags, len(payload)) + payload


def frames(body: bytes) -> list[tuple[int, bytes]]:
    out = []
    while body:
        flags, size = struct.unpack(">BI", body[:5])
        out.append((flags, body[5 : 5 + size]))
        body = body[5 + size :]
    return out


async def send_text(client: httpx.AsyncClient, text: str) -> tuple[str, str]:
    """Create a thread and send ``text`` as scope acme: (thread_id, run_id)."""
    created = await call(client, "ThreadService/CreateThread", {"metadata": {"k": "v"}}, A)
    assert created.status_code == 200, created.text
    thread_id = created.json()["thread"]["id"]
    sent = await call(
        client,
        "ThreadService/Send",
        {"threadId": thread_id, "parts": [{"text": {"text": text}}]},
        A,
    )
    assert sent.status_code == 200, sent.text
    return thread_id, sent.json()["run"]["runId"]


async def test_connect_json_send_and_stream_run_to_completion(client: httpx.AsyncClient) -> None:
    thread_id, run_id = await send_text(client, "hello over http")
    request = json.dumps({"runId": run_id}).encode()
    async with client.stream(
        "POST",
        "/pai.v1.RunService/StreamRun",
        content=envelope(request),
        headers={**A, "content-type": "application/connect+json", "connect-protocol-version": "1"},
    ) as response:
        assert response.status_code == 200
        body = b"".join([chunk async for chunk in response.aiter_bytes()])
    events = frames(body)
    *messages, (end_flags, end) = events
    assert end_flags == 2
    assert json.loads(end) == {}, "the stream ends without an error"
    decoded = [json.loads(m)["event"] for _, m in messages]
    seqs = [int(e["seq"]) for e in decoded]
    assert seqs == sorted(seqs)
    assert len(set(seqs)) == len(seqs)
    statuses = [e["status"]["status"] for e in decoded if "status" in e]
    assert statuses[-1] == "RUN_STATUS_COMPLETED"
    # The reply is on the thread, read through the same port.
    listed = await call(client, "ThreadService/ListMessages", {"threadId": thread_id}, A)
    roles = [m["role"] for m in listed.json()["messages"]]
    assert roles == ["MESSAGE_ROLE_USER", "MESSAGE_ROLE_ASSISTANT"]

    # Resuming after the last seq but one yields exactly the rest.
    resumed = await client.post(
        "/pai.v1.RunService/StreamRun",
        content=envelope(json.dumps({"runId": run_id, "afterSeq": seqs[-2]}).encode()),
        headers={**A, "content-type": "application/connect+json"},
    )
    rest = [json.loads(m)["event"] for f, m in frames(resumed.content) if f == 0]
    assert [int(e["seq"]) for e in rest] == seqs[-1:]


async def test_connect_json_send_and_stream_on_one_call(client: httpx.AsyncClient) -> None:
    created = await call(client, "ThreadService/CreateThread", {}, A)
    thread_id = created.json()["thread"]["id"]
    request = json.dumps({"send": {"threadId": thread_id, "parts": [{"text": {"text": "one"}}]}})
    async with client.stream(
        "POST",
        "/pai.v1.ThreadService/SendAndStream",
        content=envelope(request.encode()),
        headers={**A, "content-type": "application/connect+json", "connect-protocol-version": "1"},
    ) as response:
        assert response.status_code == 200
        body = b"".join([chunk async for chunk in response.aiter_bytes()])
    *messages, (end_flags, end) = frames(body)
    assert end_flags == 2
    assert json.loads(end) == {}, "the stream ends without an error"
    first, *rest = [json.loads(m) for _, m in messages]
    assert first["run"]["threadId"] == thread_id
    run_id = first["run"]["runId"]
    events = [r["event"] for r in rest]
    assert [e["status"]["status"] for e in events if "status" in e][-1] == "RUN_STATUS_COMPLETED"
    # The events are the run's log, as StreamRun gives them.
    logged = await client.post(
        "/pai.v1.RunService/StreamRun",
        content=envelope(json.dumps({"runId": run_id}).encode()),
        headers={**A, "content-type": "application/connect+json"},
    )
    log = [json.loads(m)["event"] for f, m in frames(logged.content) if f == 0]
    assert [e["seq"] for e in events] == [e["seq"] for e in log]

    # Bad input: the error names the nested field, and nothing was accepted.
    bad = await client.post(
        "/pai.v1.ThreadService/SendAndStream",
        content=envelope(json.dumps({"send": {"threadId": thread_id}}).encode()),
        headers={**A, "content-type": "application/connect+json"},
    )
    (flags, end), *_ = frames(bad.content)
    assert flags == 2
    error = json.loads(end)["error"]
    assert error["code"] == "invalid_argument"
    violations = error_details(httpx.Response(200, json=error))["bad"].field_violations
    assert [v.field for v in violations] == ["send.parts"]


async def test_connect_binary_proto(client: httpx.AsyncClient) -> None:
    request = thread_service_pb2.CreateThreadRequest(agent="")
    response = await client.post(
        "/pai.v1.ThreadService/CreateThread",
        content=request.SerializeToString(),
        headers={**A, "content-type": "application/proto"},
    )
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/proto"
    created = thread_service_pb2.CreateThreadResponse.FromString(response.content)
    got = await client.post(
        "/pai.v1.ThreadService/GetThread",
        content=thread_service_pb2.GetThreadRequest(
            thread_id=created.thread.id
        ).SerializeToString(),
        headers={**A, "content-type": "application/proto"},
    )
    assert thread_service_pb2.GetThreadResponse.FromString(got.content).thread.id == (
        created.thread.id
    )


async def test_grpc_web_unary_call(client: httpx.AsyncClient) -> None:
    thread_id, run_id = await send_text(client, "hi")
    request = run_service_pb2.ListRunsRequest(thread_id=thread_id).SerializeToString()
    response = await client.post(
        "/pai.v1.RunService/ListRuns",
        content=envelope(request),
        headers={**A, "content-type": "application/grpc-web+proto", "x-grpc-web": "1"},
    )
    assert response.status_code == 200
    (_, message), (trailer_flags, trailers) = frames(response.content)
    assert trailer_flags & 0x80
    assert b"grpc-status: 0" in trailers.lower() or b"grpc-status:0" in trailers.lower()
    runs = run_service_pb2.ListRunsResponse.FromString(message).runs
    assert [r.id for r in runs] == [run_id]


async def test_grpc_web_error_has_status_in_trailers(client: httpx.AsyncClient) -> None:
    response = await client.post(
        "/pai.v1.ThreadService/GetThread",
        content=envelope(thread_service_pb2.GetThreadRequest(thread_id="nope").SerializeToString()),
        headers={"content-type": "application/grpc-web+proto", "x-grpc-web": "1"},
    )
    assert response.status_code == 200
    ((flags, trailer_block),) = frames(response.content)
    assert flags & 0x80, "a trailers frame"
    trailers = dict(line.split(": ", 1) for line in trailer_block.decode().split("\r\n") if line)
    assert trailers["grpc-status"] == "16", "UNAUTHENTICATED without a credential"
    rich = status_pb2.Status.FromString(
        base64.b64decode(trailers["grpc-status-details-bin"] + "===")
    )
    info = error_details_pb2.ErrorInfo()
    assert rich.details[0].Unpack(info)
    assert (info.reason, info.domain) == ("MISSING_CREDENTIAL", "pai.v1")


async def test_errors_carry_code_and_error_info(client: httpx.AsyncClient) -> None:
    missing = await call(client, "ThreadService/ListThreads", {}, {})
    assert missing.status_code == 401
    assert missing.json()["code"] == "unauthenticated"
    info = error_details(missing)["info"]
    assert (info.reason, info.domain) == ("MISSING_CREDENTIAL", "pai.v1")

    wrong = await call(client, "ThreadService/ListThreads", {}, {"authorization": "Bearer x"})
    assert wrong.status_code == 401

    bad = await call(client, "ThreadService/Send", {"threadId": "t", "parts": [{}]}, A)
    assert bad.json()["code"] == "invalid_argument"
    details = error_details(bad)
    assert details["info"].domain == "pai.v1"
    assert [v.field for v in details["bad"].field_violations] == ["parts[0]"]


async def test_scopes_are_the_grpc_ports(
    client: httpx.AsyncClient, http_server: InProcessServer
) -> None:
    thread_id, _ = await send_text(client, "mine")
    other = await call(client, "ThreadService/GetThread", {"threadId": thread_id}, B)
    assert other.status_code == 404
    assert other.json()["code"] == "not_found"
    assert error_details(other)["info"].reason == "THREAD_NOT_FOUND"
    # The thread made over HTTP is the gRPC port's thread too.
    got = await http_server.threads.GetThread(
        thread_service_pb2.GetThreadRequest(thread_id=thread_id),
        metadata=(("authorization", "Bearer token-a"),),
    )
    assert json_format.MessageToDict(got.thread.metadata) == {"k": "v"}
    # Admin needs an admin credential here too.
    admin = await call(client, "AdminService/GetThreadPrivateMetadata", {"threadId": thread_id}, A)
    assert admin.status_code == 403
    assert error_details(admin)["info"].reason == "NOT_ADMIN"


async def test_send_limit_applies_on_the_http_port(sqlite_url: str) -> None:
    async with (
        serve_in_process(
            sqlite_url,
            http_address="127.0.0.1:0",
            tokens=dict(TOKENS),
            sends_per_second=0.01,
            send_burst=1,
        ) as srv,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{srv.app.http_port}") as c,
    ):
        await send_text(c, "first")
        thread = (await call(c, "ThreadService/CreateThread", {}, A)).json()["thread"]["id"]
        limited = await call(
            c, "ThreadService/Send", {"threadId": thread, "parts": [{"text": {"text": "x"}}]}, A
        )
        assert limited.status_code == 429
        assert limited.json()["code"] == "resource_exhausted"
        assert error_details(limited)["retry"].retry_delay.ToMilliseconds() > 0


async def test_cors_only_for_configured_origins(sqlite_url: str) -> None:
    from pai_grpc._config_file import parse_config

    file = parse_config({"http": {"cors_origins": ["https://app.example"]}}, "t")
    async with (
        serve_in_process(sqlite_url, http_address="127.0.0.1:0", file=file) as srv,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{srv.app.http_port}") as c,
    ):
        path = "/pai.v1.ThreadService/ListThreads"
        allowed = await c.options(path, headers={"origin": "https://app.example"})
        assert allowed.status_code == 204
        assert allowed.headers["access-control-allow-origin"] == "https://app.example"
        assert "authorization" in allowed.headers["access-control-allow-headers"]
        refused = await c.options(path, headers={"origin": "https://evil.example"})
        assert refused.status_code == 405
        assert "access-control-allow-origin" not in refused.headers
        answered = await c.post(path, json={}, headers={"origin": "https://app.example"})
        assert answered.headers["access-control-allow-origin"] == "https://app.example"


async def test_console_is_served(client: httpx.AsyncClient) -> None:
    root = await client.get("/")
    assert root.status_code == 308
    assert root.headers["location"] == "/console/"
    page = await client.get("/console/")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    assert '<script type="module"' in page.text
    script = await client.get("/console/app.js")
    assert script.headers["content-type"].startswith(("text/javascript", "application/javascript"))
    assert (await client.get("/console/../pyproject.toml")).status_code == 404
    assert (await client.get("/console/missing.js")).status_code == 404


class Target(BaseModel):
    path: str


@tool(approval=True)
async def remove(value: Target, ctx: ToolContext) -> str:
    return "removed"


async def test_drain_ends_open_streams_with_canceled(sqlite_url: str) -> None:
    model = ScriptedModel([tool_call_step(("c1", "remove", {"path": "a"}))])
    agents = AgentRegistry([Agent(name=DEFAULT_AGENT, model=model, tools=[remove])])
    async with (
        serve_in_process(sqlite_url, agents=agents, http_address="127.0.0.1:0") as srv,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{srv.app.http_port}", timeout=30) as c,
    ):
        thread = (await call(c, "ThreadService/CreateThread", {}, {})).json()["thread"]["id"]
        sent = await call(
            c, "ThreadService/Send", {"threadId": thread, "parts": [{"text": {"text": "x"}}]}, {}
        )
        request = envelope(json.dumps({"runId": sent.json()["run"]["runId"]}).encode())
        received: list[tuple[int, bytes]] = []
        waiting = asyncio.Event()

        async def follow() -> None:
            async with c.stream(
                "POST",
                "/pai.v1.RunService/StreamRun",
                content=request,
                headers={"content-type": "application/connect+json"},
            ) as response:
                body = b""
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if b"RUN_STATUS_WAITING" in body:
                        waiting.set()
                received.extend(frames(body))

        reader = asyncio.create_task(follow())
        await asyncio.wait_for(waiting.wait(), 10)
        await srv.app.stop(grace=5)
        await asyncio.wait_for(reader, 10)
    flags, end = received[-1]
    assert flags == 2
    assert json.loads(end)["error"]["code"] == "canceled"


async def test_watch_thread_streams_over_connect(client: httpx.AsyncClient) -> None:
    created = await call(client, "ThreadService/CreateThread", {}, A)
    thread = created.json()["thread"]
    request = envelope(
        json.dumps({"threadId": thread["id"], "afterVersion": thread["version"]}).encode()
    )
    changes: list[dict[str, Any]] = []
    changed = asyncio.Event()

    async def watch() -> None:
        async with client.stream(
            "POST",
            "/pai.v1.ThreadService/WatchThread",
            content=request,
            headers={**A, "content-type": "application/connect+json"},
        ) as response:
            assert response.status_code == 200
            body = b""
            async for chunk in response.aiter_bytes():
                body += chunk
                done = [json.loads(m) for f, m in frames_prefix(body) if f == 0]
                if done:
                    changes.extend(done)
                    changed.set()
                    return

    # afterVersion: a change made before the watch is open is still delivered.
    watcher = asyncio.create_task(watch())
    updated = await call(
        client,
        "ThreadService/UpdateThreadMetadata",
        {"threadId": thread["id"], "metadata": {"stage": "two"}},
        A,
    )
    assert updated.status_code == 200, updated.text
    await asyncio.wait_for(changed.wait(), 10)
    await watcher
    assert int(changes[0]["thread"]["version"]) > int(thread["version"])


def frames_prefix(body: bytes) -> list[tuple[int, bytes]]:
    """The complete frames at the start of a partly received body."""
    out = []
    while len(body) >= 5:
        flags, size = struct.unpack(">BI", body[:5])
        if len(body) < 5 + size:
            break
        out.append((flags, body[5 : 5 + size]))
        body = body[5 + size :]
    return out


async def test_the_http_port_serves_tls_with_the_api_certificate(
    sqlite_url: str, tmp_path: Any
) -> None:
    from pai_grpc._wire import ServerTls
    from tests.certs import CertificateAuthority

    ca = CertificateAuthority()
    ca_file = ca.write(tmp_path / "ca.pem")
    server = ca.issue_server(tmp_path / "server")
    tls = ServerTls(str(server.cert_file), str(server.key_file))
    async with serve_in_process(
        sqlite_url, http_address="127.0.0.1:0", tokens=dict(TOKENS), tls=tls, client_tls=None
    ) as srv:
        port = srv.app.http_port
        async with httpx.AsyncClient(verify=ssl.create_default_context(cafile=ca_file)) as c:
            ok = await c.post(
                f"https://localhost:{port}/pai.v1.ThreadService/CreateThread", json={}, headers=A
            )
            assert ok.status_code == 200, ok.text
        async with httpx.AsyncClient() as c:  # the system roots do not trust this CA
            with pytest.raises(httpx.ConnectError):
                await c.post(f"https://localhost:{port}/pai.v1.ThreadService/CreateThread")
        async with httpx.AsyncClient() as c:
            with pytest.raises(httpx.TransportError):
                await c.post(f"http://127.0.0.1:{port}/pai.v1.ThreadService/CreateThread")


async def test_console_can_be_turned_off(sqlite_url: str) -> None:
    from pai_grpc._config_file import parse_config

    file = parse_config({"http": {"console": False}}, "t")
    async with (
        serve_in_process(sqlite_url, http_address="127.0.0.1:0", file=file) as srv,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{srv.app.http_port}") as c,
    ):
        assert (await c.get("/console/")).status_code == 404
        listed = await c.post("/pai.v1.ThreadService/ListThreads", json={})
        assert listed.status_code == 200


async def test_jwt_bearer_tokens_on_the_http_port(sqlite_url: str, tmp_path: Path) -> None:
    from cryptography.hazmat.primitives.asymmetric import rsa

    from tests._identity_support import AUDIENCE, ISSUER, config_file, sign

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = tmp_path / "jwt.pem"
    pem.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    config = config_file(
        tmp_path / "pai.toml",
        f'[auth.jwt]\npublic_key_file = "{pem}"\nissuer = "{ISSUER}"\n'
        f'audience = ["{AUDIENCE}"]\nalgorithms = ["RS256"]\n',
    )
    async with (
        serve_in_process(sqlite_url, http_address="127.0.0.1:0", file=config) as srv,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{srv.app.http_port}") as c,
    ):
        alice = {"authorization": f"Bearer {sign(key, None, pai_scope='tenant-a')}"}
        bob = {"authorization": f"Bearer {sign(key, None, pai_scope='tenant-b', sub='bob')}"}
        made = await call(c, "ThreadService/CreateThread", {}, alice)
        assert made.status_code == 200, made.text
        mine = await call(c, "ThreadService/ListThreads", {}, alice)
        assert [t["id"] for t in mine.json()["threads"]] == [made.json()["thread"]["id"]]
        assert (await call(c, "ThreadService/ListThreads", {}, bob)).json() == {}
        expired = sign(key, None, pai_scope="tenant-a", exp=1)
        late = await call(
            c, "ThreadService/ListThreads", {}, {"authorization": f"Bearer {expired}"}
        )
        assert late.status_code == 401
        assert error_details(late)["info"].reason == "TOKEN_EXPIRED"
