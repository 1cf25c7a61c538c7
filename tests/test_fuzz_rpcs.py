"""Fuzz every public RPC of the API port on both backends (hypothesis).

For any generated request (hostile strings with U+0000, invalid UTF-8 and
lone surrogates on the wire, huge and non-finite numbers in Structs, Structs
nested past the parser's limit, random and malformed ids, forged page
tokens, raw garbage bytes) the server never answers UNKNOWN or INTERNAL,
every error carries ErrorInfo, and a rejected call writes nothing: the
store, read through the public read RPCs, is the same before and after.

Requests are generated from the method's descriptor, so an RPC or field
added to the contract is fuzzed without touching this file. One server per
backend serves the whole module; it has no runner, so nothing changes the
store but the calls under test. Hypothesis drives synchronous tests; the
server and its channel live on an event loop owned by a background thread.
"""

from __future__ import annotations

import asyncio
import base64
import json
import threading
from collections.abc import AsyncIterator, Awaitable, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import grpc
import pytest
from google.protobuf import descriptor_pool, message_factory, struct_pb2
from google.protobuf.descriptor import Descriptor, FieldDescriptor, MethodDescriptor
from google.protobuf.message import Message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pai.v1 import admin_service_pb2 as apb
from pai.v1 import admin_service_pb2_grpc, parts_pb2, run_service_pb2
from pai.v1 import thread_service_pb2 as tpb
from pai_grpc.testing import InProcessServer, serve_in_process
from tests.conftest import POSTGRES_URL, private_schema, rich_status

T = TypeVar("T")

SERVICES = ("pai.v1.ThreadService", "pai.v1.RunService", "pai.v1.AdminService")
MAX_EXAMPLES = 25
#: Streaming RPCs on a valid id wait for events that never come (no runner).
STREAM_WINDOW = 0.25
NEVER = {grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL}
#: Statuses the client library produces itself, without the server's details.
CLIENT_SIDE = {grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED}
READS = ("Get", "List", "Stream", "Watch")


def methods() -> list[MethodDescriptor]:
    pool = descriptor_pool.Default()
    return [m for s in SERVICES for m in pool.FindServiceByName(s).methods]


# --------------------------------------------------------------------- the server


@dataclass
class Harness:
    """A runner-less server of one backend on a loop owned by a background thread."""

    loop: asyncio.AbstractEventLoop
    srv: InProcessServer
    thread_ids: list[str]
    run_ids: list[str]
    message_ids: list[str]
    tokens: list[str]
    last: list[bytes] = field(default_factory=list)

    def run(self, coro: Awaitable[T], timeout: float = 30) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)  # type: ignore[arg-type]

    async def snapshot(self) -> list[bytes]:
        """The store as the public read RPCs show it (the fuzzed threads and runs)."""
        srv, out = self.srv, []
        listed = await srv.threads.ListThreads(tpb.ListThreadsRequest(page_size=1000))
        out.append(listed.SerializeToString(deterministic=True))
        admin = admin_service_pb2_grpc.AdminServiceStub(srv.channel)
        for thread_id in self.thread_ids:
            for response in (
                await srv.threads.ListMessages(
                    tpb.ListMessagesRequest(thread_id=thread_id, page_size=1000)
                ),
                await srv.runs.ListRuns(
                    run_service_pb2.ListRunsRequest(thread_id=thread_id, page_size=1000)
                ),
                await admin.GetThreadPrivateMetadata(
                    apb.GetThreadPrivateMetadataRequest(thread_id=thread_id)
                ),
            ):
                out.append(response.SerializeToString(deterministic=True))
        for run_id in (self.run_ids[0], self.run_ids[-1]):  # a finished and a queued run
            private = await admin.GetRunPrivateMetadata(
                apb.GetRunPrivateMetadataRequest(run_id=run_id)
            )
            out.append(private.SerializeToString(deterministic=True))
        return out


def text(s: str) -> parts_pb2.MessagePart:
    return parts_pb2.MessagePart(text=parts_pb2.TextPart(text=s))


