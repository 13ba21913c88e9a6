"""The Ray executor gives the same results as serial and local runs (a local 2-CPU Ray).

Ray takes a few seconds to start, so this module starts it twice in all: once inside
``run_tasks`` (which must shut it down again) and once by hand for the other checks.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from _executors_tasks import Job, flaky, lp_value, square_job

from phaze.executors import TaskError, run_tasks

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


@pytest.fixture(scope="module")
def ray_run():
    """One run on a Ray instance that run_tasks starts itself (num_cpus = jobs = 2)."""
    assert not ray.is_initialized()
    result = _run(square_job, TASKS, executor="ray", jobs=2)
    return result, ray.is_initialized()


@pytest.fixture(scope="module")
def ray_instance():
    """A Ray instance started by the test, which run_tasks must reuse and leave running."""
    tests_dir = str(Path(__file__).parent)
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        job_config=ray.job_config.JobConfig(code_search_path=[tests_dir]),
    )
    yield
    ray.shutdown()


def test_ray_serial_and_local_give_identical_results(ray_run):
    (got, order, summary), still_running = ray_run
    serial, _, _ = _run(square_job, TASKS, executor="serial")
    local, _, _ = _run(square_job, TASKS, executor="local", jobs=2)
    assert got == serial == local == {job: (job.n, job.n * job.n) for job in TASKS}
    assert sorted(order, key=lambda j: j.n) == list(TASKS)  # on_result once per task
    assert (summary.executor, summary.workers, summary.tasks_done) == ("ray", 2, len(TASKS))
    assert not still_running  # the instance run_tasks started is shut down


def test_ray_reuses_a_running_instance_and_runs_highs(ray_instance):
    got, _, summary = _run(lp_value, [Job(n) for n in range(5)], executor="ray", chunksize=2)
    assert got == {Job(0): 4.0, Job(1): 4.0, Job(2): 5.0, Job(3): 6.0, Job(4): 8.0}
    assert summary.workers == 2 and summary.chunks == 3  # the cluster's 2 CPUs
    assert ray.is_initialized()


def test_ray_reports_the_failing_task(ray_instance):
    delivered: list = []
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
    assert ray.is_initialized()
