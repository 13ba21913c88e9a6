"""Time ``results.pareto`` on 1e5 synthetic records (2 and 3 objectives, random and worst case).

Run: ``.venv/bin/python benchmarks/bench_results_pareto.py``. Prints the front size and the
wall time of each case (target: under 1 s each for 1e5 points).
"""

from __future__ import annotations

import time

import numpy as np

from results.pareto import pareto

N = 100_000


def _records(values: np.ndarray, names: tuple[str, ...]) -> list[dict]:
    return [
        {"key": f"k{i}", "design_id": f"d{i % 997}", **dict(zip(names, row, strict=True))}
        for i, row in enumerate(values.tolist())
    ]


def main() -> None:
    rng = np.random.default_rng(0)
    u = rng.random((N, 3))
    plane = rng.dirichlet(np.ones(3), N)  # x + y + z = 1: every point is on the front
    cases = {
        "2D random": (u[:, :2], ("tokens_per_s", "system_cost_usd")),
        "2D all on front": (
            np.column_stack([u[:, 0], u[:, 0]]),
            ("tokens_per_s", "system_cost_usd"),
        ),
        "2D ties (ints 0..99)": (np.floor(u[:, :2] * 100), ("tokens_per_s", "system_cost_usd")),
        "3D random": (u, ("tokens_per_s", "system_cost_usd", "total_kgco2e")),
        "3D all on front": (plane, ("iteration_s", "system_cost_usd", "total_kgco2e")),
        "3D ties (ints 0..19)": (np.floor(u * 20), ("tokens_per_s", "system_cost_usd", "tcdp")),
    }
    for name, (values, metrics) in cases.items():
        recs = _records(values, metrics)
        t0 = time.perf_counter()
        front = pareto(recs, metrics)
        dt = time.perf_counter() - t0
        print(f"{name:24s} n={N:,}  front={len(front):7,}  {dt * 1e3:8.1f} ms")


if __name__ == "__main__":
    main()
