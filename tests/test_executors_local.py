"""The serial and local executors: same results, each delivered once, errors naming the task."""

from __future__ import annotations

import functools
import io
import sys
import threading
import types

import pytest
from _executors_tasks import (
    Job,
    broken_warm_up,
    die,
    flaky,
    lp_value,
    nested_result,
    slow_square,
    square_job,
    warm_up,
    warmed,
)
from hypothesis import example, given
from hypothesis import strategies as st

from phaze.executors import Progress, Runner, RunSummary, TaskError, run_tasks
from phaze_common.errors import ConfigError

TASKS = tuple(Job(n) for n in range(60))
EXPECTED = {job: (job.n, job.n * job.n) for job in TASKS}


def _collect(fn, tasks, **kwargs):
    """Run and return (results by task, list of delivered tasks in order, summary)."""
    got: dict = {}
    order: list = []

    def on_result(task, result):
        order.append(task)
        got[task] = result

    summary = run_tasks(fn, tasks, on_result=on_result, **kwargs)
    return got, order, summary


@pytest.mark.parametrize(
    "kwargs",
    [
        {"executor": "serial"},
        {"executor": "local", "jobs": 1},
        {"executor": "local", "jobs": 2},
        {"executor": "local", "jobs": 2, "chunksize": 7},
        {"executor": "local", "jobs": 3, "chunksize": 1},
    ],
    ids=["serial", "local-1", "local-2", "local-2-chunk7", "local-3-chunk1"],
)
def test_every_executor_gives_the_same_results_once_per_task(kwargs):
    got, order, summary = _collect(square_job, TASKS, **kwargs)
    assert got == EXPECTED
    assert sorted(order, key=lambda j: j.n) == list(TASKS)  # each task exactly once
    assert summary.tasks_done == len(TASKS)
    assert summary.executor == ("local" if kwargs.get("jobs", 1) > 1 else "serial")
    assert summary.workers == kwargs.get("jobs", 1)


