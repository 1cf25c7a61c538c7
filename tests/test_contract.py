"""The contract surface: reflection, health, and freshness of the generated code."""

from __future__ import annotations

import filecmp
from pathlib import Path

from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from pai_grpc._codegen import GENERATED_ROOT, generate
from pai_grpc.testing import InProcessServer

#: The services and RPC names that are part of the spec (the contract in protos/pai/v1).
CONTRACT = {
    "pai.v1.ThreadService": {
        "CreateThread", "GetThread", "ListThreads", "DeleteThread", "UpdateThreadMetadata",
        "ListMessages", "Send", "SendAndStream", "Trigger", "Regenerate", "WatchThread",
    },
    "pai.v1.RunService": {"GetRun", "ListRuns", "StreamRun", "CancelRun", "ResolvePendingAction"},
    "pai.v1.AdminService": {"UpdateMessageVisibility"},
    "pai.v1.LifecyclePluginService": {
        "Describe", "PrepareRun", "ResolveModelContext", "PrepareHistoryRewrite",
        "HistoryRewritten", "PrepareModelStep", "AroundModelCall", "TransformStepStream",
        "BeforeToolCall", "AfterToolResult", "AfterStep",
    },
    "pai.v1.HookHostService": {
        "ListThreadMessages", "AppendThreadMessage", "Mutate", "CollectHistory",
    },
    "pai.v1.ToolService": {"ListTools", "ExecuteTool"},
}  # fmt: skip
#: The contract services the API port itself serves.
SERVED = ("pai.v1.ThreadService", "pai.v1.RunService", "pai.v1.AdminService")


async def test_reflection_describes_the_served_services_with_their_rpcs(
    server: InProcessServer,
) -> None:
    from google.protobuf import descriptor_pb2

    stub = reflection_pb2_grpc.ServerReflectionStub(server.channel)

    async def ask(
        request: reflection_pb2.ServerReflectionRequest,
    ) -> reflection_pb2.ServerReflectionResponse:
        call = stub.ServerReflectionInfo(iter([request]))
        async for response in call:
            return response
        raise AssertionError("no reflection response")

    listed = await ask(reflection_pb2.ServerReflectionRequest(list_services=""))
    names = {s.name for s in listed.list_services_response.service}
    # Only what this port serves is listed (tests/test_reflection.py); the plugin and
    # tool contracts are still described on request.
    assert set(SERVED) <= names
    assert not (set(CONTRACT) - set(SERVED)) & names
    assert "grpc.health.v1.Health" in names

    for service, rpcs in CONTRACT.items():
        found = await ask(reflection_pb2.ServerReflectionRequest(file_containing_symbol=service))
        methods: set[str] = set()
        for raw in found.file_descriptor_response.file_descriptor_proto:
            fd = descriptor_pb2.FileDescriptorProto.FromString(raw)
            for svc in fd.service:
                if f"{fd.package}.{svc.name}" == service:
                    methods = {m.name for m in svc.method}
        assert rpcs <= methods, (service, rpcs - methods)


async def test_health_reports_serving(server: InProcessServer) -> None:
    stub = health_pb2_grpc.HealthStub(server.channel)
    for service in ("", "pai.v1.ThreadService", "pai.v1.RunService"):
        response = await stub.Check(health_pb2.HealthCheckRequest(service=service))
        assert response.status == health_pb2.HealthCheckResponse.SERVING


def test_generated_code_is_fresh(tmp_path: Path) -> None:
    """`make protos` output must match what is committed in generated/."""
    generate(tmp_path)
    fresh = sorted(p.relative_to(tmp_path) for p in (tmp_path / "pai").rglob("*") if p.is_file())
    committed = sorted(
        p.relative_to(GENERATED_ROOT)
        for p in (GENERATED_ROOT / "pai").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    )
    assert fresh == committed, "generated/ has missing or extra files: run `make protos`"
    stale = [
        str(p) for p in fresh if not filecmp.cmp(tmp_path / p, GENERATED_ROOT / p, shallow=False)
    ]
    assert not stale, f"generated/ is stale, run `make protos`: {stale}"
