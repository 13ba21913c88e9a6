"""Run many independent tasks in-process, on local processes or on Ray, streaming results.

The sweep hands :func:`run_tasks` a pure function and its tasks; each result comes back to
``on_result`` in the parent process as soon as its task finishes, so the caller can commit
it (to the SQLite store) before the next one arrives. The executor only moves values
around: results do not depend on which executor ran them, on the number of workers or on
the order of completion. A caller with several rounds of tasks opens one :class:`Runner`
and calls :meth:`Runner.run` per round, so worker processes (with their warm caches) and
the Ray instance are started once.

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
import time
from collections.abc import Callable, Iterable, Sized
from types import TracebackType
from typing import Any, Final, Literal, TypeVar, get_args

from phaze.executors._common import Chunker, Delivery, RunSummary, TaskError
from phaze.executors._local import LocalPool, SerialRunner
from phaze.executors._ray import RaySession, check_reachable, import_ray
from phaze.executors.progress import Progress
from phaze_common.errors import ConfigError, unknown_name

__all__ = [
    "EXECUTORS",
    "Executor",
    "Progress",
    "RunSummary",
    "Runner",
    "TaskError",
    "check_executor",
    "check_reachable",
    "run_tasks",
]

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


def _problems(
    executor: str, jobs: int | None, address: str | None, chunksize: int | None
) -> list[str]:
    """Every problem with these executor arguments (an unknown executor raises at once)."""
    if executor not in EXECUTORS:
        raise unknown_name("executor", executor, EXECUTORS)
    problems = [
        f"{name} = {value!r} must be a positive integer or None"
        for name, value in (("jobs", jobs), ("chunksize", chunksize))
        if value is not None
        and (isinstance(value, bool) or not isinstance(value, int) or value < 1)
    ]
    if executor == "serial" and jobs not in (None, 1):
        problems.append(f"jobs = {jobs!r} needs executor 'local' or 'ray' (serial runs one)")
    if address is not None and executor != "ray":
        problems.append(f"address = {address!r} is only used by executor 'ray'")
    return problems


def check_executor(executor: str, jobs: int | None = None, address: str | None = None) -> None:
    """Raise the ConfigError a :class:`Runner` of these arguments would (bad arguments, Ray
    not installed), so that a command can refuse them before it prints or does anything."""
    problems = _problems(executor, jobs, address, None)
    if problems:
        raise ConfigError("executor: " + "; ".join(problems))
    if executor == "ray":
        import_ray()


class Runner:
    """An executor kept open across several runs (worker processes, a Ray instance).

    Parameters
    ----------
    executor
        ``"local"`` (worker processes on this machine), ``"ray"`` (Ray tasks) or
        ``"serial"`` (in this process, for debugging). ``"local"`` with one job runs
        serially too: one worker process would only add overhead.
    jobs
        Parallel workers. Local: processes (default: the CPUs this process may use).
        Ray: chunks running at once (twice as many are queued), and ``num_cpus`` of a
        local instance started here (default: the cluster's CPUs).
    address
        Ray only: the cluster to connect to (``"auto"``, ``"ray://host:10001"``); ``None``
        starts a local instance, shut down by :meth:`close`. A Ray already initialised in
        this process is used as it is and left running.
    initializer
        Called once in each worker process before its first task (e.g. to warm caches);
        it may run more than once per process, so it must be idempotent.

    Raises
    ------
    ConfigError
        Bad arguments (all listed at once), or ``executor="ray"`` without Ray installed.

    Examples
    --------
    >>> got = {}
    >>> with Runner("serial") as runner:
    ...     for round_ in ([1, 2], [3]):
    ...         _ = runner.run(abs, [-n for n in round_], on_result=got.__setitem__)
    >>> got
    {-1: 1, -2: 2, -3: 3}
    """

    def __init__(
        self,
        executor: Executor = "local",
        *,
        jobs: int | None = None,
        address: str | None = None,
        initializer: Callable[[], object] | None = None,
    ) -> None:
        check_executor(executor, jobs, address)
        self._backend: SerialRunner | LocalPool | RaySession
        if executor == "ray":
            self._backend = RaySession(jobs, address, initializer)
        elif executor == "local" and (jobs or _default_jobs()) > 1:
            self._backend = LocalPool(jobs or _default_jobs(), initializer)
        else:
            self._backend = SerialRunner(initializer)

    @property
    def executor(self) -> str:
        """Where tasks actually run: ``"serial"``, ``"local"`` or ``"ray"``."""
        return self._backend.name

    def __enter__(self) -> Runner:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close(abort=exc_type is not None)

    def close(self, *, abort: bool = False) -> None:
        """Stop the workers (at once if ``abort``) and shut down a Ray started here."""
        self._backend.close(abort=abort)

    def run(
        self,
        fn: Callable[[T], R],
        tasks: Iterable[T],
        *,
        on_result: Callable[[T, R], Any],
        progress: Progress | None = None,
        chunksize: int | None = None,
    ) -> RunSummary:
        """Run ``fn`` on every task and call ``on_result(task, result)`` as each finishes.

        Parameters
        ----------
        fn
            A pure function of one task. For ``local`` it must be picklable: a module-level
            function, or a ``functools.partial`` of one binding shared read-only context
            (sent once per worker and run, not once per task). Ray also takes closures; on
            a remote cluster the modules ``fn`` uses must be installed there. It returns
            expected outcomes such as "infeasible" as values; any exception is an error.
        tasks
            Picklable tasks (frozen dataclasses). Any iterable: it is consumed lazily, so
            a generator of 10⁶ tasks keeps memory flat; ``len(tasks)``, if defined, gives
            the progress total.
        on_result
            Called in this process, in completion order, exactly once per finished task
            and never with a partial result. It may commit to a database: a first signal
            waits for it.
        progress
            Advanced as tasks finish; started and closed here unless already started.
        chunksize
            Tasks sent to a worker at once; ``None`` sizes chunks from measured task times
            (about 0.2 s each). Bigger chunks cut overhead for tiny tasks, but a stop
            loses the unfinished part of each running chunk (recomputed on a resumed run).

        Returns
        -------
        RunSummary
            Executor, workers, tasks done, chunks, wall and worker time.

        Raises
        ------
        TaskError
            ``fn`` raised (the message names the task; the worker's traceback is the
            cause), a task or result could not be pickled, or a worker died. Raised after
            the same stop as below and once every result that already arrived is delivered.
        KeyboardInterrupt
            On Ctrl-C (SIGINT) or SIGTERM, after the same clean stop: no new work, pending
            work dropped, local workers terminated (Ray's at :meth:`close`, if Ray was
            started here), finished results delivered. A second signal interrupts the stop
            itself.
        """
        problems = _problems(self._backend.name, None, None, chunksize)
        if problems:
            raise ConfigError("executor: " + "; ".join(problems))
        backend = self._backend
        total = len(tasks) if isinstance(tasks, Sized) else None
        start = time.perf_counter()
        if total != 0 and isinstance(backend, RaySession):
            backend.open()  # before the progress clock starts: Ray takes seconds
        owns_progress = progress is not None and not progress.started
        chunker = Chunker(
            tasks, total, backend.workers, 1 if backend.name == "serial" else chunksize
        )
        delivery = Delivery(on_result, progress, chunker)
        logger.info(
            "running %s tasks on executor %s", "?" if total is None else total, backend.name
        )
        try:
            if owns_progress:
                progress.start(total)
            if total != 0:
                backend.run(fn, chunker, delivery)
        finally:
            if owns_progress:
                progress.close()
        summary = delivery.summary(backend.name, backend.workers, time.perf_counter() - start)
        logger.info(
            "%d tasks in %.1f s on %d %s workers (%.1f tasks/s)",
            summary.tasks_done,
            summary.wall_s,
            summary.workers,
            summary.executor,
            summary.tasks_per_s,
        )
        return summary


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
    """Run ``fn`` on every task with a :class:`Runner` opened for this run alone.

    The arguments are those of :class:`Runner` and :meth:`Runner.run`; so are the
    exceptions (ConfigError, TaskError, KeyboardInterrupt after a clean stop).

    Notes
    -----
    Local workers start with ``forkserver`` (``spawn`` where unavailable), so a script
    that calls this must guard its entry point with ``if __name__ == "__main__":``. Workers
    ignore SIGINT (the parent handles Ctrl-C for the whole process group) and exit if the
    parent is killed. At most ``jobs`` chunks are in flight locally and ``2 × jobs`` on Ray.
    """
    problems = _problems(executor, jobs, address, chunksize)
    if problems:
        raise ConfigError("executor: " + "; ".join(problems))
    with Runner(executor, jobs=jobs, address=address, initializer=initializer) as runner:
        return runner.run(fn, tasks, on_result=on_result, progress=progress, chunksize=chunksize)
