"""The packages of ``pai_grpc`` import each other without a cycle.

Nodes are the first-level names under ``pai_grpc``: each subpackage
(``convert``, ``tools``, ...) and each top-level module (``errors``,
``config``, ...). There is an edge ``a -> b`` when any module of ``a``
imports anything of ``b``, read from the AST of every module: absolute and
relative imports, at module level or inside functions, and also the imports
under ``if TYPE_CHECKING:`` — a type-only import is still a dependency of the
design, and counting it keeps this test at least as strict as the
before-stop hook's check (which counts every absolute import). Imports of the
root package ``pai_grpc`` itself are not edges (every submodule loads it).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pai_grpc

ROOT = Path(pai_grpc.__file__).parent


def _node(module: str) -> str | None:
    """The first-level name of a dotted ``pai_grpc`` module, or None outside it."""
    parts = module.split(".")
    if parts[0] != "pai_grpc" or len(parts) < 2:
        return None
    return parts[1]


def _module_name(path: Path) -> list[str]:
    """The dotted name of a module file (a package's ``__init__`` is the package)."""
    parts = ["pai_grpc", *path.relative_to(ROOT).with_suffix("").parts]
    return parts[:-1] if parts[-1] == "__init__" else parts


def _imported(path: Path) -> set[str]:
    """Every ``pai_grpc`` module a file imports, relative imports resolved."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name[:-1]
    return imported_modules(path.read_text(), package)


def imported_modules(source: str, package: list[str]) -> set[str]:
    """Every module ``source`` imports anywhere; ``package`` resolves relative ones."""
    out: set[str] = set()
    for n in ast.walk(ast.parse(source)):
        if isinstance(n, ast.Import):
            out.update(alias.name for alias in n.names)
        elif isinstance(n, ast.ImportFrom):
            base = package[: len(package) - n.level + 1] if n.level else []
            module = ".".join([*base, *([n.module] if n.module else [])])
            out.add(module)
            # `from pai_grpc import convert` imports the subpackage `convert`.
            out.update(f"{module}.{alias.name}" for alias in n.names)
    return out


def package_graph() -> dict[str, set[str]]:
    """The edges between the first-level names of ``pai_grpc``."""
    nodes = {p.stem if p.is_file() else p.name for p in ROOT.iterdir()}
    edges: dict[str, set[str]] = {}
    for path in ROOT.rglob("*.py"):
        source = _node(".".join(_module_name(path)))
        if source is None:
            continue  # the root package's own __init__
        for module in _imported(path):
            target = _node(module)
            if target is not None and target != source and target in nodes:
                edges.setdefault(source, set()).add(target)
    return edges


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``edges`` as a path ``[a, ..., a]``, or None when acyclic."""
    state: dict[str, str] = {}  # "open" while on the DFS stack, then "done"
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == "open":
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)) is not None:
                return cycle
        stack.pop()
        state[node] = "done"
        return None

    for start in sorted(edges):
        if start not in state and (cycle := visit(start)) is not None:
            return cycle
    return None


def test_the_package_import_graph_is_acyclic() -> None:
    edges = package_graph()
    assert find_cycle(edges) is None, " -> ".join(find_cycle(edges) or [])


def test_the_graph_sees_relative_and_type_checking_imports() -> None:
    # The check is only as good as the edges it reads.
    source = (
        "from typing import TYPE_CHECKING\n"
        "from ..domain import JsonValue\n"
        "from . import _sibling\n"
        "if TYPE_CHECKING:\n"
        "    from pai_grpc.tools import ToolEntry\n"
        "def f():\n"
        "    import pai_grpc.models\n"
    )
    found = imported_modules(source, ["pai_grpc", "convert"])
    assert {"pai_grpc.domain", "pai_grpc.convert._sibling", "pai_grpc.tools"} <= found
    assert "pai_grpc.models" in found
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_tools_sit_below_the_conversion_layer() -> None:
    # The cycle this test replaces: convert -> tools -> convert. Tools depend
    # on the domain only; the ToolService client and server are an edge over
    # `convert` that nothing below the edge imports.
    edges = package_graph()
    assert edges.get("tools", set()) <= {"domain", "errors"}
    assert "convert" in edges["toolservice"]
    assert not any("toolservice" in edges.get(p, set()) for p in ("convert", "tools", "domain"))


def test_the_plugin_sdk_loads_neither_storage_nor_the_runtime() -> None:
    # A plugin process imports the hook-author API and the SDK only: no
    # database layer, no SQL toolkit, no runtime, no server.
    code = "import json, sys\nimport pai_grpc.plugin_sdk\nprint(json.dumps(sorted(sys.modules)))\n"
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=60
    ).stdout
    loaded = json.loads(out)
    forbidden = ("storage", "sqlalchemy", "pai_grpc.runtime", "pai_grpc.server")
    leaked = [m for m in loaded if any(m == f or m.startswith(f + ".") for f in forbidden)]
    assert leaked == []
    assert "pai_grpc.lifecycle" in loaded  # the check saw a real import of the SDK


def _owner(module: list[str]) -> list[str]:
    """The package that owns a module: ``pai_grpc.<first level>`` or ``storage``."""
    return module[:2] if module[0] == "pai_grpc" else module[:1]


def _is_module(dotted: str) -> bool:
    """Whether a dotted name is a module or package of this project (not a name in one)."""
    parts = dotted.split(".")
    base = ROOT.parent.joinpath(*parts)
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def private_imports(source: str, module: list[str], package: list[str]) -> list[str]:
    """The ``_private`` modules of other packages that ``source`` (``module``) imports."""
    out: list[str] = []
    for imported in sorted(imported_modules(source, package)):
        parts = imported.split(".")
        if parts[0] not in ("pai_grpc", "storage") or not _is_module(imported):
            continue
        owner = _owner(parts)
        if owner == _owner(module):
            continue
        if any(p.startswith("_") and not p.startswith("__") for p in parts[len(owner) :]):
            out.append(imported)
    return out


def test_no_package_imports_another_packages_private_modules() -> None:
    # A package's `_private` modules are its own; other packages go through
    # its public modules (its __init__, or a documented module such as
    # pai_grpc.lifecycle.internal). Top-level modules of the root package
    # (pai_grpc._wire, pai_grpc._config_file, ...) are packages of their own.
    offending: list[str] = []
    for root in (ROOT, ROOT.parent / "storage"):
        for path in sorted(root.rglob("*.py")):
            parts = [*path.relative_to(ROOT.parent).with_suffix("").parts]
            module = parts[:-1] if parts[-1] == "__init__" else parts
            package = module if path.name == "__init__.py" else module[:-1]
            offending += [
                f"{'.'.join(module)} -> {imported}"
                for imported in private_imports(path.read_text(), module, package)
            ]
    assert offending == []


def test_the_private_import_check_sees_other_packages_private_modules() -> None:
    source = (
        "from pai_grpc.lifecycle._compose import Effective\n"
        "from pai_grpc.lifecycle import internal\n"
        "from storage._json import check_strict_json\n"
        "from ._facade import LifecycleThread\n"
        "from pai_grpc._wire import guard\n"
    )
    found = private_imports(source, ["pai_grpc", "runtime", "_x"], ["pai_grpc", "runtime"])
    assert found == ["pai_grpc.lifecycle._compose", "storage._json"]
