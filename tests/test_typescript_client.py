"""The TypeScript client (clients/typescript) against a real `pai-grpc serve`.

Its own tests (node:test, in clients/typescript/test) need servers: this
module installs the client's pinned dependencies (`npm ci`, skipped while
node_modules matches package-lock.json), starts `pai-grpc serve` processes and
runs `npm test` with their addresses in the environment:

- PAI_ADDRESS: a plaintext dev-mode server. For the restart tests the TS side
  writes ``kill`` (or ``term``) into PAI_CONTROL_DIR mid-stream; this side then
  stops the server with SIGKILL (or SIGTERM, a drain) and starts a new one on
  the same address, and the TS test checks its stream resumed to exactly the
  durable log.
- PAI_SECURE_*: a server requiring mutual TLS and a bearer token, with a low
  Send rate (token, TLS and RetryInfo tests). Its "tooling" agent asks a fake
  Claude that calls a client tool and an approval-gated tool of a tool server
  hosted here (tool result, approve and deny tests).

Without node/npm these tests FAIL in CI (env CI set) and skip loudly elsewhere.
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, NoReturn

import pytest
from pydantic import BaseModel

from pai_grpc.client import check_health
from pai_grpc.fakes import FakeAnthropic, RecordedRequest, Turn, reply, text_block, tool_use_block
from pai_grpc.tools import ToolContext, tool
from pai_grpc.toolservice import serve_tools
from tests.certs import CertificateAuthority
from tests.processes import Processes

ROOT = Path(__file__).resolve().parent.parent
CLIENT = ROOT / "clients" / "typescript"
#: Written into node_modules after a successful `npm ci`: the lockfile it installed.
STAMP = CLIENT / "node_modules" / ".pai-package-lock.sha256"

pytestmark = pytest.mark.slow


def _missing(message: str) -> NoReturn:
    """Fail in CI, skip loudly elsewhere."""
    message = f"{message}: the TypeScript client tests need Node.js >= 20.10 and npm"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(f"SKIPPED, NOT TESTED: {message}")


def _require(program: str) -> str:
    path = shutil.which(program)
    if path is None:
        _missing(f"{program} is not installed")
    return path


@pytest.fixture(scope="module")
def npm() -> str:
    """`npm`, with the client's dependencies installed exactly as package-lock.json pins them."""
    node = _require("node")
    version = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30)
    found = tuple(int(n) for n in re.findall(r"\d+", version.stdout)[:2])
    if found < (20, 10):  # `node --import` and `--test-concurrency`
        _missing(f"node {version.stdout.strip()} is too old")
    npm = _require("npm")
    lock = hashlib.sha256((CLIENT / "package-lock.json").read_bytes()).hexdigest()
    # Another test process may install at the same time: one `npm ci` per checkout at a
    # time (the lock lives outside node_modules, which `npm ci` deletes).
    key = hashlib.sha256(str(CLIENT).encode()).hexdigest()[:16]
    with (Path(tempfile.gettempdir()) / f"pai-grpc-npm-ci-{key}.lock").open("w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        if not STAMP.exists() or STAMP.read_text() != lock:
            done = subprocess.run(
                [npm, "ci", "--no-audit", "--no-fund"],
                cwd=CLIENT,
                capture_output=True,
                text=True,
                timeout=280,
            )
            assert done.returncode == 0, f"npm ci failed:\n{done.stdout}\n{done.stderr}"
            STAMP.write_text(lock)
    return npm


def _tree(base: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(base)): p.read_bytes() for p in sorted(base.rglob("*")) if p.is_file()
    }


