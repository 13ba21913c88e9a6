"""Task functions for the executor tests: importable by worker processes and Ray workers.

Not collected by pytest (no ``test_`` prefix); the test modules import it by name, since
pytest puts tests/ on ``sys.path`` and the executors pass that path on to their workers.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

__all__ = [
    "Job",
    "broken_warm_up",
    "die",
    "flaky",
    "lp_value",
    "nested_result",
    "slow_square",
    "square_job",
    "warm_up",
    "warmed",
]


@dataclass(frozen=True, slots=True)
class Job:
    """A deterministic test task: ``n`` and how long to sleep first."""

    n: int
    sleep_s: float = 0.0


def square_job(job: Job) -> tuple[int, int]:
    """``(n, n²)`` plus a little CPU work that depends only on ``n``."""
    acc = 0
    for i in range(200 * (job.n % 7 + 1)):
        acc = (acc * 31 + i + job.n) % 1_000_003
    if job.sleep_s:
        time.sleep(job.sleep_s)
    return job.n, job.n * job.n + 0 * acc


def slow_square(job: Job) -> tuple[int, int, int]:
    """``(n, n², pid)``; sleeps ``job.sleep_s`` first (for interruption tests)."""
    time.sleep(job.sleep_s)
    return job.n, job.n * job.n, os.getpid()


def flaky(job: Job) -> int:
    """Fails for n == 13 with a ValueError naming n."""
    if job.n == 13:
        raise ValueError(f"unlucky n = {job.n}")
    return job.n


def die(job: Job) -> int:
    """Kills its own process for n == 3 (a worker lost to the OOM killer)."""
    if job.n == 3:
        os._exit(9)
    return job.n


def nested_result(job: Job) -> object:
    """A result that cannot be pickled for n == 2 (a lambda)."""
    return (lambda: None) if job.n == 2 else job.n


def lp_value(job: Job) -> float:
    """Optimum of max x + n·y s.t. x + y ≤ 4, x + 3y ≤ 6, x, y ≥ 0, solved by HiGHS."""
    import highspy
    import numpy as np

    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("threads", 1)
    inf = highspy.kHighsInf
    h.addVars(2, np.zeros(2), np.array([inf, inf]))
    h.changeColsCost(2, np.array([0, 1], dtype=np.int32), np.array([-1.0, -float(job.n)]))
    h.addRow(-inf, 4.0, 2, np.array([0, 1], dtype=np.int32), np.array([1.0, 1.0]))
    h.addRow(-inf, 6.0, 2, np.array([0, 1], dtype=np.int32), np.array([1.0, 3.0]))
    h.run()
    return -h.getInfo().objective_function_value


def warm_up() -> None:
    """A worker initializer: leaves a mark that :func:`warmed` reads."""
    os.environ["PHAZE_TEST_WORKER_WARMED"] = "yes"


def warmed(job: Job) -> tuple[int, str | None]:
    """``(n, the mark left by warm_up in this process)``."""
    return job.n, os.environ.get("PHAZE_TEST_WORKER_WARMED")


def broken_warm_up() -> None:
    """A worker initializer that fails."""
    raise RuntimeError("cannot warm up")
