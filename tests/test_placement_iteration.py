"""The iteration model: named terms by hand, memory parts, bounded DP memory, one Cluster."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from spaces import space_toml

import phaze
from arch_space import Cluster
from phaze.cli import cli
from phaze.config import SolverSettings
from phaze_common.limits import MAX_DEVICES, MAX_GLOBAL_BATCH
from placement import (
    DeviceMemory,
    Layout,
    PlacementProblem,
    StageEdge,
    StageGraph,
    StageLayer,
    evaluate_fixed,
    place,
)
from placement.energy import iteration_energy
from placement.iteration import EnergyRates, state_split
from results.store import load

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "placement_gpt_small.json"


def _chain(n: int, *, t: int = 1, params: int = 10, stash: float = 5.0, nbytes: float = 0.0):
    layers = tuple(
        StageLayer(
            f"b{i}",
            fwd_s=1.0,
            bwd_s=2.0,
            recompute_s=0.5,
            parameters=params,
            stash_bytes=stash,
            workspace_bytes=3.0,
            tensor_parallel=t > 1,
        )
        for i in range(n)
    )
    return StageGraph(layers, tuple(StageEdge(i, i + 1, nbytes) for i in range(n - 1)), Layout(t=t))


def test_state_split_sums_to_the_state():
    assert state_split(18.0, 12.0, 2.0) == (2.0, 4.0, 12.0)  # Adam: fp16 weights, fp32 grads, 12 B
    assert state_split(14.0, 8.0, 2.0) == (2.0, 4.0, 8.0)  # SGD with momentum
    assert state_split(20.0, 12.0, 2.0) == (2.0, 6.0, 12.0)  # DeepSpeed BF16: bf16 + fp32 gradients
    assert state_split(3.0, 12.0, 2.0) == (2.0, 0.0, 1.0)


def test_interleaved_fixed_strategy_terms_by_hand():
    """4 layers on p = 2 ranks, v = 2 chunks of one layer, d = 2, 8 micro-batches."""
    cl = Cluster(
        devices=4,
        devices_per_node=4,
        intra_node_bandwidth_bytes_per_s=10.0,
        intra_node_latency_s=0.25,
    )
    problem = PlacementProblem(
        (_chain(4, nbytes=20.0),),
        cl,
        hbm_bytes=1e9,
        global_batch=8,
        gradient_bytes_per_parameter=2.0,
        optimizer_s_per_parameter=0.01,
    )
    pl = evaluate_fixed(problem, Layout(t=1, p=2, d=2, v=2))
    b = pl.breakdown
    m = 4  # micro-batches per pipeline
    # each rank runs 2 chunks of 3.5 s and takes part in 3 boundary messages (chunk 0 or 3
    # in one, chunk 1 or 2 in two), each latency + bytes / bandwidth within the node
    message = 0.25 + 20.0 / 10.0
    load = 2 * 3.5 + 3 * message
    assert pl.load_s == load
    assert b.compute_s == m * 2 * 3.0 and b.recompute_s == m * 2 * 0.5
    assert math.isclose(b.pp_comm_exposed_s, m * 3 * message)
    assert math.isclose(b.bubble_s, load * (2 - 1) / 2)
    # ring all-reduce of rank 0's 20 parameters x 2 B over d = 2 in one node
    assert math.isclose(b.dp_comm_exposed_s, 0.25 + 2 * (2 - 1) / 2 * 40.0 / 10.0)
    assert math.isclose(b.optimizer_s, 20 * 0.01)
    assert math.isclose(sum(b.terms().values()), b.iteration_s, rel_tol=1e-12)
    assert b.iteration_s == pl.breakdown.iteration_s
    # rank 0 (chunks 0 and 2): in flight min(2 (p - 1) + (v - 1) p + 1, m v) / v = 2.5
    assert pl.memory_breakdown == DeviceMemory(
        weights_bytes=20 * 2.0,
        gradients_bytes=20 * 4.0,
        optimizer_bytes=20 * 12.0,
        activations_bytes=2.5 * 10.0,
        workspace_bytes=3.0,
    )
    assert pl.memory_breakdown.total_bytes == pl.memory_breakdown.total_bytes


def test_iteration_energy_terms():
    pl = place(PlacementProblem((_chain(2),), Cluster(devices=2), hbm_bytes=1e9, global_batch=4))
    rates = EnergyRates(
        compute_j=3.0,
        memory_j=2.0,
        network_j=1.0,
        static_w_per_device=10.0,
        intra_node_link_pj_per_bit=1.0,
        inter_node_link_pj_per_bit=5.0,
        model_parameters=1e12,
        boundary_bytes=0.0,
        host_w_per_node=100.0,
    )
    e = iteration_energy(pl, rates, Cluster(devices=2), micro_batches=4)
    assert (e.compute_j, e.memory_j) == (12.0, 8.0)
    # static power over the whole iteration, split at the compute time: computing, waiting
    bd = pl.breakdown
    assert e.static_j == pytest.approx(2 * 10.0 * (bd.compute_s + bd.recompute_s))
    assert e.idle_j > 0 and e.static_j + e.idle_j == pytest.approx(
        2 * 10.0 * pl.breakdown.iteration_s
    )
    # two of a node's eight devices pay two eighths of its 100 W host over the iteration
    assert e.host_j == pytest.approx(2 / 8 * 100.0 * pl.breakdown.iteration_s)
    # the d - 1 = 1 ring all-reduce moves 4 (d - 1) P bytes at 1 pJ/bit
    assert math.isclose(e.network_j, 4.0 + 4 * (pl.layout.d - 1) * 1e12 * 8 * 1e-12)
    assert e.total_j == pytest.approx(sum(e.terms().values()))
    assert e.total_j == pytest.approx(e.device_j + e.host_j)
    # sixteen devices at eight per node are two nodes
    two = iteration_energy(pl, rates, Cluster(devices=16), micro_batches=4)
    assert two.host_j == pytest.approx(2 * 100.0 * pl.breakdown.iteration_s)


_BIG = """
import json, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (1 << 31, 1 << 31))
from placement import Cluster, PlacementProblem, StageEdge, StageGraph, StageLayer, place
from placement import read_reference_instance, solve_reference
ref = solve_reference(read_reference_instance(sys.argv[1]))
layers = tuple(StageLayer(f"b{i}", 1.0, 2.0, parameters=10, stash_bytes=5.0) for i in range(6))
g = StageGraph(layers, tuple(StageEdge(i, i + 1, 1.0) for i in range(5)))
pl = place(PlacementProblem((g,), Cluster(devices=10**9), hbm_bytes=1e9, global_batch=10**9))
print(json.dumps([ref.data_parallel_degree, ref.final_time_per_batch, pl.layout.d, pl.breakdown.iteration_s]))
"""


def test_a_billion_devices_and_micro_batches_solve_in_bounded_memory(tmp_path):
    """The DP's arrays follow the graph, not the device or micro-batch count (2 GiB cap):
    a billion of each through ``place``, the instance format at its limits."""
    doc = json.loads(EXAMPLE.read_text())
    doc.update(maxDevices=MAX_DEVICES, mbsInBatch=MAX_GLOBAL_BATCH)
    f = tmp_path / "big.json"
    f.write_text(json.dumps(doc))
    env = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-c", _BIG, str(f)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert out.returncode == 0, out.stderr
    ref_d, ref_s, d, time_s = json.loads(out.stdout)
    assert 1 <= ref_d <= MAX_DEVICES and ref_s > 0
    # 10^9 one-device pipelines of 6 layers x 3 s: one micro-batch each, then the all-reduce
    assert d == 10**9 and math.isclose(time_s, 18.0, rel_tol=1e-6)


def test_search_keeps_every_cluster_field(tmp_path):
    """Latencies given to phaze.search reach the stored config and the placement."""
    space = tmp_path / "one.toml"
    space.write_text(space_toml("one", num_tc=[2], tc_rows=[32]))
    fields = (
        "devices",
        "devices_per_node",
        "intra_node_bandwidth_bytes_per_s",
        "inter_node_bandwidth_bytes_per_s",
        "intra_node_latency_s",
        "inter_node_latency_s",
    )
    base = Cluster(
        devices=4,
        devices_per_node=2,
        intra_node_bandwidth_bytes_per_s=123e9,
        inter_node_bandwidth_bytes_per_s=7e9,
    )
    slow = dataclasses.replace(base, intra_node_latency_s=0.5, inter_node_latency_s=0.25)
    times = []
    for i, cluster in enumerate((base, slow)):
        points = phaze.search(
            ["gpt3-125m"],
            str(space),
            cluster,
            micro_batches=(1,),
            recompute_modes=("none",),
            executor="serial",
            out_dir=tmp_path / str(i),
            seq_len=128,
            global_batch=8,
            solver=SolverSettings(name="list"),
        )
        with load(tmp_path / str(i)) as store:
            config = store.inputs()["config"]
        assert {f: config[f] for f in fields} == {f: getattr(cluster, f) for f in fields}
        times.append({p["key"]: p["iteration_s"] for p in points if p["feasible"]})
    assert times[0].keys() == times[1].keys() and times[0]
    # the latencies were priced: no point gets faster, some slower (a point whose best layout
    # stays in one node, where the measured curve holds the latency, may keep its time)
    assert all(times[1][k] >= times[0][k] for k in times[0])
    assert any(times[1][k] > times[0][k] for k in times[0])


def _stage_rows(output: str) -> tuple[list[str], list[list[str]]]:
    """The header cells and rows of evaluate's stage table (cells split on 2+ spaces)."""
    lines = output.splitlines()
    top = next(i for i, line in enumerate(lines) if line.startswith("stage "))
    end = lines.index("", top)
    split = [[c.strip() for c in line.split("  ") if c.strip()] for line in lines[top:end]]
    return split[0], split[2:]


