"""The in-process (serial) executor and the local process pool.

The pool is a small one of our own rather than ``concurrent.futures.ProcessPoolExecutor``
Python 3.11's pool lacks three things a clean stop needs: terminating busy workers at
once, knowing which task a worker that died (OOM killer, ``kill -9``) was running, and
workers that stop by themselves when the parent is killed. Workers also ignore the
terminal's SIGINT (the parent handles it) so a Ctrl-C prints no tracebacks. Each worker has
its own pipe and holds at most one chunk, so at most ``jobs`` chunks are ever in flight
and memory stays flat however many tasks there are.

Workers start with the ``forkserver`` method where available (else ``spawn``): they are
forked from a clean server process, not from a parent that may hold threads (HiGHS,
BLAS, Ray), which ``fork`` makes unsafe.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import pickle
import signal
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection, wait
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from typing import Any, Final, TypeVar

from phaze.executors._common import (
    Chunker,
    ChunkOutcome,
    Delivery,
    Failure,
    StopSignals,
    TaskError,
    rest_of_chunk,
    run_chunk,
)

__all__ = ["LocalPool", "SerialRunner"]

logger = logging.getLogger("phaze.executors")

T = TypeVar("T")
R = TypeVar("R")

_STOP_GRACE_S: Final[float] = 2.0  # s a terminated worker gets before SIGKILL
_EXIT_GRACE_S: Final[float] = 5.0  # s an idle worker gets to exit after the last chunk


class SerialRunner:
    """Runs every task in this process, one at a time (for debugging and tests).

    A signal raises KeyboardInterrupt inside the running task (a pure function, so nothing
    is lost but that task), but waits while a result is being delivered.
    """

    name: Final = "serial"
    workers: Final = 1

    def __init__(self, initializer: Callable[[], object] | None) -> None:
        self._initializer = initializer

    def run(self, fn: Callable[[T], R], chunker: Chunker[T], delivery: Delivery[T, R]) -> None:
        """Run the chunks in order, delivering each outcome."""
        with StopSignals() as stop:
            while chunk := chunker.take():
                outcome = run_chunk(fn, chunk, self._initializer)
                with stop.deferred():
                    delivery.deliver(chunk, outcome)
                stop.check()

    def close(self, *, abort: bool = False) -> None:
        """Nothing to release."""


def _exit_when_parent_dies(parent_alive: Connection) -> None:
    """Block until the parent's end of the liveness pipe closes, then end this process.

    The parent never writes to that pipe, so end of file means it is gone (``kill -9``):
    a worker then stops at once instead of finishing a long task nobody will collect.
    """
    wait([parent_alive])
    os._exit(1)


def _worker_main(
    conn: Connection, parent_alive: Connection, initializer: Callable[[], object] | None
) -> None:
    """A worker's loop: receive ``(pickled fn or None, chunk)``, run it, send its outcome.

    ``fn`` comes with the first chunk of each run that uses a new function and is kept for
    the following chunks. ``None`` or end of file ends the loop. What cannot be unpickled
    here is reported as the chunk's failure instead of killing the worker.
    """
    # the terminal sends Ctrl-C to the whole process group: the parent alone handles it
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_exit_when_parent_dies, args=(parent_alive,), daemon=True).start()
    fn: Callable[[Any], Any] | None = None
    while True:
        try:
            message = conn.recv_bytes()
        except (EOFError, OSError):  # the parent is gone
            return
        try:
            decoded = pickle.loads(message)
            if decoded is None:
                return
            fn_pickle, chunk = decoded
            if fn_pickle is not None:
                fn = pickle.loads(fn_pickle)
        except Exception as exc:  # e.g. a module the parent has and this process cannot import
            error = RuntimeError(f"a worker could not load the task or its function: {exc!r}")
            conn.send(ChunkOutcome((), 0.0, Failure.from_exception(0, error)))
            continue
        assert fn is not None, "the first chunk comes with its function"
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
        parent_alive: Connection,
        initializer: Callable[[], object] | None,
    ) -> None:
        self.conn, child_conn = ctx.Pipe(duplex=True)
        self.process: BaseProcess = ctx.Process(  # type: ignore[attr-defined]
            target=_worker_main, args=(child_conn, parent_alive, initializer), daemon=True
        )
        self.process.start()
        child_conn.close()
        self.chunk: tuple = ()
        self.fn_pickle: bytes | None = None  # the function this worker holds, pickled

    def send(self, fn_pickle: bytes, chunk: tuple) -> None:
        try:
            self.conn.send((None if fn_pickle is self.fn_pickle else fn_pickle, chunk))
        except (BrokenPipeError, OSError):
            raise self.died() from None
        except Exception as exc:  # pickling: name the first task that does not pickle
            for task in chunk:
                try:
                    pickle.dumps(task)
                except Exception:
                    raise TaskError(task, f"the task could not be pickled: {exc}") from exc
            raise
        self.fn_pickle = fn_pickle
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


class LocalPool:
    """Up to ``jobs`` worker processes, started on demand and kept across runs.

    Keeping workers between runs of one sweep keeps their warm caches and saves their
    start-up (a fork and the imports of ``fn``'s modules). On an error or a stop request
    no new work is handed out, outcomes already sent are delivered, and every worker is
    terminated before the exception propagates; a later run starts fresh workers.
    """

    name: Final = "local"

    def __init__(self, jobs: int, initializer: Callable[[], object] | None) -> None:
        self.workers = jobs
        self._initializer = initializer
        self._ctx = multiprocessing.get_context(_start_method())
        self._pool: list[_Worker] = []
        # a pipe the parent never writes to: workers see its end of file if the parent dies
        self._alive_r: Connection | None = None
        self._alive_w: Connection | None = None

    def _spawn(self) -> _Worker:
        if self._alive_r is None:
            self._alive_r, self._alive_w = self._ctx.Pipe(duplex=False)
        worker = _Worker(self._ctx, self._alive_r, self._initializer)
        self._pool.append(worker)
        return worker

    def run(self, fn: Callable[[T], R], chunker: Chunker[T], delivery: Delivery[T, R]) -> None:
        """Run every chunk on the workers, delivering outcomes in completion order.

        ``fn`` is pickled once here and sent to each worker with its first chunk.
        """
        try:
            fn_pickle = pickle.dumps(fn)
        except Exception as exc:
            raise TypeError(
                f"run: fn = {fn!r} must be picklable (a module-level function, or a "
                f"functools.partial of one) to run on executor 'local': {exc}"
            ) from exc
        with StopSignals() as stop:
            try:
                self._loop(fn_pickle, chunker, delivery, stop)
            except BaseException as exc:
                with stop.deferred():
                    try:
                        if isinstance(exc, KeyboardInterrupt | TaskError):
                            _drain(self._pool, delivery)
                    finally:
                        self.close(abort=True)
                raise

    def close(self, *, abort: bool = False) -> None:
        """Stop every worker: politely after a completed run, at once when ``abort``."""
        if abort:
            _terminate(self._pool)
        else:
            _close(self._pool)
        self._pool.clear()
        for end in (self._alive_w, self._alive_r):
            if end is not None:
                end.close()
        self._alive_r = self._alive_w = None

    def _loop(
        self, fn_pickle: bytes, chunker: Chunker[T], delivery: Delivery[T, R], stop: StopSignals
    ) -> None:
        workers = self._pool
        exhausted = False
        while True:
            with stop.deferred(), stop.stop_wins():
                while not exhausted:
                    idle = next((w for w in workers if not w.chunk), None)
                    if idle is None and len(workers) >= self.workers:
                        break
                    chunk = chunker.take()
                    if not chunk:
                        exhausted = True
                        break
                    (idle or self._spawn()).send(fn_pickle, chunk)
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
