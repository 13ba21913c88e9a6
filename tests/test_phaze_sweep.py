"""The sweep engine keeps the promises of issue 7, on sweeps small enough to run in seconds.

* A sweep interrupted (Ctrl-C, ``kill -9``) and re-run ends with exactly the points of an
  uninterrupted run, every column equal.
* Pruning by optimistic bounds skips designs yet keeps every Pareto front of the sweep's
  objectives; the bound itself is never worse than any evaluated point.
* Several workloads get one aggregate row per design (``*all*``).
* Bad input gives one ``Error:`` line and a non-zero exit, and never touches stored points.

Every sweep here runs on 4 devices with 256-token sequences of gpt3-125m (and gpt3-350m),
with the deterministic "list" scheduler. Evaluations are cached by content within the test
process, so the sweeps after the first of each space cost little.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from spaces import PRUNABLE_SPACE, space_toml

import phaze
from arch_space import Accelerator, design_id
from ilp import DEFAULT_SEARCH_NODES
from phaze.cli import cli
from phaze.config import (
    SweepConfig,
    model_digest,
    quick_sweep_config,
    sweep_config_from_mapping,
)
from phaze.errors import ConfigError
from phaze.pipeline import Knobs
from phaze.pipeline import evaluate as evaluate_point
from phaze.sweep import Bound, bounds, plan, record_of, run_sweep, tight_bound
from results.pareto import pareto, parse_objectives
from results.schema import AGGREGATE_WORKLOAD
from results.store import STORE_FILENAME, Store, load

# Six designs (1, 2, 4 tensor cores of 64 or 128 rows), all kept whatever their area.
SMALL_SPACE = space_toml("test", num_tc=(1, 2, 4), tc_rows=(64, 128))


OBJECTIVES = ("tokens_per_s", "system_cost_usd", "total_kgco2e", "tcdp")


def _sweep_table(space: Path, **sweep) -> dict:
    """The [sweep] table of a small sweep (overridden by ``sweep``)."""
    return {
        "workloads": ["gpt3-125m"],
        "space": str(space),
        "devices": 4,
        "devices_per_node": 4,
        "seq_len": 256,
        "global_batch": 8,
        "micro_batches": [1],
        "recompute": ["none"],
        "presets": [],
        **sweep,
    }


def _config(space: Path, **sweep) -> SweepConfig:
    return sweep_config_from_mapping(
        {"sweep": _sweep_table(space, **sweep), "solver": {"name": "list"}}, source="test"
    )


def _toml(value) -> str:
    return json.dumps(value)  # lists of strings and numbers, strings, bools: JSON == TOML


def _config_toml(space: Path, **sweep) -> str:
    table = _sweep_table(space, **sweep)
    lines = ["[sweep]", *(f"{k} = {_toml(v)}" for k, v in table.items())]
    return "\n".join([*lines, "", "[solver]", 'name = "list"', ""])


def _points(out: Path) -> list[dict]:
    with load(out) as store:
        return store.points()


def _run(cfg: SweepConfig, out: Path, **kwargs):
    kwargs.setdefault("executor", "serial")
    return run_sweep(cfg, out, progress=False, **kwargs)


@pytest.fixture(scope="module")
def spaces(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("spaces")
    (d / "small.toml").write_text(SMALL_SPACE)
    (d / "prunable.toml").write_text(PRUNABLE_SPACE)
    return {"small": d / "small.toml", "prunable": d / "prunable.toml"}


@pytest.fixture(scope="module")
def clean(spaces, tmp_path_factory):
    """Uninterrupted reference runs, by space: (config, result, points)."""
    out = {}
    for name, kw in (
        ("small", {"presets": ["tpuv4"]}),
        ("prunable", {}),
        ("two", {"workloads": ["gpt3-125m", "gpt3-350m"], "recompute": ["none", "full"]}),
    ):
        space = "prunable" if name == "prunable" else "small"
        cfg = _config(spaces[space], **kw)
        d = tmp_path_factory.mktemp(f"clean-{name}")
        out[name] = (cfg, _run(cfg, d), _points(d))
    return out


@pytest.fixture(scope="module")
def exhaustive(spaces, tmp_path_factory):
    """The prunable space with pruning off: (config, points)."""
    cfg = _config(spaces["prunable"], prune=False)
    d = tmp_path_factory.mktemp("exhaustive")
    result = _run(cfg, d)
    assert result.pruned_designs == 0
    return cfg, _points(d)


# --------------------------------------------------------------------------- resume


@pytest.mark.parametrize(
    "space, k",
    [
        ("small", 2),
        ("small", 5),
        ("prunable", 2),
        ("prunable", 9),  # the first pruned record of round 2
        ("prunable", 30),
        ("two", 4),  # in the middle of a task's records
        ("two", 13),
    ],
)
def test_resume_after_interruption_gives_identical_points(clean, tmp_path, monkeypatch, space, k):
    """Ctrl-C while committing the k-th point, then a re-run: every column as a clean run."""
    cfg, reference, ref_points = clean[space]
    real_put = Store.put_point
    calls = 0

    def interrupted_put(self, record):
        nonlocal calls
        calls += 1
        if calls == k:
            raise KeyboardInterrupt
        real_put(self, record)

    monkeypatch.setattr(Store, "put_point", interrupted_put)
    with pytest.raises(KeyboardInterrupt):
        _run(cfg, tmp_path)
    monkeypatch.setattr(Store, "put_point", real_put)
    stored = {p["key"] for p in _points(tmp_path)}
    assert len(stored) == k - 1  # each point committed alone; the k-th not at all
    real = [p for p in ref_points if p["workload"] != AGGREGATE_WORKLOAD]
    finished = {p["design_id"] for p in real} - {
        p["design_id"] for p in real if p["key"] not in stored
    }

    resumed = _run(cfg, tmp_path)
    assert resumed.skipped_designs == len(finished)
    assert (
        resumed.evaluated_designs + resumed.pruned_designs + resumed.skipped_designs
        == reference.evaluated_designs + reference.pruned_designs
    )
    assert _points(tmp_path) == ref_points
    again = _run(cfg, tmp_path)  # a finished sweep re-run evaluates nothing
    assert (again.evaluated_designs, again.pruned_designs) == (0, 0)
    assert _points(tmp_path) == ref_points


def test_infeasible_points_are_stored_with_their_reason_and_not_redone(spaces, tmp_path):
    """1 GiB of HBM cannot hold gpt3-350m's training state on one device; 32 GiB can."""
    cfg = _config(
        spaces["small"], workloads=["gpt3-350m"], devices=1, devices_per_node=1, hbm_gib=[1, 32]
    )
    first = _run(cfg, tmp_path)
    points = _points(tmp_path)
    small = [p for p in points if p["hbm_bytes"] == 1 << 30]
    assert len(small) == len(points) // 2 == 6
    assert not any(p["feasible"] for p in small)
    assert all(p["reason"] and not p["reason"].startswith("pruned") for p in small)
    assert all(p["tokens_per_s"] is None for p in small)
    assert all(p["feasible"] and p["reason"] is None for p in points if p not in small)
    assert first.points == 12 and first.feasible == 6
    again = _run(cfg, tmp_path)
    assert (again.evaluated_designs, again.skipped_designs) == (0, 12)
    assert _points(tmp_path) == points


