"""The README's worked mutual TLS + JWT example, run as a user would: its commands, its files.

The shell block makes the certificates and the issuer key with openssl, the
TOML block is the config, the Python block mints the token, and the `chat`
command talks to a real `pai-grpc serve` process over mutual TLS.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.processes import EXE, Processes

README = Path(__file__).resolve().parent.parent / "README.md"
HEADING = "### Worked example: mutual TLS plus JWT"


def _blocks() -> list[tuple[str, str]]:
    """The fenced code blocks of the worked example, as (language, text)."""
    text = README.read_text()
    section = text.split(HEADING, 1)[1]
    section = re.split(r"\n#{2,3} ", section, maxsplit=1)[0]
    return re.findall(r"```(\w+)\n(.*?)```", section, re.S)


@pytest.mark.slow
def test_the_readme_mtls_and_jwt_example_works_as_written(tmp_path: Path) -> None:
    if shutil.which("openssl") is None:
        pytest.fail("openssl is needed to run the README's worked example")
    blocks = _blocks()
    shells = [body for lang, body in blocks if lang == "sh"]
    (config,) = [body for lang, body in blocks if lang == "toml"]
    (mint,) = [body for lang, body in blocks if lang == "python"]
    make_files, serve_cmd, chat_cmd = shells
    assert "--address 0.0.0.0:50051" in serve_cmd  # authentication lets it listen beyond loopback

    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", make_files],
        cwd=tmp_path,
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr.decode()
    (tmp_path / "pai.toml").write_text(config)

    state = tmp_path / "state"  # the harness's own files, apart from the example's
    state.mkdir()
    procs = Processes(state, f"sqlite:///{state / 'pai.db'}")
    procs.migrate()
    # The README's config (relative paths: the server runs in the example's folder).
    env = {**procs.env, "PAI_CONFIG": str(tmp_path / "pai.toml")}
    port = procs.address.rsplit(":", 1)[1]
    with (tmp_path / "serve.log").open("wb") as out:
        serve = subprocess.Popen(
            [*EXE, "serve", "--address", procs.address],
            cwd=tmp_path,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    procs.procs.append(serve)
    try:
        for _ in range(600):
            log = (tmp_path / "serve.log").read_text()
            if "serving pai.v1" in log or serve.poll() is not None:
                break
            time.sleep(0.1)
        assert "mutual TLS" in log, log

        cwd = os.getcwd()
        os.chdir(tmp_path)  # the Python block opens issuer.key relative to the example's folder
        try:
            scope: dict[str, object] = {}
            exec(mint, scope)
        finally:
            os.chdir(cwd)
        token = str(scope["token"])

        def chat(command: str, token: str) -> subprocess.CompletedProcess[bytes]:
            command = command.replace("pai-grpc", " ".join(EXE), 1)
            command = command.replace("localhost:50051", f"localhost:{port}")
            return subprocess.run(
                ["bash", "-c", command],
                cwd=tmp_path,
                env={**procs.env, "TOKEN": token},
                capture_output=True,
                timeout=60,
            )

        answered = chat(chat_cmd, token)
        assert answered.returncode == 0, answered.stderr.decode()
        assert b"run RUN_STATUS_COMPLETED" in answered.stderr or answered.stdout, answered
        refused = chat(chat_cmd, "")
        assert refused.returncode != 0
        assert b"UNAUTHENTICATED" in refused.stderr, refused.stderr
        no_cert = chat(chat_cmd.replace("--tls-cert client.crt --tls-key client.key", ""), token)
        assert no_cert.returncode != 0
        assert b"UNAVAILABLE" in no_cert.stderr, no_cert.stderr
    finally:
        procs.stop_all()
