"""Placement speed on the GPT-3 175B layer graph at 1024 devices, all four TP widths.

Prints the chain fast path's and the general downset DP's times for one placement (the
whole search over t in {1, 2, 4, 8}) and checks that both give the same answer; then the
chain path's time when the search also chooses the ZeRO stage (memory depending on d), and
with Megatron's interleaved layouts (v >= 2) competing with the DP's best. The graph
is synthesised from closed forms (placement.synthetic). The README's Speed table states the
target and the figures measured.

Run: .venv/bin/python benchmarks/bench_placement.py [--repeat N]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from placement import Cluster, PlacementProblem, place
from placement.interleave import best_interleaved
from placement.synthetic import GPT3_175B, gpt_stage_graph

# source: NVIDIA A100 datasheet, 312 TFLOP/s dense bf16; 50% sustained is a setting here.
_FLOPS_PER_S = 0.5 * 312e12
_HBM_BYTES = 80e9  # A100-80GB


def problem(zero_stages: tuple[int, ...] = (0,)) -> PlacementProblem:
    cluster = Cluster(devices=1024, devices_per_node=8)
    graphs = tuple(
        gpt_stage_graph(GPT3_175B, t, cluster, flops_per_s=_FLOPS_PER_S, recompute="full")
        for t in (1, 2, 4, 8)
    )
    return PlacementProblem(
        graphs, cluster, hbm_bytes=_HBM_BYTES, global_batch=1536, zero_stages=zero_stages
    )


def _time(fn, repeat: int) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    prob = problem()
    n = len(prob.graphs[0].layers)
    t_chain, fast = _time(lambda: place(prob, method="chain"), args.repeat)
    t_dag, full = _time(lambda: place(prob, method="dag"), max(1, args.repeat // 10))
    grid, row = np.random.default_rng(0).random((99, 99)), np.zeros(99)
    t_op, _ = _time(lambda: np.maximum(grid, row), 200)
    sharded = problem((0, 1, 2, 3))
    t_zero, zero = _time(lambda: place(sharded, method="chain"), args.repeat)
    print(f"GPT-3 175B: {n} layers, {prob.cluster.devices} devices, t in (1, 2, 4, 8)")
    print(f"machine load gauge: np.maximum on 99x99 takes {t_op * 1e6:.1f} us")
    print(f"chain fast path : {t_chain * 1e3:8.1f} ms per placement (best of {args.repeat})")
    print(f"general DP      : {t_dag * 1e3:8.1f} ms per placement")
    same = (fast.layout.t, fast.layout.p, fast.layout.d) == (
        full.layout.t,
        full.layout.p,
        full.layout.d,
    ) and [st.layers for st in fast.stages] == [st.layers for st in full.stages]
    rel = abs(fast.breakdown.iteration_s - full.breakdown.iteration_s) / full.breakdown.iteration_s
    print(
        f"best: {fast.layout} time/batch {fast.breakdown.iteration_s:.3f} s, "
        f"memory {fast.memory_breakdown.total_bytes / 2**30:.1f} GiB"
    )
    print(
        f"paths agree on t, p, d and stages: {same}; time per batch differs by {rel:.1e} "
        "(summation order: prefix sums vs matrix products)"
    )
    print(
        f"chain, ZeRO 0-3 : {t_zero * 1e3:8.1f} ms per placement; best: {zero.layout} "
        f"time/batch {zero.breakdown.iteration_s:.3f} s"
    )

    def every_knob():
        best = place(sharded, method="chain")
        return best_interleaved(sharded, best.breakdown.iteration_s) or best

    t_knobs, knobs = _time(every_knob, max(1, args.repeat // 4))
    print(
        f"+ interleaving   : {t_knobs * 1e3:8.1f} ms per placement; best: {knobs.layout} "
        f"time/batch {knobs.breakdown.iteration_s:.3f} s"
    )


if __name__ == "__main__":
    main()
