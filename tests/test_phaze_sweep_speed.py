"""The sweep's speed-ups change no result.

* ``evaluate`` schedules only the tensor-parallel widths whose placement fits the HBM and
  whose lower-bound placement is not slower than the best so far; the points (placement,
  score, or the reason nothing fits) are those of scheduling and searching every width.
* The Pareto front kept for pruning answers "is this bound dominated?" exactly as all the
  points would.
* Worker processes running pruning rounds with speculation store exactly the points of an
  in-process run, HBM siblings sharing a task included.
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
from budget import budget
from hypothesis import given
from hypothesis import strategies as st
from spaces import space_toml

import phaze.model.pipeline as pipeline
from arch_space import Accelerator, Cluster
from ilp import costed_graph, layer_timing
from ilp.listsched import lower_bound
from ilp.problem import build_problem
from ilp.timing import channels
from phaze.config import SolverSettings, sweep_config_from_mapping
from phaze.model.lower_bounds import pass_bound_s
from phaze.sweep import run_sweep
from phaze_common.errors import Infeasible
from placement import Layout, place
from placement.interleave import best_interleaved
from results.fronts import dominated, front_add
from results.store import load
from workloads import build_layer_graph, resolve_model

_MIB = 1 << 20

# 4 tensor-core counts x 2 array shapes x 2 buffers, with two HBM capacities each.
_SPACE = space_toml("speed", num_tc=(1, 2, 4, 8), tc_rows=(8, 128), glb_mib=(16, 128))


def _design(num_tc: int, rows: int, hbm_mib: int) -> Accelerator:
    return Accelerator(
        num_tc=num_tc,
        tc_rows=rows,
        tc_cols=128,
        num_vc=1,
        vc_lanes=128,
        glb_bytes=16 * _MIB,
        hbm_bytes=hbm_mib * _MIB,
        hbm_bandwidth_bytes_per_s=1.2e12,
        clock_hz=1.05e9,
        node_nm=7,
    )


@pytest.mark.parametrize(
    "devices, link_bytes_per_s",
    [
        (4, 300e9),
        (8, 5e9),
        # the same fast and slow links on the other device count
        pytest.param(8, 300e9, marks=pytest.mark.slow),
        pytest.param(4, 2e9, marks=pytest.mark.slow),
    ],
)
def test_evaluate_equals_scheduling_every_width(devices, link_bytes_per_s):
    """HBM from no width fitting to all, fast and slow links (the widest width wins or
    not): every point has the placement, or the reason, of one search over every width's
    scheduled graph."""
    model = resolve_model("gpt3-125m")
    ctx = pipeline.Context(
        cluster=Cluster(
            devices=devices,
            devices_per_node=4,
            intra_node_bandwidth_bytes_per_s=link_bytes_per_s,
        ),
        seq_len=256,
        global_batch=8,
        sequence_parallel=True,  # the reference schedules one graph per width
        solver=SolverSettings("list"),
    )
    widths = pipeline.tp_widths(model, ctx)
    tps = set()
    # the knobs with the least (1, full) and the most (4, none) activation memory
    for base, hbm_mib, (mb, rc) in itertools.product(
        [_design(1, 8, 1024), _design(8, 128, 1024)],
        [300, 360, 420, 600, 700, 800],
        [(1, "full"), (4, "none")],
    ):
        acc = dataclasses.replace(base, hbm_bytes=hbm_mib * _MIB)
        knobs = Layout.searching(mbs=mb, recompute=rc)
        got = pipeline.evaluate("w", model, acc, knobs, ctx)
        setup = pipeline.training_setup(model, ctx, knobs)
        graphs = tuple(
            pipeline.width_variant(model, setup, t, acc, ctx.cluster, ctx.solver).graph
            for t in widths
        )
        hbm = pipeline.device_hbm(acc, ctx)
        # ZeRO stages 0-1 first; 2-3 only when nothing fits with those
        wider = dataclasses.replace(ctx, zero_stages=ctx.zero_fallback, zero_fallback=())
        try:
            try:
                problem = pipeline.placement_problem(graphs, hbm, ctx, setup)
                want = place(problem)
            except Infeasible:
                problem = pipeline.placement_problem(graphs, hbm, wider, setup)
                want = place(problem)
        except Infeasible as e:
            # state beyond all the devices' HBM is refused up front, saying so
            whole = model.parameters * setup.state_bytes_per_parameter > devices * acc.hbm_bytes
            assert got.placement is None
            assert got.reason.startswith("the training state") if whole else got.reason == e.reason
        else:
            # Megatron's interleaved layouts compete with the DP's best
            want = best_interleaved(problem, want.breakdown.iteration_s) or want
            assert got.placement == want
            tps.add(want.layout.t)
    assert len(tps) > 1 or link_bytes_per_s > 1e11  # slow links: narrower widths win too


@pytest.mark.parametrize("name", ["gpt3-125m", "llama2-7b"])
def test_pass_bound_is_the_schedulers_lower_bound(name):
    """The bound from op costs alone equals ``ilp``'s lower bound of the scheduling problem
    (to rounding) on every pass of every width, and never exceeds the scheduled makespan
    (checked on one width per design under full recompute, where every pass has work:
    schedules are the costly part)."""
    model = resolve_model(name)
    cluster = Cluster(devices=8, devices_per_node=8)
    checked = scheduled = 0
    designs, widths = [_design(1, 8, 1024), _design(4, 128, 1024), _design(8, 8, 1024)], [1, 2, 4]
    for (a, acc), (w, tp), mb, rc in itertools.product(
        enumerate(designs), enumerate(widths), [1, 4], ["none", "full"]
    ):
        ctx = pipeline.Context(cluster=cluster, seq_len=256, global_batch=8)
        setup = pipeline.training_setup(model, ctx, Layout.searching(mbs=mb, recompute=rc))
        lg = build_layer_graph(model, setup, tp)
        schedule = a == w and (mb, rc) == (4, "full")
        timings = layer_timing(lg, acc, cluster, solver="list") if schedule else {}
        for cid, passes in lg.op_graphs.items():
            for k, g in enumerate((passes.forward, passes.backward, passes.recompute)):
                ours = pass_bound_s(g, acc, cluster)
                costed = costed_graph(g, acc, cluster)
                theirs = lower_bound(
                    build_problem(costed, acc.capacity, resources=channels(costed)).problem
                )
                assert ours == pytest.approx(theirs, rel=1e-12, abs=0.0)
                checked += 1
                if cid in timings:
                    lt = timings[cid]
                    makespan = (lt.forward, lt.backward, lt.recompute)[k].makespan_s
                    assert ours <= makespan * (1 + 1e-12)
                    scheduled += 1
    assert checked > 100 and scheduled >= 18


_ROW = st.lists(st.sampled_from([0.0, 1.0, 2.0, 3.0]), min_size=3, max_size=3)


@budget(200, deadline=None)
@given(points=st.lists(_ROW, max_size=25), bounds=st.lists(_ROW, min_size=1, max_size=25))
def test_front_dominates_exactly_what_the_points_dominate(points, bounds):
    pts = np.array(points, dtype=float).reshape(len(points), 3)
    bnd = np.array(bounds, dtype=float)
    front = np.empty((0, 3))
    for chunk in (pts[:7], pts[7:]):  # added in two goes, as rounds add theirs
        front = front_add(front, chunk)
    brute = [any(np.all(p <= b) and np.any(p < b) for p in pts) for b in bnd]
    assert dominated(front, bnd).tolist() == brute
    assert len(front) <= len(pts)
    # no front row is <= another in every objective
    assert not any(
        i != j and np.all(front[i] <= front[j])
        for i in range(len(front))
        for j in range(len(front))
    )


@pytest.fixture(scope="module")
def speed_space(tmp_path_factory):
    path = tmp_path_factory.mktemp("speed") / "speed.toml"
    path.write_text(_SPACE)
    return path


def _cfg(space, prune=True):
    return sweep_config_from_mapping(
        {
            "sweep": {
                "workloads": ["gpt3-125m"],
                "space": str(space),
                "devices": 4,
                "devices_per_node": 4,
                "seq_len": 256,
                "global_batch": 8,
                "micro_batches": [1, 2],
                "recompute": ["none"],
                "hbm_gib": [0.5, 1],
                "presets": [],
                "prune": prune,
            },
            "solver": {"name": "list"},
        },
        source="test",
    )


@pytest.fixture(scope="module")
def serial_run(speed_space, tmp_path_factory):
    """The in-process reference sweep: (its result, its output directory)."""
    out = tmp_path_factory.mktemp("serial")
    return run_sweep(_cfg(speed_space), out, executor="serial", progress=False), out


def test_two_workers_store_the_points_of_a_serial_run(speed_space, serial_run, tmp_path):
    """Same points (pruned ones included) with 2 local workers as in-process."""
    cfg = _cfg(speed_space)
    serial, serial_dir = serial_run
    local = run_sweep(cfg, tmp_path / "local", executor="local", jobs=2, progress=False)
    with load(serial_dir) as a, load(tmp_path / "local") as b:
        assert a.points() == b.points()
        assert b.manifest()["pruned_designs"] == serial.pruned_designs
    assert serial.pruned_designs > 0
    assert (local.evaluated_designs, local.pruned_designs) == (
        serial.evaluated_designs,
        serial.pruned_designs,
    )


class _Greedy:
    """A stand-in Runner: takes every task on offer (speculative ones too) before finishing
    any, then finishes them newest first, the most out-of-order a real pool could be."""

    def __init__(self, *args, **kwargs) -> None:
        pass

    def __enter__(self) -> _Greedy:
        return self

    def __exit__(self, *exc) -> None:
        pass

    def run(self, fn, tasks, *, on_result) -> None:
        batch = list(tasks)
        for task in reversed(batch):
            on_result(task, fn(task))


def test_speculation_out_of_order_stores_the_points_of_a_serial_run(
    speed_space, serial_run, tmp_path, monkeypatch
):
    """Speculative results held, then committed or dropped: the serial run's points."""
    cfg = _cfg(speed_space)
    serial, serial_dir = serial_run
    monkeypatch.setattr("phaze.sweep.run.Runner", _Greedy)
    greedy = run_sweep(cfg, tmp_path / "greedy", executor="serial", progress=False)
    with load(serial_dir) as a, load(tmp_path / "greedy") as b:
        assert a.points() == b.points()
        assert b.manifest()["discarded_designs"] > 0  # some speculation was dropped
    assert (greedy.evaluated_designs, greedy.pruned_designs) == (
        serial.evaluated_designs,
        serial.pruned_designs,
    )
