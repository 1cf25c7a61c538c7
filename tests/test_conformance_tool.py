"""`make conformance` reads rule markers from the test sources and counts only real proofs."""

from __future__ import annotations

from pathlib import Path

from tests.conformance import find_proofs, main, read_rules


def test_rules_markers_and_xfails_are_read_from_the_sources(tmp_path: Path) -> None:
    rules = tmp_path / "RULES.md"
    rules.write_text("## AB — things\n- AB-01 One.\n- AB-02 Two.\n")
    assert read_rules(rules) == {"AB-01": ("AB", "One."), "AB-02": ("AB", "Two.")}
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_x.py").write_text(
        "import pytest\n"
        "pytestmark = pytest.mark.rule('AB-02')\n"
        "@pytest.mark.rule('AB-01')\n"
        "def test_one(): pass\n"
        "@pytest.mark.xfail(strict=True)\n"
        "@pytest.mark.rule('AB-01')\n"
        "async def test_broken(): pass\n"
        "class TestGroup:\n"
        "    @pytest.mark.rule('ZZ-09')\n"
        "    def test_inner(self): pass\n"
        "def helper(): pass\n"
    )
    proofs = find_proofs(tests)
    assert sorted((p.test.split("::", 1)[1], p.xfail) for p in proofs["AB-01"]) == [
        ("test_broken", True),
        ("test_one", False),
    ]
    assert len(proofs["AB-02"]) == 3  # the module mark applies to every test
    assert [p.test.split("::", 1)[1] for p in proofs["ZZ-09"]] == ["TestGroup::test_inner"]


def test_the_repository_covers_every_required_rule() -> None:
    assert main(["--quiet"]) == 0
