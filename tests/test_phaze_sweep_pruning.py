"""Exact pruning: optimistic bounds skip designs yet keep every Pareto front of the sweep's
objectives, and a bound is never worse than any point its design reaches, whatever the
scoring parameters.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import pytest
import sweeps
from budget import budget
from hypothesis import assume, given
from hypothesis import strategies as st
from sweeps import OBJECTIVES

from arch_space import Accelerator, Cluster, design_id
from phaze.config import SolverSettings
from phaze.model.pipeline import Context
from phaze.model.pipeline import evaluate as evaluate_point
from phaze.model.scoring import SECONDS_PER_YEAR, ScoringParams
from phaze.sweep import Bound, bounds, plan, record_of, tight_bound
from phaze.sweep import run as run_module
from placement import Layout
from results.pareto import pareto
from results.schema import AGGREGATE_WORKLOAD, COLUMNS
from workloads import resolve_model


@pytest.fixture(scope="module")
def exhaustive(sweep_spaces, tmp_path_factory):
    """The prunable space with pruning off: (config, points)."""
    cfg = sweeps.config(sweep_spaces["prunable"], prune=False)
    d = tmp_path_factory.mktemp("exhaustive")
    result = sweeps.run(cfg, d)
    assert result.pruned_designs == 0
    return cfg, sweeps.points(d)


def test_pruning_skips_dominated_designs_and_keeps_the_front(clean_sweeps, exhaustive):
    cfg, result, points = clean_sweeps["prunable"]
    _, all_points = exhaustive
    pruned = [p for p in points if not p["feasible"]]
    assert result.pruned_designs == len(pruned) > 0
    assert all(p["reason"].startswith("pruned:") for p in pruned)
    # Pruning only replaces points; an evaluated point is the exhaustive run's, bit for bit.
    assert [p["key"] for p in points] == [p["key"] for p in all_points]
    by_key = {p["key"]: p for p in all_points}
    assert all(p == by_key[p["key"]] for p in points if p["feasible"])
    front = sweeps.front(points, cfg.objectives)
    assert front == sweeps.front(all_points, cfg.objectives)
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


@pytest.mark.parametrize(
    "workloads",
    [["gpt3-125m"], pytest.param(["gpt3-125m", "gpt3-350m"], marks=pytest.mark.slow)],
)
def test_tighter_worker_bounds_prune_more_and_keep_the_fronts(
    sweep_spaces, clean_sweeps, request, tmp_path, monkeypatch, workloads
):
    """Workers' tight bounds decide pruning exactly. With the tightest valid bound (a
    design's own best values, from an exhaustive run) no fewer designs are pruned (the
    cheap bounds may already prune every design this space lets them), and
    with two workloads a design a worker skipped on one workload but the other keeps is
    evaluated there too: every kept point and every front is the exhaustive run's."""
    if workloads == sweeps.sweep_table(sweep_spaces["prunable"])["workloads"]:
        # the shared reference sweeps of this space are exactly these two runs
        _, all_points = request.getfixturevalue("exhaustive")
        _, cheap, _ = clean_sweeps["prunable"]
    else:
        exhaustive_dir, cheap_dir = tmp_path / "all", tmp_path / "cheap"
        sweeps.run(
            sweeps.config(sweep_spaces["prunable"], prune=False, workloads=workloads),
            exhaustive_dir,
        )
        all_points = sweeps.points(exhaustive_dir)
        cheap = sweeps.run(sweeps.config(sweep_spaces["prunable"], workloads=workloads), cheap_dir)
    tight_dir = tmp_path / "tight"
    monkeypatch.setattr("phaze.sweep.tasks.tight_bound", _oracle_bounds(all_points))
    tight = sweeps.run(sweeps.config(sweep_spaces["prunable"], workloads=workloads), tight_dir)
    assert 0 < cheap.pruned_designs <= tight.pruned_designs
    points = sweeps.points(tight_dir)
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
        assert sweeps.front(mine, OBJECTIVES) == sweeps.front(
            [p for p in all_points if p["workload"] == name], OBJECTIVES
        )


@pytest.mark.parametrize(
    "objectives",
    [
        *itertools.combinations(OBJECTIVES, 2),
        # all four together: test_pruning_skips_dominated_designs_and_keeps_the_front
        *(pytest.param(c, marks=pytest.mark.slow) for c in itertools.combinations(OBJECTIVES, 3)),
    ],
    ids="/".join,
)
def test_pruned_and_exhaustive_pareto_fronts_agree(sweep_spaces, exhaustive, tmp_path, objectives):
    """A sweep pruned for its own objectives has the exhaustive sweep's front over them."""
    cfg = sweeps.config(sweep_spaces["prunable"], objectives=list(objectives))
    sweeps.run(cfg, tmp_path)
    _, all_points = exhaustive
    front = pareto(sweeps.points(tmp_path), objectives)
    assert front == pareto(all_points, objectives)
    assert sorted(p["key"] for p in front) == [
        p["key"] for p in sweeps.front(all_points, objectives)
    ]


def _check_bound(acc: Accelerator, model, ctx, point: dict, knobs) -> None:
    """Both bounds (the cheap one and the tight one over ``knobs``) are optimistic."""
    for b in (bounds(acc, model, ctx), tight_bound(acc, model, knobs, ctx)):
        _check_one_bound(b, point)


