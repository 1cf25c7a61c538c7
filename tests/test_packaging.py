"""The built wheel carries everything a container needs (migrations, generated code)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


def test_the_wheel_migrates_and_imports_without_the_source_tree(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = wheels.glob("pai_grpc-*.whl")
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    env = {**os.environ, "PYTHONPATH": str(target)}
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import storage, pai_grpc, pai.v1.thread_service_pb2 as t; print(storage.__file__)",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert probe.stdout.startswith(str(target))
    # The HTTP port's Connect services and the console's static files ship too.
    for shipped in (
        "pai/v1/thread_service_connect.py",
        "pai/v1/run_service_connect.py",
        "pai/v1/admin_service_connect.py",
        "pai_grpc/console/index.html",
        "pai_grpc/console/app.js",
        "pai_grpc/console/api.js",
        "pai_grpc/console/timeline.js",
        "pai_grpc/console/style.css",
    ):
        assert (target / shipped).is_file(), shipped
    migrated = subprocess.run(
        [
            sys.executable,
            "-m",
            "pai_grpc.cli",
            "migrate",
            "--database-url",
            f"sqlite:///{tmp_path / 'x.db'}",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert migrated.returncode == 0, migrated.stderr
    assert "-> 0001" in migrated.stderr
