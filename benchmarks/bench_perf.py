"""Op-cost evaluations per second of the vectorised cost model (target >= 1e5/s on one core).

Run: ``.venv/bin/python benchmarks/bench_perf.py [--ops N] [--repeat R]``.

One *evaluation* is one op costed on one design in both estimates (one core and all cores),
computed from scratch (the content cache is bypassed). The second figure is the cached
``op_costs`` path on real transformer-block graphs, as a sweep sees it.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from arch_space.accelerator import Cluster
from arch_space.perf import default_settings, op_costs
from arch_space.perf.costs import evaluate_ops, op_key
from arch_space.presets import preset
from arch_space.tech import tech_node
from workloads.ops import CollectiveKind, CoreType, Op, OpKind

__all__: list[str] = []


def _random_ops(n: int, rng: np.random.Generator) -> list[Op]:
    """Distinct ops of every kind with transformer-like shapes."""
    ops = []
    kinds = rng.choice(5, size=n, p=[0.45, 0.15, 0.2, 0.1, 0.1])
    for i, kind in enumerate(kinds):
        m, k, nn = (int(x) for x in rng.integers(1, 16384, size=3))
        elements = int(rng.integers(1, 1 << 26))
        if kind == 0:
            ops.append(
                Op(f"g{i}", OpKind.MATMUL, CoreType.TC, flops=2 * m * k * nn, m=m, k=k, n=nn)
            )
        elif kind == 1:
            b = int(rng.integers(2, 96))
            ops.append(
                Op(
                    f"b{i}",
                    OpKind.BATCHED_MATMUL,
                    CoreType.TC_AND_VC,
                    flops=2 * b * m * k * nn,
                    batch=b,
                    m=m,
                    k=k,
                    n=nn,
                    epilogue_flops=b * m * nn,
                )
            )
        elif kind in (2, 3):
            vk = (OpKind.ELEMENTWISE, OpKind.SOFTMAX, OpKind.NORM)[int(rng.integers(3))]
            ops.append(
                Op(
                    f"v{i}",
                    vk,
                    CoreType.VC,
                    flops=5 * elements,
                    bytes_read=2 * elements,
                    bytes_written=2 * elements,
                    elements=elements,
                )
            )
        else:
            ops.append(
                Op(
                    f"c{i}",
                    OpKind.COLLECTIVE,
                    CoreType.NOP,
                    collective=CollectiveKind.ALL_REDUCE,
                    collective_bytes=2 * elements,
                    group=int(rng.choice([2, 4, 8, 16])),
                )
            )
    return ops


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    acc = preset("a100")
    cluster = Cluster(devices=16)
    tech = tech_node(acc.node_nm)
    settings = default_settings()
    keys = [op_key(op) for op in _random_ops(args.ops, rng)]

    best = float("inf")
    for _ in range(args.repeat):
        start = time.perf_counter()
        evaluate_ops(keys, acc, cluster, tech, 100.0, settings)
        best = min(best, time.perf_counter() - start)
    print(
        f"uncached: {len(keys)} ops x 2 estimates in {best * 1e3:.1f} ms -> "
        f"{len(keys) / best:,.0f} op-cost evaluations/s"
    )

    from workloads.build import build_layer_graph
    from workloads.catalog import get_model
    from workloads.setup import TrainingSetup

    graphs = build_layer_graph(
        get_model("gpt3-175b"), TrainingSetup(seq_len=2048, global_batch=1536), 8
    )
    block = graphs.op_graphs["block"].backward
    start = time.perf_counter()
    calls = 2000
    for _ in range(calls):
        op_costs(block, acc, cluster)
    spent = time.perf_counter() - start
    print(
        f"cached op_costs on a GPT-3 175B block backward graph ({len(block.ops)} ops): "
        f"{calls * len(block.ops) / spent:,.0f} op costs/s"
    )


if __name__ == "__main__":
    main()
