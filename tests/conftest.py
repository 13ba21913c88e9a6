"""Test settings (hypothesis is derandomised with no deadline in CI, and never flaky on
time; the slow run loads the ``thorough`` profile, see budget.py) and the shared fixtures."""

import importlib.util
import os
from pathlib import Path

import pytest
import sweeps
from budget import THOROUGH, THOROUGH_MAX_EXAMPLES
from hypothesis import HealthCheck, settings
from spaces import PRUNABLE_SPACE
from sweeps import SMALL_SPACE

_BASE = "ci" if os.environ.get("CI") else "dev"
settings.register_profile(
    "ci", derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile(
    THOROUGH, parent=settings.get_profile(_BASE), max_examples=THOROUGH_MAX_EXAMPLES
)
settings.load_profile(_BASE)


def _runs_slow_tests(config: pytest.Config) -> bool:
    """Whether the ``-m`` expression selects the slow tests (``-m slow``, not the default)."""
    expr = config.option.markexpr or ""
    return "slow" in expr and "not slow" not in expr


def pytest_configure(config: pytest.Config) -> None:
    """The slow run loads the ``thorough`` profile: every ``@budget`` test at its full count."""
    if _runs_slow_tests(config):
        settings.load_profile(THOROUGH)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In the slow run the ``@budget`` tests count as slow, so that ``-m slow`` runs them at
    their full counts (marked before the ``-m`` expression deselects anything)."""
    if _runs_slow_tests(config):
        for item in items:
            if item.get_closest_marker("budget"):
                item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def sweep_spaces(tmp_path_factory) -> dict[str, Path]:
    """The sweep tests' design spaces as TOML files: "small" and "prunable"."""
    d = tmp_path_factory.mktemp("spaces")
    (d / "small.toml").write_text(SMALL_SPACE)
    (d / "prunable.toml").write_text(PRUNABLE_SPACE)
    return {"small": d / "small.toml", "prunable": d / "prunable.toml"}


class _OnDemand(dict):
    """A mapping whose values are made on first use (by ``make(key)``), then kept."""

    def __init__(self, make) -> None:
        super().__init__()
        self._make = make

    def __missing__(self, key):
        value = self[key] = self._make(key)
        return value


@pytest.fixture(scope="session")
def clean_sweeps(sweep_spaces, tmp_path_factory):
    """Uninterrupted reference sweeps, by name: (config, result, points). "small" has the
    TPUv4 preset too, "two" two workloads and two recompute modes. Each is run when a test
    first asks for it (an xdist worker runs only the ones its tests use)."""
    options = {
        "small": {"presets": ["tpuv4"]},
        "prunable": {},
        "two": {"workloads": ["gpt3-125m", "gpt3-350m"], "recompute": ["none", "full"]},
    }

    def make(name):
        space = "prunable" if name == "prunable" else "small"
        cfg = sweeps.config(sweep_spaces[space], **options[name])
        d = tmp_path_factory.mktemp(f"clean-{name}")
        return cfg, sweeps.run(cfg, d), sweeps.points(d)

    return _OnDemand(make)


# ---------------------------------------------------------------- command line (CLI tests)
@pytest.fixture(scope="session")
def cli_run():
    """Run ``phaze`` in this process: ``cli_run("export", dir, "--json")`` -> click's Result.

    Arguments are turned into strings; keyword arguments go to ``CliRunner.invoke`` (e.g.
    ``catch_exceptions=False`` to see a traceback). ``output`` holds stdout and stderr
    interleaved, ``stdout`` and ``stderr`` each alone.
    """
    from click.testing import CliRunner

    from phaze.cli import cli

    def run(*args, **kwargs):
        return CliRunner().invoke(cli, [str(a) for a in args], **kwargs)

    return run


@pytest.fixture(scope="session")
def small_sweep(cli_run, tmp_path_factory):
    """A real sweep of two small designs on gpt3-125m, run once: (its TOML config, its
    output directory). Tests copy the directory before changing anything in it."""
    import json

    from spaces import space_toml

    d = tmp_path_factory.mktemp("small-sweep")
    (d / "space.toml").write_text(space_toml("small", num_tc=[1, 2], tc_rows=[64]))
    table = {
        "workloads": ["gpt3-125m"],
        "space": str(d / "space.toml"),
        "devices": 4,
        "devices_per_node": 4,
        "seq_len": 256,
        "global_batch": 8,
        "micro_batches": [1],
        "recompute": ["none"],
        "presets": [],
    }
    lines = ["[sweep]", *(f"{k} = {json.dumps(v)}" for k, v in table.items())]
    config = d / "sweep.toml"
    config.write_text("\n".join([*lines, "", "[solver]", 'name = "list"', ""]))
    out = d / "out"
    r = cli_run("sweep", config, "--out", out, "--executor", "serial", "--no-report")
    assert r.exit_code == 0, r.output
    return config, out


# ---------------------------------------------------------------- executors (unit tests)
# The executor's chunking and signal handling are tested as units; they are internal to
# phaze.executors, so the tests get them here rather than importing the private module.
@pytest.fixture(scope="session")
def Chunker():
    """The executor's chunker: ``Chunker(tasks, n_tasks, workers, chunksize)``."""
    from phaze.executors._common import Chunker

    return Chunker


@pytest.fixture(scope="session")
def StopSignals():
    """The executor's SIGINT/SIGTERM handling: a context manager with ``deferred()``."""
    from phaze.executors._common import StopSignals

    return StopSignals


@pytest.fixture(scope="session")
def benchmark_script():
    """Load a script of ``benchmarks/`` as a module: ``benchmark_script("fit_area").fit()``."""

    def load(name: str):
        path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    return load
