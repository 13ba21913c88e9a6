"""Time the command line's start: ``phaze --help`` (and a subcommand's ``--help``) as new
processes, the way a user waits for them.

Run: ``.venv/bin/python benchmarks/bench_cli_start.py [--runs 15]``. Prints each run's wall
time and the median per command (target: ``phaze --help`` at most 0.3 s). The machine's load
moves these figures: compare two versions by alternating runs.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

COMMANDS = (["--help"], ["sweep", "--help"], ["--version"])


def _phaze() -> list[str]:
    exe = Path(sys.executable).with_name("phaze")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "phaze"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    for argv in COMMANDS:
        times = []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            subprocess.run([*_phaze(), *argv], check=True, capture_output=True)
            times.append(time.perf_counter() - t0)
        shown = " ".join(f"{t:.3f}" for t in times)
        print(f"phaze {' '.join(argv)}: median {statistics.median(times):.3f} s ({shown})")


if __name__ == "__main__":
    main()
