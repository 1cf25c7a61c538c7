"""Dev mode (no auth configured) refuses to listen beyond loopback unless told --insecure-dev."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from pai_grpc._config_file import parse_config
from pai_grpc._exposure import InsecureBind, is_loopback
from pai_grpc.config import Settings
from pai_grpc.models import OfflineModel
from pai_grpc.runtime import DEFAULT_AGENT, Agent, AgentRegistry
from pai_grpc.server import App
from pai_grpc.testing import migrated_store
from storage import Store
from tests.processes import EXE, free_port

ROOT = Path(__file__).resolve().parent.parent
REFUSAL = "refusing to serve"


@pytest.mark.parametrize(
    ("address", "loopback"),
    [
        ("127.0.0.1:50051", True),
        ("127.8.9.10:1", True),
        ("[::1]:50051", True),
        ("localhost:50051", True),
        ("LOCALHOST:0", True),
        ("[::ffff:127.0.0.1]:1", True),
        ("unix:/tmp/pai.sock", True),
        ("0.0.0.0:50051", False),
        ("[::]:50051", False),
        (":50051", False),
        ("192.168.1.20:50051", False),
        ("[fe80::1]:50051", False),
        ("pai.example.com:50051", False),
        ("localhost.example.com:50051", False),
    ],
)
def test_which_addresses_count_as_loopback(address: str, loopback: bool) -> None:
    assert is_loopback(address) is loopback


def test_any_configured_identity_source_lifts_dev_mode() -> None:
    assert Settings().dev_mode
    assert Settings(file=parse_config({"auth": {}}, "t")).dev_mode
    assert Settings(file=parse_config({"auth": {"tokens": {}}}, "t")).dev_mode
    assert not Settings(tokens={"t": "s"}).dev_mode
    assert not Settings(admin_tokens={"t": "s"}).dev_mode
    assert not Settings(file=parse_config({"auth": {"tokens": {"t": "s"}}}, "t")).dev_mode


def _app(url: str, store: Store, **settings: Any) -> App:
    agents = AgentRegistry([Agent(name=DEFAULT_AGENT, model=OfflineModel(chunk_delay=0))])
    return App(Settings(database_url=url, **settings), agents, store=store)


async def test_app_refuses_a_public_address_in_dev_mode(
    sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = await migrated_store(sqlite_url)
    refused = _app(sqlite_url, store, address="0.0.0.0:0")
    with pytest.raises(InsecureBind, match=REFUSAL):
        await refused.start()
    assert refused.server is None
    assert refused.runner is None
    await refused.stop(grace=0)
    # Each of these starts: a token, the explicit flag, a loopback address.
    for settings, warned in (
        ({"address": "0.0.0.0:0", "tokens": {"tok": "scope"}}, False),
        ({"address": "0.0.0.0:0", "insecure_dev": True}, True),
        ({"address": "localhost:0"}, False),
    ):
        caplog.clear()
        app = _app(sqlite_url, await migrated_store(sqlite_url), **settings)
        with caplog.at_level(logging.WARNING, logger="pai_grpc.server"):
            assert await app.start() > 0
        await app.stop(grace=0)
        assert any("INSECURE" in r.message for r in caplog.records) is warned, settings


# ---- the real command ------------------------------------------------------


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if not k.startswith("PAI_")}
    out.pop("ANTHROPIC_API_KEY", None)
    out["PAI_DATABASE_URL"] = f"sqlite:///{tmp_path / 'pai.db'}"
    return out


def outcome(env: dict[str, str], *args: str, tmp: Path) -> tuple[int, str]:
    """Run ``pai-grpc serve ARGS``: (its exit code, or 0 once it is healthy; its log).

    The address is ``--address`` when given, else ``PAI_ADDRESS``; health is
    probed on loopback at its port.
    """
    done = subprocess.run([*EXE, "migrate"], env=env, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    address = args[args.index("--address") + 1] if "--address" in args else env["PAI_ADDRESS"]
    health = f"127.0.0.1:{address.rsplit(':', 1)[1]}"
    log = tmp / "serve.log"
    with log.open("wb") as sink:
        proc = subprocess.Popen([*EXE, "serve", *args], env=env, stdout=sink, stderr=sink)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            code = proc.poll()
            if code is not None:
                return code, log.read_text()
            probe = subprocess.run(
                [*EXE, "health", "--address", health, "--timeout", "1"],
                env=env,
                capture_output=True,
                timeout=30,
            )
            if probe.returncode == 0:
                return 0, log.read_text()
            time.sleep(0.2)
        pytest.fail("serve neither exited nor became healthy: " + log.read_text())
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.slow
@pytest.mark.parametrize("host", ["0.0.0.0", "[::]"])
def test_serve_exits_2_on_a_public_address_without_auth(
    env: dict[str, str], tmp_path: Path, host: str
) -> None:
    address = f"{host}:{free_port()}"
    code, log = outcome(env, "--address", address, tmp=tmp_path)
    assert code == 2, log
    assert f"{REFUSAL} {address}" in log
    assert "--insecure-dev" in log
    assert "PAI_INSECURE_DEV=1" in log


@pytest.mark.slow
@pytest.mark.parametrize("how", ["flag", "env"])
def test_insecure_dev_serves_a_public_address_with_a_warning(
    env: dict[str, str], tmp_path: Path, how: str
) -> None:
    args = ["--address", f"0.0.0.0:{free_port()}"]
    if how == "flag":
        args.append("--insecure-dev")
    else:
        env["PAI_INSECURE_DEV"] = "1"
    code, log = outcome(env, *args, tmp=tmp_path)
    assert code == 0, log
    assert re.search(r"WARNING .*INSECURE: serving 0\.0\.0\.0:\d+ with no authentication", log)


@pytest.mark.slow
def test_a_configured_token_lifts_the_refusal(env: dict[str, str], tmp_path: Path) -> None:
    config = tmp_path / "pai.toml"
    config.write_text('[auth.tokens]\n"s3cret" = "team-a"\n')
    args = ("--address", f"0.0.0.0:{free_port()}", "--config", str(config))
    code, log = outcome(env, *args, tmp=tmp_path)
    assert code == 0, log
    assert "INSECURE" not in log


@pytest.mark.slow
def test_loopback_needs_no_flag(env: dict[str, str], tmp_path: Path) -> None:
    code, log = outcome(env, "--address", f"127.0.0.1:{free_port()}", tmp=tmp_path)
    assert code == 0, log
    assert "INSECURE" not in log


# ---- the container image ---------------------------------------------------


def dockerfile_runtime_env() -> dict[str, str]:
    """The ENV of the Dockerfile's final stage (continuation lines joined)."""
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    final = text.rsplit("\nFROM ", 1)[1]
    env: dict[str, str] = {}
    for line in final.splitlines():
        if line.startswith("ENV "):
            env.update(re.findall(r"(\w+)=(\S+)", line))
    return env


