"""Metrics and logs of real `pai-grpc serve` processes: a real Prometheus scrapes them,
JSON logs never carry tokens or content, and a client going away is not an error."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import urllib.parse
import urllib.request
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import struct_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc

from pai.v1 import parts_pb2, run_service_pb2, run_service_pb2_grpc, runs_pb2
from pai.v1 import thread_service_pb2 as tpb
from pai.v1 import thread_service_pb2_grpc as tgrpc
from pai_grpc.fakes import FakeAnthropic, reply, text_block, tool_use_block
from pai_grpc.telemetry._metrics import PROMETHEUS_NAMES
from tests.processes import Processes, free_port

pytestmark = pytest.mark.slow


def text(s: str) -> parts_pb2.MessagePart:
    return parts_pb2.MessagePart(text=parts_pb2.TextPart(text=s))


def _install_prometheus() -> str | None:
    """Why Prometheus cannot be had (None once ``prometheus`` is on PATH)."""
    if shutil.which("prometheus"):
        return None
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        return "no `prometheus` on PATH and no root apt-get to install Debian's package"
    done = subprocess.run(
        ["apt-get", "install", "-y", "--no-install-recommends", "prometheus"],
        capture_output=True,
        timeout=600,
        env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
    )
    if shutil.which("prometheus"):
        return None
    return f"apt-get install prometheus failed: {done.stderr.decode()[-500:]}"


@pytest.fixture(scope="session")
def prometheus_binary() -> str:
    """Debian's `prometheus`, installed on first use (skipped loudly when impossible)."""
    problem = _install_prometheus()
    if problem is not None:
        message = f"SKIPPING the real-Prometheus test: {problem}"
        warnings.warn(message, stacklevel=1)
        pytest.skip(message)
    path = shutil.which("prometheus")
    assert path is not None
    return path


@pytest.fixture
def processes(tmp_path: Path, sqlite_url: str) -> Iterator[Processes]:
    ps = Processes(tmp_path, sqlite_url, chunk_delay=0.05)
    ps.migrate()
    try:
        yield ps
    finally:
        ps.stop_all()


async def wait_serving(channel: grpc.aio.Channel) -> None:
    health = health_pb2_grpc.HealthStub(channel)
    for _ in range(300):
        try:
            got = await health.Check(health_pb2.HealthCheckRequest(), timeout=2)
            if got.status == health_pb2.HealthCheckResponse.SERVING:
                return
        except grpc.aio.AioRpcError:
            pass
        await asyncio.sleep(0.1)
    raise AssertionError("the server never reported SERVING")


def http_get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as response:
        body: bytes = response.read()
        return body


async def stop(proc: subprocess.Popen[bytes]) -> int:
    proc.send_signal(signal.SIGTERM)
    return await asyncio.to_thread(proc.wait, 30)


async def test_a_real_prometheus_scrapes_the_service(
    processes: Processes, tmp_path: Path, prometheus_binary: str
) -> None:
    metrics_port = free_port()
    proc = processes.start(
        "serve",
        "--address",
        processes.address,
        "--metrics-address",
        f"127.0.0.1:{metrics_port}",
        name="serve",
    )
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        f"  - job_name: pai\n    static_configs: [{{targets: ['127.0.0.1:{metrics_port}']}}]\n"
    )
    web = f"127.0.0.1:{free_port()}"
    with (tmp_path / "prometheus.log").open("wb") as log:
        prometheus = subprocess.Popen(  # noqa: ASYNC220 (started once, not awaited)
            [
                prometheus_binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'prometheus-data'}",
                f"--web.listen-address={web}",
                "--storage.tsdb.retention.time=1h",
            ],
            stdout=log,
            stderr=log,
        )
    try:
        async with grpc.aio.insecure_channel(processes.address) as channel:
            await wait_serving(channel)
            threads = tgrpc.ThreadServiceStub(channel)
            runs = run_service_pb2_grpc.RunServiceStub(channel)
            for i in range(3):
                thread_id = (await threads.CreateThread(tpb.CreateThreadRequest())).thread.id
                sent = await threads.Send(
                    tpb.SendRequest(thread_id=thread_id, parts=[text(f"hello {i}")])
                )
                request = run_service_pb2.StreamRunRequest(run_id=sent.run.run_id)
                events = [r.event async for r in runs.StreamRun(request)]
                assert events[-1].status.status == runs_pb2.RUN_STATUS_COMPLETED

        exposition = await asyncio.to_thread(http_get, f"http://127.0.0.1:{metrics_port}/metrics")
        families = {
            line.split()[2]
            for line in exposition.decode().splitlines()
            if line.startswith("# TYPE ")
        }
        recorded = {
            "pai_runs_started_total",
            "pai_runs_finished_total",
            "pai_run_queue_seconds",
            "pai_time_to_first_chunk_seconds",
            "pai_run_duration_seconds",
            "pai_active_runs",
            "pai_active_streams",
            "pai_storage_commit_seconds",
            "rpc_server_duration_seconds",
        }
        assert recorded <= families, recorded - families
        assert {f for f in families if f.startswith("pai_")} <= PROMETHEUS_NAMES

        # Prometheus needs ~5 s before its first scrape (target sync), whatever the interval.
        query = urllib.parse.urlencode({"query": "sum(pai_runs_finished_total)"})
        url = f"http://{web}/api/v1/query?{query}"
        answer: dict[str, Any] = {}
        for _ in range(300):
            await asyncio.sleep(0.1)
            try:
                answer = json.loads(await asyncio.to_thread(http_get, url))
            except OSError:
                continue  # Prometheus is still starting
            result = answer.get("data", {}).get("result", [])
            if result and float(result[0]["value"][1]) >= 3:
                break
        else:
            raise AssertionError(f"Prometheus never saw the runs: {answer}")
        assert await stop(proc) == 0, processes.log("serve")
    finally:
        prometheus.terminate()
        prometheus.wait(10)