def test_manifest_records_version_config_solver_and_stage_times(clean):
    cfg, result, _ = clean["small"]
    with load(result.out_dir) as store:
        manifest, inputs, stored_hash = store.manifest(), store.inputs(), store.config_hash
    assert manifest["tool_version"] == phaze.__version__
    assert manifest["config_hash"] == cfg.config_hash() == stored_hash
    assert manifest["model_digest"] == model_digest()
    assert manifest["solver"] == {
        "name": "list",
        "time_limit_s": 1.0,
        "mip_gap": 1e-4,
        "search_nodes": 0,
    }
    assert set(manifest["wall_times_s"]) >= {"plan_s", "evaluate_s", "aggregate_s", "total_s"}
    assert all(t >= 0 for t in manifest["wall_times_s"].values())
    assert manifest["designs"] == result.evaluated_designs == 7  # six designs and the TPUv4
    assert inputs["config"]["workloads"] == ["gpt3-125m"]
    assert inputs["defaults"] == cfg.scoring.as_dict()


def _stored_points(path: Path) -> int | None:
    """Points in a store being written by another process (None before it has a table)."""
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=5)
        try:
            return conn.execute("SELECT COUNT(*) FROM points").fetchone()[0]
        finally:
            conn.close()
    except sqlite3.Error:
        return None