def test_the_image_listens_publicly_but_does_not_opt_out_of_the_refusal() -> None:
    env = dockerfile_runtime_env()
    assert not is_loopback(env["PAI_ADDRESS"])  # reachable through a published port
    assert "PAI_INSECURE_DEV" not in env
    assert "PAI_CONFIG" not in env
    cmd = (ROOT / "Dockerfile").read_text().rsplit("\nCMD ", 1)[1]
    assert "pai-grpc serve" in cmd
    assert "insecure" not in cmd


@pytest.mark.slow
@pytest.mark.parametrize("given", ["nothing", "a config with auth", "PAI_INSECURE_DEV=1"])
def test_the_image_command_needs_a_config_or_the_explicit_flag(
    env: dict[str, str], tmp_path: Path, given: str
) -> None:
    # The image's environment, on a free port and a database in tmp.
    image = dockerfile_runtime_env()
    env["PAI_ADDRESS"] = image["PAI_ADDRESS"].rsplit(":", 1)[0] + f":{free_port()}"
    if given == "a config with auth":
        config = tmp_path / "pai.toml"
        config.write_text('[auth.tokens]\n"s3cret" = "team-a"\n')
        env["PAI_CONFIG"] = str(config)
    elif given == "PAI_INSECURE_DEV=1":
        env["PAI_INSECURE_DEV"] = "1"
    code, log = outcome(env, tmp=tmp_path)
    if given == "nothing":
        assert code == 2, log
        assert REFUSAL in log
    else:
        assert code == 0, log


async def test_the_http_port_is_refused_off_loopback_in_dev_mode(sqlite_url: str) -> None:
    refused = _app(sqlite_url, await migrated_store(sqlite_url), http_address="0.0.0.0:0")
    with pytest.raises(InsecureBind, match=f"{REFUSAL} 0.0.0.0:0"):
        await refused.start()
    assert refused.server is None
    assert refused.http is None
    await refused.stop(grace=0)
    allowed = _app(
        sqlite_url,
        await migrated_store(sqlite_url),
        http_address="0.0.0.0:0",
        tokens={"tok": "scope"},
    )
    await allowed.start()
    assert allowed.http_port > 0
    await allowed.stop(grace=0)
