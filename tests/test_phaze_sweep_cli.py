"""``phaze sweep`` and ``phaze.search``: bad input gives one ``Error:`` line and a non-zero
exit and never touches stored points; a changed config is refused; the quick sweep with no
arguments, ``--json`` and the report.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import sweeps
from click.testing import CliRunner

import phaze
from arch_space import Cluster, preset
from ilp import DEFAULT_SEARCH_NODES
from phaze.cli import cli
from phaze.config import quick_sweep_config, sweep_config_from_mapping
from phaze.sweep import plan, schedule_exactness
from phaze_common.errors import ConfigError
from results.store import load


def _errors(result, exit_code: int) -> str:
    """The one ``Error:`` line of a failed command (checking exit code and no traceback)."""
    assert result.exit_code == exit_code, result.output
    assert "Traceback" not in result.output
    assert isinstance(result.exception, SystemExit), result.exception
    lines = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(lines) == 1, result.output
    return lines[0]


def _snapshot(out: Path) -> tuple:
    with load(out) as store:
        return store.points(), store.manifest(), store.sweeps()


@pytest.fixture(scope="module")
def stored(sweep_spaces, tmp_path_factory):
    """A finished ``phaze sweep`` of the small space: (config file, out dir)."""
    d = tmp_path_factory.mktemp("stored")
    config = d / "sweep.toml"
    config.write_text(sweeps.config_toml(sweep_spaces["small"]))
    out = d / "out"
    result = CliRunner().invoke(cli, ["sweep", str(config), "--out", str(out), "--no-report"])
    assert result.exit_code == 0, result.output
    return config, out


BAD_TOML = {  # (line of the good config, its replacement, what the error must name)
    "unknown field": ("devices = 4", "devcies = 4", ["unknown key 'devcies'", "'devices'"]),
    "negative field": ("devices = 4", "devices = -4", ["devices = -4", "a positive integer"]),
    "bad recompute": (
        'recompute = ["none"]',
        'recompute = ["sometimes"]',
        ["recompute = ['sometimes']", "none, selective, full"],
    ),
    "not TOML": ("devices = 4", "devices = ", ["not valid TOML"]),
    "bad search budget": (
        'name = "list"',
        'name = "list"\nsearch_nodes = -1',
        ["[solver]: search_nodes = -1 must be an integer >= 0"],
    ),
}


@pytest.mark.parametrize("case", BAD_TOML, ids=str)
def test_an_invalid_config_file_is_one_error_and_stores_nothing(stored, tmp_path, case):
    config, out = stored
    good, replacement, needles = BAD_TOML[case]
    text = config.read_text()
    assert f"\n{good}\n" in text
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace(f"\n{good}\n", f"\n{replacement}\n"))
    before = _snapshot(out)
    result = CliRunner().invoke(cli, ["sweep", str(bad), "--out", str(out), "--no-report"])
    error = _errors(result, 1)
    assert "bad.toml" in error
    for needle in needles:
        assert needle in error
    assert _snapshot(out) == before


BAD_OPTIONS = {
    "unknown workload": (
        ["--workload", "gpt3-125mm"],
        1,
        ["unknown model 'gpt3-125mm'", "did you mean gpt3-125m"],
    ),
    "unknown space": (["--space", "tinyy"], 1, ["unknown space 'tinyy'", "tiny"]),
    "missing space file": (["--space", "nowhere.toml"], 1, ["nowhere.toml"]),
    "impossible cluster": (
        ["--devices", "6"],
        1,
        ["devices = 6 must be a multiple of devices_per_node = 4"],
    ),
    "micro-batch": (["--micro-batch", "3"], 1, ["micro_batches: 3 does not divide global_batch"]),
    "unknown objective": (["--objective", "speed"], 1, ["speed"]),
    "negative devices": (["--devices", "-4"], 2, ["--devices", "-4"]),
    "zero jobs": (["--jobs", "0"], 2, ["--jobs"]),
    "unknown executor": (["--executor", "slurm"], 2, ["--executor", "slurm"]),
}


@pytest.mark.parametrize("case", BAD_OPTIONS, ids=str)
def test_bad_options_are_one_error_and_keep_stored_points(stored, case):
    config, out = stored
    options, exit_code, needles = BAD_OPTIONS[case]
    before = _snapshot(out)
    result = CliRunner().invoke(
        cli, ["sweep", str(config), "--out", str(out), "--no-report", *options]
    )
    error = _errors(result, exit_code)
    for needle in needles:
        assert needle in error
    assert _snapshot(out) == before


def test_a_different_config_into_a_used_directory_is_refused(stored):
    config, out = stored
    before = _snapshot(out)
    result = CliRunner().invoke(
        cli, ["sweep", str(config), "--out", str(out), "--no-report", "--seq-len", "128"]
    )
    error = _errors(result, 1)
    assert "holds results of a sweep with config hash" in error
    assert "choose another output directory" in error
    assert _snapshot(out) == before
    # The same config again is a resume: nothing evaluated, nothing changed.
    result = CliRunner().invoke(cli, ["sweep", str(config), "--out", str(out), "--no-report"])
    assert result.exit_code == 0, result.output
    assert "0 designs evaluated" in result.output
    assert _snapshot(out)[0] == before[0]


def test_the_api_refuses_a_changed_config_too(sweep_spaces, clean_sweeps, tmp_path):
    cfg, _, _ = clean_sweeps["small"]
    sweeps.run(cfg, tmp_path)
    before = _snapshot(tmp_path)
    with pytest.raises(ConfigError, match="config hash"):
        sweeps.run(sweeps.config(sweep_spaces["small"], global_batch=4), tmp_path)
    assert _snapshot(tmp_path) == before


# --------------------------------------------------------------------------- smoke


def test_the_search_budget_defaults_by_scheduler_and_is_kept_when_given():
    """The list schedule runs no search unless asked; the MIP solvers search first."""

    def solver(**kw):
        return sweep_config_from_mapping({"solver": kw}).solver

    assert solver(name="list").search_nodes == 0
    assert solver(name="highs").search_nodes == DEFAULT_SEARCH_NODES
    assert solver(name="list", search_nodes=500).search_nodes == 500
    assert solver(name="cbc", search_nodes=0).search_nodes == 0


def test_quick_sweep_config_plans_a_few_hundred_points():
    cfg = quick_sweep_config()
    shared, designs = plan(cfg)
    assert cfg.space == "tiny" and len(cfg.workloads) == 2
    points = len(designs) * len(shared.workloads) * len(shared.knobs)
    assert 100 <= points <= 1000, points


def test_sweep_with_no_arguments_runs_the_quick_sweep(monkeypatch):
    """No arguments: the quick config; Ctrl-C then ends with how to resume (exit 130)."""
    from phaze.cli import sweep_cmd

    seen = {}

    def interrupted(cfg, out, **kwargs):
        seen.update(cfg=cfg, out=out, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(sweep_cmd, "run_sweep", interrupted)
    result = CliRunner().invoke(cli, ["sweep"])
    assert result.exit_code == 130, result.output
    assert seen["cfg"] == quick_sweep_config()
    assert seen["out"] == Path("phaze-out") / f"sweep-{quick_sweep_config().config_hash()[:8]}"
    assert seen["executor"] == "local"
    assert "re-run the same command to resume" in result.output
    assert "Traceback" not in result.output


def test_sweep_help():
    result = CliRunner().invoke(cli, ["sweep", "--help"])
    assert result.exit_code == 0
    for option in ("--workload", "--space", "--devices", "--out", "--jobs", "--executor"):
        assert option in result.output


def test_sweep_json_and_report(stored, tmp_path):
    """One JSON document on stdout (with the scoring defaults), and the report's path; the
    report counts the points by schedule gap."""
    config, _ = stored
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["sweep", str(config), "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["points"] == doc["feasible"] == len(sweeps.points(out)) == 6
    assert doc["out_dir"] == str(out) and Path(doc["report"]).is_file()
    assert doc["defaults"]["pue"] > 1
    (line,) = [x for x in result.stderr.splitlines() if x.startswith("scoring defaults:")]
    # the host server is chosen per accelerator when not given: the line says so, not None
    assert "host_profile=per accelerator, host_w_per_node=per accelerator" in line
    assert "None" not in line
    text = Path(doc["report"]).read_text(encoding="utf-8")
    section = text[text.index('<section id="schedules">') :].split("</section>")[0]
    cells = [int(c) for c in re.findall(r'<td class="num">(\d+)</td>', section)]
    assert sum(cells) == sum(p["feasible"] for p in sweeps.points(out)) > 0


def test_the_scoring_line_names_a_given_host_and_its_figures():
    from phaze.cli.sweep_cmd import _scoring_text
    from phaze.model.scoring import ScoringParams

    line = _scoring_text(ScoringParams(host_profile="dgx-h100"))
    assert "host_profile=dgx-h100, host_w_per_node=" in line
    assert "per accelerator" not in line and "None" not in line


def test_search_api_returns_the_stored_points(sweep_spaces, clean_sweeps, tmp_path):
    cfg, _, ref_points = clean_sweeps["small"]
    points = phaze.search(
        cfg.workloads,
        cfg.space,
        Cluster(devices=4, devices_per_node=4),
        micro_batches=cfg.training.micro_batches,
        recompute_modes=cfg.training.recompute,
        executor="serial",
        out_dir=tmp_path,
        seq_len=256,
        global_batch=8,
    )
    assert points == sweeps.points(tmp_path)
    assert {p["key"] for p in ref_points} <= {p["key"] for p in points}


def test_evaluate_prints_how_exact_its_layer_schedules_are():
    """The worst gap and the methods, as the API's evaluation of the same point has them."""
    args = ["--devices", "4", "--devices-per-node", "4", "--global-batch", "8", "--seq-len", "256"]
    result = CliRunner().invoke(
        cli, ["evaluate", "--workload", "gpt3-125m", "--arch", "tpuv4", *args]
    )
    assert result.exit_code == 0, result.output
    ev = phaze.evaluate(
        "gpt3-125m",
        preset("tpuv4"),
        Cluster(devices=4, devices_per_node=4),
        seq_len=256,
        global_batch=8,
    )
    gap, methods = schedule_exactness(ev.pass_timings)
    line = f"layer schedules +worst gap {100 * gap:.1f} % \\({methods}\\)"
    assert methods and re.search(line, result.output), result.output