def test_kill_9_mid_sweep_then_rerun_gives_the_clean_points(spaces, clean, tmp_path):
    """``kill -9`` of ``phaze sweep`` after its first commits; the same command finishes it."""
    _, _, ref_points = clean["prunable"]
    config = tmp_path / "sweep.toml"
    config.write_text(_config_toml(spaces["prunable"]))
    killed = tmp_path / "killed"
    args = ["sweep", str(config), "--out", str(killed), "--executor", "serial", "--no-report"]
    proc = subprocess.Popen(
        [sys.executable, "-c", "from phaze.cli import main; main()", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120
        while (_stored_points(killed / STORE_FILENAME) or 0) < 1:
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() < deadline, "no point stored in 120 s"
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    stored = _stored_points(killed / STORE_FILENAME)
    assert 1 <= stored < len(ref_points), "the kill must land mid-sweep"
    with closing(sqlite3.connect(killed / STORE_FILENAME)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"

    rerun = CliRunner().invoke(cli, args)
    assert rerun.exit_code == 0, rerun.output
    assert f"{stored} already stored" in rerun.output  # one point per design here
    clean_dir = tmp_path / "clean"
    again = CliRunner().invoke(cli, [*args[:3], str(clean_dir), *args[4:]])
    assert again.exit_code == 0, again.output
    assert _points(killed) == _points(clean_dir) == ref_points


# --------------------------------------------------------------------------- pruning


def _front(points, objectives) -> list[dict]:
    """Non-dominated feasible points over any number of objectives (O(n²) oracle)."""
    objs = parse_objectives(objectives)
    rows = [
        (p, [(-1 if o.sense == "max" else 1) * p[o.metric] for o in objs])
        for p in points
        if p["feasible"] and p["workload"] != AGGREGATE_WORKLOAD
    ]

    def dominates(a, b):
        return all(x <= y for x, y in zip(a, b, strict=True)) and a != b

    return sorted(
        (p for p, v in rows if not any(dominates(w, v) for _, w in rows)), key=lambda p: p["key"]
    )


def test_pruning_skips_dominated_designs_and_keeps_the_front(clean, exhaustive):
    cfg, result, points = clean["prunable"]
    _, all_points = exhaustive
    pruned = [p for p in points if not p["feasible"]]
    assert result.pruned_designs == len(pruned) > 0
    assert all(p["reason"].startswith("pruned:") for p in pruned)
    # Pruning only replaces points; an evaluated point is the exhaustive run's, bit for bit.
    assert [p["key"] for p in points] == [p["key"] for p in all_points]
    by_key = {p["key"]: p for p in all_points}
    assert all(p == by_key[p["key"]] for p in points if p["feasible"])
    front = _front(points, cfg.objectives)
    assert front == _front(all_points, cfg.objectives)
    assert not {p["design_id"] for p in front} & {p["design_id"] for p in pruned}


def _oracle_bounds(points):
    """The tightest valid bound of each (design, workload): its evaluated points' best
    values (vacuous for a design with none)."""
    best: dict[tuple[str, str], dict] = {}
    for p in points:
        if p["feasible"] and p["workload"] != AGGREGATE_WORKLOAD:
            b = best.setdefault((p["design_id"], p["workload"]), {})
            for f in dataclasses.fields(Bound):
                pick = max if f.name in ("tokens_per_s", "samples_per_s") else min
                b[f.name] = pick(b.get(f.name, p[f.name]), p[f.name])
    worst = {
        f.name: 0.0 if f.name.endswith("per_s") else math.inf for f in dataclasses.fields(Bound)
    }

    def bound(acc, model, knobs, ctx):
        return Bound(**best.get((design_id(acc), model.name), worst))

    return bound


@pytest.mark.parametrize("workloads", [["gpt3-125m"], ["gpt3-125m", "gpt3-350m"]])
def test_tighter_worker_bounds_prune_more_and_keep_the_fronts(
    spaces, tmp_path, monkeypatch, workloads
):
    """Workers' tight bounds decide pruning exactly. With the tightest valid bound (a
    design's own best values, from an exhaustive run) many more designs are pruned, and
    with two workloads a design a worker skipped on one workload but the other keeps is
    evaluated there too: every kept point and every front is the exhaustive run's."""
    exhaustive_dir, cheap_dir, tight_dir = tmp_path / "all", tmp_path / "cheap", tmp_path / "tight"
    _run(_config(spaces["prunable"], prune=False, workloads=workloads), exhaustive_dir)
    all_points = _points(exhaustive_dir)
    cheap = _run(_config(spaces["prunable"], workloads=workloads), cheap_dir)
    monkeypatch.setattr("phaze.sweep.tasks.tight_bound", _oracle_bounds(all_points))
    tight = _run(_config(spaces["prunable"], workloads=workloads), tight_dir)
    assert cheap.pruned_designs < tight.pruned_designs
    points = _points(tight_dir)
    per_workload = [p["key"] for p in all_points if p["workload"] != AGGREGATE_WORKLOAD]
    assert [p["key"] for p in points if p["workload"] != AGGREGATE_WORKLOAD] == per_workload
    by_key = {p["key"]: p for p in all_points}
    pruned = {p["design_id"] for p in points if (p["reason"] or "").startswith("pruned:")}
    assert len(pruned) == tight.pruned_designs
    for p in points:
        if p["design_id"] not in pruned:
            assert p == by_key[p["key"]]
    for name in workloads:
        mine = [p for p in points if p["workload"] == name]
        assert _front(mine, OBJECTIVES) == _front(
            [p for p in all_points if p["workload"] == name], OBJECTIVES
        )


@pytest.mark.parametrize(
    "objectives",
    [c for r in (2, 3) for c in itertools.combinations(OBJECTIVES, r)],
    ids="/".join,
)
def test_pruned_and_exhaustive_pareto_fronts_agree(spaces, exhaustive, tmp_path, objectives):
    """A sweep pruned for its own objectives has the exhaustive sweep's front over them."""
    cfg = _config(spaces["prunable"], objectives=list(objectives))
    _run(cfg, tmp_path)
    _, all_points = exhaustive
    front = pareto(_points(tmp_path), objectives)
    assert front == pareto(all_points, objectives)
    assert sorted(p["key"] for p in front) == [p["key"] for p in _front(all_points, objectives)]


def _check_bound(acc: Accelerator, model, ctx, point: dict, knobs) -> None:
    """Both bounds (the cheap one and the tight one over ``knobs``) are optimistic."""
    for b in (bounds(acc, model, ctx), tight_bound(acc, model, knobs, ctx)):
        _check_one_bound(b, point)


def _check_one_bound(b, point: dict) -> None:
    where = point["key"]
    assert b.tokens_per_s >= point["tokens_per_s"], where
    assert b.samples_per_s >= point["samples_per_s"], where
    assert b.iteration_s <= point["iteration_s"], where
    assert b.time_to_train_s <= point["time_to_train_s"], where
    assert b.system_cost_usd == pytest.approx(point["system_cost_usd"], rel=1e-12), where
    for metric in ("embodied_kgco2e", "operational_kgco2e", "total_kgco2e", "tcdp"):
        assert getattr(b, metric) <= point[metric], (where, metric)
    assert b.tcdp_kgco2e_days <= point["tcdp_kgco2e_days"], where


def test_bounds_are_optimistic_for_every_evaluated_point(exhaustive):
    cfg, points = exhaustive
    shared, designs = plan(cfg)
    by_id = {design_id(a): a for a in designs}
    ((_, model),) = shared.workloads
    feasible = [p for p in points if p["feasible"]]
    assert len(feasible) > 30
    tighter = 0
    for p in feasible:
        acc = by_id[p["design_id"]]
        _check_bound(acc, model, shared.ctx, p, shared.knobs)
        cheap = bounds(acc, model, shared.ctx).iteration_s
        tight = tight_bound(acc, model, shared.knobs, shared.ctx).iteration_s
        assert tight >= cheap
        tighter += tight > cheap
    assert tighter > len(feasible) // 2  # most designs here are far from 100 % MFU


@settings(max_examples=25)
@given(
    num_tc=st.sampled_from([1, 2, 4, 8]),
    tc_rows=st.sampled_from([8, 32, 128]),
    tc_cols=st.sampled_from([32, 128]),
    glb_mib=st.sampled_from([4, 16, 64]),
    micro_batch=st.sampled_from([1, 2, 4]),
    recompute=st.sampled_from(["none", "selective", "full"]),
    devices=st.sampled_from([1, 4, 8]),
)
def test_bounds_are_optimistic_on_random_designs_and_knobs(
    num_tc, tc_rows, tc_cols, glb_mib, micro_batch, recompute, devices
):
    cfg = sweep_config_from_mapping(
        {
            "sweep": {
                "workloads": ["gpt3-125m"],
                "devices": devices,
                "devices_per_node": 4 if devices > 4 else devices,
                "seq_len": 256,
                "global_batch": 8,
            }
        }
    )
    shared, _ = plan(cfg)
    ((name, model),) = shared.workloads
    acc = Accelerator(
        num_tc=num_tc,
        tc_rows=tc_rows,
        tc_cols=tc_cols,
        num_vc=1,
        vc_lanes=tc_cols,
        glb_bytes=glb_mib << 20,
        hbm_bytes=32 << 30,
        hbm_bandwidth_bytes_per_s=1.2e12,
        clock_hz=1.05e9,
        node_nm=7,
    )
    ev = evaluate_point(name, model, acc, Knobs(micro_batch, recompute), shared.ctx)
    if ev.feasible:
        _check_bound(
            acc, model, shared.ctx, record_of(ev, devices), (Knobs(micro_batch, recompute),)
        )


# --------------------------------------------------------------------------- aggregates


def test_aggregate_rows_score_sum_and_match_the_best_points(clean):
    """gpt3-125m and gpt3-350m on the small space, recompute none or full."""
    cfg, _, points = clean["two"]
    names = cfg.workloads
    agg = {p["design_id"]: p for p in points if p["workload"] == AGGREGATE_WORKLOAD}
    best: dict[tuple[str, str], dict] = {}  # each design's fastest point per workload
    for p in points:
        if p["feasible"] and p["workload"] in names:
            k = (p["design_id"], p["workload"])
            if k not in best or p["tokens_per_s"] > best[k]["tokens_per_s"]:
                best[k] = p
    everywhere = {d for d, _ in best if all((d, w) in best for w in names)}
    assert len(everywhere) >= 2 and set(agg) == everywhere
    top = {w: max(p["tokens_per_s"] for (_, ww), p in best.items() if ww == w) for w in names}
    for did, row in agg.items():
        rows = [best[did, w] for w in names]
        ratios = [r["tokens_per_s"] / top[w] for r, w in zip(rows, names, strict=True)]
        assert 0 < row["throughput_score"] <= 1
        assert row["throughput_score"] == pytest.approx(math.prod(ratios) ** (1 / len(names)))
        for metric in (
            "total_kgco2e",
            "embodied_kgco2e",
            "operational_kgco2e",
            "job_energy_j",
            "time_to_train_s",
        ):
            assert row[metric] == pytest.approx(math.fsum(r[metric] for r in rows), rel=1e-12)
        assert row["tcdp"] == pytest.approx(row["total_kgco2e"] * row["time_to_train_s"])
        assert row["system_cost_usd"] == rows[0]["system_cost_usd"] == rows[1]["system_cost_usd"]
        assert (row["num_tc"], row["tc_rows"]) == (rows[0]["num_tc"], rows[0]["tc_rows"])
    winners = {
        max((d for d, ww in best if ww == w), key=lambda d: best[d, w]["tokens_per_s"])
        for w in names
    }
    assert len(winners) == 1, "the space is meant to have one design fastest on both"
    (champion,) = winners
    assert agg[champion]["throughput_score"] == 1.0
    assert all(r["throughput_score"] < 1 for d, r in agg.items() if d != champion)
    # Ranked and filtered like any metric.
    front = pareto(list(agg.values()), ["throughput_score", "total_kgco2e"])
    assert front and front[0]["design_id"] == champion


def test_one_workload_has_no_aggregate_rows(clean):
    _, _, points = clean["small"]
    assert points and all(p["workload"] == "gpt3-125m" for p in points)


# --------------------------------------------------------------------------- CLI


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
def stored(spaces, tmp_path_factory):
    """A finished ``phaze sweep`` of the small space: (config file, out dir)."""
    d = tmp_path_factory.mktemp("stored")
    config = d / "sweep.toml"
    config.write_text(_config_toml(spaces["small"]))
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


def test_the_api_refuses_a_changed_config_too(spaces, clean, tmp_path):
    cfg, _, _ = clean["small"]
    _run(cfg, tmp_path)
    before = _snapshot(tmp_path)
    with pytest.raises(ConfigError, match="config hash"):
        _run(_config(spaces["small"], global_batch=4), tmp_path)
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
    """One JSON document on stdout (with the scoring defaults), and the report's path."""
    config, _ = stored
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["sweep", str(config), "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["points"] == doc["feasible"] == len(_points(out)) == 6
    assert doc["out_dir"] == str(out) and Path(doc["report"]).is_file()
    assert doc["defaults"]["pue"] > 1
    assert "scoring defaults:" in result.stderr


def test_search_api_returns_the_stored_points(spaces, clean, tmp_path):
    from arch_space import Cluster

    cfg, _, ref_points = clean["small"]
    points = phaze.search(
        cfg.workloads,
        cfg.space,
        Cluster(devices=4, devices_per_node=4),
        micro_batches=cfg.micro_batches,
        recompute_modes=cfg.recompute,
        executor="serial",
        out_dir=tmp_path,
        seq_len=256,
        global_batch=8,
    )
    assert points == _points(tmp_path)
    assert {p["key"] for p in ref_points} <= {p["key"] for p in points}
