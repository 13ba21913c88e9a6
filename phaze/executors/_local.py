"""The in-process (serial) executor and the local process pool.

The pool is a small one of our own rather than ``concurrent.futures.ProcessPoolExecutor``
because a clean Ctrl-C needs three things Python 3.11's pool lacks: terminating busy
workers at once, knowing which task a worker that died (OOM killer, ``kill -9``) was
running, and workers that ignore the terminal's SIGINT so they print no tracebacks. Each
worker has its own pipe and holds at most one chunk, so at most ``jobs`` chunks are ever
in flight and memory stays flat however many tasks there are.

Workers start with the ``forkserver`` method where available (else ``spawn``): they are
forked from a clean server process, not from a parent that may hold threads (HiGHS,
BLAS, Ray), which ``fork`` makes unsafe.
"""

from __future__ import annotations

import logging
import multiprocessing
import pickle
import signal
import time
from collections.abc import Callable
from multiprocessing.connection import Connection, wait
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from typing import Final, TypeVar

from phaze.executors._common import (
    Chunker,
    ChunkOutcome,
    Delivery,
    Failure,
    RunSummary,
    StopSignals,
    TaskError,
    rest_of_chunk,
    run_chunk,
)

__all__ = ["run_pool", "run_serial"]

logger = logging.getLogger("phaze.executors")

T = TypeVar("T")
R = TypeVar("R")

_STOP_GRACE_S: Final[float] = 2.0  # s a terminated worker gets before SIGKILL
_EXIT_GRACE_S: Final[float] = 5.0  # s an idle worker gets to exit after the last chunk


def run_serial(
    fn: Callable[[T], R],
    chunker: Chunker[T],
    delivery: Delivery[T, R],
    initializer: Callable[[], object] | None,
) -> RunSummary:
    """Run every task in this process, one at a time (for debugging and tests).

    A signal raises KeyboardInterrupt inside the running task (a pure function, so nothing
    is lost but that task), but waits while a result is being delivered.
    """
    start = time.perf_counter()
    delivery.begin()
    with StopSignals() as stop:
        while chunk := chunker.take():
            outcome = run_chunk(fn, chunk, initializer)
            with stop.deferred():
                delivery.deliver(chunk, outcome)
            stop.check()
    return delivery.summary("serial", 1, time.perf_counter() - start)


def _worker_main(
    conn: Connection, fn: Callable[[T], R], initializer: Callable[[], object] | None
) -> None:
    """A worker's loop: receive a chunk, run it, send its outcome; ``None`` or EOF ends it."""
    # the terminal sends Ctrl-C to the whole process group: the parent alone handles it
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while True:
        try:
            chunk = conn.recv()
        except (EOFError, OSError):  # the parent is gone
            return
        if chunk is None:
            return
        outcome = run_chunk(fn, chunk, initializer)
        try:
            conn.send(outcome)
        except (BrokenPipeError, EOFError, OSError):
            return
        except Exception:  # a result that cannot be pickled: report it as that task's failure
            conn.send(_unpicklable_result(chunk, outcome))


def _unpicklable_result(chunk: tuple[T, ...], outcome: ChunkOutcome[R]) -> ChunkOutcome[R]:
    """The outcome up to the first result that cannot be pickled, failing at that task."""
    for index, result in enumerate(outcome.results):
        try:
            pickle.dumps(result)
        except Exception as exc:
            failure = Failure.from_exception(
                index, TypeError(f"its result could not be pickled: {exc}")
            )
            return ChunkOutcome(outcome.results[:index], outcome.worker_s, failure)
    raise AssertionError("every result pickles, yet the outcome did not")


def _start_method() -> str:
    return "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"


class _Worker:
    """One worker process, its end of the pipe, and the chunk it is running (if any)."""

    def __init__(
        self,
        ctx: BaseContext,
        fn: Callable[[T], R],
        initializer: Callable[[], object] | None,
    ) -> None:
        self.conn, child_conn = ctx.Pipe(duplex=True)
        self.process: BaseProcess = ctx.Process(  # type: ignore[attr-defined]
            target=_worker_main, args=(child_conn, fn, initializer), daemon=True
        )
        self.process.start()
        child_conn.close()
        self.chunk: tuple = ()

    def send(self, chunk: tuple) -> None:
        try:
            self.conn.send(chunk)
        except (BrokenPipeError, OSError):
            raise self.died() from None
        except Exception as exc:  # pickling: name the first task that does not pickle
            for task in chunk:
                try:
                    pickle.dumps(task)
                except Exception:
                    raise TaskError(task, f"the task could not be pickled: {exc}") from exc
            raise
        self.chunk = chunk

    def receive(self) -> ChunkOutcome:
        try:
            outcome = self.conn.recv()
        except (EOFError, OSError):
            raise self.died() from None
        return outcome

    def died(self) -> TaskError:
        """The error for this worker's death, naming the task it was running."""
        self.process.join(_STOP_GRACE_S)
        code = self.process.exitcode
        how = (
            f"killed by signal {-code}" if code is not None and code < 0 else f"exit status {code}"
        )
        if not self.chunk:
            return TaskError(None, f"a worker process died while idle ({how})")
        extra = rest_of_chunk(len(self.chunk))
        return TaskError(self.chunk[0], f"its worker process died ({how}){extra}")


