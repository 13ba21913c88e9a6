"""The progress display: exact text, redraw in place on a terminal, periodic lines otherwise."""

from __future__ import annotations

import io
import json
import math
import sys
import time
from pathlib import Path

import pytest
from _executors_tasks import Job, square_job

from phaze.executors import Progress, run_tasks
from phaze.executors import progress as progress_module
from phaze.executors.progress import Ticker, format_duration, format_progress, ticking


class FakeClock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (59.4, "59s"),
        (60, "1m00s"),
        (187.4, "3m07s"),
        (3600, "1h00m"),
        (7500, "2h05m"),
        (86400 + 4 * 3600 + 59, "1d04h"),
        (math.inf, "--"),
        (math.nan, "--"),
        (-1, "--"),
    ],
)
def test_durations(seconds, text):
    assert format_duration(seconds) == text


def test_progress_text_has_count_percentage_rate_and_eta():
    assert format_progress("points", 250, 1000, 12.5, 20.0) == (
        "points 250/1000 (25.0%)  12.5/s  ETA 1m00s"
    )
    assert format_progress("points", 0, 1000, 0.0, 3.0) == "points 0/1000 (0.0%)  --/s  ETA --"
    assert format_progress("points", 10, 10, 2340.7, 0.004) == (
        "points 10/10 (100.0%)  2341/s  done in 0s"
    )
    assert format_progress("points", 0, 0, 0.0, 0.0) == "points 0/0 (100.0%)  --/s  done in 0s"
    assert format_progress("tasks", 7, None, 0.5, 14.0) == "tasks 7  0.5/s  elapsed 14s"


def test_a_terminal_line_is_redrawn_in_place_at_most_every_interval():
    out, clock = io.StringIO(), FakeClock()
    bar = Progress(stream=out, label="points", is_tty=True, clock=clock)
    bar.start(100)
    assert out.getvalue() == "\rpoints 0/100 (0.0%)  --/s  ETA --"
    clock.now += 0.05
    bar.advance(10)  # too soon: not drawn
    assert out.getvalue().count("\r") == 1
    clock.now += 0.05
    bar.advance(10)  # 20 done in 0.1 s: 200/s, 80 left -> 0.4 s
    assert out.getvalue().endswith("\rpoints 20/100 (20.0%)  200/s  ETA 0s")
    clock.now += 0.9
    bar.advance(80)
    bar.close()
    bar.close()  # idempotent
    assert out.getvalue().endswith("\rpoints 100/100 (100.0%)  100/s  done in 1s\n")
    assert out.getvalue().count("\n") == 1


def test_a_shorter_line_wipes_the_longer_one_before_it():
    out, clock = io.StringIO(), FakeClock()
    bar = Progress(stream=out, label="p", is_tty=True, clock=clock)
    bar.start(10)  # "p 0/10 (0.0%)  --/s  ETA --" is 27 characters
    clock.now += 1.0
    bar.advance(10)  # "p 10/10 (100.0%)  10/s  done in 1s" is 34: no padding needed
    bar.start(1)
    first_len = len("p 10/10 (100.0%)  10/s  done in 1s")
    assert out.getvalue().endswith("\r" + "p 0/1 (0.0%)  --/s  ETA --".ljust(first_len))


def test_a_log_gets_a_line_per_interval_and_skipped_items_count_but_not_in_the_rate():
    out, clock = io.StringIO(), FakeClock()
    bar = Progress(stream=out, label="points", skipped=50, is_tty=False, clock=clock)
    bar.start(50)
    for _ in range(25):
        clock.now += 1.0
        bar.advance()  # a line at 10 s and 20 s only
    bar.close()
    assert out.getvalue().splitlines() == [
        "points 50/100 (50.0%)  --/s  ETA --",
        "points 60/100 (60.0%)  1/s  ETA 40s",
        "points 70/100 (70.0%)  1/s  ETA 30s",
        "points 75/100 (75.0%)  1/s  ETA 25s",
    ]


def test_a_log_gets_one_line_when_everything_was_done_before():
    out, clock = io.StringIO(), FakeClock()
    bar = Progress(stream=out, label="designs", skipped=2, is_tty=False, clock=clock)
    bar.start(0)  # a fully resumed run
    clock.now += 3.0
    bar.close()
    assert out.getvalue().splitlines() == ["designs 2/2 (100.0%)  --/s  done in 0s"]


def test_disabled_progress_draws_nothing():
    out = io.StringIO()
    bar = Progress(stream=out, enabled=False)
    bar.start(3)
    bar.advance(3)
    bar.close()
    assert out.getvalue() == "" and bar.done == 3


