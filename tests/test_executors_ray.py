"""The Ray executor gives the same results as serial and local runs (a local 2-CPU Ray).

Ray takes seconds to start, so the default suite starts it once, by hand (``ray_instance``),
and the executor must reuse it; the check that a Runner starts its own instance once and
shuts it down again runs with the slow tests.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
from _executors_tasks import Job, flaky, lp_value, square_job

from phaze.executors import Runner, TaskError, run_tasks
from phaze_common.errors import ConfigError

ray = pytest.importorskip("ray")

pytestmark = pytest.mark.ray

TASKS = tuple(Job(n) for n in range(40))


def _run(fn, tasks, **kwargs):
    got: dict = {}
    order: list = []

    def on_result(task, result):
        order.append(task)
        got[task] = result

    summary = run_tasks(fn, tasks, on_result=on_result, **kwargs)
    return got, order, summary


def _two_rounds():
    """Two rounds on one Ray Runner (jobs = 2): (results, delivery order, summaries, whether
    Ray ran between the rounds, whether it runs after the Runner closed)."""
    got: dict = {}
    order: list = []

    def on_result(task, result):
        order.append(task)
        got[task] = result

    with Runner("ray", jobs=2) as runner:
        first = runner.run(square_job, TASKS[:15], on_result=on_result)
        running_between_rounds = ray.is_initialized()
        second = runner.run(square_job, TASKS[15:], on_result=on_result)
    return got, order, (first, second), running_between_rounds, ray.is_initialized()


def _check_identical_to_serial_and_local(got, order, summaries) -> None:
    serial, _, _ = _run(square_job, TASKS, executor="serial")
    local, _, _ = _run(square_job, TASKS, executor="local", jobs=2)
    assert got == serial == local == {job: (job.n, job.n * job.n) for job in TASKS}
    assert sorted(order, key=lambda j: j.n) == list(TASKS)  # on_result once per task
    assert [(s.executor, s.workers, s.tasks_done) for s in summaries] == [
        ("ray", 2, 15),
        ("ray", 2, len(TASKS) - 15),
    ]


@pytest.mark.slow  # starts and stops a Ray instance of its own
def test_a_runner_starts_ray_once_and_shuts_it_down():
    assert not ray.is_initialized()  # runs before the module's shared instance starts
    got, order, summaries, running_between_rounds, running_after = _two_rounds()
    _check_identical_to_serial_and_local(got, order, summaries)
    assert running_between_rounds  # one instance for both rounds
    assert not running_after  # the instance the Runner started is shut down


def test_a_bad_address_is_a_config_error():
    assert not ray.is_initialized()  # runs before the module's shared instance starts
    with pytest.raises(ConfigError, match="executor 'ray': cannot connect to address = 'x::'"):
        run_tasks(square_job, TASKS, on_result=print, executor="ray", address="x::")
    assert not ray.is_initialized()


def test_an_unreachable_address_fails_within_seconds():
    """Ray itself retries such an address for minutes; the executor probes it first."""
    with socket.socket() as s:  # a loopback port nothing listens on
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"
    t0 = time.monotonic()
    with pytest.raises(ConfigError, match=f"cannot reach the Ray cluster at address = '{address}'"):
        run_tasks(square_job, TASKS, on_result=print, executor="ray", address=address)
    assert time.monotonic() - t0 < 30
    assert not ray.is_initialized()


@pytest.fixture(scope="module")
def ray_instance():
    """A Ray instance started by the test (2 CPUs, no dashboard), which the executor must
    reuse and leave running."""
    tests_dir = str(Path(__file__).parent)
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        job_config=ray.job_config.JobConfig(code_search_path=[tests_dir]),
    )
    yield
    ray.shutdown()


def test_ray_serial_and_local_give_identical_results(ray_instance):
    got, order, summaries, running_between_rounds, running_after = _two_rounds()
    _check_identical_to_serial_and_local(got, order, summaries)
    assert running_between_rounds and running_after  # an instance it did not start stays up


def test_ray_reuses_a_running_instance_and_runs_highs(ray_instance):
    got, _, summary = _run(lp_value, [Job(n) for n in range(5)], executor="ray", chunksize=2)
    assert got == {Job(0): 4.0, Job(1): 4.0, Job(2): 5.0, Job(3): 6.0, Job(4): 8.0}
    assert summary.workers == 2 and summary.chunks == 3  # the cluster's 2 CPUs
    assert ray.is_initialized()


def test_ray_takes_tasks_lazily_with_two_chunks_per_worker_in_flight(ray_instance):
    taken, delivered, peak = 0, 0, 0

    def tasks():
        nonlocal taken
        for n in range(30):
            taken += 1
            yield Job(n)

    def on_result(task, result):
        nonlocal delivered, peak
        peak = max(peak, taken - delivered)
        delivered += 1

    run_tasks(square_job, tasks(), on_result=on_result, executor="ray", jobs=2, chunksize=2)
    assert delivered == taken == 30
    assert peak <= 2 * 2 * 2


def test_ray_reports_the_failing_task(ray_instance, monkeypatch):
    delivered: list = []
    cancelled: list = []  # ray.cancel racing a task's reply aborts the driver (Ray 2.60)
    monkeypatch.setattr(ray, "cancel", lambda ref, **kw: cancelled.append(ref))
    with pytest.raises(
        TaskError, match=r"task Job\(n=13, sleep_s=0\.0\) failed: ValueError: unlucky"
    ) as info:
        run_tasks(
            flaky,
            [Job(n) for n in range(20)],
            on_result=lambda t, r: delivered.append(t),
            executor="ray",
            jobs=2,
        )
    assert "raise ValueError" in info.value.traceback_text
    assert Job(13) not in delivered and len(delivered) == len(set(delivered))
    assert not cancelled
    assert ray.is_initialized()