def run_pool(
    fn: Callable[[T], R],
    chunker: Chunker[T],
    delivery: Delivery[T, R],
    initializer: Callable[[], object] | None,
    jobs: int,
) -> RunSummary:
    """Run the tasks on up to ``jobs`` local worker processes, streaming results back.

    Workers start lazily, one per chunk until ``jobs`` are running. On an error or a stop
    request no new work is handed out, outcomes already sent are delivered, and every
    worker is terminated before the exception propagates.
    """
    start = time.perf_counter()
    ctx = multiprocessing.get_context(_start_method())
    workers: list[_Worker] = []
    delivery.begin()
    with StopSignals() as stop:
        try:
            _pool_loop(ctx, fn, chunker, delivery, initializer, jobs, workers, stop)
        except BaseException as exc:
            with stop.deferred():
                try:
                    if isinstance(exc, KeyboardInterrupt | TaskError):
                        _drain(workers, delivery)
                finally:
                    _terminate(workers)
            raise
        _close(workers)
    return delivery.summary("local", len(workers), time.perf_counter() - start)


def _pool_loop(
    ctx: BaseContext,
    fn: Callable[[T], R],
    chunker: Chunker[T],
    delivery: Delivery[T, R],
    initializer: Callable[[], object] | None,
    jobs: int,
    workers: list[_Worker],
    stop: StopSignals,
) -> None:
    exhausted = False
    while True:
        with stop.deferred(), stop.stop_wins():
            while not exhausted:
                idle = next((w for w in workers if not w.chunk), None)
                if idle is None and len(workers) >= jobs:
                    break
                chunk = chunker.take()
                if not chunk:
                    exhausted = True
                    break
                if idle is None:
                    idle = _Worker(ctx, fn, initializer)
                    workers.append(idle)
                idle.send(chunk)
        busy = [w for w in workers if w.chunk]
        if not busy:
            return
        stop.check()  # a signal deferred while handing out work; later ones raise in wait()
        ready = set(wait([w.conn for w in busy] + [w.process.sentinel for w in workers]))
        with stop.deferred(), stop.stop_wins():
            for w in busy:
                if w.conn in ready:
                    outcome = w.receive()
                    chunk, w.chunk = w.chunk, ()
                    delivery.deliver(chunk, outcome)
            for w in workers:
                if w.process.sentinel in ready:
                    raise w.died()
        stop.check()


def _drain(workers: list[_Worker], delivery: Delivery) -> None:
    """Deliver the outcomes workers already sent, without waiting for running chunks."""
    for w in workers:
        if not w.chunk:
            continue
        try:
            if not w.conn.poll():
                continue
            outcome = w.conn.recv()
        except (EOFError, OSError):
            continue
        chunk, w.chunk = w.chunk, ()
        delivery.deliver(chunk, outcome, raise_failure=False)


def _terminate(workers: list[_Worker]) -> None:
    """Stop every worker now: SIGTERM, a short grace, then SIGKILL."""
    for w in workers:
        if w.process.is_alive():
            w.process.terminate()
    _reap(workers, _STOP_GRACE_S)


def _close(workers: list[_Worker]) -> None:
    """Ask idle workers to exit after a completed run, terminating any that linger."""
    for w in workers:
        try:
            w.conn.send(None)
        except OSError:
            pass
    _reap(workers, _EXIT_GRACE_S)


def _reap(workers: list[_Worker], grace_s: float) -> None:
    deadline = time.monotonic() + grace_s
    for w in workers:
        w.process.join(max(deadline - time.monotonic(), 0.0))
        if w.process.is_alive():
            logger.warning("worker %s did not exit; killing it", w.process.pid)
            w.process.kill()
            w.process.join()
        w.conn.close()
        w.process.close()
