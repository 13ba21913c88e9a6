"""Run many independent tasks in-process, on local processes or on Ray, streaming results.

The sweep hands :func:`run_tasks` a pure function and its tasks; each result comes back to
``on_result`` in the parent process as soon as its task finishes, so the caller can commit
it (to the SQLite store) before the next one arrives. The executor only moves values
around: results do not depend on which executor ran them, on the number of workers or on
the order of completion.

Examples
--------
>>> import math
>>> got = {}
>>> summary = run_tasks(math.factorial, range(6), on_result=got.__setitem__, executor="serial")
>>> [got[n] for n in range(6)], summary.tasks_done
([1, 1, 2, 6, 24, 120], 6)
"""

from __future__ import annotations

import logging
import os
import pickle
from collections.abc import Callable, Iterable, Sized
from typing import Any, Final, Literal, TypeVar, get_args

from phaze.errors import ConfigError, unknown_name
from phaze.executors._common import Chunker, Delivery, RunSummary, TaskError
from phaze.executors._local import run_pool, run_serial
from phaze.executors._ray import import_ray, run_ray
from phaze.executors.progress import Progress

__all__ = ["EXECUTORS", "Executor", "Progress", "RunSummary", "TaskError", "run_tasks"]

logger = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")

Executor = Literal["local", "ray", "serial"]
EXECUTORS: Final[tuple[str, ...]] = get_args(Executor)


def _default_jobs() -> int:
    """The CPUs this process may use (its affinity mask where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _check(
    fn: Callable[..., Any],
    executor: str,
    jobs: int | None,
    address: str | None,
    chunksize: int | None,
) -> None:
    """Raise one ConfigError listing every problem with the arguments."""
    if executor not in EXECUTORS:
        raise unknown_name("executor", executor, EXECUTORS)
    problems = []
    if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1):
        problems.append(f"jobs = {jobs!r} must be a positive integer")
    if executor == "serial" and jobs not in (None, 1):
        problems.append(f"jobs = {jobs!r} needs executor 'local' or 'ray' (serial runs one)")
    if address is not None and executor != "ray":
        problems.append(f"address = {address!r} is only used by executor 'ray'")
    if chunksize is not None and (
        isinstance(chunksize, bool) or not isinstance(chunksize, int) or chunksize < 1
    ):
        problems.append(f"chunksize = {chunksize!r} must be a positive integer or None")
    if problems:
        raise ConfigError("run_tasks: " + "; ".join(problems))
    if executor == "ray":
        import_ray()
    if executor != "serial":
        try:
            pickle.dumps(fn)
        except Exception as exc:
            raise TypeError(
                f"run_tasks: fn = {fn!r} must be picklable (a module-level function, or a "
                f"functools.partial of one) to run on executor {executor!r}: {exc}"
            ) from exc


def run_tasks(
    fn: Callable[[T], R],
    tasks: Iterable[T],
    *,
    on_result: Callable[[T, R], Any],
    executor: Executor = "local",
    jobs: int | None = None,
    address: str | None = None,
    progress: Progress | None = None,
    chunksize: int | None = None,
    initializer: Callable[[], object] | None = None,
) -> RunSummary:
    """Run ``fn`` on every task and call ``on_result(task, result)`` as each one finishes.

    Parameters
    ----------
    fn
        A pure function of one task. For ``local`` and ``ray`` it must be picklable: a
        module-level function, or a ``functools.partial`` of one binding shared read-only
        context (sent once per worker, not once per task). It returns expected outcomes
        such as "infeasible" as values; any exception it raises is an error.
    tasks
        Picklable tasks (frozen dataclasses). Any iterable: it is consumed lazily, so a
        generator of 10⁶ tasks keeps memory flat; ``len(tasks)``, if defined, gives the
        progress total.
    on_result
        Called in this process, in completion order, exactly once per finished task and
        never with a partial result. It may commit to a database: signals wait for it.
    executor
        ``"local"`` (worker processes on this machine), ``"ray"`` (Ray tasks) or
        ``"serial"`` (in this process, for debugging). ``"local"`` with ``jobs=1`` runs
        serially too: one worker process would only add overhead.
    jobs
        Parallel workers. Local: processes (default: the CPUs this process may use).
        Ray: tasks in flight per round, and ``num_cpus`` of a local instance started here
        (default: the cluster's CPUs).
    address
        Ray only: the cluster to connect to (``"auto"``, ``"ray://host:10001"``); ``None``
        starts a local instance for this run and shuts it down afterwards.
    progress
        Drawn as tasks finish; ``None`` for none.
    chunksize
        Tasks sent to a worker at once; ``None`` sizes chunks from measured task times
        (about 0.2 s each). Bigger chunks cut overhead for tiny tasks but a stop loses
        the unfinished part of each running chunk (recomputed on a resumed run).
    initializer
        Called once in each worker process before its first task (e.g. to warm caches);
        it may run more than once per process, so it must be idempotent.

    Returns
    -------
    RunSummary
        Executor, worker count, tasks done, chunks, wall and worker time.

    Raises
    ------
    TaskError
        ``fn`` raised (the message names the task; the worker's traceback is the cause),
        a task or result could not be pickled, or a worker died. Raised after every worker
        is stopped and every result that already arrived is delivered.
    KeyboardInterrupt
        On Ctrl-C (SIGINT) or SIGTERM, after the same clean stop: no new work, pending
        work cancelled, workers terminated, finished results delivered. A second signal
        during the stop interrupts it.
    ConfigError
        Bad arguments, or ``executor="ray"`` without Ray installed.

    Notes
    -----
    Local workers start with ``forkserver`` (``spawn`` where unavailable), so a script
    that calls this must guard its entry point with ``if __name__ == "__main__":``. Workers
    ignore SIGINT (the parent handles Ctrl-C for the whole process group). At most
    ``jobs`` chunks are in flight locally and ``2 × jobs`` on Ray.
    """
    _check(fn, executor, jobs, address, chunksize)
    total = len(tasks) if isinstance(tasks, Sized) else None
    if executor == "local" and jobs == 1:
        executor = "serial"
    workers = 1 if executor == "serial" else (jobs or _default_jobs())
    chunker = Chunker(tasks, total, workers, 1 if executor == "serial" else chunksize)
    delivery = Delivery(on_result, progress, chunker, total)
    logger.info("running %s tasks on executor %s", "?" if total is None else total, executor)
    try:
        if executor == "serial":
            summary = run_serial(fn, chunker, delivery, initializer)
        elif executor == "local":
            summary = run_pool(fn, chunker, delivery, initializer, workers)
        elif total == 0:
            delivery.begin()
            summary = delivery.summary("ray", 0, 0.0)
        else:
            summary = run_ray(fn, chunker, delivery, initializer, jobs, address)
    finally:
        if progress is not None:
            progress.close()
    logger.info(
        "%d tasks in %.1f s on %d %s workers (%.1f tasks/s)",
        summary.tasks_done,
        summary.wall_s,
        summary.workers,
        summary.executor,
        summary.tasks_per_s,
    )
    return summary
