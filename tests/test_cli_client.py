"""The client commands as people and scripts use them, against a real `pai-grpc serve`.

The model is the fake Anthropic API (scripted turns) and the tool that asks
for approval lives in a real tool server, so approvals travel the whole way.
The interactive chat is driven through a pseudo-terminal: typed lines,
Ctrl-C (the terminal's interrupt character) and Ctrl-D (end of input).
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import subprocess
import termios
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from pai_grpc.client import PaiClient, RetryPolicy
from pai_grpc.domain import ToolPart
from pai_grpc.fakes import FakeAnthropic, reply, text_block, tool_use_block
from pai_grpc.fakes._anthropic_turns import StreamTurn
from pai_grpc.tools import tool
from pai_grpc.toolservice import serve_tools
from tests.processes import EXE, Processes

pytestmark = pytest.mark.slow

TOKEN = "cli-test-token"


class FileName(BaseModel):
    name: str


@tool(approval=True, description="Delete a file.")
async def delete_file(value: FileName) -> str:
    return f"deleted {value.name}"


def asks_to_delete(call_id: str, name: str) -> StreamTurn:
    return reply(tool_use_block(call_id, "delete_file", {"name": name}), stop_reason="tool_use")


@asynccontextmanager
async def deployment(tmp_path: Path, url: str, *turns: StreamTurn) -> AsyncIterator[Processes]:
    """`pai-grpc serve` answering with scripted turns, a tool server, and a client env."""
    server, port = await serve_tools([delete_file])
    try:
        async with FakeAnthropic(api_key="test-key") as fake:
            fake.script(*turns)
            ps = Processes(tmp_path, url)
            ps.config.write_text(
                'default_agent = "assistant"\n\n'
                f'[auth]\ntokens = {{ "{TOKEN}" = "acme" }}\n\n'
                '[agents.assistant]\nmodel = "anthropic:claude-test"\ntools = ["delete_file"]\n\n'
                f'[tool_servers.files]\naddress = "127.0.0.1:{port}"\napproval = ["delete_file"]\n'
            )
            ps.env.update(
                ANTHROPIC_API_KEY="test-key",
                ANTHROPIC_BASE_URL=fake.base_url,
                PAI_ADDRESS=ps.address,
                PAI_TOKEN=TOKEN,
            )
            await asyncio.to_thread(ps.migrate)
            ps.serve(name="serve")
            try:
                patient = RetryPolicy(max_attempts=100, initial_backoff=0.05, max_backoff=0.3)
                async with PaiClient(ps.address, token=TOKEN, retry=patient) as client:
                    [_ async for _ in client.threads()]  # up and answering
                yield ps
            finally:
                ps.stop_all()
    finally:
        await server.stop(None)


async def cli(ps: Processes, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        *EXE,
        *args,
        env=env or ps.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def _take_terminal() -> None:
    # In the child, after setsid: make the pty its controlling terminal, so the
    # interrupt character typed on it raises SIGINT, as in a real terminal.
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class Terminal:
    """A `pai-grpc` command on a pseudo-terminal: type into it, wait for what it shows."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        master, slave = os.openpty()
        self.proc = subprocess.Popen(
            [*EXE, *args],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            start_new_session=True,
            preexec_fn=_take_terminal,
        )
        os.close(slave)
        os.set_blocking(master, False)
        self.master = master
        self.screen = ""
        self.seen_up_to = 0

    def type(self, keys: str) -> None:
        os.write(self.master, keys.encode())

    async def expect(self, text: str, within: float = 30) -> str:
        """Wait (bounded) until ``text`` shows after what was already expected; what led to it."""
        deadline = time.monotonic() + within
        while (found := self.screen.find(text, self.seen_up_to)) < 0:
            if time.monotonic() > deadline:
                raise AssertionError(f"{text!r} never showed; the screen:\n{self.screen[-3000:]}")
            try:
                self.screen += os.read(self.master, 65536).decode(errors="replace")
            except (BlockingIOError, OSError):  # nothing yet, or the command exited
                await asyncio.sleep(0.02)
        shown = self.screen[self.seen_up_to : found + len(text)]
        self.seen_up_to = found + len(text)
        return shown

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.close(self.master)


