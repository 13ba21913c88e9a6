"""The sweep: workloads x designs x knobs, evaluated in parallel, committed as they finish.

Work is split by design: one task evaluates one design (one HBM capacity) for every workload
and knob setting, and its points are committed to the SQLite store as soon as it returns.
A re-run skips designs whose points are all stored, so an interrupted sweep resumes where it
stopped and ends with exactly the results of an uninterrupted one.

Exact pruning (DESIGN §7): a design is skipped only when, for every workload, some evaluated
point dominates an *optimistic bound* of every point the design could reach (throughput at
100 % MFU; cost exact; carbon and time at that throughput with the least possible energy).
The bound is valid because no placement beats peak FLOP/s, so a pruned design can sit on no
Pareto front of the sweep's objectives. Designs are processed in rounds of growing size in a
fixed order, each round pruned only against earlier rounds, so which designs are pruned does
not depend on the executor, the number of workers or an interruption.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import math
import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np

from arch_space import (
    Accelerator,
    Cluster,
    area_mm2,
    design_id,
    device_cost_usd,
    embodied_kgco2e,
    load_space,
    preset,
    static_power_w,
    tech_node,
)
from phaze import __version__
from phaze.config import SweepConfig
from phaze.errors import ConfigError
from phaze.executors import Progress, Runner
from phaze.pipeline import Context, Evaluation, Knobs, evaluate
from phaze.scoring import FORMULAS
from placement import Placement
from results.pareto import parse_objectives
from results.schema import AGGREGATE_WORKLOAD
from results.store import Store
from workloads import Model, TrainingSetup, model_flops_per_sequence, resolve_model

__all__ = [
    "SweepResult",
    "Bound",
    "bounds",
    "placement_summary",
    "point_key",
    "record_of",
    "run_sweep",
    "plan",
]

logger = logging.getLogger(__name__)

_J_PER_KWH: Final = 3.6e6
# Objectives an optimistic bound exists for, with the bound's field.
_BOUNDED: Final = frozenset(
    {
        "tokens_per_s",
        "samples_per_s",
        "iteration_s",
        "time_to_train_s",
        "system_cost_usd",
        "embodied_kgco2e",
        "operational_kgco2e",
        "total_kgco2e",
        "tcdp",
        "tcdp_kgco2e_days",
    }
)
_FIRST_ROUND: Final = 8


@dataclass(frozen=True, slots=True)
class _Shared:
    """Read-only context sent once to every worker."""

    workloads: tuple[tuple[str, Model], ...]
    knobs: tuple[Knobs, ...]
    ctx: Context


@dataclass(frozen=True, slots=True)
class _Task:
    """One design on one workload (index into ``_Shared.workloads``), every knob setting."""

    design: Accelerator
    workload: int


@dataclass(frozen=True, slots=True)
class _TaskResult:
    records: tuple[dict[str, Any], ...]
    wall_s: float


@dataclass(frozen=True, slots=True)
class SweepResult:
    """What a sweep did: its store directory, point counts and wall times."""

    out_dir: Path
    points: int
    feasible: int
    evaluated_designs: int
    pruned_designs: int
    skipped_designs: int
    wall_s: float


def point_key(workload: str, design: str, knobs: Knobs) -> str:
    """The content key of one point (the store's primary key)."""
    return f"{workload}|{design}|mbs={knobs.micro_batch}|recompute={knobs.recompute}"


def _design_columns(acc: Accelerator) -> dict[str, Any]:
    return {
        "design_id": design_id(acc),
        "design_name": acc.name,
        "num_tc": acc.num_tc,
        "tc_rows": acc.tc_rows,
        "tc_cols": acc.tc_cols,
        "num_vc": acc.num_vc,
        "vc_lanes": acc.vc_lanes,
        "glb_bytes": acc.glb_bytes,
        "hbm_bytes": acc.hbm_bytes,
        "hbm_bandwidth_bytes_per_s": acc.hbm_bandwidth_bytes_per_s,
        "clock_hz": acc.clock_hz,
        "node_nm": acc.node_nm,
        "area_mm2": area_mm2(acc),
        "peak_flops": acc.peak_flops,
        "device_cost_usd": device_cost_usd(acc),
    }


def placement_summary(pl: Placement) -> str:
    """The placement as compact JSON text (degrees, knobs and each stage's layer range)."""
    return json.dumps(
        {
            "tp": pl.tp,
            "pp": pl.pp,
            "dp": pl.dp,
            "micro_batch": pl.micro_batch,
            "recompute": pl.recompute,
            "sequence_parallel": pl.sequence_parallel,
            "virtual_stages": pl.virtual_stages,
            "devices_used": pl.devices_used,
            "bubble_fraction": pl.bubble_fraction,
            "stages": [
                {
                    "layers": [min(s.layers), max(s.layers)],
                    "devices": s.devices,
                    "memory_bytes": s.memory_bytes,
                }
                for s in pl.stages
            ],
        },
        sort_keys=True,
    )


def record_of(ev: Evaluation, devices: int) -> dict[str, Any]:
    """A store record (flat, column-named) of one evaluation."""
    rec: dict[str, Any] = {
        "key": point_key(ev.workload, design_id(ev.design), ev.knobs),
        "workload": ev.workload,
        **_design_columns(ev.design),
        "devices": devices,
        "micro_batch": ev.knobs.micro_batch,
        "recompute": ev.knobs.recompute,
        "feasible": ev.feasible,
        "reason": ev.reason or None,
        "embodied_kgco2e": None,
    }
    if ev.placement is not None and ev.score is not None:
        pl, sc = ev.placement, ev.score
        rec.update(dataclasses.asdict(sc))
        rec.update(
            tp=pl.tp,
            pp=pl.pp,
            dp=pl.dp,
            compute_s=pl.compute_s,
            communication_s=pl.communication_s,
            bubble_s=pl.load_s * (pl.pp - 1) / pl.virtual_stages,
            memory_per_device_bytes=pl.memory_per_device_bytes,
            placement=placement_summary(pl),
        )
    return rec


def _run_task(shared: _Shared, task: _Task) -> _TaskResult:
    """Evaluate one design on one workload for every knob setting (runs in a worker)."""
    start = time.perf_counter()
    name, model = shared.workloads[task.workload]
    records = tuple(
        record_of(evaluate(name, model, task.design, k, shared.ctx), shared.ctx.cluster.devices)
        for k in shared.knobs
    )
    return _TaskResult(records, time.perf_counter() - start)


@dataclass(frozen=True, slots=True)
class Bound:
    """Optimistic (never worse than reachable) metrics of one design for one workload."""

    tokens_per_s: float
    samples_per_s: float
    iteration_s: float
    time_to_train_s: float
    system_cost_usd: float
    embodied_kgco2e: float
    operational_kgco2e: float
    total_kgco2e: float
    tcdp: float
    tcdp_kgco2e_days: float


def bounds(acc: Accelerator, model: Model, ctx: Context) -> Bound:
    """The optimistic bound of every point of ``acc`` on ``model`` (see module docstring).

    Throughput: all devices at peak FLOP/s doing only model FLOPs (MFU = 1). Energy: only
    the MACs of the model FLOPs plus leakage of every device over the shortest possible
    time; no memory, network or recompute energy.
    """
    sc, n = ctx.scoring, ctx.cluster.devices
    flops_per_seq = model_flops_per_sequence(model, ctx.seq_len)
    samples = n * acc.peak_flops / flops_per_seq
    tokens = samples * ctx.seq_len
    setup = TrainingSetup(
        seq_len=ctx.seq_len, global_batch=ctx.global_batch, tokens_to_train=ctx.tokens_to_train
    )
    budget = setup.training_tokens(model.tokens_to_train)
    d = budget / tokens
    mac_j = budget / ctx.seq_len * flops_per_seq / 2 * tech_node(acc.node_nm).mac_energy_pj * 1e-12
    energy = mac_j + n * static_power_w(acc) * d
    operational = energy / _J_PER_KWH * sc.pue * sc.grid_gco2e_per_kwh / 1000
    emb_device = embodied_kgco2e(acc)
    embodied = (
        n
        * emb_device
        * (d / (sc.lifetime_s * sc.utilisation) if sc.embodied_mode == "amortised" else 1.0)
    )
    total = embodied + operational
    return Bound(
        tokens_per_s=tokens,
        samples_per_s=samples,
        iteration_s=ctx.global_batch / samples,
        time_to_train_s=d,
        system_cost_usd=n * (device_cost_usd(acc) + sc.host_network_usd_per_device),
        embodied_kgco2e=embodied,
        operational_kgco2e=operational,
        total_kgco2e=total,
        tcdp=total * d,
        tcdp_kgco2e_days=total * d / 86400,
    )


def _dominates_bound(points: np.ndarray, bound: np.ndarray) -> bool:
    """True if some row of ``points`` (objectives as minimised values) is <= ``bound`` in
    every objective and < in one."""
    if points.size == 0:
        return False
    le = np.all(points <= bound, axis=1)
    lt = np.any(points < bound, axis=1)
    return bool(np.any(le & lt))


def plan(cfg: SweepConfig) -> tuple[_Shared, tuple[Accelerator, ...]]:
    """Resolve a config into the shared context and the designs to evaluate (validated)."""
    workloads = tuple((w, resolve_model(w)) for w in cfg.workloads)
    cluster = Cluster(
        devices=cfg.devices,
        devices_per_node=cfg.devices_per_node,
        intra_node_bandwidth_bytes_per_s=cfg.intra_node_bandwidth_bytes_per_s,
        inter_node_bandwidth_bytes_per_s=cfg.inter_node_bandwidth_bytes_per_s,
    )
    ctx = Context(
        cluster=cluster,
        seq_len=cfg.seq_len,
        global_batch=cfg.global_batch,
        sequence_parallel=cfg.sequence_parallel,
        solver=cfg.solver,
        scoring=cfg.scoring,
    )
    problems = [
        f"micro_batches: {mb} does not divide global_batch = {cfg.global_batch}"
        for mb in cfg.micro_batches
        if cfg.global_batch % mb
    ]
    for name, model in workloads:
        if model.tokens_to_train is None:
            problems.append(
                f"workload {name!r} has no published token budget; set tokens_to_train in [sweep]"
            )
    if problems:
        raise ConfigError("sweep: " + "; ".join(problems))
    parse_objectives(cfg.objectives)
    space = load_space(cfg.space)
    designs = tuple(space.enumerate())
    if cfg.hbm_bytes:
        designs = tuple(dataclasses.replace(a, hbm_bytes=h) for a in designs for h in cfg.hbm_bytes)
    designs = tuple(preset(name) for name in cfg.presets) + designs
    knobs = tuple(Knobs(mb, rc) for mb in cfg.micro_batches for rc in cfg.recompute)
    return _Shared(workloads, knobs, ctx), designs


def _objective_signs(objectives: Sequence[str]) -> list[tuple[str, float]]:
    """(metric, sign) so that sign * value is minimised."""
    return [(o.metric, -1.0 if o.sense == "max" else 1.0) for o in parse_objectives(objectives)]


def run_sweep(
    cfg: SweepConfig,
    out_dir: str | Path,
    *,
    executor: str = "local",
    jobs: int | None = None,
    address: str | None = None,
    progress: bool = True,
    allow_config_change: bool = False,
) -> SweepResult:
    """Run (or resume) a sweep into ``out_dir``; returns counts and wall time.

    Every point is committed as it completes; Ctrl-C stops cleanly (KeyboardInterrupt
    propagates after the finished points are stored).
    """
    t0 = time.perf_counter()
    shared, designs = plan(cfg)
    out = Path(out_dir)
    inputs = {
        "config": cfg.as_dict(),
        "formulas": dict(FORMULAS),
        "defaults": cfg.scoring.as_dict(),
        "designs": len(designs),
    }
    stage_s: dict[str, float] = {"plan_s": time.perf_counter() - t0}
    with Store.open(
        out, inputs, cfg.config_hash(), allow_config_change=allow_config_change
    ) as store:
        done = store.done_keys()
        names = [n for n, _ in shared.workloads]
        keys_of = {
            design_id(a): [point_key(w, design_id(a), k) for w in names for k in shared.knobs]
            for a in designs
        }
        todo = [a for a in designs if not all(k in done for k in keys_of[design_id(a)])]
        skipped = len(designs) - len(todo)
        signs = _objective_signs(cfg.objectives)
        prune = cfg.prune and all(n in _BOUNDED for n, _ in signs)
        if cfg.prune and not prune:
            logger.info("pruning off: no optimistic bound for some objective of %s", cfg.objectives)
        t1 = time.perf_counter()
        bound_rows = (
            {
                design_id(a): {
                    w: np.array([s * getattr(bounds(a, m, shared.ctx), n) for n, s in signs])
                    for w, m in shared.workloads
                }
                for a in todo
            }
            if prune
            else {}
        )
        # Presets first (reference points, never pruned), then the strongest: optimistic
        # throughput per dollar, then the design id. The rounds are cut from this total order
        # of *all* designs, not of those left to do, so a resumed sweep prunes each design
        # against the same earlier rounds as an uninterrupted one.
        order = sorted(
            designs, key=lambda a: (not a.name, -a.peak_flops / device_cost_usd(a), design_id(a))
        )
        pending = {design_id(a) for a in todo}
        stage_s["bounds_s"] = time.perf_counter() - t1
        pruned = 0
        evaluated = 0
        task_wall = 0.0
        bar = Progress(label="designs", skipped=skipped, enabled=progress)
        bar.start(len(todo))
        fn = functools.partial(_run_task, shared)
        finished: dict[str, int] = {}

        def on_result(task: _Task, result: _TaskResult) -> None:
            nonlocal evaluated, task_wall
            for rec in result.records:
                store.put_point(rec)
            task_wall += result.wall_s
            did = design_id(task.design)
            finished[did] = finished.get(did, 0) + 1
            if finished[did] == sum(
                1 for w in names if not all(point_key(w, did, k) in done for k in shared.knobs)
            ):
                evaluated += 1
                bar.advance()

        def tasks_of(batch: Sequence[Accelerator]) -> list[_Task]:
            return [
                _Task(a, i)
                for a in batch
                for i, w in enumerate(names)
                if not all(point_key(w, design_id(a), k) in done for k in shared.knobs)
            ]

        with Runner(executor, jobs=jobs, address=address) as runner:
            start = 0
            size = _FIRST_ROUND
            earlier: set[str] = set()
            while start < len(order):
                round_ = order[start : start + size]
                start += size
                size *= 4
                batch = [a for a in round_ if design_id(a) in pending]
                if prune and batch:
                    incumbents = _incumbents(store, names, signs, earlier)
                    keep = []
                    for a in batch:
                        did = design_id(a)
                        if not a.name and all(
                            _dominates_bound(incumbents[w], bound_rows[did][w]) for w in names
                        ):
                            for w in names:
                                for k in shared.knobs:
                                    store.put_point(_pruned_record(a, w, k, cfg.devices))
                            pruned += 1
                            bar.skip(1)
                        else:
                            keep.append(a)
                    batch = keep
                runner.run(fn, tasks_of(batch), on_result=on_result)
                earlier.update(design_id(a) for a in round_)
        bar.close()
        stage_s["evaluate_s"] = task_wall
        t2 = time.perf_counter()
        for rec in aggregate_records(store.points(feasible_only=True), names):
            store.put_point(rec)
        stage_s["aggregate_s"] = time.perf_counter() - t2
        stage_s["total_s"] = time.perf_counter() - t0
        points = store.points()
        store.set_manifest(
            {
                "tool_version": __version__,
                "config_hash": cfg.config_hash(),
                "solver": dataclasses.asdict(cfg.solver),
                "executor": executor,
                "jobs": jobs,
                "wall_times_s": stage_s,
                "designs": len(designs),
                "evaluated_designs": evaluated,
                "pruned_designs": pruned,
                "skipped_designs": skipped,
            }
        )
    real = [p for p in points if p["workload"] != AGGREGATE_WORKLOAD]
    return SweepResult(
        out_dir=out,
        points=len(real),
        feasible=sum(1 for p in real if p["feasible"]),
        evaluated_designs=evaluated,
        pruned_designs=pruned,
        skipped_designs=skipped,
        wall_s=time.perf_counter() - t0,
    )


def _pruned_record(acc: Accelerator, workload: str, knobs: Knobs, devices: int) -> dict[str, Any]:
    return {
        "key": point_key(workload, design_id(acc), knobs),
        "workload": workload,
        **_design_columns(acc),
        "devices": devices,
        "micro_batch": knobs.micro_batch,
        "recompute": knobs.recompute,
        "feasible": False,
        "reason": "pruned: its optimistic bound is dominated by an evaluated design",
    }


def _incumbents(
    store: Store,
    workloads: Iterable[str],
    signs: Sequence[tuple[str, float]],
    designs: Collection[str],
) -> Mapping[str, np.ndarray]:
    """Feasible points of ``designs`` (the earlier rounds), per workload, as minimised
    objective rows."""
    out = {}
    for w in workloads:
        pts = [p for p in store.points(feasible_only=True, workload=w) if p["design_id"] in designs]
        out[w] = np.array([[s * p[n] for n, s in signs] for p in pts]).reshape(len(pts), len(signs))
    return out


def aggregate_records(
    points: Sequence[Mapping[str, Any]], workloads: Sequence[str]
) -> list[dict[str, Any]]:
    """One row per design over all workloads (issue 7 item 7), like the reference's "one
    design for a set of models".

    ``throughput_score`` is the geometric mean over workloads of the design's best tokens/s
    divided by the best tokens/s of any design on that workload (1 = best everywhere);
    time to train, energy and carbon are summed over the jobs; the system cost is that of
    the one system that runs them all. tCDP is the summed carbon times the summed time.
    Only designs feasible on every workload get a row.
    """
    if len(workloads) < 2:
        return []
    best: dict[tuple[str, str], Mapping[str, Any]] = {}
    for p in points:
        if p["workload"] == AGGREGATE_WORKLOAD:
            continue
        k = (p["design_id"], p["workload"])
        if k not in best or (p["tokens_per_s"], p["key"]) > (
            best[k]["tokens_per_s"],
            best[k]["key"],
        ):
            best[k] = p
    top = {
        w: max((p["tokens_per_s"] for (_, ww), p in best.items() if ww == w), default=0.0)
        for w in workloads
    }
    out = []
    for did in sorted({d for d, _ in best}):
        rows = [best.get((did, w)) for w in workloads]
        if any(r is None for r in rows):
            continue
        score = math.exp(
            sum(math.log(r["tokens_per_s"] / top[w]) for r, w in zip(rows, workloads, strict=True))
            / len(rows)
        )
        first = rows[0]
        total = math.fsum(r["total_kgco2e"] for r in rows)
        d = math.fsum(r["time_to_train_s"] for r in rows)
        rec = {k: first[k] for k in _DESIGN_KEYS}
        rec.update(
            key=f"{AGGREGATE_WORKLOAD}|{did}",
            workload=AGGREGATE_WORKLOAD,
            devices=first["devices"],
            feasible=True,
            throughput_score=score,
            time_to_train_s=d,
            system_cost_usd=first["system_cost_usd"],
            job_energy_j=math.fsum(r["job_energy_j"] for r in rows),
            embodied_kgco2e=math.fsum(r["embodied_kgco2e"] for r in rows),
            operational_kgco2e=math.fsum(r["operational_kgco2e"] for r in rows),
            total_kgco2e=total,
            tcdp=total * d,
            tcdp_kgco2e_days=total * d / 86400,
        )
        out.append(rec)
    return out


_DESIGN_KEYS: Final = (
    "design_id",
    "design_name",
    "num_tc",
    "tc_rows",
    "tc_cols",
    "num_vc",
    "vc_lanes",
    "glb_bytes",
    "hbm_bytes",
    "hbm_bandwidth_bytes_per_s",
    "clock_hz",
    "node_nm",
    "area_mm2",
    "peak_flops",
    "device_cost_usd",
)
