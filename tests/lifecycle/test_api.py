"""The hook-author API of ``pai_grpc.lifecycle``: what it exports, and that each name is documented."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pai_grpc.lifecycle as api
import pai_grpc.lifecycle.internal as internal


def test_the_api_and_the_runtime_plumbing_are_disjoint() -> None:
    assert set(api.__all__).isdisjoint(internal.__all__)
    for name in ("Effective", "maybe_await", "current_report", "apply_patch", "FacadeBackend"):
        assert name not in api.__all__
    # Every exported name resolves (a stale __all__ entry fails here).
    assert all(hasattr(api, name) for name in api.__all__)
    assert all(hasattr(internal, name) for name in internal.__all__)


def _documented_values() -> set[str]:
    """Module-level assignments of the lifecycle package preceded by a ``#:`` comment."""
    out: set[str] = set()
    for path in Path(api.__file__).parent.glob("_*.py"):
        lines = path.read_text().splitlines()
        for node in ast.parse(path.read_text()).body:
            target = None
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
                target = node.targets[0].id
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                target = node.target.id
            if target and lines[node.lineno - 2].lstrip().startswith("#:"):
                out.add(target)
    return out


def test_every_public_name_is_documented() -> None:
    values = _documented_values()
    missing = []
    for module in (api, internal):
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isclass(obj) or inspect.isfunction(obj):
                documented = bool(obj.__doc__ and obj.__doc__.strip())
            else:
                documented = name in values
            if not documented:
                missing.append(f"{module.__name__}.{name}")
    assert missing == []
