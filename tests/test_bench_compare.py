"""``python -m pai_grpc.bench.compare``: each version served from its own code, rounds alternated."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pai_grpc.bench.compare import (
    FIGURES,
    Version,
    checkout,
    order,
    runs_its_own_code,
    table,
    wins,
)

ROOT = Path(__file__).resolve().parents[1]


def test_each_version_goes_first_in_half_the_rounds() -> None:
    # A drifting machine favours whichever version runs in the quieter half of a pair.
    assert list(order(4)) == [0, 1, 1, 0, 0, 1, 1, 0]
    pairs = list(zip(*[iter(order(6))] * 2, strict=True))
    assert sum(first == 0 for first, _ in pairs) == sum(first == 1 for first, _ in pairs)


def test_the_candidate_wins_a_round_only_when_it_does_better() -> None:
    assert wins([200.0, 210.0, 190.0], [205.0, 210.0, 180.0], higher_is_better=True) == 1
    assert wins([4.0, 4.2, 4.1], [3.9, 4.3, 4.0], higher_is_better=False) == 2


def test_the_report_gives_both_medians_their_ratio_and_the_rounds_won() -> None:
    base = [dict.fromkeys((k for k, *_ in FIGURES), 2.0) for _ in range(3)]
    candidate = [dict.fromkeys((k for k, *_ in FIGURES), v) for v in (1.0, 3.0, 3.0)]
    lines = table(("base", "new"), {0: base, 1: candidate})
    assert len(lines) == 1 + len(FIGURES)
    runs = next(line for line in lines if line.startswith("runs/s, 16 clients (Send + StreamRun)"))
    assert "2.00 runs/s" in runs
    assert "3.00 runs/s" in runs
    assert "1.50x" in runs
    assert runs.endswith("2 of 3")  # higher is better: two rounds of three
    cpu = next(line for line in lines if line.startswith("server CPU per run (Send + StreamRun)"))
    assert cpu.endswith("1 of 3")  # lower is better: one round of three


def test_a_revision_is_served_from_its_own_code_whatever_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    version = checkout("HEAD", tmp_path)
    assert version.root.is_relative_to(tmp_path)
    assert (version.root / "pai_grpc" / "cli.py").is_file()
    assert (version.root / "generated").is_dir()
    # Started from this checkout (where the benchmarks usually run), `python -m`
    # would find this checkout's modules first; the version's environment prevents it.
    monkeypatch.chdir(ROOT)
    runs_its_own_code(version)  # raises unless the modules come from the version


def test_a_directory_without_the_code_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "copy"
    shutil.copytree(ROOT / "pai_grpc", elsewhere / "pai_grpc")
    # storage/ is missing: its modules would come from this checkout instead.
    with pytest.raises(SystemExit, match="not the code in"):
        runs_its_own_code(Version("copy", elsewhere))
    with pytest.raises(SystemExit, match="neither a checkout nor a revision"):
        checkout(str(tmp_path / "nothing-here"), tmp_path)