def test_chunks_follow_chunksize_and_the_summary_counts_them():
    _, _, summary = _collect(square_job, TASKS, executor="local", jobs=2, chunksize=7)
    assert summary.chunks == -(-len(TASKS) // 7)
    assert isinstance(summary, RunSummary)
    assert summary.worker_s > 0 and summary.wall_s > 0 and summary.tasks_per_s > 0


def test_a_generator_is_consumed_lazily_and_an_empty_run_is_fine():
    got, _, summary = _collect(square_job, (Job(n) for n in range(25)), jobs=2)
    assert got == {Job(n): (n, n * n) for n in range(25)}
    got, _, summary = _collect(square_job, [], jobs=2)
    assert got == {} and summary.tasks_done == 0


def test_work_is_spread_over_the_workers():
    got, _, summary = _collect(slow_square, [Job(n, 0.05) for n in range(8)], jobs=2)
    assert len({pid for _, _, pid in got.values()}) == 2
    assert summary.workers == 2


def test_highs_solves_in_worker_processes():
    serial, _, _ = _collect(lp_value, [Job(n) for n in range(5)], executor="serial")
    local, _, _ = _collect(lp_value, [Job(n) for n in range(5)], jobs=2)
    assert local == serial == {Job(0): 4.0, Job(1): 4.0, Job(2): 5.0, Job(3): 6.0, Job(4): 8.0}


def test_a_partial_of_a_module_function_is_sent_to_workers():
    fn = functools.partial(pow, exp=3)
    got: dict = {}
    run_tasks(fn, range(10), on_result=got.__setitem__, jobs=2)
    assert got == {n: n**3 for n in range(10)}


@pytest.mark.parametrize("kwargs", [{"executor": "serial"}, {"jobs": 2}], ids=["serial", "local"])
def test_an_exception_names_the_task_and_keeps_the_traceback(kwargs):
    delivered: list = []
    with pytest.raises(
        TaskError, match=r"task Job\(n=13, sleep_s=0\.0\) failed: ValueError: unlucky n = 13"
    ) as info:
        run_tasks(
            flaky, [Job(n) for n in range(30)], on_result=lambda t, r: delivered.append(t), **kwargs
        )
    err = info.value
    assert err.task == Job(13)
    assert "raise ValueError" in err.traceback_text and "flaky" in err.traceback_text
    assert isinstance(err.__cause__, ValueError)
    assert "unlucky" in str(err.__cause__.__cause__)  # the worker's traceback, printed as the cause
    assert Job(13) not in delivered  # a failed task is never delivered
    assert len(delivered) == len(set(delivered))
    if kwargs.get("executor") == "serial":
        assert delivered == [Job(n) for n in range(13)]


def test_a_dead_worker_is_reported_with_its_task():
    with pytest.raises(
        TaskError,
        match=r"task Job\(n=3, sleep_s=0\.0\) failed: its worker process died \(exit status 9\)$",
    ):
        run_tasks(die, [Job(n) for n in range(6)], on_result=lambda t, r: None, jobs=2, chunksize=1)


def test_a_result_that_does_not_pickle_is_reported_with_its_task():
    with pytest.raises(
        TaskError,
        match=r"Job\(n=2, sleep_s=0\.0\) failed: TypeError: its result could not be pickled",
    ):
        run_tasks(nested_result, [Job(n) for n in range(4)], on_result=lambda t, r: None, jobs=2)


def test_a_task_that_does_not_pickle_is_reported():
    tasks = [1, 2, lambda: 3]
    with pytest.raises(TaskError, match="failed: the task could not be pickled"):
        run_tasks(repr, tasks, on_result=lambda t, r: None, jobs=2, chunksize=3)


def test_fn_must_be_picklable_except_in_process():
    with pytest.raises(
        TypeError, match=r"fn = .*lambda.* must be picklable .* on executor 'local'"
    ):
        run_tasks(lambda x: x, [1], on_result=lambda t, r: None, jobs=2)
    got: dict = {}
    run_tasks(lambda x: -x, [1, 2], on_result=got.__setitem__, executor="serial")
    assert got == {1: -1, 2: -2}


def test_an_on_result_error_stops_the_run_and_propagates():
    def on_result(task, result):
        if task.n == 5:
            raise RuntimeError("store is full")

    with pytest.raises(RuntimeError, match="store is full"):
        run_tasks(square_job, TASKS, on_result=on_result, jobs=2)


def test_bad_arguments_are_reported_all_at_once():
    with pytest.raises(ConfigError) as info:
        run_tasks(square_job, TASKS, on_result=print, jobs=0, address="auto", chunksize=-1)
    msg = str(info.value)
    assert "jobs = 0 must be a positive integer or None" in msg
    assert "address = 'auto' is only used by executor 'ray'" in msg
    assert "chunksize = -1 must be a positive integer or None" in msg
    with pytest.raises(ConfigError, match="unknown executor 'rey'; did you mean ray"):
        run_tasks(square_job, TASKS, on_result=print, executor="rey")
    with pytest.raises(ConfigError, match="jobs = 4 needs executor 'local' or 'ray'"):
        run_tasks(square_job, TASKS, on_result=print, executor="serial", jobs=4)


def test_the_ray_executor_without_ray_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # makes `import ray` fail
    with pytest.raises(ConfigError, match=r"needs the ray extra: pip install 'phaze\[ray\]'"):
        run_tasks(square_job, TASKS, on_result=print, executor="ray")


def test_the_initializer_runs_in_workers_before_tasks():
    got: dict = {}
    run_tasks(warmed, TASKS[:8], on_result=got.__setitem__, jobs=2, initializer=warm_up)
    assert got == {job: (job.n, "yes") for job in TASKS[:8]}
    with pytest.raises(TaskError, match="RuntimeError: cannot warm up"):
        run_tasks(square_job, TASKS[:4], on_result=print, jobs=2, initializer=broken_warm_up)


def test_chunk_sizes_adapt_to_task_time_and_keep_a_tail(Chunker):
    chunker = Chunker(range(10_000), 10_000, workers=2, chunksize=None)
    assert len(chunker.take()) == 1  # nothing measured yet
    chunker.record(10, 0.01)  # 1 ms per task -> 0.2 s chunks of 200 tasks
    assert len(chunker.take()) == 200
    chunker.record(1, 1.0)  # now 1.01 s / 11 tasks -> int(0.2 / 0.0918) = 2 per chunk
    assert len(chunker.take()) == 2
    tail = Chunker(range(100), 100, workers=2, chunksize=None)
    tail.record(1000, 0.0)  # free tasks: still leave 4 chunks per worker for the tail
    assert len(tail.take()) == 100 // 8
    fixed = Chunker(range(10), 10, workers=2, chunksize=4)
    assert [len(fixed.take()) for _ in range(4)] == [4, 4, 2, 0]


@given(
    n_tasks=st.integers(0, 300),
    workers=st.integers(1, 8),
    chunksize=st.one_of(st.none(), st.integers(1, 50)),
    sized=st.booleans(),
    timings=st.lists(st.floats(0.0, 2.0), max_size=40),
)
@example(n_tasks=1, workers=1, chunksize=None, sized=False, timings=[5e-324])  # 1 / mean: inf
def test_chunks_hand_out_every_task_once_in_order(
    Chunker, n_tasks, workers, chunksize, sized, timings
):
    tasks = list(range(n_tasks))
    chunker = Chunker(
        tasks if sized else iter(tasks), n_tasks if sized else None, workers, chunksize
    )
    chunks = []
    for worker_s in [*timings, *[0.0] * (n_tasks + 1)]:
        chunk = chunker.take()
        if not chunk:
            break
        assert 1 <= len(chunk) <= (chunksize or 4096)
        chunks.append(chunk)
        chunker.record(len(chunk), worker_s)
    assert [task for chunk in chunks for task in chunk] == tasks
    assert chunker.take() == ()


def _in_flight_peak(jobs: int, chunksize: int, **kwargs) -> int:
    """The most tasks ever taken from the iterator but not yet delivered."""
    taken = delivered = peak = 0

    def tasks():
        nonlocal taken
        for n in range(40):
            taken += 1
            yield Job(n)

    def on_result(task, result):
        nonlocal delivered, peak
        peak = max(peak, taken - delivered)
        delivered += 1

    run_tasks(square_job, tasks(), on_result=on_result, jobs=jobs, chunksize=chunksize, **kwargs)
    assert delivered == taken == 40
    return peak


def test_tasks_are_taken_lazily_with_at_most_one_chunk_per_worker_in_flight():
    assert _in_flight_peak(jobs=2, chunksize=3) <= 2 * 3
    assert _in_flight_peak(jobs=3, chunksize=1) <= 3


def test_a_run_from_another_thread_leaves_signals_alone():
    got: dict = {}
    errors: list = []

    def run():
        try:
            run_tasks(square_job, TASKS[:10], on_result=got.__setitem__, jobs=2)
        except Exception as exc:  # surfaced below
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert errors == [] and got == {job: EXPECTED[job] for job in TASKS[:10]}


def test_a_runner_keeps_its_workers_across_runs_and_functions():
    pids: list[set] = []
    with Runner("local", jobs=2) as runner:
        assert runner.executor == "local"
        for round_ in (range(0, 6), range(6, 20)):
            got: dict = {}
            runner.run(slow_square, [Job(n, 0.02) for n in round_], on_result=got.__setitem__)
            assert {job.n: sq for job, (_, sq, _) in got.items()} == {n: n * n for n in round_}
            pids.append({pid for _, _, pid in got.values()})
        got = {}
        runner.run(square_job, TASKS, on_result=got.__setitem__)  # another function
        assert got == EXPECTED
        with pytest.raises(TaskError, match="unlucky"):
            runner.run(flaky, [Job(n) for n in range(20)], on_result=lambda t, r: None)
        got = {}
        runner.run(slow_square, [Job(n, 0.02) for n in range(6)], on_result=got.__setitem__)
        pids.append({pid for _, _, pid in got.values()})
    assert pids[0] == pids[1]  # the same two processes, warm caches and all
    assert not pids[2] & pids[0]  # the failed run stopped them; fresh ones took over


def test_one_progress_can_span_several_runs_and_skipped_items():
    out = io.StringIO()
    bar = Progress("points", stream=out, is_tty=False, interval_s=1e9)
    bar.start(10)
    with Runner("local", jobs=2) as runner:
        runner.run(square_job, TASKS[:4], on_result=lambda t, r: None, progress=bar)
        bar.skip(2)  # e.g. pruned designs
        runner.run(square_job, TASKS[4:8], on_result=lambda t, r: None, progress=bar)
    assert bar.started and bar.done == 10 and bar.skipped == 2
    bar.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and lines[-1].startswith("points 10/10 (100.0%)")


def test_a_function_workers_cannot_import_is_reported_with_the_task(monkeypatch):
    phantom = types.ModuleType("phaze_test_phantom")  # importable here only

    def double(job):
        return 2 * job.n

    double.__module__ = phantom.__name__
    double.__qualname__ = "double"
    phantom.double = double
    monkeypatch.setitem(sys.modules, phantom.__name__, phantom)
    with pytest.raises(
        TaskError,
        # either worker may report first, so any of the tasks may be the one named
        match=r"task Job\(n=\d, sleep_s=0\.0\) failed: RuntimeError: a worker could not load the "
        r"task or its function: ModuleNotFoundError\(\"No module named 'phaze_test_phantom'",
    ):
        run_tasks(double, [Job(n) for n in range(4)], on_result=lambda t, r: None, jobs=2)