CANARY_MESSAGE = "canary-message-7f3a9c"
CANARY_RESULT = "canary-result-2b8e41"
CANARY_TOKEN = "canary-token-c0ffee99"


async def test_json_logs_carry_no_token_message_or_tool_content(
    processes: Processes, tmp_path: Path
) -> None:
    processes.config.write_text(
        f'[auth]\ntokens = {{ "{CANARY_TOKEN}" = "acme" }}\n\n'
        '[agents.assistant]\nmodel = "anthropic:claude-test"\ntools = ["lookup"]\n\n'
        '[tools.lookup]\ndescription = "Look a thing up."\n'
    )
    async with FakeAnthropic(api_key="test-key") as fake:
        fake.script(
            reply(
                tool_use_block("toolu_1", "lookup", {"q": CANARY_MESSAGE}), stop_reason="tool_use"
            ),
            reply(text_block(f"The answer is {CANARY_RESULT}")),
        )
        processes.env.update(ANTHROPIC_API_KEY="test-key", ANTHROPIC_BASE_URL=fake.base_url)
        proc = processes.start(
            "--log-level",
            "INFO",
            "serve",
            "--address",
            processes.address,
            "--log-format",
            "json",
            name="serve",
        )
        auth = (("authorization", f"Bearer {CANARY_TOKEN}"),)
        async with grpc.aio.insecure_channel(processes.address) as channel:
            await wait_serving(channel)
            threads = tgrpc.ThreadServiceStub(channel)
            runs = run_service_pb2_grpc.RunServiceStub(channel)
            thread_id = (
                await threads.CreateThread(tpb.CreateThreadRequest(), metadata=auth)
            ).thread.id
            sent = await threads.Send(
                tpb.SendRequest(thread_id=thread_id, parts=[text(f"find {CANARY_MESSAGE}")]),
                metadata=auth,
            )
            run_id = sent.run.run_id
            request = run_service_pb2.StreamRunRequest(run_id=run_id)
            stream = runs.StreamRun(request, metadata=auth)
            events = []
            async for response in stream:  # a waiting run's stream stays open
                events.append(response.event)
                if response.event.status.status == runs_pb2.RUN_STATUS_WAITING:
                    break
            stream.cancel()
            action = next(e.pending_action for e in events if e.HasField("pending_action"))
            value = struct_pb2.Value()
            value.struct_value.update({"found": CANARY_RESULT})
            await runs.ResolvePendingAction(
                run_service_pb2.ResolvePendingActionRequest(
                    run_id=run_id,
                    action_id=action.id,
                    tool_result=run_service_pb2.ClientToolResult(output=value),
                ),
                metadata=auth,
            )
            request = run_service_pb2.StreamRunRequest(run_id=run_id, after_seq=events[-1].seq)
            tail = [r.event async for r in runs.StreamRun(request, metadata=auth, timeout=30)]
            assert tail[-1].status.status == runs_pb2.RUN_STATUS_COMPLETED
        assert len(fake.requests) == 2  # the model saw the tool result: the canaries flowed
        assert await stop(proc) == 0, processes.log("serve")
    output = processes.log("serve")
    for canary in (CANARY_MESSAGE, CANARY_RESULT, CANARY_TOKEN):
        assert canary not in output, output
    lines = [json.loads(line) for line in output.splitlines() if line.strip()]
    assert lines, "the server logged nothing"
    for line in lines:
        assert {"time", "level", "logger", "message"} <= line.keys(), line
    assert any("serving pai.v1" in line["message"] for line in lines)
    # Lines logged while the run executes name it (the model call's HTTP log).
    assert any(line.get("run_id") == run_id for line in lines), output


async def test_a_client_going_away_is_not_an_error(processes: Processes) -> None:
    proc = processes.serve(name="serve")
    async with grpc.aio.insecure_channel(processes.address) as channel:
        await wait_serving(channel)
        threads = tgrpc.ThreadServiceStub(channel)
        runs = run_service_pb2_grpc.RunServiceStub(channel)
        thread_id = (await threads.CreateThread(tpb.CreateThreadRequest())).thread.id
        long_text = " ".join(f"word{i}" for i in range(60))  # ~3 s of streaming
        sent = await threads.Send(tpb.SendRequest(thread_id=thread_id, parts=[text(long_text)]))
        watch = threads.WatchThread(tpb.WatchThreadRequest(thread_id=thread_id))
        stream = runs.StreamRun(run_service_pb2.StreamRunRequest(run_id=sent.run.run_id))
        async for response in stream:
            if response.event.chunk.WhichOneof("chunk") == "text_delta":
                break
        await watch.read()
        stream.cancel()  # mid-run
        watch.cancel()
        # A second stream is left open when the channel closes under it.
        orphan = runs.StreamRun(run_service_pb2.StreamRunRequest(run_id=sent.run.run_id))
        await orphan.read()
    await asyncio.sleep(0.5)  # the server notices the cancellations
    assert await stop(proc) == 0, processes.log("serve")
    output = processes.log("serve")
    assert " ERROR " not in output, output
    assert "Traceback" not in output, output