async def _seed(srv: InProcessServer) -> tuple[list[str], list[str]]:
    """Two threads with finished runs (so every listing has a second page)."""
    thread_ids, run_ids = [], []
    meta = struct_pb2.Struct()
    meta.update({"k": "v", "n": [1, 2.5]})
    for _ in range(2):
        thread = await srv.threads.CreateThread(tpb.CreateThreadRequest(metadata=meta))
        thread_ids.append(thread.thread.id)
        for word in ("one", "two"):
            sent = await srv.threads.Send(
                tpb.SendRequest(thread_id=thread.thread.id, parts=[text(word)])
            )
            run_ids.append(sent.run.run_id)
            async for _ in srv.runs.StreamRun(
                run_service_pb2.StreamRunRequest(run_id=sent.run.run_id), timeout=20
            ):
                pass
    return thread_ids, run_ids


async def _tokens(srv: InProcessServer, thread_id: str) -> list[str]:
    admin = admin_service_pb2_grpc.AdminServiceStub(srv.channel)
    pages = [
        await srv.threads.ListThreads(tpb.ListThreadsRequest(page_size=1)),
        await srv.threads.ListMessages(tpb.ListMessagesRequest(thread_id=thread_id, page_size=1)),
        await srv.runs.ListRuns(run_service_pb2.ListRunsRequest(thread_id=thread_id, page_size=1)),
        await admin.ListLifecycleMessages(
            apb.ListLifecycleMessagesRequest(thread_id=thread_id, page_size=1)
        ),
    ]
    real = [p.next_page_token for p in pages]
    assert all(real)
    forged = []
    for token in real:
        payload = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        for cursor in (10**30, 2**63, -1, True, None, "x", [1, 2], ["x", 10**30], {"a": 1}):
            raw = json.dumps({"q": payload["q"], "c": cursor}).encode()
            forged.append(base64.urlsafe_b64encode(raw).decode().rstrip("="))
    return [*real, *forged, "%%%", "x" * 3000, "é", "e30="]


@asynccontextmanager
async def _database(backend: str, tmp: Path) -> AsyncIterator[str]:
    if backend == "sqlite":
        yield f"sqlite:///{tmp / 'fuzz.db'}"
        return
    async with private_schema() as schema:
        yield f"{POSTGRES_URL}?schema={schema}"


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def harness(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Harness]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="fuzz-server", daemon=True)
    thread.start()
    stack = AsyncExitStack()

    async def start() -> Harness:
        url = await stack.enter_async_context(
            _database(str(request.param), tmp_path_factory.mktemp("fuzz"))
        )
        async with serve_in_process(url) as seeding:
            thread_ids, run_ids = await _seed(seeding)
        srv = await stack.enter_async_context(serve_in_process(url, embedded_runner=False))
        # A queued run (no runner will take it), for CancelRun and friends.
        queued = await srv.threads.Send(tpb.SendRequest(thread_id=thread_ids[0], parts=[text("q")]))
        run_ids.append(queued.run.run_id)
        messages = await srv.threads.ListMessages(tpb.ListMessagesRequest(thread_id=thread_ids[0]))
        h = Harness(
            loop=loop,
            srv=srv,
            thread_ids=thread_ids,
            run_ids=run_ids,
            message_ids=[m.id for m in messages.messages],
            tokens=await _tokens(srv, thread_ids[0]),
        )
        h.last = await h.snapshot()
        return h

    try:
        h = asyncio.run_coroutine_threadsafe(start(), loop).result(120)
        yield h
    finally:
        asyncio.run_coroutine_threadsafe(stack.aclose(), loop).result(60)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


# ----------------------------------------------------------------- the requests

HOSTILE = st.sampled_from(
    ["", "\x00", "a\x00b", "\n", " ", "x" * 300, "\u202e", "🙂", "null", "0", "-1", "default"]
)
TEXT = st.text(max_size=20) | HOSTILE
ULID = st.text(alphabet="0123456789ABCDEFGHJKMNPQRSTVWXYZ", min_size=26, max_size=26)
NUMBERS = st.floats() | st.sampled_from(
    [2.0**53, -(2.0**53), 2.0**53 - 1, 1e16, 1e300, -1e308, 5e-324, float("nan"), float("inf")]
)


def json_values() -> st.SearchStrategy[Any]:
    scalars = st.none() | st.booleans() | NUMBERS | TEXT
    return st.recursive(
        scalars,
        lambda kids: st.lists(kids, max_size=3) | st.dictionaries(TEXT, kids, max_size=3),
        max_leaves=8,
    )


