"""Ctrl-C and SIGTERM stop a run cleanly: finished results delivered, no traceback, exit 130."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from phaze.executors import TaskError

TESTS_DIR = Path(__file__).parent

# A sweep of 4 quick tasks then 6 that would take a minute each; prints each result as the
# store would commit it, and turns KeyboardInterrupt into a message and exit 130 (the CLI's
# behaviour).
_SCRIPT = textwrap.dedent(
    """
    import sys
    from _executors_tasks import Job, slow_square
    from phaze.executors import Progress, run_tasks

    def on_result(task, result):
        print("result", task.n, result[1], flush=True)

    if __name__ == "__main__":
        tasks = [Job(n, 0.0) for n in range(4)] + [Job(n, 60.0) for n in range(4, 10)]
        try:
            run_tasks(slow_square, tasks, on_result=on_result, executor=sys.argv[1],
                      jobs=None if sys.argv[1] == "serial" else 2, chunksize=1,
                      progress=Progress(label="points", is_tty=False))
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            sys.exit(130)
    """
)


_HAS_RAY = importlib.util.find_spec("ray") is not None
_RAY = pytest.param(
    "ray",
    marks=[
        pytest.mark.ray,
        pytest.mark.slow,  # starts Ray in the subprocess (~10 s)
        pytest.mark.skipif(not _HAS_RAY, reason="needs the ray extra"),
    ],
)


@pytest.mark.parametrize("executor", ["local", "serial", _RAY])
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_stops_the_run_promptly_and_cleanly(executor, signum):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS_DIR), *sys.path])}
    proc = subprocess.Popen(
        [sys.executable, "-c", _SCRIPT, executor],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,  # its own process group, like a shell job
    )
    try:
        lines = [proc.stdout.readline() for _ in range(4)]  # the quick tasks are reported
        # like a terminal's Ctrl-C, signal the whole process group (workers included)
        os.killpg(proc.pid, signum)
        # the slow tasks would take 60 s: finishing well before proves they were stopped
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert sorted(lines) == [f"result {n} {n * n}\n" for n in range(4)]
    assert out == ""  # nothing delivered twice, no slow task reported
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert err.rstrip().endswith("interrupted")
    assert "points 4/10 (40.0%)" in err  # the progress line is closed at the stop


def _signal_self(signum: int) -> None:
    os.kill(os.getpid(), signum)


def test_a_first_signal_waits_for_a_deferred_section_and_a_second_does_not(StopSignals):
    with StopSignals() as stop:
        with stop.deferred():
            _signal_self(signal.SIGINT)  # e.g. Ctrl-C while a result is being committed
            assert stop.requested
            with pytest.raises(KeyboardInterrupt):
                _signal_self(signal.SIGTERM)  # a second one is not deferred
        with pytest.raises(KeyboardInterrupt):
            stop.check()


def test_a_signal_outside_a_deferred_section_interrupts_at_once_and_handlers_are_restored(
    StopSignals,
):
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    with StopSignals() as stop:
        with pytest.raises(KeyboardInterrupt):
            _signal_self(signal.SIGTERM)
        assert stop.requested
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


def test_task_errors_after_a_stop_request_are_part_of_the_stop(StopSignals):
    stop = StopSignals()
    with pytest.raises(TaskError, match="boom"), stop.stop_wins():
        raise TaskError(1, "boom")
    stop.requested = True  # e.g. SIGTERM to the process group also killed the workers
    with pytest.raises(KeyboardInterrupt), stop.stop_wins():
        raise TaskError(1, "its worker process died (killed by signal 15)")


def test_an_ignored_signal_stays_ignored(StopSignals):
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with StopSignals():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)
