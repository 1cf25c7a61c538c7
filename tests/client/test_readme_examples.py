"""The README's Python client examples run as written (against a real in-process server)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import re
from pathlib import Path

from pai_grpc.testing import serve_in_process

README = Path(__file__).resolve().parents[2] / "README.md"


def client_examples() -> list[str]:
    """The Python blocks of the README's "Clients" section, in order."""
    text = README.read_text()
    section = text.split("\n## Clients\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


def run_example(code: str, address: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code.replace("127.0.0.1:50051", address), "README.md", "exec"), {})
    return out.getvalue()


async def test_the_async_and_sync_quick_starts_work_as_written(sqlite_url: str) -> None:
    examples = client_examples()
    assert len(examples) == 3  # async, sync, and the raw stubs for any language
    async with serve_in_process(sqlite_url) as srv:
        for code in examples:
            # Each example runs its own event loop (asyncio.run), so off this one.
            printed = await asyncio.to_thread(run_example, code, srv.address)
            assert "You said: hello" in printed, printed