def fill_value(pb: struct_pb2.Value, value: Any) -> None:
    if value is None:
        pb.null_value = struct_pb2.NULL_VALUE
    elif isinstance(value, bool):
        pb.bool_value = value
    elif isinstance(value, float):
        pb.number_value = value
    elif isinstance(value, str):
        pb.string_value = value
    elif isinstance(value, list):
        pb.list_value.SetInParent()
        for item in value:
            fill_value(pb.list_value.values.add(), item)
    else:
        pb.struct_value.SetInParent()
        for key, item in value.items():
            fill_value(pb.struct_value.fields[key], item)


def to_value(value: Any) -> struct_pb2.Value:
    pb = struct_pb2.Value()
    fill_value(pb, value)
    return pb


def to_struct(value: dict[str, Any]) -> struct_pb2.Struct:
    return to_value(value).struct_value


class Requests:
    """Strategies for any message of the contract, biased towards hostile values."""

    def __init__(self, h: Harness) -> None:
        self.h = h
        self.ids = (
            st.sampled_from([*h.thread_ids, *h.run_ids, *h.message_ids])
            | st.builds(
                lambda p, u: f"{p}_{u}", st.sampled_from(["thr", "run", "msg", "act"]), ULID
            )
            | st.sampled_from(h.thread_ids + h.run_ids).map(lambda i: i + "\n")
            | TEXT
        )
        self.tokens = st.sampled_from(h.tokens) | TEXT
        self.etags = (
            st.sampled_from(["1", '"2"', 'W/"3"', "99999999999999999999999", "²", "-1", "W/"])
            | TEXT
        )

    def string(self, f: FieldDescriptor) -> st.SearchStrategy[str]:
        if f.name.endswith(("_id", "_ids")):
            return self.ids
        if f.name == "page_token":
            return self.tokens
        if f.name == "etag":
            return self.etags
        return TEXT

    def scalar(self, f: FieldDescriptor) -> st.SearchStrategy[Any]:
        t = f.type
        if t == FieldDescriptor.TYPE_STRING:
            return self.string(f)
        if t == FieldDescriptor.TYPE_BOOL:
            return st.booleans()
        if t == FieldDescriptor.TYPE_BYTES:
            return st.binary(max_size=16)
        if t in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
            return NUMBERS if t == FieldDescriptor.TYPE_DOUBLE else st.floats(width=32)
        if t == FieldDescriptor.TYPE_ENUM:
            return st.integers(-3, 12)
        if t in (FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_FIXED32):
            lo, hi = 0, 2**32 - 1
        elif t in (FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64):
            lo, hi = 0, 2**64 - 1
        elif t in (
            FieldDescriptor.TYPE_INT32,
            FieldDescriptor.TYPE_SINT32,
            FieldDescriptor.TYPE_SFIXED32,
        ):
            lo, hi = -(2**31), 2**31 - 1
        else:
            lo, hi = -(2**63), 2**63 - 1
        return st.integers(-3, 5) | st.sampled_from([lo, hi, 0]) | st.integers(lo, hi)

    def message(self, d: Descriptor, depth: int = 0) -> st.SearchStrategy[Message]:
        if d.full_name == "google.protobuf.Struct":
            return st.dictionaries(TEXT, json_values(), max_size=4).map(to_struct)
        if d.full_name == "google.protobuf.Value":
            return json_values().map(to_value)
        cls = message_factory.GetMessageClass(d)
        if depth > 3:
            return st.just(cls())
        optional = {f.name: self.field(f, depth) for f in d.fields}
        return st.fixed_dictionaries({}, optional=optional).map(lambda kw: build(cls, d, kw))

    def field(self, f: FieldDescriptor, depth: int) -> st.SearchStrategy[Any]:
        if f.type == FieldDescriptor.TYPE_MESSAGE:
            if f.message_type.GetOptions().map_entry:
                key = self.scalar(f.message_type.fields_by_name["key"])
                value = self.field(f.message_type.fields_by_name["value"], depth + 1)
                return st.dictionaries(key, value, max_size=3)
            one = self.message(f.message_type, depth + 1)
        else:
            one = self.scalar(f)
        return st.lists(one, max_size=3) if f.is_repeated else one


