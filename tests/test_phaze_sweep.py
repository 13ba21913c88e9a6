"""The sweep engine's store: a sweep interrupted (Ctrl-C, ``kill -9``) and re-run ends with
exactly the points of an uninterrupted run, every column equal; infeasible points keep their
reason; the manifest says how the points were made; several workloads get one aggregate
row per design (``*all*``).

The sweeps are those of ``tests/sweeps.py``, small enough to run in seconds.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

import pytest
import sweeps
from click.testing import CliRunner

import phaze
from arch_space import design_id
from ilp import layer_timing
from phaze.cli import cli
from phaze.config import model_digest
from phaze.sweep import plan
from phaze_common.errors import ConfigError
from placement import parse_strategy
from results.pareto import pareto
from results.schema import AGGREGATE_WORKLOAD
from results.store import STORE_FILENAME, Store, load
from workloads import Recompute, TrainingSetup, build_layer_graph

# --------------------------------------------------------------------------- resume


@pytest.mark.parametrize(
    "space, k",
    [
        ("small", 2),
        pytest.param("small", 5, marks=pytest.mark.slow),
        ("prunable", 2),
        ("prunable", 9),  # the first pruned record of round 2
        pytest.param("prunable", 30, marks=pytest.mark.slow),
        ("two", 4),  # in the middle of a task's records
        pytest.param("two", 13, marks=pytest.mark.slow),
    ],
)
def test_resume_after_interruption_gives_identical_points(
    clean_sweeps, tmp_path, monkeypatch, space, k
):
    """Ctrl-C while committing the k-th point (alone, or in a batch of pruned points), then
    a re-run: every column as a clean run."""
    cfg, reference, ref_points = clean_sweeps[space]
    real_put, real_many = Store.put_point, Store.put_points
    calls = 0

    def interrupted_many(self, records):
        nonlocal calls
        records = list(records)
        if calls < k <= calls + len(records):
            raise KeyboardInterrupt
        calls += len(records)
        real_many(self, records)

    monkeypatch.setattr(Store, "put_point", lambda self, record: interrupted_many(self, [record]))
    monkeypatch.setattr(Store, "put_points", interrupted_many)
    with pytest.raises(KeyboardInterrupt):
        sweeps.run(cfg, tmp_path)
    monkeypatch.setattr(Store, "put_point", real_put)
    monkeypatch.setattr(Store, "put_points", real_many)
    stored = {p["key"] for p in sweeps.points(tmp_path)}
    assert len(stored) == calls < k  # the transaction holding the k-th point stored nothing
    real = [p for p in ref_points if p["workload"] != AGGREGATE_WORKLOAD]
    finished = {p["design_id"] for p in real} - {
        p["design_id"] for p in real if p["key"] not in stored
    }

    resumed = sweeps.run(cfg, tmp_path)
    assert resumed.skipped_designs == len(finished)
    assert (
        resumed.evaluated_designs + resumed.pruned_designs + resumed.skipped_designs
        == reference.evaluated_designs + reference.pruned_designs
    )
    assert sweeps.points(tmp_path) == ref_points
    again = sweeps.run(cfg, tmp_path)  # a finished sweep re-run evaluates nothing
    assert (again.evaluated_designs, again.pruned_designs) == (0, 0)
    assert sweeps.points(tmp_path) == ref_points


def test_infeasible_points_are_stored_with_their_reason_and_not_redone(sweep_spaces, tmp_path):
    """1 GiB of HBM cannot hold gpt3-350m's training state on one device; 32 GiB can."""
    cfg = sweeps.config(
        sweep_spaces["small"],
        workloads=["gpt3-350m"],
        devices=1,
        devices_per_node=1,
        hbm_gib=[1, 32],
    )
    first = sweeps.run(cfg, tmp_path)
    points = sweeps.points(tmp_path)
    small = [p for p in points if p["hbm_bytes"] == 1 << 30]
    assert len(small) == len(points) // 2 == 6
    assert not any(p["feasible"] for p in small)
    assert all(p["reason"] and not p["reason"].startswith("pruned") for p in small)
    assert all(p["tokens_per_s"] is None for p in small)
    assert all(p["feasible"] and p["reason"] is None for p in points if p not in small)
    assert first.points == 12 and first.feasible == 6
    again = sweeps.run(cfg, tmp_path)
    assert (again.evaluated_designs, again.skipped_designs) == (0, 12)
    assert sweeps.points(tmp_path) == points


