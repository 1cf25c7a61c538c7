"""The plugin SDK stands apart from the runtime: importing it loads no runtime side."""

from __future__ import annotations

import ast
import json
import pathlib
import subprocess
import sys

import pai_grpc.plugin_sdk

#: Packages a plugin process must never load (the runtime's side of the protocol).
RUNTIME_SIDE = ("pai_grpc.plugins", "pai_grpc.server", "pai_grpc.runtime")
#: Packages the SDK's own modules must not import (a hook's Page and
#: VersionConflict are the hook-author API's, pai_grpc.lifecycle).
FORBIDDEN_IMPORTS = (*RUNTIME_SIDE, "storage")


def test_importing_the_sdk_loads_no_runtime_module() -> None:
    code = "import json, sys\nimport pai_grpc.plugin_sdk\nprint(json.dumps(sorted(sys.modules)))\n"
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout
    loaded = json.loads(out)
    leaked = [m for m in loaded if m.startswith(RUNTIME_SIDE)]
    assert leaked == []
    assert "pai_grpc.plugin_sdk._servicer" in loaded


def test_sdk_modules_import_no_runtime_or_storage_module() -> None:
    root = pathlib.Path(pai_grpc.plugin_sdk.__file__).parent
    offending: list[str] = []
    for path in sorted(root.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offending += [
                f"{path.name}: {name}"
                for name in names
                if any(name == f or name.startswith(f + ".") for f in FORBIDDEN_IMPORTS)
            ]
    assert offending == []