def _check_one_bound(b: Bound, point: dict) -> None:
    """Every field of the bound is no worse than the point's value in the direction the
    store's schema calls better (the cost, exact, equal to rounding)."""
    for f in dataclasses.fields(Bound):
        bound, value = getattr(b, f.name), point[f.name]
        where = (point["key"], f.name, bound, value)
        if f.name == "system_cost_usd":
            assert bound == pytest.approx(value, rel=1e-12), where
        elif COLUMNS[f.name].sense == "max":
            assert bound >= value, where
        else:
            assert bound <= value, where


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


_SCORING = st.builds(
    ScoringParams,
    pue=st.floats(1.0, 2.0),
    grid_gco2e_per_kwh=st.floats(0.0, 1000.0),
    lifetime_s=st.floats(0.5 * SECONDS_PER_YEAR, 10 * SECONDS_PER_YEAR),
    utilisation=st.floats(0.05, 1.0),
    embodied_mode=st.sampled_from(["amortised", "whole-life"]),
    host_profile=st.sampled_from([None, "dgx-a100", "dgx-h100"]),
    host_w_per_node=st.none() | st.floats(0.0, 1e4),
    host_embodied_kgco2e_per_device=st.none() | st.floats(0.0, 1e4),
    usd_per_kwh=st.none() | st.floats(0.0, 1.0),
    cost_view=st.sampled_from(["build", "buy"]),
    interest=st.none() | st.floats(0.0, 0.3),
    goodput=st.none() | st.floats(0.3, 1.0),
)


@budget(30)
@given(
    scoring=_SCORING,
    workload=st.sampled_from(["gpt3-125m", "gpt3-350m"]),
    tokens_to_train=st.sampled_from([None, 10**6, 10**10]),
    num_tc=st.sampled_from([1, 2, 4, 8]),
    tc_rows=st.sampled_from([8, 32, 128]),
    tc_cols=st.sampled_from([32, 128]),
    glb_mib=st.sampled_from([4, 16, 64]),
    node_nm=st.sampled_from([16, 7, 5]),
    micro_batch=st.sampled_from([1, 2, 4]),
    recompute=st.sampled_from(["none", "selective", "full"]),
    devices=st.sampled_from([1, 4, 8]),
)
def test_bounds_never_beat_the_scored_point_for_any_scoring(
    scoring,
    workload,
    tokens_to_train,
    num_tc,
    tc_rows,
    tc_cols,
    glb_mib,
    node_nm,
    micro_batch,
    recompute,
    devices,
):
    """Random scoring parameters (PUE, grid intensity, lifetime, utilisation, embodied
    mode, host server, its power and embodied carbon, electricity price, cost view, interest,
    goodput), designs, workloads and knobs: each bound is optimistic for the point
    the pipeline scores, so pruning stays exact whatever the user sets."""
    model = resolve_model(workload)
    ctx = Context(
        cluster=Cluster(devices=devices, devices_per_node=min(devices, 4)),
        seq_len=256,
        global_batch=8,
        tokens_to_train=tokens_to_train,
        solver=SolverSettings("list"),
        scoring=scoring,
    )
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
        node_nm=node_nm,
    )
    knobs = Layout.searching(mbs=micro_batch, recompute=recompute)
    ev = evaluate_point(workload, model, acc, knobs, ctx)
    assume(ev.feasible)
    _check_bound(acc, model, ctx, record_of(ev, devices), (knobs,))


def test_bounds_of_many_designs_are_each_design_s_bound_in_its_own_host():
    """The vectorised bounds of a round (presets beside new designs) equal each design's
    own bound, each priced in its own host server (an H100 in a DGX H100)."""
    from arch_space import preset
    from phaze.model.scoring import system_capex
    from phaze.sweep.optimistic import bound_columns

    model = resolve_model("gpt3-125m")
    ctx = Context(cluster=Cluster(devices=8), seq_len=256, global_batch=8)
    mine = Accelerator(
        num_tc=4,
        tc_rows=64,
        tc_cols=64,
        num_vc=1,
        vc_lanes=64,
        glb_bytes=16 << 20,
        hbm_bytes=32 << 30,
        hbm_bandwidth_bytes_per_s=1.2e12,
        clock_hz=1.05e9,
        node_nm=7,
    )
    designs = [preset("h100"), mine, preset("a100")]
    capex = [system_capex(a, 8, ctx.scoring) for a in designs]
    signs = [(n, 1.0) for n in ("total_kgco2e", "tco_usd", "electricity_usd")]
    columns = bound_columns(designs, capex, model, ctx, signs)
    for i, acc in enumerate(designs):
        one = bounds(acc, model, ctx)
        for (name, _), (values, _) in zip(signs, columns, strict=True):
            assert values[i] == pytest.approx(getattr(one, name), rel=1e-12)


def test_work_left_is_withheld_then_counts_at_most_the_open_designs(
    sweep_spaces, tmp_path, monkeypatch
):
    """The sweep's ETA reads the designs it still expects to evaluate: unknown (None) until
    a design after the first round settles, then never more than the designs not yet
    decided, and none at the end."""
    seen = []

    class Recording(run_module.Progress):
        def advance(self, n=1):
            super().advance(n)
            if self.work_left is not None:
                seen.append((self.work_left(), self.total - self.done))

    monkeypatch.setattr(run_module, "Progress", Recording)
    cfg = sweeps.config(sweep_spaces["prunable"])
    result = sweeps.run(cfg, tmp_path / "out")
    assert result.pruned_designs > 0
    assert seen[0][0] is None
    known = [(left, undecided) for left, undecided in seen if left is not None]
    assert known and all(0 <= left <= undecided for left, undecided in known)
    assert known[-1] == (0, 0)