def test_manifest_records_version_config_solver_and_stage_times(clean_sweeps):
    cfg, result, _ = clean_sweeps["small"]
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


def test_kill_9_mid_sweep_then_rerun_gives_the_clean_points(sweep_spaces, clean_sweeps, tmp_path):
    """``kill -9`` of ``phaze sweep`` after its first commits; the same command finishes it."""
    _, _, ref_points = clean_sweeps["prunable"]
    config = tmp_path / "sweep.toml"
    config.write_text(sweeps.config_toml(sweep_spaces["prunable"]))
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
    assert sweeps.points(killed) == sweeps.points(clean_dir) == ref_points


# --------------------------------------------------------------------------- aggregates


def test_aggregate_rows_score_sum_and_match_the_best_points(clean_sweeps):
    """gpt3-125m and gpt3-350m on the small space, recompute none or full."""
    cfg, _, points = clean_sweeps["two"]
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
        assert row["schedule_gap_max"] == max(r["schedule_gap_max"] for r in rows)
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


def test_one_workload_has_no_aggregate_rows(clean_sweeps):
    _, _, points = clean_sweeps["small"]
    assert points and all(p["workload"] == "gpt3-125m" for p in points)


# --------------------------------------------------------------------------- schedule exactness


def test_points_record_how_exact_their_layer_schedules_are(clean_sweeps):
    """Each point's worst gap and method counts are those of the distinct layer passes
    at its placement's width, scheduled again here; the "list" scheduler proves some
    passes (gap 0, closed by the bound) and leaves a gap on others."""
    cfg, _, pts = clean_sweeps["two"]
    shared, designs = plan(cfg)
    by_id = {design_id(a): a for a in designs}
    models = dict(shared.workloads)
    feasible = [p for p in pts if p["feasible"] and p["workload"] != AGGREGATE_WORKLOAD]
    assert feasible
    for p in feasible:
        acc, model = by_id[p["design_id"]], models[p["workload"]]
        setup = TrainingSetup(
            seq_len=cfg.training.seq_len,
            global_batch=cfg.training.global_batch,
            micro_batch=p["micro_batch"],
            recompute=Recompute(p["recompute"]),
            # as chosen
            sequence_parallel=parse_strategy(json.loads(p["placement"])["strategy"]).sp,
        )
        solver = shared.ctx.solver
        timings = layer_timing(
            build_layer_graph(model, setup, p["tp"]),
            acc,
            shared.ctx.cluster,
            solver=solver.name,
            time_limit_s=solver.time_limit_s,
            mip_gap=solver.mip_gap,
            search_nodes=solver.search_nodes,
        )
        passes = [t for lt in timings.values() for t in (lt.forward, lt.backward, lt.recompute)]
        timed = [t for t in passes if t.makespan_s > 0]
        methods = dict(m.split(":") for m in p["schedule_methods"].split(","))
        assert sum(map(int, methods.values())) == len(timed), p["key"]
        for m in {str(t.method) for t in timed}:
            assert int(methods[m]) == sum(str(t.method) == m for t in timed), (p["key"], m)
        assert p["schedule_gap_max"] == max(t.gap for t in timed), p["key"]
    gaps = [p["schedule_gap_max"] for p in feasible]
    assert all(0 <= g < 1 for g in gaps) and max(gaps) > 0
    assert all("bound:" in p["schedule_methods"] for p in feasible)


def test_a_store_from_before_the_schedule_columns_is_refused_clearly(clean_sweeps, tmp_path):
    """A store of the earlier layout (no schedule columns): a resume and a report each
    end in one Error line that says to use a new directory, and the store is untouched."""
    cfg, result, _ = clean_sweeps["small"]
    old = tmp_path / "old"
    shutil.copytree(result.out_dir, old)
    with closing(sqlite3.connect(old / STORE_FILENAME)) as conn:
        for column in ("schedule_gap_max", "schedule_methods"):
            conn.execute(f"ALTER TABLE points DROP COLUMN {column}")
        conn.execute("PRAGMA user_version=1")
        conn.commit()
    before = (old / STORE_FILENAME).read_bytes()
    with pytest.raises(ConfigError, match="layout version 1.*new directory"):
        sweeps.run(cfg, old)
    for args in (["report", str(old)], ["export", str(old), "--json"]):
        out = CliRunner().invoke(cli, args)
        assert out.exit_code == 1 and "Traceback" not in out.output, out.output
        errors = [line for line in out.output.splitlines() if line.startswith("Error:")]
        assert len(errors) == 1 and "layout version 1" in errors[0], out.output
    assert (old / STORE_FILENAME).read_bytes() == before


