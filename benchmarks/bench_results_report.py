"""Time the results store and the report on a synthetic sweep, scaled up.

Run: ``.venv/bin/python benchmarks/bench_results_report.py [COPIES]`` (default 40 copies of the
test suite's synthetic sweep, ~15k points). Prints points/s of committed writes (one
transaction per point), the read time, the Pareto time and the report's wall time and size.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from test_results_report import CONFIG, synthetic_points

from results.pareto import pareto
from results.report import write_report
from results.store import Store, load


def main(copies: int) -> None:
    _, base = synthetic_points()
    points = [
        {**p, "key": f"{p['key']}#{c}", "design_id": f"{p['design_id']}#{c}",
         **({"tokens_per_s": p["tokens_per_s"] * (1 + 0.01 * c)} if p.get("tokens_per_s") else {})}
        for c in range(copies)
        for p in base
    ]  # fmt: skip
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        with Store.open(d, CONFIG, "bench") as s:
            for p in points:
                s.put_point(p)
        t_write = time.perf_counter() - t0
        t0 = time.perf_counter()
        with load(d) as st:
            got = st.points()
        t_read = time.perf_counter() - t0
        t0 = time.perf_counter()
        front = pareto(
            [p for p in got if p["feasible"]], ["system_cost_usd", "tokens_per_s", "total_kgco2e"]
        )
        t_front = time.perf_counter() - t0
        t0 = time.perf_counter()
        out = write_report(d)
        t_report = time.perf_counter() - t0
        size = out.stat().st_size
    n = len(points)
    print(f"points           {n:,}")
    print(f"write (1 tx/pt)  {t_write:.2f} s  ({n / t_write:,.0f} points/s)")
    print(f"read all         {t_read:.2f} s")
    print(f"3D Pareto        {t_front * 1e3:.0f} ms  ({len(front)} on the front)")
    print(f"report           {t_report:.1f} s  ({size / 1e6:.2f} MB)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 40)
