"""Exit statuses and messages of the commands as docs/cli.md states them: 3 for a sweep with
no feasible point (after its store is written), 2 for every out-of-range option, 130 for
Ctrl-C in every command, and messages that name what the user gave."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

import phaze.cli.report_cmd
import phaze.cli.schedule_cmd
import results.report
from results.store import load


def _sweep_args(config, out, *extra):
    return ("sweep", config, "--out", out, "--executor", "serial", "--no-report", *extra)


def test_a_sweep_with_no_feasible_point_exits_3_after_storing_it(cli_run, small_sweep, tmp_path):
    config, _ = small_sweep
    out = tmp_path / "out"
    r = cli_run(*_sweep_args(config, out, "--hbm-gib", "0.001"))
    assert r.exit_code == 3, r.output
    assert "HBM [0.001] GiB" in r.stderr
    error = [line for line in r.output.splitlines() if line.startswith("Error:")]
    assert error == [
        f"Error: no feasible point among 2 points; every point and its reason is stored "
        f"in {out} (see `phaze export {out} --csv`)"
    ]
    points = load(out).points()
    assert len(points) == 2 and not any(p["feasible"] for p in points)
    # the capacity is shown with enough digits to tell it from zero
    assert all("4 x 1.02 MiB" in p["reason"] for p in points), points[0]["reason"]
    r = cli_run(*_sweep_args(config, out, "--hbm-gib", "0.001", "--json"))
    assert r.exit_code == 3 and json.loads(r.stdout)["feasible"] == 0


def test_the_banner_says_presets_keep_their_own_hbm(cli_run, small_sweep, tmp_path):
    config, _ = small_sweep
    text = config.read_text().replace("presets = []", 'presets = ["a100"]')
    (tmp_path / "p.toml").write_text(text)
    r = cli_run(*_sweep_args(tmp_path / "p.toml", tmp_path / "o", "--hbm-gib", "64", "--json"))
    assert r.exit_code == 0, r.output
    assert "HBM [64] GiB (presets keep their own)" in r.stderr
    designs = {
        p["design_name"] or p["design_id"]: p["hbm_bytes"] for p in load(tmp_path / "o").points()
    }
    assert designs["a100"] != 64 * 2**30
    assert {h for n, h in designs.items() if n != "a100"} == {64 * 2**30}


def test_a_bad_objective_comes_before_the_banner(cli_run, small_sweep, tmp_path):
    config, _ = small_sweep
    r = cli_run(*_sweep_args(config, tmp_path / "o", "--objective", "speed"))
    assert r.exit_code == 1
    assert r.output.startswith("Error: sweep: unknown metric 'speed'"), r.output
    assert len(r.output.splitlines()) == 1 and not (tmp_path / "o").exists()


def test_a_fully_resumed_sweep_prints_its_progress_line_once(cli_run, small_sweep, tmp_path):
    config, out = small_sweep
    d = tmp_path / "again"
    shutil.copytree(out, d)
    r = cli_run(*_sweep_args(config, d))
    assert r.exit_code == 0, r.output
    progress = [line for line in r.stderr.splitlines() if line.startswith("designs ")]
    assert len(progress) == 1 and progress[0].startswith("designs 2/2 (100.0%)"), r.stderr
    assert "0 designs evaluated" in r.stdout and "2 already stored" in r.stdout


SCHEDULE = ("schedule", "--workload", "gpt3-125m", "--arch", "a100", "--solver", "list")


@pytest.mark.parametrize(
    ("option", "value", "words"),
    [
        ("--seq-len", "0", "1<=x<=10000000"),
        ("--micro-batch", "-1", "1<=x<=1000000"),
        ("--tp", "0", "1<=x<=1000000"),
        ("--search-nodes", "-1", "x>=0"),
        ("--mip-gap", "1", "1 is not a finite number in [0, 1)"),
        ("--time-limit", "0", "0 is not a finite number in (0, 1e+06]"),
        ("--solver", "cplex", "'highs', 'cbc', 'gurobi', 'list'"),
    ],
)
def test_schedule_range_errors_exit_2_naming_the_option(cli_run, option, value, words):
    r = cli_run(*SCHEDULE[:5], option, value)
    assert r.exit_code == 2, r.output
    assert f"Invalid value for '{option}'" in r.output and words in r.output
    assert "global_batch" not in r.output


def _interrupt(*_args, **_kwargs):
    raise KeyboardInterrupt


@pytest.mark.parametrize(
    ("module", "name", "args"),
    [
        (phaze.cli.schedule_cmd, "pass_schedule", SCHEDULE),
        (results.report, "write_report", ("report", "{dir}")),
        (phaze.cli.report_cmd, "json_document", ("export", "{dir}", "--json")),
    ],
)
def test_ctrl_c_exits_130_with_one_line(cli_run, small_sweep, monkeypatch, module, name, args):
    monkeypatch.setattr(module, name, _interrupt)
    r = cli_run(*(a.format(dir=small_sweep[1]) for a in args))
    assert r.exit_code == 130, r.output
    assert r.stderr.strip() == "interrupted" and "Aborted" not in r.output


def _phaze(*args: str, **kwargs) -> subprocess.Popen:
    """``phaze ARGS`` in a process of its own, its stdout and stderr piped."""
    code = "from phaze.cli import main; main()"
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        **kwargs,
    )


EVALUATE = ("evaluate", "--workload", "gpt3-125m", "--arch", "a100", "--devices", "1")
EVALUATE += ("--global-batch", "1", "--seq-len", "64")


@pytest.mark.parametrize("args", [EVALUATE, ("workloads", "list"), ("arch", "list", "--json")])
def test_a_closed_stdout_pipe_ends_quietly_with_status_0(args):
    """``phaze ... | head -1``: the reader is gone before the output is written."""
    p = _phaze(*args)
    p.stdout.close()
    stderr = p.stderr.read().decode()
    assert p.wait(timeout=120) == 0, stderr
    assert "Error" not in stderr and "Traceback" not in stderr and "Exception" not in stderr


def test_every_command_takes_verbose_after_its_name_too():
    def debug_lines(*args: str) -> list[str]:
        p = _phaze(*args)
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err.decode()
        return [line for line in err.decode().splitlines() if line.startswith("DEBUG ")]

    assert debug_lines(*EVALUATE, "-vv") and debug_lines("-v", *EVALUATE, "-v")
    assert not debug_lines(*EVALUATE, "-v")


def test_each_command_and_subcommand_lists_verbose(cli_run):
    for args in (("evaluate",), ("validate", "gemm"), ("workloads", "show"), ("place",)):
        r = cli_run(*args, "--help")
        assert r.exit_code == 0 and "-v, --verbose" in r.output, (args, r.output)
