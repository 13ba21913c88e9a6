"""layer_timing glue and the ``phaze schedule`` command."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import pytest
from click.testing import CliRunner

from arch_space.accelerator import Cluster
from arch_space.presets import preset
from ilp import LayerTiming, costed_graph, layer_timing, pass_schedule
from phaze.cli import cli
from workloads import OpKind, Recompute, TrainingSetup, build_layer_graph, get_model

SETUP = TrainingSetup(seq_len=512, global_batch=8, micro_batch=1)


@pytest.fixture(scope="module")
def gpt_small():
    return build_layer_graph(get_model("gpt3-125m"), SETUP, 1)


def test_layer_timing_covers_every_distinct_layer(gpt_small):
    acc = preset("tpuv4")
    timings = layer_timing(gpt_small, acc, Cluster(devices=8), time_limit_s=0.5)
    assert set(timings) == set(gpt_small.op_graphs)
    for cid, lt in timings.items():
        assert isinstance(lt, LayerTiming) and lt.class_id == cid
        for p in (lt.forward, lt.backward):
            assert p.makespan_s > 0 and p.energy_j > 0
            busy = dict(p.utilisation_by_kind)
            assert set(acc.capacity) <= set(busy) and all(0 <= x <= 1 for x in busy.values())
            assert p.time_limit_s == 0.5
        # No recompute: the recompute pass is empty.
        assert lt.recompute.makespan_s == 0 and lt.recompute.energy_j == 0
    block = timings["block"]
    # The backward pass has about twice the forward GEMM work.
    assert block.backward.makespan_s > block.forward.makespan_s


def test_pass_makespan_is_bounded_by_serial_and_parallel_sums(gpt_small):
    acc = preset("tpuv4")
    cluster = Cluster(devices=8)
    og = gpt_small.op_graphs["block"].forward
    g = costed_graph(og, acc, cluster)
    s = pass_schedule(og, acc, cluster, time_limit_s=0.5)
    fastest = [min(a["latency_s"], a["parallel_latency_s"]) for _, a in g.nodes(data=True)]
    assert s.makespan_s <= sum(fastest) * (1 + 1e-9)
    assert s.makespan_s >= max(fastest)
    # Energies come from the chosen modes.
    lo = sum(min(a["energy_j"], a["parallel_energy_j"]) for _, a in g.nodes(data=True))
    hi = sum(max(a["energy_j"], a["parallel_energy_j"]) for _, a in g.nodes(data=True))
    assert lo - 1e-12 <= s.energy_j <= hi + 1e-12


def test_full_recompute_pass_equals_forward():
    setup = TrainingSetup(seq_len=512, global_batch=8, micro_batch=1, recompute=Recompute.FULL)
    lg = build_layer_graph(get_model("gpt3-125m"), setup, 1)
    t = layer_timing(lg, preset("tpuv4"), Cluster(devices=8), time_limit_s=0.5)["block"]
    assert t.recompute.makespan_s == pytest.approx(t.forward.makespan_s, rel=1e-6)


def test_timings_are_cached_by_content(gpt_small):
    acc = preset("tpuv4")
    a = layer_timing(gpt_small, acc, Cluster(devices=8), time_limit_s=0.5)
    b = layer_timing(gpt_small, replace(acc, name="other"), Cluster(devices=8), time_limit_s=0.5)
    assert a["block"].forward is b["block"].forward and a["block"] == b["block"]


def test_cli_schedule_table_json_and_gantt(tmp_path):
    runner = CliRunner()
    png = tmp_path / "g.png"
    r = runner.invoke(
        cli,
        [
            "schedule",
            "--workload",
            "gpt3-125m",
            "--arch",
            "tpuv4",
            "--seq-len",
            "512",
            "--time-limit",
            "0.5",
            "--gantt",
            str(png),
        ],
    )
    assert r.exit_code == 0, r.output
    assert "makespan" in r.output and "proj" in r.output and "single" in r.output
    assert png.exists() and png.stat().st_size > 1000
    r = runner.invoke(
        cli,
        [
            "schedule",
            "--workload",
            "gpt3-125m",
            "--arch",
            "tpuv4",
            "--seq-len",
            "512",
            "--pass",
            "bwd",
            "--tp",
            "2",
            "--time-limit",
            "0.5",
            "--json",
        ],
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["schema_version"] == 1 and doc["pass"] == "backward" and doc["tp"] == 2
    assert doc["makespan_s"] == pytest.approx(
        max(o["start_s"] + o["duration_s"] for o in doc["ops"]), rel=1e-12
    )
    assert {o["mode"] for o in doc["ops"]} <= {"single", "parallel"}


def test_cli_schedule_errors():
    runner = CliRunner()
    r = runner.invoke(cli, ["schedule", "--workload", "gpt3-125m", "--arch", "tpu5"])
    assert r.exit_code == 1 and "tpuv4" in r.output
    r = runner.invoke(
        cli, ["schedule", "--workload", "gpt3-125m", "--arch", "tpuv4", "--layer", "blok"]
    )
    assert r.exit_code == 1 and "unknown layer class 'blok'; did you mean block" in r.output
    r = runner.invoke(
        cli, ["schedule", "--workload", "gpt3-125m", "--arch", "tpuv4", "--solver", "gurobo"]
    )
    assert (
        r.exit_code == 2 and "'gurobo' is not one of 'highs', 'cbc', 'gurobi', 'list'" in r.output
    )
    r = runner.invoke(
        cli, ["schedule", "--workload", "gpt3-125m", "--arch", "tpuv4", "--search-nodes", "-1"]
    )
    assert r.exit_code == 2 and "'--search-nodes': -1 is not in the range x>=0" in r.output
    r = runner.invoke(cli, ["schedule", "--help"])
    assert r.exit_code == 0 and "--gantt" in r.output


def test_cli_schedule_json_is_the_whole_stdout_of_a_fresh_process():
    """HiGHS prints a banner to descriptor 1 when a process builds its first solver (here the
    LP bound); stdout must still be one JSON document."""
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "from phaze.cli import cli; cli()",
            "schedule",
            "--workload",
            "gpt3-175b",
            "--arch",
            "tpuv4",
            "--search-nodes",
            "0",
            "--time-limit",
            "0.2",
            "--json",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    doc = json.loads(out.stdout)
    assert doc["workload"] == "gpt3-175b" and doc["solver"] in ("highs", "cbc", "none")


def test_collectives_hold_their_groups_channel(gpt_small):
    """At t = 8 with sequence parallelism every collective holds the one unit of the
    tensor-parallel channel, so no two overlap; a pass without collectives has the cores
    alone."""
    acc, cluster = preset("a100"), Cluster(devices=8)
    setup = replace(SETUP, sequence_parallel=True)
    og = build_layer_graph(get_model("gpt3-1.3b"), setup, 8).op_graphs["block"].backward
    s = pass_schedule(og, acc, cluster, solver="list", search_nodes=0)
    assert s.capacity["channel:tp"] == 1
    colls = [op.name for op in og.ops if op.kind is OpKind.COLLECTIVE]
    assert len(colls) >= 4
    spans = sorted((s.start_s[c], s.finish_s(c)) for c in colls)
    assert all(a[1] <= b[0] * (1 + 1e-12) for a, b in zip(spans, spans[1:], strict=False))
    assert {s.core_ids[c] for c in colls} == {"channel:tp0"}
    plain = pass_schedule(gpt_small.op_graphs["block"].backward, acc, cluster, solver="list")
    assert dict(plain.capacity) == {"TC": acc.num_tc, "VC": acc.num_vc}
