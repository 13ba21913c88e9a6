"""Pieces shared by every executor: chunks, their outcomes, delivery to the parent, signals.

A *chunk* is a tuple of consecutive tasks run by one worker in one go; :func:`run_chunk`
is the only code that runs in workers (local processes or Ray). It never raises for an
exception of the task function: it returns the results finished so far and a
:class:`Failure` describing the task that raised, so the parent can report the task by
name, deliver what finished, and stop.
"""

from __future__ import annotations

import functools
import logging
import pickle
import signal
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import islice
from types import FrameType
from typing import Any, Final, Generic, TypeVar

from phaze.executors.progress import Progress

__all__ = [
    "Chunker",
    "ChunkOutcome",
    "Delivery",
    "Failure",
    "RunSummary",
    "StopSignals",
    "TaskError",
    "rest_of_chunk",
    "run_chunk",
    "short_repr",
]

logger = logging.getLogger("phaze.executors")

T = TypeVar("T")
R = TypeVar("R")

# s of worker time per chunk when sizing chunks adaptively: long enough that the fixed cost of
# a chunk (pickling and a pipe round trip locally, more as a Ray task; see
# benchmarks/bench_executors.py) stays small, short enough that a stop loses little work.
_TARGET_CHUNK_S: Final[float] = 0.2
# chunks per worker kept for the tail of a run so the last workers finish together
_TAIL_CHUNKS_PER_WORKER: Final[int] = 4
_MAX_CHUNK: Final[int] = 4096  # tasks; bounds one message's size whatever the task speed
_MAX_REPR: Final[int] = 1000  # characters of a task's repr quoted in an error


def short_repr(obj: object) -> str:
    """``repr(obj)``, cut to a readable length for error messages."""
    text = repr(obj)
    return text if len(text) <= _MAX_REPR else text[: _MAX_REPR - 3] + "..."


def rest_of_chunk(chunk_len: int) -> str:
    """How to say that a lost chunk's failure may come from a task after its first."""
    if chunk_len <= 1:
        return ""
    if chunk_len == 2:
        return " (or the next task in its chunk)"
    return f" (or one of the next {chunk_len - 1} tasks in its chunk)"


class TaskError(RuntimeError):
    """A task's function raised (or its worker died); names the task and keeps the traceback.

    Attributes
    ----------
    task
        The task that failed (``None`` for a worker lost between tasks).
    reason
        ``"ExceptionType: message"`` or what happened to the worker.
    traceback_text
        The worker-side traceback (empty when the worker died without one).
    """

    def __init__(self, task: object, reason: str, traceback_text: str = "") -> None:
        super().__init__(reason if task is None else f"task {short_repr(task)} failed: {reason}")
        self.task = task
        self.reason = reason
        self.traceback_text = traceback_text


class _RemoteTraceback(Exception):
    """Carries a worker's formatted traceback so it prints as the cause of the error."""

    def __str__(self) -> str:
        return "\n" + "".join(self.args)


@dataclass(frozen=True, slots=True)
class Failure:
    """Why the task at ``index`` of a chunk raised: its type, message and traceback."""

    index: int
    reason: str
    traceback_text: str
    exception_pickle: bytes | None

    @classmethod
    def from_exception(cls, index: int, exc: BaseException) -> Failure:
        """Describe ``exc`` in plain, always-picklable values."""
        try:
            exception_pickle = pickle.dumps(exc)
        except Exception:  # an exception with unpicklable state still gets reported
            exception_pickle = None
        return cls(
            index=index,
            reason=f"{type(exc).__qualname__}: {exc}",
            traceback_text="".join(traceback.format_exception(exc)),
            exception_pickle=exception_pickle,
        )

    def error(self, task: object) -> TaskError:
        """The TaskError to raise in the parent, caused by the original exception."""
        err = TaskError(task, self.reason, self.traceback_text)
        cause: BaseException = _RemoteTraceback(self.traceback_text)
        if self.exception_pickle is not None:
            try:
                original = pickle.loads(self.exception_pickle)
            except Exception:  # not reconstructible here: the traceback text still says it
                original = None
            if isinstance(original, BaseException):
                original.__cause__ = cause
                cause = original
        err.__cause__ = cause
        return err


@dataclass(frozen=True, slots=True)
class ChunkOutcome(Generic[R]):
    """What a worker sends back for a chunk: results in task order, time spent, a failure."""

    results: tuple[R, ...]
    worker_s: float
    failure: Failure | None = None


@functools.cache
def _initialise_once(initializer: Callable[[], object]) -> None:
    """Run a worker initializer once per process (keyed by the initializer itself)."""
    initializer()


def run_chunk(
    fn: Callable[[T], R], tasks: tuple[T, ...], initializer: Callable[[], object] | None = None
) -> ChunkOutcome[R]:
    """Run ``fn`` on each task in order; stop at the first exception and describe it.

    This is what every worker executes. ``initializer`` (if any) runs first, once per
    process; if it raises, the failure is reported against the chunk's first task.
    """
    start = time.perf_counter()
    results: list[R] = []
    try:
        if initializer is not None:
            _initialise_once(initializer)
        for task in tasks:
            results.append(fn(task))
    except Exception as exc:
        failure = Failure.from_exception(len(results), exc)
        return ChunkOutcome(tuple(results), time.perf_counter() - start, failure)
    return ChunkOutcome(tuple(results), time.perf_counter() - start)


