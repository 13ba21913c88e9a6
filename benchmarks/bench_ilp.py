"""Time the layer scheduler on transformer blocks over many designs.

GPT-3 175B, Llama-3 70B and Mixtral 8x7B blocks, forward and backward, at tensor-parallel
widths 1 and 8, on N random designs (powers of two around a TPUv4-like chip). Prints the
median and p95 wall time per solve, split by how it ended: fast path (the list schedule meets
the lower bounds, LP bound included, in every part), proven optimal by the branch and bound
or the MIP, or unproven at the time limit (the best schedule found, with its gap), with
methods and statuses; the solves beyond the fast path of layers of at most 30 ops (the dense
blocks' forward passes) on their own (the full-ILP target); per graph its op count,
all solves and those beyond the fast path; and, where they ran, how the plain list schedule
(no search) compares.

Run: ``.venv/bin/python benchmarks/bench_ilp.py [--designs 100] [--time-limit 1.0]
[--search-nodes 10000]``.
Caches are cleared first, so every solve is cold except repeats inside the run.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from collections import Counter

import numpy as np

from arch_space.accelerator import Cluster
from arch_space.presets import preset
from ilp import (
    DEFAULT_SEARCH_NODES,
    HEURISTIC,
    Method,
    ScheduleStatus,
    costed_graph,
    solve_schedule,
)
from ilp.schedule import clear_caches
from ilp.timing import channels
from workloads import TrainingSetup, build_layer_graph, get_model

MODELS = ("gpt3-175b", "llama3-70b", "mixtral-8x7b")
TPS = (1, 8)
MEDIAN_TARGET_S = 0.020  # the target median time per solve, over all solves
SMALL_LAYER_OPS = 30  # the dense blocks' forward passes (26-28 ops)
PASSES = ("forward", "backward")


def designs(n: int, seed: int = 0):
    """``n`` distinct designs: core counts, array sizes, lanes and buffer as powers of two."""
    rng = np.random.default_rng(seed)
    base = preset("tpuv4")
    seen, out = set(), []
    while len(out) < n:
        d = dataclasses.replace(
            base,
            name="",
            num_tc=int(2 ** rng.integers(0, 7)),
            tc_rows=int(2 ** rng.integers(4, 9)),
            tc_cols=int(2 ** rng.integers(4, 9)),
            num_vc=int(2 ** rng.integers(0, 5)),
            vc_lanes=int(2 ** rng.integers(6, 11)),
            glb_bytes=int(2 ** rng.integers(23, 28)),
        )
        if d not in seen:
            seen.add(d)
            out.append(d)
    return out


def instances():
    """(label, op graph) of every block pass the benchmark schedules."""
    setup = TrainingSetup(seq_len=2048, global_batch=512, micro_batch=1)
    graphs = []
    for name in MODELS:
        for tp in TPS:
            lg = build_layer_graph(get_model(name), setup, tp)
            for p in PASSES:
                graphs.append((f"{name} t={tp} {p}", getattr(lg.op_graphs["block"], p)))
    return graphs


def _stats(xs):
    if not xs:
        return "-"
    a = np.asarray(xs) * 1e3
    return f"n={len(a):5d}  median {np.median(a):8.2f} ms  p95 {np.percentile(a, 95):8.2f} ms"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--designs", type=int, default=100)
    ap.add_argument("--time-limit", type=float, default=1.0)
    ap.add_argument("--search-nodes", type=int, default=DEFAULT_SEARCH_NODES)
    args = ap.parse_args()
    cluster = Cluster(devices=8)
    graphs = instances()
    clear_caches()
    fast, proven, unproven, small_exact = [], [], [], []
    list_excess = []  # the plain list schedule's makespan over the exact one's, where it ran
    status = Counter()
    per_graph = {label: ([], []) for label, _ in graphs}  # (all solves, beyond the fast path)
    t_all = time.perf_counter()
    for acc in designs(args.designs):
        for label, og in graphs:
            g = costed_graph(og, acc, cluster)
            t0 = time.perf_counter()
            s = solve_schedule(
                g,
                acc.capacity,
                resources=channels(g),
                time_limit_s=args.time_limit,
                search_nodes=args.search_nodes,
            )
            dt = time.perf_counter() - t0
            exact = s.method not in (Method.EMPTY, Method.BOUND)
            if not exact:
                fast.append(dt)
            else:
                (proven if s.status == ScheduleStatus.OPTIMAL else unproven).append(dt)
            if exact and len(og.ops) <= SMALL_LAYER_OPS:
                small_exact.append(dt)
            status[f"{s.method}/{s.status}"] += 1
            per_graph[label][0].append(dt)
            if exact:
                per_graph[label][1].append(dt)
                listed = solve_schedule(
                    g,
                    acc.capacity,
                    resources=channels(g),
                    solver=HEURISTIC,
                    search_nodes=0,
                )
                list_excess.append(listed.makespan_s / s.makespan_s - 1)
    everything = fast + proven + unproven
    print(
        f"{len(everything)} solves in {time.perf_counter() - t_all:.1f} s "
        f"(time limit {args.time_limit} s, search budget {args.search_nodes} nodes per part)"
    )
    print(f"all        {_stats(everything)}")
    under = sum(t < MEDIAN_TARGET_S for t in everything)
    print(
        f"under {MEDIAN_TARGET_S * 1e3:.0f} ms: {under} of {len(everything)} solves "
        f"(the median target needs half)"
    )
    print(f"fast path  {_stats(fast)}")
    print(f"proven by search or MIP  {_stats(proven)}")
    print(f"unproven at the limit    {_stats(unproven)}")
    print(f"search or MIP, layers of <= {SMALL_LAYER_OPS} ops  {_stats(small_exact)}")
    for label, og in graphs:
        every, beyond = per_graph[label]
        print(f"  {label:26s} {len(og.ops):3d} ops  all {_stats(every)}")
        print(f"  {'':26s}   search or MIP {_stats(beyond)}")
    print("method/status:", dict(sorted(status.items())))
    if list_excess:
        excess = np.asarray(list_excess)
        print(
            f"plain list schedule vs search or MIP, where they ran: equal in "
            f"{int((np.abs(excess) <= 1e-6).sum())} of {excess.size}, shorter in "
            f"{int((excess < -1e-6).sum())} (both timed out above it), longer by "
            f"{100 * np.median(excess[excess > 1e-6]) if (excess > 1e-6).any() else 0:.1f} % "
            f"median and {100 * max(excess.max(), 0):.1f} % at worst"
        )


if __name__ == "__main__":
    main()