def test_evaluate_groups_interleaved_chunks_by_stage():
    """With v chunks per rank, one row per pipeline stage (not per chunk), naming its
    chunks' layers; its load and memory are its chunks' sums, the fullest stage's memory
    the device's. Without interleaving the table keeps one row per stage."""
    args = ["evaluate", "--workload", "gpt3-1.3b", "--arch", "h100", "--devices", "8"]
    args += ["--global-batch", "64", "--strategy"]
    r = CliRunner().invoke(cli, [*args, "t=1,p=2,d=4,v=3,mbs=4", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    stages = doc["pipeline_stages"]
    assert [s["stage"] for s in stages] == [0, 1]
    assert all(len(s["chunks"]) == 3 for s in stages)
    # chunk c on rank c mod p: the ranks alternate along the layers
    starts = sorted((c["layers"][0], s["stage"]) for s in stages for c in s["chunks"])
    assert [rank for _, rank in starts] == [0, 1, 0, 1, 0, 1]
    for s in stages:
        assert s["load_s"] == pytest.approx(sum(c["load_s"] for c in s["chunks"]))
        assert s["memory_bytes"] == pytest.approx(sum(c["memory_bytes"] for c in s["chunks"]))
    fullest = max(s["memory_bytes"] for s in stages)
    assert fullest == pytest.approx(doc["memory_per_device_bytes"])
    header, rows = _stage_rows(CliRunner().invoke(cli, [*args, "t=1,p=2,d=4,v=3,mbs=4"]).output)
    assert header[:3] == ["stage", "chunks", "layers of each chunk"] and len(rows) == 2
    ranges = ", ".join("{}-{}".format(*c["layers"]) for c in stages[0]["chunks"])
    assert rows[0][:3] == ["0", "3", ranges]
    header, rows = _stage_rows(CliRunner().invoke(cli, [*args, "t=1,p=2,d=4,v=1,mbs=4"]).output)
    assert header == ["stage", "layers", "devices", "load per micro-batch", "memory"]
    assert [row[0] for row in rows] == ["0", "1"]


def test_evaluate_shows_where_the_time_and_memory_go():
    args = ["evaluate", "--workload", "gpt3-125m", "--arch", "a100", "--devices", "8"]
    args += ["--global-batch", "16", "--seq-len", "256", "--strategy", "t=2,p=2,d=2,v=2"]
    args += ["--framework", "megatron-2022"]  # blocking p2p sends: exposed
    r = CliRunner().invoke(cli, [*args, "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    b, mem = doc["breakdown"], doc["memory_breakdown"]
    assert set(b) >= {
        "compute_s",
        "recompute_s",
        "tp_comm_exposed_s",
        "pp_comm_exposed_s",
        "bubble_s",
        "dp_comm_exposed_s",
        "optimizer_s",
    }
    terms = sum(v for k, v in b.items() if k != "iteration_s")
    assert math.isclose(terms, doc["iteration_s"], rel_tol=1e-9)
    assert b["iteration_s"] == doc["iteration_s"]
    assert min(b["compute_s"], b["pp_comm_exposed_s"], b["bubble_s"], b["dp_comm_exposed_s"]) > 0
    assert b["tp_comm_exposed_s"] > 0 and doc["framework"] == "megatron-2022"
    parts = sum(v for k, v in mem.items() if k != "total_bytes")
    assert math.isclose(parts, doc["memory_per_device_bytes"]) and mem["total_bytes"] == parts
    human = CliRunner().invoke(cli, args)
    assert human.exit_code == 0, human.output
    for word in ("time term", "bubble", "dp_comm_exposed", "optimizer", "activations"):
        assert word in human.output