def build(cls: type[Message], d: Descriptor, values: dict[str, Any]) -> Message:
    msg = cls()
    for name, value in values.items():
        f = d.fields_by_name[name]
        target = (
            getattr(msg, name) if f.is_repeated or f.type == FieldDescriptor.TYPE_MESSAGE else None
        )
        if f.type == FieldDescriptor.TYPE_MESSAGE and f.message_type.GetOptions().map_entry:
            for k, v in value.items():
                if isinstance(v, Message):
                    target[k].CopyFrom(v)  # type: ignore[index]
                else:
                    target[k] = v  # type: ignore[index]
        elif f.is_repeated:
            if f.type == FieldDescriptor.TYPE_MESSAGE:
                for v in value:
                    target.add().CopyFrom(v)  # type: ignore[union-attr]
            else:
                target.extend(value)  # type: ignore[union-attr]
        elif f.type == FieldDescriptor.TYPE_MESSAGE:
            target.CopyFrom(value)  # type: ignore[union-attr]
        else:
            setattr(msg, name, value)
    return msg


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (wire type 2)."""
    size, n = bytearray(), len(payload)
    while True:
        size.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            break
    return _varint(number << 3 | 2) + bytes(size) + payload


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def deep_struct(levels: int) -> bytes:
    struct = b""
    for _ in range(levels - 1):
        struct = _field(1, _field(1, b"a") + _field(2, _field(5, struct)))
    return struct


def payloads(requests: Requests, method: MethodDescriptor) -> st.SearchStrategy[bytes]:
    """Serialized requests, sometimes with a hostile field appended, or plain garbage."""
    d = method.input_type
    valid = requests.message(d).map(lambda m: m.SerializeToString())
    tails: list[st.SearchStrategy[bytes]] = [st.just(b"")]
    for f in d.fields:
        if f.type == FieldDescriptor.TYPE_STRING:
            # Invalid UTF-8, a lone surrogate (CESU-8), a truncated sequence.
            bad = st.sampled_from([b"\xff", b"\xed\xa0\x80", b"a\xc3", b"\xc0\x80"])
            tails.append(bad.map(lambda b, n=f.number: _field(n, b)))
        elif f.type == FieldDescriptor.TYPE_MESSAGE and f.message_type.full_name in (
            "google.protobuf.Struct",
            "google.protobuf.Value",
        ):
            wrap = f.message_type.full_name == "google.protobuf.Value"
            deep = st.integers(30, 40).map(deep_struct)
            tails.append(
                deep.map(lambda b, n=f.number, w=wrap: _field(n, _field(5, b) if w else b))
            )
    hostile = st.tuples(valid, st.one_of(tails)).map(lambda pair: pair[0] + pair[1])
    return hostile | st.binary(max_size=48)


# --------------------------------------------------------------------- the check


async def call(h: Harness, method: MethodDescriptor, payload: bytes) -> grpc.aio.AioRpcError | None:
    path = f"/{method.containing_service.full_name}/{method.name}"
    try:
        if method.server_streaming:
            stream = h.srv.channel.unary_stream(path)(payload, timeout=STREAM_WINDOW)
            async for _ in stream:
                pass
        else:
            await h.srv.channel.unary_unary(path)(payload, timeout=10)
    except grpc.aio.AioRpcError as err:
        return err
    return None


async def check(h: Harness, method: MethodDescriptor, payload: bytes) -> None:
    err = await call(h, method, payload)
    if err is None:
        if not method.name.startswith(READS):
            h.last = await h.snapshot()
        return
    assert err.code() not in NEVER, f"{method.name}: {err.code()} {err.details()}"
    if err.code() in CLIENT_SIDE:
        assert method.server_streaming, f"{method.name}: {err.code()}"
    else:
        rich_status(err)  # asserts ErrorInfo
    assert await h.snapshot() == h.last, f"{method.name} failed with {err.code()} but wrote"


@pytest.mark.parametrize("method", methods(), ids=lambda m: m.name)
def test_no_generated_request_gets_an_untruthful_status_or_a_partial_write(
    harness: Harness, method: MethodDescriptor
) -> None:
    strategy = payloads(Requests(harness), method)

    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(payload=strategy)
    def fuzz(payload: bytes) -> None:
        harness.run(check(harness, method, payload))

    fuzz()