async def test_an_interactive_chat_streams_asks_for_approval_and_cancels_on_ctrl_c(
    tmp_path: Path, sqlite_url: str
) -> None:
    story = " ".join(f"word{i}" for i in range(400))
    turns = (
        asks_to_delete("toolu_1", "notes.txt"),
        reply(text_block("Deleted notes.txt for you.")),
        asks_to_delete("toolu_2", "todo.txt"),
        reply(text_block("Understood, todo.txt stays.")),
        reply(text_block(story), delay=0.05),  # 20 s of words unless cancelled
    )
    async with deployment(tmp_path, sqlite_url, *turns) as ps:
        term = Terminal(["chat"], ps.env)
        try:
            await term.expect("> ")
            term.type("please clean up\r")
            shown = await term.expect('? allow delete_file {"name": "notes.txt"}? ')
            assert "\r| " in shown, "a spinner turns on a terminal until something shows"
            thread_id = shown.split("thread ")[1].split()[0]
            term.type("y\r")
            await term.expect("Deleted notes.txt for you.")
            await term.expect("> ")

            term.type("and todo.txt\r")
            await term.expect('? allow delete_file {"name": "todo.txt"}? ')
            term.type("n: keep it\r")
            await term.expect("[tool call denied]")
            await term.expect("Understood, todo.txt stays.")
            await term.expect("> ")

            term.type("tell me a long story\r")
            await term.expect("word3 ")
            term.type("\x03")  # Ctrl-C: cancels the reply, not the session
            await term.expect("[cancelled run_")
            await term.expect("> ")

            term.type("/history\r")
            history = await term.expect("assistant: Understood, todo.txt stays.")
            assert "user: please clean up" in history
            assert '[tool delete_file {"name": "todo.txt"} -> output-denied]' in history
            await term.expect("\n> ")

            term.type("\x04")  # Ctrl-D at an empty prompt ends the session
            assert await asyncio.to_thread(term.proc.wait, 30) == 0
        finally:
            term.close()

        async with PaiClient(ps.address, token=TOKEN) as client:
            runs = [r async for r in client.runs(thread_id)]
            assert [r.status for r in runs] == ["cancelled", "completed", "completed"]
            parts = [
                p
                async for m in client.messages(thread_id)
                for p in m.parts
                if isinstance(p, ToolPart)
            ]
            assert [(p.approval.approved, p.approval.reason) for p in parts if p.approval] == [
                (True, None),
                (False, "keep it"),
            ]


async def test_scripts_list_show_stream_and_resolve_with_json_output(
    tmp_path: Path, sqlite_url: str
) -> None:
    turns = (asks_to_delete("toolu_1", "notes.txt"), reply(text_block("Deleted.")))
    async with deployment(tmp_path, sqlite_url, *turns) as ps:
        code, out, err = await cli(ps, "chat", "clean up")
        assert code == 0, err
        assert "\r|" not in out + err, "no spinner without a terminal"
        thread_id = err.split("thread ")[1].split()[0]
        waits = err.split("pai-grpc actions resolve ")[1].split()
        run_id, action_id = waits[0], waits[1]

        code, out, _ = await cli(ps, "runs", "show", run_id, "-o", "json")
        shown = json.loads(out)
        assert shown["run"]["status"] == "waiting"
        assert [a["id"] for a in shown["pending_actions"]] == [action_id]
        assert shown["pending_actions"][0]["input"] == {"name": "notes.txt"}

        # PAI_TOKEN is what lets the commands in: without it the server refuses.
        anonymous = {k: v for k, v in ps.env.items() if k != "PAI_TOKEN"}
        code, _, err = await cli(ps, "runs", "show", run_id, env=anonymous)
        assert code == 1
        assert "UNAUTHENTICATED" in err

        code, out, err = await cli(
            ps, "actions", "resolve", run_id, action_id, "--approve", "-o", "json"
        )
        assert code == 0, err
        assert json.loads(out)["id"] == run_id

        code, out, err = await cli(ps, "runs", "stream", run_id, "-o", "json")
        assert code == 0, err
        events: list[dict[str, Any]] = [json.loads(line) for line in out.splitlines()]
        seqs = [e["seq"] for e in events]
        assert seqs == sorted(set(seqs))
        assert events[-1]["payload"] == {
            "kind": "status",
            "status": "completed",
            "outcome": "completed",
            "reason": None,
            "error": None,
        }
        # The run has ended: the read commands are independent of each other.
        tail, runs, threads, show_json, show_text = await asyncio.gather(
            cli(ps, "runs", "stream", run_id, "--after-seq", str(seqs[-3]), "-o", "json"),
            cli(ps, "runs", "list", thread_id, "-o", "json"),
            cli(ps, "threads", "list", "-o", "json"),
            cli(ps, "threads", "show", thread_id, "-o", "json"),
            cli(ps, "threads", "show", thread_id),
        )
        assert [json.loads(line)["seq"] for line in tail[1].splitlines()] == seqs[-2:]
        assert [r["id"] for r in json.loads(runs[1])] == [run_id]
        assert [t["id"] for t in json.loads(threads[1])] == [thread_id]
        out = show_json[1]
        shown = json.loads(out)
        assert shown["thread"]["status"] == "idle"
        assert [m["role"] for m in shown["messages"]] == ["user", "assistant", "assistant"]
        out = show_text[1]
        assert "user: clean up" in out
        assert (
            '[tool delete_file {"name": "notes.txt"} -> output-available: "deleted notes.txt"]'
            in out
        )
