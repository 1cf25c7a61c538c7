"""Compare two versions of the server, served as users run them, in alternating rounds.

``python -m pai_grpc.bench.compare BASE CANDIDATE [--backend B] [--rounds N]``

On a shared machine the same code reads up to a fifth apart from one minute
to the next, so figures measured at different times do not compare code.
This serves each version in turn, ``N`` rounds each in the order A B B A A B
..., every round on a fresh database migrated by that version, with the
same load generator (this checkout's) and the same measurements as ``bench
runs`` (runs/s and server CPU per run with 16 clients, first text delta with
one client, for Send + StreamRun and for SendAndStream, and one long stream).
It prints each figure's median for both versions, their ratio, and in how
many rounds the candidate beat the round of the base next to it: a change
worth keeping wins most pairs, not only the medians.

A version is a git revision of this repository (extracted with ``git
archive``) or a directory holding a checkout; ``.`` is the working tree.
Both run on this checkout's virtualenv, so they must share its dependencies.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pai_grpc.bench import _process
from pai_grpc.bench._common import drop_schema, free_port, postgres_reachable
from pai_grpc.cli import loop_runner

#: Rounds per version unless told.
ROUNDS = 6

#: The figures compared: key, label, unit, and whether a higher value is better.
FIGURES = (
    ("rate", "runs/s, 16 clients (Send + StreamRun)", "runs/s", True),
    ("cpu_ms", "server CPU per run (Send + StreamRun)", "ms", False),
    ("ttfc_ms", "first text delta p50, one client (Send + StreamRun)", "ms", False),
    ("rate-one", "runs/s, 16 clients (SendAndStream)", "runs/s", True),
    ("cpu_ms-one", "server CPU per run (SendAndStream)", "ms", False),
    ("ttfc_ms-one", "first text delta p50, one client (SendAndStream)", "ms", False),
    ("stream", f"one stream of {_process.STREAM_WORDS} text deltas", "deltas/s", True),
)


@dataclass(frozen=True)
class Version:
    """One version of the server: its name as given and the directory its code is in."""

    name: str
    root: Path

    def env(self) -> dict[str, str]:
        """The environment that runs this version's code on this interpreter.

        PYTHONSAFEPATH: ``python -m`` would otherwise put the working directory
        (often this checkout) ahead of PYTHONPATH.
        """
        return {
            "PYTHONPATH": os.pathsep.join([str(self.root), str(self.root / "generated")]),
            "PYTHONSAFEPATH": "1",
        }


def checkout(name: str, into: Path) -> Version:
    """``name`` as code: a checkout as it is, or a revision extracted under ``into``."""
    path = Path(name)
    if (path / "pai_grpc").is_dir() and (path / "storage").is_dir():
        return Version(name, path.resolve())
    repo = Path(__file__).resolve().parents[2]
    commit = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--verify", f"{name}^{{commit}}"],
        capture_output=True,
        text=True,
    )
    if commit.returncode != 0:
        raise SystemExit(f"{name!r} is neither a checkout nor a revision of {repo}")
    target = into / commit.stdout.strip()[:12]
    target.mkdir(parents=True, exist_ok=True)
    with subprocess.Popen(
        ["git", "-C", str(repo), "archive", commit.stdout.strip()], stdout=subprocess.PIPE
    ) as archive:
        subprocess.run(["tar", "-x", "-C", str(target)], stdin=archive.stdout, check=True)
    if archive.returncode != 0:
        raise SystemExit(f"git archive {name} failed")
    return Version(name, target)


def runs_its_own_code(version: Version) -> None:
    """Refuse to measure a version whose processes would import another's modules."""
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import pai_grpc, storage; print(pai_grpc.__file__, storage.__file__)",
        ],
        env={**os.environ, **version.env()},
        capture_output=True,
        text=True,
    )
    found = probe.stdout.split()
    if probe.returncode != 0 or not all(Path(f).is_relative_to(version.root) for f in found):
        raise SystemExit(
            f"{version.name}: its processes import {found or probe.stderr.strip()}, "
            f"not the code in {version.root}"
        )


def order(rounds: int) -> Iterator[int]:
    """Which version goes next (0: base, 1: candidate): A B B A A B ..., fair to both."""
    for r in range(rounds):
        yield from (0, 1) if r % 2 == 0 else (1, 0)


async def measure(version: Version, backend: str, workdir: Path) -> dict[str, float]:
    """One round: a fresh database migrated by ``version``, served by it, measured."""
    env, schema = await _process.served_database(backend, workdir, "compare", version.env())
    try:
        address = f"127.0.0.1:{free_port()}"
        args = (*_process.CLI, "serve", "--address", address)
        async with _process.serving(*args, env=env, address=address) as pid:
            return await _process.measure(address, pid, _process.SECONDS)
    finally:
        await drop_schema(schema)


def wins(base: Sequence[float], candidate: Sequence[float], higher_is_better: bool) -> int:
    """Rounds in which the candidate beat the base's round next to it."""
    return sum(
        (c > b) if higher_is_better else (c < b) for b, c in zip(base, candidate, strict=True)
    )


def table(names: tuple[str, str], rounds: Mapping[int, list[dict[str, float]]]) -> list[str]:
    """The report: per figure, both medians, their ratio, the pairs the candidate won."""
    base, candidate = rounds[0], rounds[1]
    lines = [f"{'':52} {names[0][:18]:>18} {names[1][:18]:>18}  ratio  candidate won"]
    for key, label, unit, higher in FIGURES:
        a = [r[key] for r in base]
        b = [r[key] for r in candidate]
        ma, mb = statistics.median(a), statistics.median(b)
        lines.append(
            f"{label:52} {f'{ma:.2f} {unit}':>18} {f'{mb:.2f} {unit}':>18} {mb / ma:5.2f}x"
            f"  {wins(a, b, higher)} of {len(a)}"
        )
    return lines


async def main(base: str, candidate: str, backend: str, rounds: int) -> int:
    """Measure both versions in alternating rounds and print the comparison."""
    if backend == "postgresql" and not await postgres_reachable():
        print("PostgreSQL is unreachable", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        versions = (checkout(base, workdir / "trees"), checkout(candidate, workdir / "trees"))
        for version in versions:
            runs_its_own_code(version)
        measured: dict[int, list[dict[str, float]]] = {0: [], 1: []}
        for step, which in enumerate(order(rounds), 1):
            version = versions[which]
            result = await measure(version, backend, workdir)
            measured[which].append(result)
            print(
                f"  round {step}/{2 * rounds} {version.name}: "
                f"{result['rate']:.0f} / {result['rate-one']:.0f} runs/s, "
                f"{result['cpu_ms']:.2f} / {result['cpu_ms-one']:.2f} ms CPU per run",
                flush=True,
            )
    print(f"== {backend}: {base} (base) against {candidate}, rounds of each: {rounds}")
    for line in table((base, candidate), measured):
        print(line)
    return 0


def cli() -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(
        prog="python -m pai_grpc.bench.compare", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("base", help="a git revision, or a directory holding a checkout")
    parser.add_argument("candidate", help="likewise; '.' is the working tree")
    parser.add_argument("--backend", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="rounds per version")
    ns = parser.parse_args()
    if ns.rounds < 1:
        parser.error("--rounds must be at least 1")
    logging.basicConfig(level=logging.WARNING)
    return loop_runner("auto")(main(ns.base, ns.candidate, ns.backend, ns.rounds))


if __name__ == "__main__":
    raise SystemExit(cli())
