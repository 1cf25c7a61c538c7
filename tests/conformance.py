"""Which tests prove which rule: ``make conformance``.

Reads the rule list (``tests/CONFORMANCE.md``, a copy of the shared
specification's rule list), finds every test that names a rule with
``@pytest.mark.rule("ID")`` (by reading the test sources, so nothing runs),
prints each rule with its tests, and exits non-zero when a rule of a
required section has no test, or a test names a rule that does not exist.
A test marked ``xfail`` is listed but does not count as proof.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "tests" / "CONFORMANCE.md"
SHARED = ROOT.parent / "shared" / "CONFORMANCE.md"
#: Sections every build must cover completely.
REQUIRED = (
    "RT", "LC", "RMC", "CMP", "HR", "PR", "PMS", "CFG", "AMC", "RSN", "TSS", "TV", "TH", "AS",
    "CMPS", "REM",
)  # fmt: skip

_RULE = re.compile(r"^- ([A-Z]+-\d+) (.*)$")
_SECTION = re.compile(r"^## ([A-Z]+) — (.*)$")


@dataclass(frozen=True)
class Proof:
    """A test that names a rule."""

    test: str
    xfail: bool


def read_rules(path: Path) -> dict[str, tuple[str, str]]:
    """Rule id -> (section, text), in document order."""
    rules: dict[str, tuple[str, str]] = {}
    section = ""
    for line in path.read_text().splitlines():
        if m := _SECTION.match(line):
            section = m.group(1)
        elif m := _RULE.match(line):
            rules[m.group(1)] = (section, m.group(2))
    return rules


def _marks(node: ast.expr) -> list[ast.Call]:
    """The pytest.mark.* calls in a decorator or pytestmark value."""
    if isinstance(node, ast.List | ast.Tuple):
        return [c for item in node.elts for c in _marks(item)]
    if isinstance(node, ast.Call):
        return [node]
    return []


def _mark_name(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else ""


def _rule_ids(calls: list[ast.Call]) -> list[str]:
    return [
        str(c.args[0].value)
        for c in calls
        if _mark_name(c) == "rule" and c.args and isinstance(c.args[0], ast.Constant)
    ]


def _is_xfail(calls: list[ast.Call]) -> bool:
    return any(_mark_name(c) == "xfail" for c in calls)


def find_proofs(tests: Path) -> dict[str, list[Proof]]:
    """Rule id -> the tests naming it."""
    proofs: dict[str, list[Proof]] = defaultdict(list)
    for path in sorted(tests.rglob("test_*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        module_marks: list[ast.Call] = []
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets
            ):
                module_marks += _marks(node.value)
        rel = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.relative_to(tests)

        def visit(
            body: list[ast.stmt], prefix: str, inherited: list[ast.Call], rel: Path = rel
        ) -> None:
            for node in body:
                if isinstance(node, ast.ClassDef):
                    marks = inherited + [c for d in node.decorator_list for c in _marks(d)]
                    visit(node.body, f"{prefix}{node.name}::", marks, rel)
                elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    if not node.name.startswith("test"):
                        continue
                    marks = inherited + [c for d in node.decorator_list for c in _marks(d)]
                    for rule in _rule_ids(marks):
                        test = f"{rel}::{prefix}{node.name}"
                        proofs[rule].append(Proof(test, _is_xfail(marks)))

        visit(tree.body, "", module_marks)
    return proofs


def main(argv: list[str] | None = None) -> int:
    """Print the rule/test map; return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--require",
        default=",".join(REQUIRED),
        help="comma-separated sections that must be fully covered",
    )
    parser.add_argument("--quiet", action="store_true", help="print only problems and totals")
    args = parser.parse_args(argv)
    required = {s for s in args.require.split(",") if s}
    rules = read_rules(RULES)
    proofs = find_proofs(ROOT / "tests")
    problems: list[str] = []
    if SHARED.exists() and read_rules(SHARED) != rules:
        problems.append(f"{RULES.relative_to(ROOT)} differs from {SHARED}: copy it again")
    unknown = sorted(set(proofs) - set(rules))
    for rule in unknown:
        tests = ", ".join(p.test for p in proofs[rule])
        problems.append(f"{rule} is not a rule of CONFORMANCE.md (named by {tests})")
    covered: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for rule, (section, text) in rules.items():
        proven = [p for p in proofs.get(rule, []) if not p.xfail]
        covered[section][1] += 1
        if proven:
            covered[section][0] += 1
        elif section in required:
            problems.append(f"{rule} has no passing test: {text}")
        if not args.quiet:
            status = "ok  " if proven else ("MISSING" if section in required else "open")
            print(f"{status:7} {rule:8} {text[:90]}")
            for p in proofs.get(rule, []):
                print(f"          {'(xfail) ' if p.xfail else ''}{p.test}")
    print()
    for section, (done, total) in covered.items():
        flag = "" if done == total else ("  <- required" if section in required else "")
        print(f"{section:5} {done:3}/{total:<3}{flag}")
    if problems:
        print("\nconformance problems:", file=sys.stderr)
        for p in problems:
            print(f"  - {p}", file=sys.stderr)
        return 1
    print(f"\nevery rule of {', '.join(sorted(required))} names at least one passing test")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
