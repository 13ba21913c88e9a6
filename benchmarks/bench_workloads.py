"""Time layer-graph construction (run by hand: ``.venv/bin/python benchmarks/bench_workloads.py``).

Prints the uncached time to build GPT-3 175B's layer graph at t = 8 and the time to build
every (catalog model, valid t <= 8, SP on/off, recompute mode) combination.
"""

from __future__ import annotations

import time

from workloads import (
    Recompute,
    TrainingSetup,
    build_layer_graph,
    get_model,
    model_names,
    valid_tp_widths,
)


def main() -> None:
    model = get_model("gpt3-175b")
    times = []
    for i in range(20):  # a new global batch each time: a cache miss, the same graph
        setup = TrainingSetup(seq_len=2048, global_batch=1000 + i, sequence_parallel=True)
        t0 = time.perf_counter()
        build_layer_graph(model, setup, 8)
        times.append(time.perf_counter() - t0)
    print(
        f"gpt3-175b t=8 layer graph: min {min(times) * 1e3:.2f} ms, max {max(times) * 1e3:.2f} ms"
    )
    n, t0 = 0, time.perf_counter()
    for name in model_names():
        m = get_model(name)
        s = min(2048, m.max_positions)
        for tp in valid_tp_widths(m, max_tp=8):
            for sp in (False, True) if s % tp == 0 else (False,):
                for rc in Recompute:
                    st = TrainingSetup(
                        seq_len=s, global_batch=7, recompute=rc, sequence_parallel=sp
                    )
                    build_layer_graph(m, st, tp)
                    n += 1
    dt = time.perf_counter() - t0
    print(f"{n} layer graphs (all catalog models) in {dt:.2f} s ({dt / n * 1e3:.2f} ms each)")


if __name__ == "__main__":
    main()