class Chunker(Generic[T]):
    """Hands out tasks lazily in chunks, sized so that one chunk takes about 0.2 s.

    With a fixed ``chunksize`` every chunk has that size. Otherwise the first chunks have
    one task each, and later sizes follow the mean task time measured so far, capped so that
    at least four chunks per worker remain for the tail of the run (when the total is
    known). Chunking only groups work: it never changes any result.
    """

    def __init__(
        self, tasks: Iterable[T], total: int | None, workers: int, chunksize: int | None
    ) -> None:
        self._tasks: Iterator[T] = iter(tasks)
        self._remaining = total
        self._workers = workers
        self._fixed = chunksize
        self._timed_tasks = 0
        self._timed_s = 0.0

    def take(self) -> tuple[T, ...]:
        """The next chunk; empty when every task has been handed out."""
        chunk = tuple(islice(self._tasks, self._size()))
        if self._remaining is not None:
            self._remaining = max(self._remaining - len(chunk), 0)
        return chunk

    def record(self, tasks: int, worker_s: float) -> None:
        """Learn from a finished chunk of ``tasks`` tasks that took ``worker_s`` seconds."""
        self._timed_tasks += tasks
        self._timed_s += worker_s

    def _size(self) -> int:
        if self._fixed is not None:
            return self._fixed
        if self._timed_tasks == 0:
            return 1
        mean_s = self._timed_s / self._timed_tasks
        # Tasks this fast fill the largest chunk (and 1 / a subnormal mean would overflow).
        size = (
            _MAX_CHUNK if mean_s * _MAX_CHUNK <= _TARGET_CHUNK_S else int(_TARGET_CHUNK_S / mean_s)
        )
        if self._remaining is not None:
            size = min(size, self._remaining // (self._workers * _TAIL_CHUNKS_PER_WORKER))
        return max(1, min(size, _MAX_CHUNK))


@dataclass(frozen=True, slots=True)
class RunSummary:
    """How a run went: where it ran, how much finished and how long it took.

    ``worker_s`` is the time spent inside the task function summed over workers, so
    ``worker_s / wall_s`` is the mean number of busy workers.
    """

    executor: str
    workers: int
    tasks_done: int
    chunks: int
    wall_s: float
    worker_s: float

    @property
    def tasks_per_s(self) -> float:
        """Tasks finished per second of wall time."""
        return self.tasks_done / self.wall_s if self.wall_s > 0 else 0.0


class Delivery(Generic[T, R]):
    """Hands finished results to ``on_result`` in the parent and keeps the counts."""

    def __init__(
        self,
        on_result: Callable[[T, R], Any],
        progress: Progress | None,
        chunker: Chunker[T],
    ) -> None:
        self._on_result = on_result
        self._progress = progress
        self._chunker = chunker
        self.tasks_done = 0
        self.chunks = 0
        self.worker_s = 0.0

    def deliver(
        self, chunk: tuple[T, ...], outcome: ChunkOutcome[R], *, raise_failure: bool = True
    ) -> None:
        """Call ``on_result`` for each finished task, then raise the chunk's failure if any.

        Only whole results are delivered: a failed task is never passed to ``on_result``.
        """
        assert len(outcome.results) <= len(chunk), "a worker returned more results than tasks"
        self.chunks += 1
        self.worker_s += outcome.worker_s
        self._chunker.record(len(outcome.results), outcome.worker_s)
        for task, result in zip(chunk, outcome.results, strict=False):
            self._on_result(task, result)
            self.tasks_done += 1
            if self._progress is not None:
                self._progress.advance()
        if outcome.failure is not None:
            error = outcome.failure.error(chunk[outcome.failure.index])
            if raise_failure:
                raise error
            logger.warning("while stopping: %s", error)

    def summary(self, executor: str, workers: int, wall_s: float) -> RunSummary:
        """The run's summary so far."""
        return RunSummary(executor, workers, self.tasks_done, self.chunks, wall_s, self.worker_s)


class StopSignals:
    """While active, SIGINT and SIGTERM ask the run to stop cleanly instead of killing it.

    Inside :meth:`deferred` sections (delivering results, handing out work) a first signal
    only sets :attr:`requested`; the run loop then stops at its next :meth:`check`.
    Elsewhere (waiting for workers, or running a task in-process) and on a second signal,
    it raises KeyboardInterrupt at once. Handlers are installed only in the main thread
    and never over an ignored signal (e.g. SIGINT in a background job), and restored on
    exit.
    """

    _SIGNALS: Final = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.requested = False
        self._deferring = 0
        self._saved: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in self._SIGNALS:
                previous = signal.getsignal(sig)
                if previous in (signal.SIG_IGN, None):
                    continue
                self._saved[sig] = previous
                signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc_info: object) -> None:
        for sig, previous in self._saved.items():
            signal.signal(sig, previous)
        self._saved.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self._deferring and not self.requested:
            self.requested = True
            return
        self.requested = True
        raise KeyboardInterrupt

    @contextmanager
    def deferred(self) -> Iterator[None]:
        """A section a first signal must not interrupt."""
        self._deferring += 1
        try:
            yield
        finally:
            self._deferring -= 1

    def check(self) -> None:
        """Raise KeyboardInterrupt if a stop was requested."""
        if self.requested:
            raise KeyboardInterrupt

    @contextmanager
    def stop_wins(self) -> Iterator[None]:
        """Turn a TaskError into KeyboardInterrupt once a stop was requested.

        A signal sent to the whole process group (``kill -TERM -PGID``) also kills the
        workers; their deaths are then part of the stop, not errors of their tasks.
        """
        try:
            yield
        except TaskError as exc:
            if not self.requested:
                raise
            logger.info("while stopping: %s", exc)
            raise KeyboardInterrupt from None
