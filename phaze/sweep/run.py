"""Run (or resume) a sweep: plan it, run its rounds of tasks, commit and aggregate."""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from dataclasses import dataclass
from pathlib import Path

from arch_space import Accelerator, design_id
from phaze import __version__
from phaze.config import SweepConfig, model_digest
from phaze.executors import Progress, Runner
from phaze.model.scoring import FORMULAS, system_capex
from phaze.sweep.aggregate import aggregate_records
from phaze.sweep.optimistic import BOUNDED, fastest_flops
from phaze.sweep.pairs import run_pairs
from phaze.sweep.planning import Shared, objective_signs, plan
from phaze.sweep.rounds import Rounds
from phaze.sweep.tasks import run_task
from results.schema import AGGREGATE_WORKLOAD
from results.store import Store

__all__ = ["SweepResult", "run_sweep"]

logger = logging.getLogger(__name__)


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


def _design_order(
    designs: tuple[Accelerator, ...], ids: list[str], accelerator_usd: list[float]
) -> list[int]:
    """The order designs are evaluated in (indices of ``designs``): presets first
    (reference points, never pruned), then the strongest, by optimistic throughput (in the
    fastest format) per dollar of accelerator, then the design id. The rounds are cut from
    this total order of *all* designs, not of those left to do, so a resumed sweep prunes
    each design against the same earlier rounds as an uninterrupted one."""
    return sorted(
        range(len(designs)),
        key=lambda i: (
            not designs[i].name,
            -fastest_flops(designs[i]) / accelerator_usd[i],
            ids[i],
        ),
    )


def _workloads_to_do(
    shared: Shared,
    names: list[str],
    ids: tuple[str, ...],
    designs: tuple[Accelerator, ...],
    done: frozenset[str],
) -> tuple[tuple[int, ...], ...]:
    """Per design (in evaluation order), the workloads (indices of ``names``) some of whose
    points are not yet stored (``done``: the stored points' keys)."""
    if not done:
        return tuple(tuple(range(len(names))) for _ in designs)
    return tuple(
        tuple(
            w
            for w, name in enumerate(names)
            if not all(k in done for k in shared.point_keys(name, did, a))
        )
        for did, a in zip(ids, designs, strict=True)
    )


def _manifest(
    cfg: SweepConfig,
    executor: str,
    jobs: int | None,
    stage_s: dict[str, float],
    designs: int,
    rounds: Rounds,
    skipped: int,
) -> dict:
    """What a finished sweep records about itself beside its points: the versions and
    hashes it ran with, how it ran, its wall times and what became of its designs."""
    return {
        "tool_version": __version__,
        "config_hash": cfg.config_hash(),
        "model_digest": model_digest(),
        "solver": dataclasses.asdict(cfg.solver),
        "executor": executor,
        "jobs": jobs,
        "wall_times_s": stage_s,
        "designs": designs,
        "evaluated_designs": rounds.evaluated,
        "pruned_designs": rounds.pruned,
        "skipped_designs": skipped,
        "discarded_designs": rounds.discarded,
    }


def run_sweep(
    cfg: SweepConfig,
    out_dir: str | Path,
    *,
    executor: str = "local",
    jobs: int | None = None,
    address: str | None = None,
    progress: bool = True,
    allow_config_change: bool = False,
    planned: tuple[Shared, tuple[Accelerator, ...]] | None = None,
) -> SweepResult:
    """Run (or resume) a sweep into ``out_dir``; returns counts and wall time.

    ``planned`` is ``plan(cfg)`` when the caller has checked the config already. Every
    evaluated point is committed as it completes (pruned points in batches); Ctrl-C stops
    cleanly (KeyboardInterrupt propagates after the finished points are stored).
    """
    t0 = time.perf_counter()
    shared, designs = planned if planned is not None else plan(cfg)
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
        t1 = time.perf_counter()
        names = [n for n, _ in shared.workloads]
        ids = [design_id(a) for a in designs]
        capex = [system_capex(a, cfg.devices, cfg.scoring) for a in designs]
        rank = _design_order(designs, ids, [c.accelerator_usd for c in capex])
        order = tuple(designs[i] for i in rank)
        order_ids = tuple(ids[i] for i in rank)
        done = store.done_keys()
        need = _workloads_to_do(shared, names, order_ids, order, done)
        skipped = sum(1 for n in need if not n)
        signs = objective_signs(cfg.objectives)
        prune = cfg.prune and all(n in BOUNDED for n, _ in signs)
        if cfg.prune and not prune:
            logger.info("pruning off: no optimistic bound for some objective of %s", cfg.objectives)
        stage_s["bounds_s"] = time.perf_counter() - t1
        bar = Progress(label="designs", skipped=skipped, enabled=progress)
        rounds = Rounds(
            store,
            shared,
            order,
            [capex[i] for i in rank],
            need,
            prune=prune,
            signs=signs,
            bar=bar,
        )
        if prune:  # most designs are pruned at no cost: the ETA counts the designs still open
            bar.work_left = rounds.work_left
        bar.start(len(designs) - skipped)
        rounds.start(store.points(feasible_only=True) if done else (), order_ids)
        fn = functools.partial(run_task, shared)
        with Runner(executor, jobs=jobs, address=address) as runner:
            while not rounds.finished:
                runner.run(fn, rounds.tasks(), on_result=rounds.on_result)
                assert rounds.finished or rounds.queued, "the sweep's rounds stalled"
            bar.close()
            if cfg.serving.pairs:  # prefill-decode design pairs, once every design is stored
                t_pairs = time.perf_counter()
                run_pairs(
                    store, shared, order, runner, Progress(label="pair pools", enabled=progress)
                )
                stage_s["pairs_s"] = time.perf_counter() - t_pairs
        stage_s["bounds_s"] += rounds.bounds_s
        stage_s["evaluate_s"] = rounds.task_s
        stage_s["evaluate_cpu_s"] = rounds.task_cpu_s
        t2 = time.perf_counter()
        feasible = [
            p for p in store.points(feasible_only=True) if p["workload"] != AGGREGATE_WORKLOAD
        ]
        if shared.serve is None:  # serving points have no training throughput to aggregate
            for rec in aggregate_records(feasible, names):
                store.put_point(rec)
        stage_s["aggregate_s"] = time.perf_counter() - t2
        stage_s["total_s"] = time.perf_counter() - t0
        points = len(store) - len(store.points(workload=AGGREGATE_WORKLOAD))
        store.set_manifest(_manifest(cfg, executor, jobs, stage_s, len(designs), rounds, skipped))
    return SweepResult(
        out_dir=out,
        points=points,
        feasible=len(feasible),
        evaluated_designs=rounds.evaluated,
        pruned_designs=rounds.pruned,
        skipped_designs=skipped,
        wall_s=time.perf_counter() - t0,
    )