def test_the_api_applies_the_size_limits_of_the_command_line(tmp_path):
    """Sizes beyond any machine are one ConfigError naming each field, before any work."""
    from arch_space import Cluster, preset

    huge = Cluster(devices=10**8, devices_per_node=8)
    with pytest.raises(ConfigError, match=r"devices = 100000000 is above the limit") as e:
        phaze.evaluate("gpt3-125m", preset("a100"), huge, seq_len=10**9, micro_batch=10**7)
    assert "seq_len = 1000000000" in str(e.value) and "micro_batch = 10000000" in str(e.value)
    with pytest.raises(ConfigError, match=r"global_batch = 2000000 is above the limit"):
        phaze.search(["gpt3-125m"], global_batch=2 * 10**6, out_dir=tmp_path, executor="serial")
    assert not any(tmp_path.iterdir())


def test_the_api_search_takes_what_phaze_sweep_does(tmp_path, monkeypatch):
    """framework, ZeRO stages, ep, cp, presets and a token budget (as text, like --tokens)
    reach the sweep's config, checked by the rules of a sweep file."""
    seen = []

    def run(cfg, *args, **kwargs):
        seen.append(cfg)
        raise KeyboardInterrupt  # the config is all this test needs

    monkeypatch.setattr(phaze.api, "run_sweep", run)
    with pytest.raises(KeyboardInterrupt):
        phaze.search(
            ["gpt3-125m"],
            out_dir=tmp_path,
            framework="megatron-2022",
            zero=[1, 3],
            ep=[1],
            cp=[1, 2],
            presets=["a100"],
            tokens_to_train="300B",
            sequence_parallel=False,
        )
    (cfg,) = seen
    assert (
        cfg.training.framework,
        cfg.training.zero,
        cfg.training.ep,
        cfg.training.cp,
        cfg.presets,
    ) == (
        "megatron-2022",
        (1, 3),
        (1,),
        (1, 2),
        ("a100",),
    )
    assert (cfg.training.tokens_to_train, cfg.training.sequence_parallel) == (300 * 10**9, False)
    with pytest.raises(ConfigError) as e:
        phaze.search(["gpt3-125m"], out_dir=tmp_path, framework="fast", zero=[4], cp=[0])
    for field in ("framework = 'fast'", "zero = [4]", "cp = [0]"):
        assert f"phaze.search [sweep]: {field}" in str(e.value)
    assert len(seen) == 1


# --------------------------------------------------------------------------- one host rule


def test_a_preset_s_sweep_point_and_its_evaluation_agree(tmp_path):
    """The sweep prices a preset in the host server ``phaze evaluate`` runs it in (its own:
    an H100 in a DGX H100), so the stored point and the evaluation of the same point agree
    on energy, cost and carbon."""
    from spaces import space_toml

    space = tmp_path / "one.toml"
    space.write_text(space_toml("one", num_tc=(1,), tc_rows=(64,)))
    cfg = sweeps.config(space, presets=["h100"], devices=8, devices_per_node=8)
    sweeps.run(cfg, tmp_path / "out")
    (point,) = [p for p in sweeps.points(tmp_path / "out") if p["design_name"] == "h100"]
    args = ["evaluate", "--workload", "gpt3-125m", "--arch", "h100", "--devices", "8"]
    args += ["--seq-len", "256", "--global-batch", "8", "--json", "--strategy"]
    args += [f"t={point['tp']},p={point['pp']},d={point['dp']},mbs=1,recompute=none"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["iteration_s"] == pytest.approx(point["iteration_s"])
    assert doc["energy_breakdown"]["host_j"] == pytest.approx(point["energy_host_j"])
    assert doc["energy_j"] / 1.10 == pytest.approx(point["job_energy_j"])
    assert doc["capex_usd"] == pytest.approx(point["system_cost_usd"])
    assert doc["tco_usd"] == pytest.approx(point["tco_usd"])
    assert doc["total_kgco2e"] == pytest.approx(point["total_kgco2e"])