@pytest.mark.timeout(300)
def test_generated_typescript_is_fresh(npm: str, tmp_path: Path) -> None:
    # The same buf template `npm run generate` uses (with node_modules/.bin on PATH
    # for the local protoc-gen-es), written elsewhere and compared.
    bin_dir = CLIENT / "node_modules" / ".bin"
    done = subprocess.run(
        [str(bin_dir / "buf"), "generate", "--output", str(tmp_path)],
        cwd=CLIENT,
        env={**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    fresh = _tree(tmp_path / "src" / "gen")
    committed = _tree(CLIENT / "src" / "gen")
    assert fresh, "buf generated nothing"
    stale = sorted(k for k in fresh.keys() | committed.keys() if fresh.get(k) != committed.get(k))
    assert not stale, f"clients/typescript/src/gen is stale, run `npm run generate`: {stale}"


TOKEN = "ts-client-secret"
#: The amounts the "transfer" tool moved (it runs only once a human approved).
TRANSFERS: list[int] = []


class _Transfer(BaseModel):
    amount: int


@tool(description="Move money (asks a human first).")
async def transfer(value: _Transfer, ctx: ToolContext) -> dict[str, Any]:
    TRANSFERS.append(value.amount)
    return {"moved": value.amount}


def _claude(request: RecordedRequest) -> Turn:
    """The fake Claude of the "tooling" agent: a tool call per question, then the tool's output."""
    last = request.body["messages"][-1]["content"]
    block = last[0] if isinstance(last, list) else {"type": "text", "text": last}
    if block["type"] == "tool_result":
        return reply(text_block(f"Result: {block.get('content', '')}"))
    tool_id = f"toolu_{len(request.body['messages'])}"
    if "transfer" in block["text"]:
        call = tool_use_block(tool_id, "transfer", {"amount": 5})
    else:
        call = tool_use_block(tool_id, "lookup", {"q": "meaning"})
    return reply(call, stop_reason="tool_use")


def _secure_server(tmp: Path, tool_port: int) -> Processes:
    """A server on its own SQLite database: mutual TLS, a bearer token, 1 Send per second.

    Its first (default) agent is the offline one; "tooling" asks the fake Claude,
    with the client tool "lookup" and the tool server's "transfer", which needs
    an approval.
    """
    tmp.mkdir()
    ca = CertificateAuthority("ts client CA")
    ca.write(tmp / "ca.pem")
    cert = ca.issue_server(tmp / "server")
    ca.issue_client(tmp / "client", "ts-client")
    procs = Processes(tmp, f"sqlite:///{tmp / 'pai.db'}", chunk_delay=0.0)
    with procs.config.open("a") as config:
        config.write(
            f'\n[tls]\ncert_file = "{cert.cert_file}"\nkey_file = "{cert.key_file}"\n'
            f'client_ca_file = "{tmp / "ca.pem"}"\nrequire_client_cert = true\n'
            f'\n[auth.tokens]\n"{TOKEN}" = "ts-scope"\n'
            "\n[limits]\nsends_per_second = 1\nsend_burst = 1\n"
            '\n[agents.plain]\nmodel = "offline"\n'
            '\n[agents.tooling]\nmodel = "anthropic:claude-test"\n'
            'tools = ["lookup", "transfer"]\n'
            '\n[tools.lookup]\ndescription = "Look a thing up."\n'
            f'\n[tool_servers.desk]\naddress = "127.0.0.1:{tool_port}"\napproval = ["transfer"]\n'
        )
    return procs


async def _serving(server: Processes, name: str, *, tls: bool = False) -> None:
    deadline = time.monotonic() + 60
    while True:
        if tls:  # the TLS server logs its start; a health check would need a certificate
            if "serving pai.v1" in server.log(name):
                return
        elif await check_health(server.address, timeout=1):
            return
        assert time.monotonic() < deadline, server.log(name)
        await asyncio.sleep(0.1)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", ["postgresql"])
async def test_typescript_client_against_a_real_server(
    npm: str, database_url: str, tmp_path: Path
) -> None:
    TRANSFERS.clear()
    tool_server, tool_port = await serve_tools([transfer])
    try:
        async with FakeAnthropic(api_key="test-key") as fake:
            fake.script(_claude)
            await _run_client_tests(npm, database_url, tmp_path, fake, tool_port)
    finally:
        await tool_server.stop(None)
    # What the TS client submitted reached the model and the tool server: the
    # client tool's result, and one transfer (approved; the denied one never ran).
    results = [
        r.body["messages"][-1]["content"][0]
        for r in fake.requests
        if r.path.split("?")[0] == "/v1/messages"
        and isinstance(r.body["messages"][-1]["content"], list)
    ]
    outputs = [b.get("content") for b in results if b.get("type") == "tool_result"]
    assert '{"answer": 42}' in outputs, outputs
    assert TRANSFERS == [5]


async def _run_client_tests(
    npm: str, database_url: str, tmp_path: Path, fake: FakeAnthropic, tool_port: int
) -> None:
    server = Processes(tmp_path, database_url, chunk_delay=0.02)
    # A short grace: SIGTERM hands the streaming run back instead of finishing it.
    server.config.write_text(
        "[runner]\nlease_seconds = 1.0\ngrace_seconds = 0.5\n\n[offline]\nchunk_delay = 0.02\n"
    )
    secure = _secure_server(tmp_path / "secure", tool_port)
    secure.env.update(ANTHROPIC_API_KEY="test-key", ANTHROPIC_BASE_URL=fake.base_url)
    control = tmp_path / "control"
    control.mkdir()
    output = tmp_path / "npm-test.log"
    tests: asyncio.subprocess.Process | None = None
    try:
        server.migrate()
        secure.migrate()
        first = server.serve(name="server-0")
        secure.serve(name="secure")
        await _serving(server, "server-0")
        await _serving(secure, "secure", tls=True)
        pem = tmp_path / "secure"
        env = {
            **os.environ,
            "PAI_ADDRESS": server.address,
            "PAI_CONTROL_DIR": str(control),
            "PAI_SECURE_ADDRESS": secure.address,
            "PAI_SECURE_TOKEN": TOKEN,
            "PAI_SECURE_CA": str(pem / "ca.pem"),
            "PAI_SECURE_CERT": str(pem / "client.crt"),
            "PAI_SECURE_KEY": str(pem / "client.key"),
        }
        with output.open("wb") as log:
            # Its own session: a failed or timed-out test can stop npm and its node children.
            tests = await asyncio.create_subprocess_exec(
                npm,
                "test",
                cwd=CLIENT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        current, restarts = first, []
        waiting = asyncio.ensure_future(tests.wait())
        while not waiting.done():
            for how in ("kill", "term"):
                if how in restarts or not (control / how).exists():
                    continue
                # Mid-stream, as the TS test asked: SIGKILL (no goodbye) or SIGTERM
                # (a drain), then a new server on the same address.
                current.send_signal(signal.SIGKILL if how == "kill" else signal.SIGTERM)
                deadline = time.monotonic() + 60
                while current.poll() is None:
                    assert time.monotonic() < deadline, f"the server did not stop on {how}"
                    await asyncio.sleep(0.02)
                restarts.append(how)
                current = server.serve(name=f"server-{len(restarts)}")
            await asyncio.wait({waiting}, timeout=0.02)
        report = output.read_text()
        logs = "\n".join(server.log(f"server-{n}") for n in range(len(restarts) + 1))
        assert tests.returncode == 0, f"npm test failed:\n{report}\n{logs}"
        assert restarts == ["kill", "term"], f"the restart tests did not ask for both:\n{report}"
        assert "# fail 0" in report, report
        assert "# skipped 0" in report, report
    finally:
        if tests is not None and tests.returncode is None:
            os.killpg(tests.pid, signal.SIGKILL)
            await tests.wait()
        server.stop_all()
        secure.stop_all()