def test_run_tasks_draws_progress_to_the_end():
    out = io.StringIO()
    run_tasks(
        square_job,
        [Job(n) for n in range(12)],
        on_result=lambda t, r: None,
        executor="serial",
        progress=Progress(stream=out, label="points", is_tty=False),
    )
    lines = out.getvalue().splitlines()
    assert lines[0] == "points 0/12 (0.0%)  --/s  ETA --"
    assert lines[-1].startswith("points 12/12 (100.0%)") and "done in" in lines[-1]


def test_the_eta_counts_every_design_done_this_run_pruned_ones_too():
    """A sweep's stream: 20 designs found in the store, then 5 evaluated one per 2 s while
    pruned designs arrive in jumps of 15. The rate is of all designs this run has done, so the
    ETA is what is left at that rate (counting the evaluated ones only, it read 0.5/s and
    ETA 2m10s)."""
    out, clock = io.StringIO(), FakeClock()
    bar = Progress(stream=out, label="designs", skipped=20, is_tty=False, clock=clock)
    bar.start(100)
    for i in range(5):
        clock.now += 2.0
        bar.advance()
        if i % 2:
            bar.skip(15)  # a round's pruned designs, decided at once
    assert bar.line() == "designs 55/120 (45.8%)  3.5/s  ETA 19s"
    bar.close()
    assert out.getvalue().splitlines()[1] == "designs 55/120 (45.8%)  3.5/s  ETA 19s"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_ticker_shows_the_elapsed_time_of_a_long_command_then_wipes_it():
    out = _Terminal()
    with Ticker("phaze evaluate", stream=out, delay_s=0.05, interval_s=0.01):
        time.sleep(0.3)
    text = out.getvalue()
    assert text.startswith("\rphaze evaluate: working, 0s elapsed")
    width = len("phaze evaluate: working, 0s elapsed")
    assert text.endswith("\r" + " " * width + "\r")  # wiped: the next output starts clean


def test_ticker_draws_nothing_for_a_short_command_or_off_a_terminal():
    tty, pipe = _Terminal(), io.StringIO()
    with Ticker("phaze serve", stream=tty, delay_s=5.0):
        pass
    with Ticker("phaze serve", stream=pipe, delay_s=0.0, interval_s=0.01):
        time.sleep(0.05)
    assert tty.getvalue() == pipe.getvalue() == ""


def test_ticking_runs_the_function_under_a_ticker(monkeypatch):
    out = _Terminal()
    monkeypatch.setattr(sys, "stderr", out)
    monkeypatch.setattr(progress_module, "_TICK_DELAY_S", 0.0)
    assert ticking("phaze place")(lambda x: (time.sleep(0.05), 2 * x)[1])(21) == 42
    assert "phaze place: working" in out.getvalue()


def _seconds(text: str) -> float:
    """The seconds of a :func:`format_duration` text."""
    units = {"d": 86400, "h": 3600, "m": 60, "s": 1}
    total, number = 0.0, ""
    for ch in text:
        if ch.isdigit():
            number += ch
        else:
            total, number = total + int(number) * units[ch], ""
    return total


def test_sweep_eta_from_the_work_left_is_within_2x_of_a_recorded_run():
    """Replays a real sweep's progress (tests/data/sweep_progress_trace.json): the ETA shown
    once 2 % of the designs are decided is within 0.5x-2x of the time the run took from
    there, where the count of designs left gave about 10x."""
    trace = json.loads((Path(__file__).parent / "data" / "sweep_progress_trace.json").read_text())
    samples, designs = trace["samples"], trace["designs"]
    clock, left = FakeClock(), [None]
    out = io.StringIO()
    bar = Progress(
        "designs", stream=out, is_tty=False, interval_s=0.0, clock=clock, work_left=lambda: left[0]
    )
    bar.start(designs)
    assert bar.line().endswith("ETA after the first round")
    evaluated = pruned = 0
    for t, ev, pr, work_left in samples:
        clock.now, left[0] = t, work_left
        bar.skip(pr - pruned)
        bar.advance(ev - evaluated)
        evaluated, pruned = ev, pr
        if ev + pr >= 0.02 * designs:
            eta = _seconds(bar.line().rsplit("ETA ", 1)[1])
            actual = samples[-1][0] - t
            assert 0.5 * actual <= eta <= 2 * actual, (eta, actual)
            items_eta = (designs - ev - pr) / ((ev + pr) / t)  # the designs-left ETA
            assert items_eta > 5 * actual
            return
    raise AssertionError("the trace never reaches 2 % of its designs")
