"""Record every deterministic layer-schedule result on the bench_ilp instances, to compare
two versions of the scheduler exactly.

For each design of ``bench_ilp.designs`` and each transformer-block pass of
``bench_ilp.instances`` it records, as exact floats:

* ``list``: solver "list" without the search (list schedules and local search only);
* ``search``: solver "list" with the branch and bound under its node budget (no deadline);
* ``highs``: solver "highs" with no binding time limit, only where ``search`` proved the
  optimum (then the LP bound and the search settle it and no MIP runs, so it is
  deterministic);
* ``bound``: :func:`ilp.makespan_lower_bound` of the pass.

Run: ``.venv/bin/python benchmarks/compare_ilp.py --designs 20 --out before.json``, change the
code, run again with ``--out after.json``, then
``.venv/bin/python benchmarks/compare_ilp.py --compare before.json after.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping

import networkx as nx
from bench_ilp import designs, instances

from arch_space.accelerator import Cluster
from ilp import DEFAULT_SEARCH_NODES, HEURISTIC, costed_graph, makespan_lower_bound, solve_schedule
from ilp.timing import channels

_NO_LIMIT_S = 1e6  # a time limit no solve reaches: the search and MIP stop on their own


def _bound(g: nx.DiGraph, units: Mapping[str, int]) -> float:
    order = list(nx.lexicographical_topological_sort(g, key=str))
    pos = {v: k for k, v in enumerate(order)}
    a = g.nodes
    return makespan_lower_bound(
        [a[v]["units"] for v in order],
        [a[v].get("latency_s", 0.0) for v in order],
        [a[v].get("parallel_latency_s", a[v].get("latency_s", 0.0)) for v in order],
        [[pos[p] for p in g.predecessors(v)] for v in order],
        units,
    )


def record(num_designs: int, search_nodes: int) -> list[dict]:
    cluster = Cluster(devices=8)
    graphs = instances()
    rows = []
    for k, acc in enumerate(designs(num_designs)):
        for label, og in graphs:
            g = costed_graph(og, acc, cluster)
            row: dict = {"design": k, "graph": label, "bound": _bound(g, acc.capacity)}
            for mode, solver, nodes in (
                ("list", HEURISTIC, 0),
                ("search", HEURISTIC, search_nodes),
                ("highs", "highs", search_nodes),
            ):
                if mode == "highs" and row["search"]["status"] != "optimal":
                    continue
                s = solve_schedule(
                    g,
                    acc.capacity,
                    resources=channels(g),
                    solver=solver,
                    search_nodes=nodes,
                    time_limit_s=_NO_LIMIT_S,
                )
                row[mode] = {
                    "makespan_s": s.makespan_s,
                    "method": str(s.method),
                    "status": str(s.status),
                    "gap": s.gap,
                    "start_s": [s.start_s[v] for v in g.nodes],
                    "parallel": sorted(map(str, s.parallel)),
                }
            rows.append(row)
    return rows


def compare(before_path: str, after_path: str) -> int:
    with open(before_path) as f:
        before = json.load(f)["rows"]
    with open(after_path) as f:
        after = json.load(f)["rows"]
    if len(before) != len(after):
        print(f"different instance counts: {len(before)} and {len(after)}")
        return 1
    solves = same = bounds_same = 0
    for b, a in zip(before, after, strict=True):
        bounds_same += b["bound"] == a["bound"]
        for mode in ("list", "search", "highs"):
            if mode in b or mode in a:
                solves += 1
                if b.get(mode) == a.get(mode):
                    same += 1
                else:
                    print(f"differs: design {b['design']} {b['graph']} {mode}")
    print(
        f"{same} of {solves} solves identical (makespan, starts, modes, method, status, gap); "
        f"{bounds_same} of {len(before)} lower bounds identical"
    )
    return 0 if same == solves and bounds_same == len(before) else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--designs", type=int, default=20)
    ap.add_argument("--search-nodes", type=int, default=DEFAULT_SEARCH_NODES)
    ap.add_argument("--out", default="compare_ilp.json")
    ap.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    args = ap.parse_args()
    if args.compare:
        return compare(*args.compare)
    t0 = time.perf_counter()
    rows = record(args.designs, args.search_nodes)
    with open(args.out, "w") as f:
        json.dump({"designs": args.designs, "search_nodes": args.search_nodes, "rows": rows}, f)
    solves = sum(mode in r for r in rows for mode in ("list", "search", "highs"))
    print(f"{solves} solves of {len(rows)} instances in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
