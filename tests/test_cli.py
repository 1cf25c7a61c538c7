"""The command line, as a user runs it: migrate, serve, chat, health, SIGTERM drain."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.processes import free_port

pytestmark = pytest.mark.slow
EXE = [sys.executable, "-m", "pai_grpc.cli"]


def run(*args: str, env: dict[str, str], timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*EXE, *args], env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    out = dict(os.environ)
    out.pop("ANTHROPIC_API_KEY", None)
    out["PAI_DATABASE_URL"] = f"sqlite:///{tmp_path / 'cli.db'}"
    out["PAI_ADDRESS"] = f"127.0.0.1:{free_port()}"
    return out


def serve(env: dict[str, str], log: Path) -> subprocess.Popen[str]:
    """Migrate, start ``pai-grpc serve`` logging to ``log``, and wait until it is healthy."""
    assert run("migrate", env=env).returncode == 0
    with log.open("w") as sink:
        proc = subprocess.Popen([*EXE, "serve"], env=env, stdout=sink, stderr=sink, text=True)
    proc.log = log  # type: ignore[attr-defined]
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if run("health", "--address", env["PAI_ADDRESS"], env=env).returncode == 0:
            return proc
        assert proc.poll() is None, log.read_text()
        time.sleep(0.2)
    proc.kill()
    proc.wait()
    pytest.fail("server did not become healthy: " + log.read_text())


@pytest.fixture
def served(env: dict[str, str], tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    proc = serve(env, tmp_path / "serve.log")
    yield proc
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def test_serve_then_chat_prints_a_streamed_reply(
    served: subprocess.Popen[str], env: dict[str, str]
) -> None:
    result = run("chat", "--address", env["PAI_ADDRESS"], "hello", env=env)
    assert result.returncode == 0, result.stderr
    assert "offline stand-in model" in result.stdout
    assert "You said: hello" in result.stdout
    thread_id = result.stderr.split("thread ")[1].split()[0]
    again = run("chat", "--address", env["PAI_ADDRESS"], "--thread", thread_id, "again", env=env)
    assert again.returncode == 0, again.stderr
    assert "You said: again" in again.stdout
    assert "thread " not in again.stderr  # continued the same thread


def test_sigterm_with_nothing_in_flight_drains_without_waiting_out_the_grace(
    served: subprocess.Popen[str], env: dict[str, str]
) -> None:
    # NOT_SERVING during a drain with a run in flight is proven by
    # tests/test_drain.py::test_sigterm_reports_not_serving_while_streams_finish;
    # here nothing is in flight, so the drain must not sit out the grace period.
    started = time.monotonic()
    served.send_signal(signal.SIGTERM)
    assert served.wait(timeout=20) == 0
    assert time.monotonic() - started < 5  # well under the default 10 s grace
    stderr = served.log.read_text()  # type: ignore[attr-defined]
    assert "offline stand-in model" in stderr  # the log says which model answers
    assert "event loop: uvloop" in stderr  # [server] event_loop = "auto", uvloop installed
    assert "draining (grace 10.0s)" in stderr
    assert "drained; bye" in stderr
    assert " ERROR " not in stderr
    # The port is closed afterwards: health reports the server unreachable.
    assert run("health", "--address", env["PAI_ADDRESS"], env=env).returncode != 0


def test_serve_on_asyncio_s_own_loop_when_configured(env: dict[str, str], tmp_path: Path) -> None:
    config = tmp_path / "asyncio.toml"
    config.write_text('[server]\nevent_loop = "asyncio"\n\n[offline]\nchunk_delay = 0\n')
    env = {**env, "PAI_CONFIG": str(config)}
    log = tmp_path / "asyncio.log"
    proc = serve(env, log)
    try:
        result = run("chat", "--address", env["PAI_ADDRESS"], "hello", env=env)
        assert result.returncode == 0, result.stderr
        assert "You said: hello" in result.stdout
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    assert "event loop: asyncio" in log.read_text()


def test_an_event_loop_that_is_not_installed_is_a_config_error(
    env: dict[str, str], tmp_path: Path
) -> None:
    config = tmp_path / "uvloop.toml"
    config.write_text('[server]\nevent_loop = "uvloop"\n')
    assert run("migrate", env=env).returncode == 0
    # An interpreter where uvloop cannot be imported (a None entry in sys.modules).
    script = (
        "import sys; sys.modules['uvloop'] = None; from pai_grpc import cli; "
        "sys.exit(cli.main(['serve']))"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        env={**env, "PAI_CONFIG": str(config)},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert 'event_loop = "uvloop", but uvloop is not installed' in result.stderr


def test_serve_refuses_an_unmigrated_database(env: dict[str, str]) -> None:
    result = run("serve", env=env, timeout=30)
    assert result.returncode == 2
    assert "pai-grpc migrate" in result.stderr


def test_chat_reports_an_unreachable_server(env: dict[str, str]) -> None:
    result = run("chat", "--address", f"127.0.0.1:{free_port()}", "hi", env=env)
    assert result.returncode == 1
    assert "UNAVAILABLE" in result.stderr
