"""A dependency-free progress display: points done / total, rate and ETA on stderr.

On a terminal the line is redrawn in place with ``\\r`` (at most every 0.1 s); on a pipe or
a log file a plain line is written every ``interval_s`` (10 s by default) so logs stay short.
The text itself comes from the pure :func:`format_progress`, which the tests check exactly.
A single long command (one evaluation) has no count to show: :class:`Ticker` draws its
elapsed time instead, on a terminal only, once it has run past a delay.
"""

from __future__ import annotations

import functools
import math
import sys
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Final, ParamSpec, TextIO, TypeVar

__all__ = [
    "Progress",
    "Ticker",
    "eta_from_work_left",
    "format_duration",
    "format_elapsed",
    "format_progress",
    "ticking",
]

_P = ParamSpec("_P")
_R = TypeVar("_R")

_TTY_INTERVAL_S: Final[float] = 0.1  # s between redraws on a terminal (10 Hz is smooth, cheap)
_LOG_INTERVAL_S: Final[float] = 10.0  # s between lines when stderr is a file or a pipe
_TICK_DELAY_S: Final[float] = 2.0  # s a single command runs before its elapsed time shows
_TICK_INTERVAL_S: Final[float] = 0.5  # s between redraws of that line (it shows whole seconds)


def format_duration(seconds: float) -> str:
    """A short human duration: ``42s``, ``3m07s``, ``2h05m``, ``3d04h``; ``--`` if unknown.

    Examples
    --------
    >>> format_duration(187.4), format_duration(7500), format_duration(math.inf)
    ('3m07s', '2h05m', '--')
    """
    if not math.isfinite(seconds) or seconds < 0:
        return "--"
    s = round(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def format_progress(
    label: str,
    done: int,
    total: int | None,
    rate_per_s: float,
    elapsed_s: float,
    eta_s: float | None = None,
) -> str:
    """One progress line: count, percentage, rate and ETA (or elapsed time when finished).

    ``rate_per_s`` is the rate of this run only (items already done before it, e.g. points
    found in the store, count towards ``done`` but not towards the rate; items this run
    decided without running them, e.g. pruned designs, count towards both). ``eta_s``, when
    given, is the time left as the caller estimates it (from the work left rather than the
    items left; NaN: not yet known, shown as "ETA after the first round").

    Examples
    --------
    >>> format_progress("points", 250, 1000, 12.5, 20.0)
    'points 250/1000 (25.0%)  12.5/s  ETA 1m00s'
    >>> format_progress("points", 1000, 1000, 12.5, 80.0)
    'points 1000/1000 (100.0%)  12.5/s  done in 1m20s'
    >>> format_progress("points", 7, None, 0.0, 1.0)
    'points 7  --/s  elapsed 1s'
    >>> format_progress("designs", 8, 3138, 0.3, 24.0, eta_s=math.nan)
    'designs 8/3138 (0.3%)  0.3/s  ETA after the first round'
    """
    if rate_per_s <= 0:
        rate = "--/s"
    else:
        rate = f"{rate_per_s:.0f}/s" if rate_per_s >= 100 else f"{rate_per_s:.3g}/s"
    if total is None:
        return f"{label} {done}  {rate}  elapsed {format_duration(elapsed_s)}"
    pct = 100.0 * done / total if total else 100.0
    if done >= total:
        tail = f"done in {format_duration(elapsed_s)}"
    elif eta_s is not None and math.isnan(eta_s):
        tail = "ETA after the first round"
    else:
        if eta_s is None:
            eta_s = (total - done) / rate_per_s if rate_per_s > 0 else math.inf
        tail = f"ETA {format_duration(eta_s)}"
    return f"{label} {done}/{total} ({pct:.1f}%)  {rate}  {tail}"


class Progress:
    """Progress of a run of tasks, drawn on ``stream`` (stderr by default).

    A run (:func:`phaze.executors.run_tasks`, :meth:`Runner.run`) advances it as tasks
    finish. If it is not started yet, the run starts it with its own task count and closes
    it at the end; a caller spanning several runs starts it with the grand total, may
    :meth:`skip` items it decides not to run, and closes it. Pass ``progress=None`` (or
    ``enabled=False`` here) for no output.

    Parameters
    ----------
    label
        The noun counted, e.g. ``"points"``.
    stream
        Where to draw; ``None`` means ``sys.stderr`` at the time of drawing.
    skipped
        Items already done before this run (e.g. found in the store): they count towards
        done / total but not towards the rate, which is this run's. Items this run decides
        without running them (:meth:`skip`, e.g. pruned designs) count towards the rate, so
        the ETA covers every item left whichever way it will be done.
    enabled
        ``False`` draws nothing.
    is_tty
        Redraw in place (``True``) or write periodic lines (``False``); ``None`` asks the
        stream.
    interval_s
        Minimum time between two draws; defaults to 0.1 s on a terminal and 10 s otherwise.
    clock
        Monotonic time source in seconds (tests pass a fake one).
    work_left
        The items still to run, as the caller knows them (a sweep: the designs it still
        expects to evaluate, :meth:`phaze.sweep.rounds.Rounds.work_left`), or None while it
        cannot tell; with it, the ETA is :func:`eta_from_work_left` at the time per item run
        since it first told ("after the first round" until then), since items decided
        without running cost nothing and their share grows as a run goes.
    """

    def __init__(
        self,
        label: str = "tasks",
        *,
        stream: TextIO | None = None,
        skipped: int = 0,
        enabled: bool = True,
        is_tty: bool | None = None,
        interval_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        work_left: Callable[[], int | None] | None = None,
    ) -> None:
        self._stream = stream
        self.work_left = work_left
        self.ran = 0  # items this run ran (advanced, not skipped)
        self._known: tuple[float, int] | None = None  # (elapsed s, ran) when work_left first told
        self.label = label
        self.skipped = skipped
        self._resumed = skipped
        self.enabled = enabled
        self._is_tty = is_tty
        self._interval_s = interval_s
        self._clock = clock
        self.total: int | None = None
        self.done = 0
        self._start = 0.0
        self._last_draw = -math.inf
        self._drawn_done: int | None = None
        self._width = 0
        self._open = False

    @property
    def stream(self) -> TextIO:
        """The stream drawn on."""
        return self._stream if self._stream is not None else sys.stderr

    @property
    def tty(self) -> bool:
        """Whether the line is redrawn in place."""
        if self._is_tty is not None:
            return self._is_tty
        isatty = getattr(self.stream, "isatty", None)
        return bool(isatty and isatty())

    def start(self, total: int | None) -> None:
        """Begin a run of ``total`` new items (``None`` if unknown) and draw the first line."""
        self.total = None if total is None else total + self.skipped
        self.done = self.skipped
        self._resumed = self.skipped
        self.ran = 0
        self._known = None
        self._start = self._clock()
        self._last_draw = -math.inf
        self._open = True
        self._draw(force=True)

    @property
    def started(self) -> bool:
        """Whether :meth:`start` was called and :meth:`close` not yet."""
        return self._open

    def skip(self, n: int) -> None:
        """Count ``n`` items as done without running them (e.g. pruned): done by this run,
        so in its rate."""
        self.skipped += n
        self.ran -= n
        self.advance(n)

    def advance(self, n: int = 1) -> None:
        """Count ``n`` more items done, redrawing if the interval has passed."""
        self.done += n
        self.ran += n
        self._draw(force=False)

    def close(self) -> None:
        """Draw the final line and end it with a newline (idempotent).

        In a log, the final line is left out when the last one drawn already had the final
        count (a fully resumed run is one line, not two).
        """
        if not self._open:
            return
        if self.tty or self._drawn_done != self.done:
            self._draw(force=True)
        if self.enabled and self.tty:
            self.stream.write("\n")
            self.stream.flush()
        self._open = False

    def line(self) -> str:
        """The current progress text."""
        elapsed_s = max(self._clock() - self._start, 0.0)
        new = self.done - self._resumed
        rate = new / elapsed_s if elapsed_s > 0 and new > 0 else 0.0
        eta_s = None
        if self.work_left is not None:
            left = self.work_left()
            if left is not None and self._known is None:
                self._known = (elapsed_s, self.ran)
            since_s, ran = self._known or (0.0, self.ran)
            eta_s = eta_from_work_left(elapsed_s - since_s, self.ran - ran, left)
        return format_progress(self.label, self.done, self.total, rate, elapsed_s, eta_s)

    def _draw(self, *, force: bool) -> None:
        if not self.enabled:
            return
        now = self._clock()
        tty = self.tty
        interval_s = self._interval_s
        if interval_s is None:
            interval_s = _TTY_INTERVAL_S if tty else _LOG_INTERVAL_S
        if not force and now - self._last_draw < interval_s:
            return
        self._last_draw = now
        self._drawn_done = self.done
        text = self.line()
        if tty:
            # pad with spaces to wipe the rest of a longer previous line
            self.stream.write("\r" + text.ljust(self._width))
            self._width = len(text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()


def eta_from_work_left(since_s: float, ran_since: int, work_left: int | None) -> float:
    """Seconds left when ``work_left`` items still need running and the ``ran_since`` items
    run since the work left became known took ``since_s`` (items decided without running
    take no time; the items before, such as a sweep's first round, also paid for the
    workers' start and cold caches); NaN while it cannot be told.

    Examples
    --------
    >>> eta_from_work_left(60.0, 20, 50), eta_from_work_left(60.0, 0, 50)
    (150.0, nan)
    """
    if work_left is None or ran_since <= 0:
        return math.nan
    return work_left * since_s / ran_since


def format_elapsed(label: str, elapsed_s: float) -> str:
    """The line of a single long command: what runs and for how long.

    Examples
    --------
    >>> format_elapsed("phaze evaluate", 12.3)
    'phaze evaluate: working, 12s elapsed'
    """
    return f"{label}: working, {format_duration(elapsed_s)} elapsed"


class Ticker:
    """The elapsed time of one long command, redrawn in place on ``stream`` (stderr by
    default) from ``delay_s`` after it starts (2 s), every ``interval_s`` (0.5 s), and wiped
    when it ends.

    Only on a terminal: a pipe, a log file or a captured stream gets nothing, so ``--json``
    documents and logs stay as they were. A background thread draws the line, since the
    command's own work (one evaluation) has no points at which to draw. Use as a context
    manager.
    """

    def __init__(
        self,
        label: str,
        *,
        stream: TextIO | None = None,
        delay_s: float | None = None,
        interval_s: float | None = None,
        is_tty: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.label = label
        self._stream = stream
        self._delay_s = _TICK_DELAY_S if delay_s is None else delay_s
        self._interval_s = _TICK_INTERVAL_S if interval_s is None else interval_s
        self._is_tty = is_tty
        self._clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._width = 0

    @property
    def stream(self) -> TextIO:
        return self._stream if self._stream is not None else sys.stderr

    def _tty(self) -> bool:
        if self._is_tty is not None:
            return self._is_tty
        isatty = getattr(self.stream, "isatty", None)
        return bool(isatty and isatty())

    def __enter__(self) -> Ticker:
        if self._tty():
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        if self._width:  # wipe the line: what the command prints next starts clean
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()

    def _run(self) -> None:
        start = self._clock()
        if self._stop.wait(self._delay_s):
            return
        while True:
            text = format_elapsed(self.label, self._clock() - start)
            self.stream.write("\r" + text.ljust(self._width))
            self.stream.flush()
            self._width = max(self._width, len(text))
            if self._stop.wait(self._interval_s):
                return


def ticking(label: str) -> Callable[[Callable[_P, _R]], Callable[_P, _R]]:
    """Run the decorated function (a command's body) under a :class:`Ticker` on stderr."""

    def decorate(fn: Callable[_P, _R]) -> Callable[_P, _R]:
        @functools.wraps(fn)
        def run(*args: _P.args, **kwargs: _P.kwargs) -> _R:
            with Ticker(label):
                return fn(*args, **kwargs)

        return run

    return decorate
