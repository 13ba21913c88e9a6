"""Executor overhead: tasks/s of serial, local and Ray runs, fixed vs adaptive chunks.

Run by hand: ``python benchmarks/bench_executors.py [--tasks N] [--ray]``. Prints, for a
task of ~0 s and one of ~1 ms, the throughput of each executor and the overhead per task
relative to the serial run, the cost of starting workers (paid once per Runner), and the
parent's peak memory for a run of many tasks (which must stay flat: tasks are handed out
lazily and results are not kept).
"""

from __future__ import annotations

import argparse
import itertools
import resource
import time
from collections.abc import Iterable

from phaze.executors import Runner, run_tasks


def spin(n: int) -> int:
    """A task of about n µs of pure-Python work here (deterministic)."""
    acc = 0
    for i in range(n * 8):
        acc = (acc * 31 + i) % 1_000_003
    return acc


def _run(label: str, tasks: Iterable[int], n_tasks: int, **kwargs: object) -> float:
    done = 0

    def on_result(task: int, result: int) -> None:
        nonlocal done
        done += 1

    start = time.perf_counter()
    summary = run_tasks(spin, tasks, on_result=on_result, **kwargs)
    wall_s = time.perf_counter() - start
    assert done == n_tasks == summary.tasks_done
    print(
        f"  {label:<24} {n_tasks / wall_s:>10.0f} tasks/s  {wall_s:6.2f} s wall  "
        f"{summary.chunks:>6} chunks  busy workers {summary.worker_s / wall_s:4.2f}"
    )
    return wall_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--ray", action="store_true", help="also time a local 2-CPU Ray")
    args = parser.parse_args()
    if args.ray:
        import ray

        start = time.perf_counter()
        ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING")
        print(f"Ray start: {time.perf_counter() - start:.1f} s (not counted below)")
    for cost, name in ((0, "~0 s"), (1000, "~1 ms")):
        n = args.tasks if cost == 0 else args.tasks // 10
        tasks = [cost] * n
        print(f"{n} tasks of {name}:")
        serial_s = _run("serial", tasks, n, executor="serial")
        runs = [("local jobs=2 chunks=1", {"jobs": 2, "chunksize": 1})]
        runs.append(("local jobs=2 adaptive", {"jobs": 2}))
        if args.ray:
            runs.append(("ray jobs=2 adaptive", {"executor": "ray", "jobs": 2}))
            if cost:  # ~2 ms a Ray task: only the smaller run
                runs.append(("ray jobs=2 chunks=1", {"executor": "ray", "jobs": 2, "chunksize": 1}))
        for label, kwargs in runs:
            wall_s = _run(label, tasks, n, **kwargs)
            print(
                f"  {'':<24} overhead vs serial/2: {(wall_s - serial_s / 2) / n * 1e6:8.1f} µs/task"
            )
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with Runner("local", jobs=2) as runner:
        for attempt in ("first run (starts workers)", "second run, same Runner"):
            start = time.perf_counter()
            runner.run(spin, [0, 0], on_result=lambda task, result: None)
            print(f"  2 tasks, {attempt:<27} {time.perf_counter() - start:6.3f} s wall")
    many = args.tasks * 10
    _run("local, lazy 10x tasks", itertools.repeat(0, many), many, jobs=2)
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"parent peak RSS {rss0 / 1024:.0f} MiB before, {rss1 / 1024:.0f} MiB after")


if __name__ == "__main__":
    main()
