"""``make bench``: every benchmark, each reported as a ratio to a baseline measured in the same run.

The machines are shared and noisy, so absolute numbers drift; ratios to a
baseline taken moments earlier on the same machine are what to compare.
"""

from __future__ import annotations

import os

# Before gRPC loads: uvloop starts the load generators and servers with fork(),
# and gRPC logs every fork in a process that uses it (INFO), which buried the report.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

import argparse
import logging
import sys
import tempfile
from pathlib import Path

from pai_grpc.bench import (
    _counts,
    _hooks,
    _memory,
    _provider,
    _retention,
    _runs,
    _scale,
    _storage,
    _telemetry,
)
from pai_grpc.bench._common import Report, postgres_reachable
from pai_grpc.cli import loop_runner

SECTIONS = {
    "storage": _storage.run,
    "runs": _runs.run,
    "provider": _provider.run,
    "hooks": _hooks.run,
    "memory": _memory.run,
    "telemetry": _telemetry.run,
    "retention": _retention.run,
    "scale": _scale.run,
    "counts": _counts.run,
}


async def main(sections: list[str], backends: list[str]) -> int:
    """Run the selected sections on the selected backends."""
    report = Report()
    if "postgresql" in backends and not await postgres_reachable():
        print("PostgreSQL is unreachable: skipping its benchmarks", file=sys.stderr)
        backends = [b for b in backends if b != "postgresql"]
    with tempfile.TemporaryDirectory() as tmp:
        for section in sections:
            print(f"== {section}", flush=True)
            for backend in backends:
                await SECTIONS[section](report, backend, Path(tmp))
    return 0


def cli() -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(prog="python -m pai_grpc.bench", description=__doc__)
    parser.add_argument("sections", nargs="*", metavar="SECTION", help=f"one of {list(SECTIONS)}")
    parser.add_argument("--backend", action="append", choices=["sqlite", "postgresql"])
    ns = parser.parse_args()
    unknown = [s for s in ns.sections if s not in SECTIONS]
    if unknown:
        parser.error(f"unknown sections {unknown}; choose from {list(SECTIONS)}")
    logging.basicConfig(level=logging.WARNING)
    # On the loop `pai-grpc serve` runs on by default: the baselines measured in this
    # process (the bare SDK, the in-process servers) get what the served process gets.
    return loop_runner("auto")(
        main(ns.sections or list(SECTIONS), ns.backend or ["sqlite", "postgresql"])
    )


if __name__ == "__main__":
    raise SystemExit(cli())
