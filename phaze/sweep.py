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
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
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
from phaze.config import SweepConfig, model_digest
from phaze.errors import ConfigError
from phaze.executors import Progress, Runner
from phaze.pipeline import (
    Context,
    Evaluation,
    Knobs,
    evaluate,
    iteration_lower_bound_s,
    timing_design,
)
from phaze.scoring import FORMULAS
from placement import Placement
from results.pareto import parse_objectives
from results.schema import AGGREGATE_WORKLOAD, DESIGN_COLUMNS
from results.store import Store
from workloads import Model, TrainingSetup, model_flops_per_sequence, resolve_model

__all__ = [
    "SweepResult",
    "Bound",
    "bounds",
    "tight_bound",
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
# Booleans in the temporaries of one front comparison (bounds x front rows x objectives).
_COMPARE_CELLS: Final = 1 << 22


@dataclass(frozen=True, slots=True)
class _Shared:
    """Read-only context sent once to every worker."""

    workloads: tuple[tuple[str, Model], ...]
    knobs: tuple[Knobs, ...]
    ctx: Context
    signs: tuple[tuple[str, float], ...] = ()  # (objective, sign): sign * value is minimised


@dataclass(frozen=True, slots=True)
class _Task:
    """Designs that differ only in HBM capacity (they share every layer schedule, so one
    worker's caches compute each once) on one workload (index into ``_Shared.workloads``),
    every knob setting. ``serial`` numbers the tasks of a sweep.

    ``front`` (minimised objective rows of points of earlier rounds, or None) lets the
    worker skip a design whose tight bound it dominates: such a design is pruned whatever
    else the earlier rounds hold."""

    designs: tuple[Accelerator, ...]
    workload: int
    serial: int
    front: np.ndarray | None = None


@dataclass(frozen=True, slots=True)
class _TaskResult:
    """Per design of a task: its records (one per knob setting; None when the task's front
    dominates its tight bound, so it was not evaluated) and its tight bound row; and the
    worker's wall and CPU time (the CPU time does not grow when other processes share the
    cores)."""

    records: tuple[tuple[dict[str, Any], ...] | None, ...]
    rows: tuple[tuple[float, ...], ...]
    wall_s: float
    cpu_s: float


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


@functools.lru_cache(maxsize=4096)
def _design_columns(acc: Accelerator) -> Mapping[str, Any]:
    """The design's columns of a record (cached: every knob setting's record repeats them)."""
    return MappingProxyType(
        {
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
    )


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
    cols = _design_columns(ev.design)
    rec: dict[str, Any] = {
        "key": point_key(ev.workload, cols["design_id"], ev.knobs),
        "workload": ev.workload,
        **cols,
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
    """Evaluate a task's designs on its workload for every knob setting (runs in a worker),
    except designs whose tight bound the task's front dominates (never a preset)."""
    start, cpu = time.perf_counter(), time.process_time()
    name, model = shared.workloads[task.workload]
    devices = shared.ctx.cluster.devices
    records: list[tuple[dict[str, Any], ...] | None] = []
    rows = []
    for a in task.designs:
        row: tuple[float, ...] = ()
        if task.front is not None and not a.name:  # presets are never pruned
            b = tight_bound(a, model, shared.knobs, shared.ctx)
            row = tuple(sign * getattr(b, n) for n, sign in shared.signs)
            if _dominated(task.front, np.array([row]))[0]:
                rows.append(row)
                records.append(None)
                continue
        rows.append(row)
        records.append(
            tuple(record_of(evaluate(name, model, a, k, shared.ctx), devices) for k in shared.knobs)
        )
    return _TaskResult(
        tuple(records), tuple(rows), time.perf_counter() - start, time.process_time() - cpu
    )


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
    return _bound_at(acc, acc.peak_flops, model, ctx)


def tight_bound(acc: Accelerator, model: Model, knobs: Sequence[Knobs], ctx: Context) -> Bound:
    """A tighter optimistic bound than :func:`bounds`, valid for every point of ``acc`` over
    ``knobs``: the throughput of the iteration-time lower bound of
    :func:`phaze.pipeline.iteration_lower_bound_s` (layer passes at their schedule lower
    bounds spread over all devices), when that is below peak FLOP/s. It needs the design's
    op costs, so workers compute it, and only for designs :func:`bounds` does not prune."""
    flops_per_batch = ctx.global_batch * model_flops_per_sequence(model, ctx.seq_len)
    floor_s = iteration_lower_bound_s(model, acc, knobs, ctx)
    rate = acc.peak_flops
    if floor_s > 0:
        rate = min(rate, flops_per_batch / (ctx.cluster.devices * floor_s))
    return _bound_at(acc, rate, model, ctx)


def _bound_at(acc: Accelerator, flops_per_s: float, model: Model, ctx: Context) -> Bound:
    """The bound of ``acc`` when every device does model FLOPs at ``flops_per_s``."""
    fields = _bound_fields(
        flops_per_s,
        tech_node(acc.node_nm).mac_energy_pj,
        static_power_w(acc),
        embodied_kgco2e(acc),
        device_cost_usd(acc),
        model,
        ctx,
    )
    return Bound(**fields)


def _bound_fields(
    peak_flops: Any,
    mac_energy_pj: Any,
    static_w: Any,
    embodied_kgco2e_per_device: Any,
    device_cost: Any,
    model: Model,
    ctx: Context,
) -> dict[str, Any]:
    """The fields of :class:`Bound` from the device's figures: floats, or numpy arrays of
    many designs' (the same operations in the same order, so the same values)."""
    sc, n = ctx.scoring, ctx.cluster.devices
    flops_per_seq = model_flops_per_sequence(model, ctx.seq_len)
    samples = n * peak_flops / flops_per_seq
    tokens = samples * ctx.seq_len
    setup = TrainingSetup(
        seq_len=ctx.seq_len, global_batch=ctx.global_batch, tokens_to_train=ctx.tokens_to_train
    )
    budget = setup.training_tokens(model.tokens_to_train)
    d = budget / tokens
    mac_j = budget / ctx.seq_len * flops_per_seq / 2 * mac_energy_pj * 1e-12
    energy = mac_j + n * static_w * d
    operational = energy / _J_PER_KWH * sc.pue * sc.grid_gco2e_per_kwh / 1000
    embodied = (
        n
        * embodied_kgco2e_per_device
        * (d / (sc.lifetime_s * sc.utilisation) if sc.embodied_mode == "amortised" else 1.0)
    )
    total = embodied + operational
    return {
        "tokens_per_s": tokens,
        "samples_per_s": samples,
        "iteration_s": ctx.global_batch / samples,
        "time_to_train_s": d,
        "system_cost_usd": n * (device_cost + sc.host_network_usd_per_device),
        "embodied_kgco2e": embodied,
        "operational_kgco2e": operational,
        "total_kgco2e": total,
        "tcdp": total * d,
        "tcdp_kgco2e_days": total * d / 86400,
    }


def _bound_columns(
    designs: Sequence[Accelerator],
    costs_usd: np.ndarray,
    model: Model,
    ctx: Context,
    signs: Sequence[tuple[str, float]],
) -> list[tuple[np.ndarray, float]]:
    """(values over ``designs``, sign) of each bounded objective, vectorised over designs;
    ``costs_usd`` are the designs' device costs (already known to the caller)."""
    fields = _bound_fields(
        np.array([a.peak_flops for a in designs], dtype=float),
        np.array([tech_node(a.node_nm).mac_energy_pj for a in designs], dtype=float),
        np.array([static_power_w(a) for a in designs], dtype=float),
        np.array([embodied_kgco2e(a) for a in designs], dtype=float),
        costs_usd,
        model,
        ctx,
    )
    return [(np.broadcast_to(fields[n], (len(designs),)), s) for n, s in signs]


def plan(cfg: SweepConfig) -> tuple[_Shared, tuple[Accelerator, ...]]:
    """Resolve a config into the shared context and the designs to evaluate (validated)."""
    workloads = tuple((w, resolve_model(w)) for w in cfg.workloads)
    cluster = Cluster(
        devices=cfg.devices,
        devices_per_node=cfg.devices_per_node,
        intra_node_bandwidth_bytes_per_s=cfg.intra_node_bandwidth_bytes_per_s,
        inter_node_bandwidth_bytes_per_s=cfg.inter_node_bandwidth_bytes_per_s,
        intra_node_latency_s=cfg.intra_node_latency_s,
        inter_node_latency_s=cfg.inter_node_latency_s,
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
    return _Shared(workloads, knobs, ctx, tuple(_objective_signs(cfg.objectives))), designs


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
        t1 = time.perf_counter()
        names = [n for n, _ in shared.workloads]
        ids = [design_id(a) for a in designs]
        costs = [device_cost_usd(a) for a in designs]
        # Presets first (reference points, never pruned), then the strongest: optimistic
        # throughput per dollar, then the design id. The rounds are cut from this total order
        # of *all* designs, not of those left to do, so a resumed sweep prunes each design
        # against the same earlier rounds as an uninterrupted one.
        rank = sorted(
            range(len(designs)),
            key=lambda i: (not designs[i].name, -designs[i].peak_flops / costs[i], ids[i]),
        )
        order = tuple(designs[i] for i in rank)
        order_ids = tuple(ids[i] for i in rank)
        done = store.done_keys()
        need = tuple(
            tuple(
                w
                for w, name in enumerate(names)
                if not all(point_key(name, did, k) in done for k in shared.knobs)
            )
            if done
            else tuple(range(len(names)))
            for did in order_ids
        )
        skipped = sum(1 for n in need if not n)
        signs = _objective_signs(cfg.objectives)
        prune = cfg.prune and all(n in _BOUNDED for n, _ in signs)
        if cfg.prune and not prune:
            logger.info("pruning off: no optimistic bound for some objective of %s", cfg.objectives)
        stage_s["bounds_s"] = time.perf_counter() - t1
        bar = Progress(label="designs", skipped=skipped, enabled=progress)
        bar.start(len(designs) - skipped)
        rounds = _Rounds(
            store,
            shared,
            order,
            [costs[i] for i in rank],
            need,
            prune=prune,
            signs=signs,
            bar=bar,
        )
        rounds.start(store.points(feasible_only=True) if done else (), order_ids)
        fn = functools.partial(_run_task, shared)
        with Runner(executor, jobs=jobs, address=address) as runner:
            while not rounds.finished:
                runner.run(fn, rounds.tasks(), on_result=rounds.on_result)
                assert rounds.finished or rounds.queued, "the sweep's rounds stalled"
        bar.close()
        stage_s["bounds_s"] += rounds.bounds_s
        stage_s["evaluate_s"] = rounds.task_s
        stage_s["evaluate_cpu_s"] = rounds.task_cpu_s
        t2 = time.perf_counter()
        feasible = [
            p for p in store.points(feasible_only=True) if p["workload"] != AGGREGATE_WORKLOAD
        ]
        for rec in aggregate_records(feasible, names):
            store.put_point(rec)
        stage_s["aggregate_s"] = time.perf_counter() - t2
        stage_s["total_s"] = time.perf_counter() - t0
        points = len(store) - len(store.points(workload=AGGREGATE_WORKLOAD))
        store.set_manifest(
            {
                "tool_version": __version__,
                "config_hash": cfg.config_hash(),
                "model_digest": model_digest(),
                "solver": dataclasses.asdict(cfg.solver),
                "executor": executor,
                "jobs": jobs,
                "wall_times_s": stage_s,
                "designs": len(designs),
                "evaluated_designs": rounds.evaluated,
                "pruned_designs": rounds.pruned,
                "skipped_designs": skipped,
                "discarded_designs": rounds.discarded,
            }
        )
    return SweepResult(
        out_dir=out,
        points=points,
        feasible=len(feasible),
        evaluated_designs=rounds.evaluated,
        pruned_designs=rounds.pruned,
        skipped_designs=skipped,
        wall_s=time.perf_counter() - t0,
    )


def _pruned_record(acc: Accelerator, workload: str, knobs: Knobs, devices: int) -> dict[str, Any]:
    cols = _design_columns(acc)
    return {
        "key": point_key(workload, cols["design_id"], knobs),
        "workload": workload,
        **cols,
        "devices": devices,
        "micro_batch": knobs.micro_batch,
        "recompute": knobs.recompute,
        "feasible": False,
        "reason": "pruned: its optimistic bound is dominated by an evaluated design",
    }


def _round_ranges(n: int) -> tuple[range, ...]:
    """The pruning rounds over ``n`` ordered designs: 8, 32, 128, ... designs each."""
    out, start, size = [], 0, _FIRST_ROUND
    while start < n:
        out.append(range(start, min(start + size, n)))
        start, size = start + size, size * 4
    return tuple(out)


def _front_add(front: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``front`` (minimised objective rows) with ``rows`` added, keeping only the rows that
    no other row is <= in every objective.

    A bound is dominated by some point iff it is dominated by some row of this front (a
    point that another is <= everywhere dominates nothing the other does not), so pruning
    compares bounds with the front alone: O(front) rather than O(points) per design.
    """
    if rows.size == 0:
        return front
    rows = rows[~_covered(front, rows)]
    for r in rows:
        if front.size and np.any(np.all(front <= r, axis=1)):
            continue
        front = np.vstack([front[~np.all(r <= front, axis=1)], r])
    return front


def _covered(front: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """For each of ``rows``: is some row of ``front`` <= it in every objective?"""
    return _compare(front, rows, strict=False)


def _dominated(front: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """For each of ``rows``: is some row of ``front`` <= it in every objective and < in one?"""
    return _compare(front, rows, strict=True)


def _compare(front: np.ndarray, rows: np.ndarray, *, strict: bool) -> np.ndarray:
    out = np.zeros(len(rows), dtype=bool)
    if front.size == 0 or rows.size == 0:
        return out
    step = max(1, _COMPARE_CELLS // front.size)  # bounds the (step, front, objectives) temporaries
    for lo in range(0, len(rows), step):
        r = rows[lo : lo + step, None, :]
        hit = np.all(front <= r, axis=2)
        if strict:
            hit &= np.any(front < r, axis=2)
        out[lo : lo + step] = np.any(hit, axis=1)
    return out


_UNDECIDED, _KEEP, _PRUNED = range(3)


class _Rounds:
    """The order of evaluation of a sweep and its exact pruning, keeping the workers busy.

    The ordered designs are cut into rounds (8, 32, 128, ... designs). A design of round q
    is pruned iff, for every workload, its bound is dominated by the points of rounds < q
    (presets never are), so every decision depends on the earlier rounds' points alone: the
    same for any executor, number of workers or interruption. Two bounds are checked: the
    cheap one of :func:`bounds` for all the round's designs at once, when round q - 1
    completes; then the tight one of :func:`tight_bound`, which workers compute at the start
    of a design's task (it needs op costs). A task carries the front of points known when it
    was dispatched (a subset of the earlier rounds' points), and its worker skips the
    evaluation of a design whose tight bound that front already dominates; the parent
    decides with the tight bounds the tasks return, against the earlier rounds' points, and
    evaluates whatever a kept design still lacks (a workload skipped while another kept it).

    Meanwhile, workers left idle by the last tasks of round q - 1 start on designs of round
    q that no point so far dominates: such results are held, committed once the design is
    decided kept and dropped if it is pruned, so no round waits on its slowest task and the
    decisions stay those of strict rounds. Designs that differ only in HBM capacity and are
    dispatched together share one task, so one worker (with its caches) schedules their
    layers once.
    """

    def __init__(
        self,
        store: Store,
        shared: _Shared,
        order: Sequence[Accelerator],
        costs_usd: Sequence[float],
        need: Sequence[tuple[int, ...]],
        *,
        prune: bool,
        signs: Sequence[tuple[str, float]],
        bar: Progress,
    ) -> None:
        self._store = store
        self._shared = shared
        self._order = order
        self._costs_usd = costs_usd
        self._need = need  # workloads still to evaluate, per design (none: all stored)
        self._prune = prune
        self._signs = signs
        self._bar = bar
        n = len(order)
        self._rounds = _round_ranges(n) if prune else ((range(n),) if n else ())
        self._round_of = np.repeat(np.arange(len(self._rounds)), [len(r) for r in self._rounds])
        self._state = [_UNDECIDED] * n
        self._waiting = [0] * n  # tasks of a dispatched design not yet returned
        # returned (workload, records or None when skipped, tight bound row) per design
        self._held: dict[int, list[tuple[int, Any, tuple[float, ...]]]] = {}
        self._members: dict[int, tuple[int, ...]] = {}  # task serial -> designs
        self._serial = 0
        self._queue: deque[_Task] = deque()
        self._cache: dict[tuple[str, int], Any] = {}  # (what, round) -> bounds, groups
        self._stored: list[list[tuple[int, list[float]]]] = [[] for _ in self._rounds]
        empty = np.empty((0, len(signs)))
        self._settled = [empty] * len(shared.workloads)  # front of the rounds before `_cur`
        self._live = list(self._settled)  # the same with round `_cur`'s points so far
        self._cur = -1
        self._open = 0  # designs of round `_cur` not yet pruned or committed
        self._next = 0  # position in round `_cur + 1` of the next speculative candidate
        self.evaluated = self.pruned = self.discarded = 0
        self.task_s = self.task_cpu_s = self.bounds_s = 0.0

    @property
    def finished(self) -> bool:
        return self._open == 0 and self._cur >= len(self._rounds) - 1

    @property
    def queued(self) -> int:
        return len(self._queue)

    def start(self, stored: Iterable[Mapping[str, Any]], ids: Sequence[str]) -> None:
        """Take the stored feasible points of this sweep's designs (``ids``, in order) by
        round, then decide round 0."""
        position = {did: i for i, did in enumerate(ids)}
        names = {n: w for w, (n, _) in enumerate(self._shared.workloads)}
        knobs = {(k.micro_batch, k.recompute) for k in self._shared.knobs}
        for p in stored:
            i = position.get(p["design_id"])
            if i is not None and p["workload"] in names:
                if (p["micro_batch"], p["recompute"]) in knobs:
                    row = [s * p[n] for n, s in self._signs]
                    self._stored[self._round_of[i]].append((names[p["workload"]], row))
        self._advance()

    def tasks(self) -> Iterator[_Task]:
        """Tasks to run now: the current round's, then speculative ones of the next round."""
        while True:
            if self._queue:
                yield self._queue.popleft()
            elif not self._speculate():
                return

    def on_result(self, task: _Task, result: _TaskResult) -> None:
        """Hold (or commit, or drop) a task's results, then decide whatever that completes."""
        self.task_s += result.wall_s
        self.task_cpu_s += result.cpu_s
        for j, i in enumerate(self._members.pop(task.serial)):
            self._waiting[i] -= 1
            if self._state[i] == _PRUNED:
                continue
            records, row = result.records[j], result.rows[j]
            if self._state[i] == _KEEP:  # an evaluation a kept design still lacked
                self._commit(i, task.workload, records)
                self._finish_if_done(i)
                continue
            self._held.setdefault(i, []).append((task.workload, records, row))
            if not self._waiting[i] and self._round_of[i] <= self._cur:
                self._settle(i)
        self._advance()

    # ------------------------------------------------------------------ internals
    def _advance(self) -> None:
        """Settle each completed round and decide the next, as far as that goes."""
        while self._open == 0 and self._cur < len(self._rounds) - 1:
            self._settled = list(self._live)
            self._cur += 1
            self._next = 0
            self._decide(self._cur)

    def _decide(self, q: int) -> None:
        """Round ``q``: prune by the cheap bound; settle designs whose speculative tasks have
        all returned; dispatch the rest (with the earlier rounds' fronts)."""
        r = self._rounds[q]
        todo = [i for i in r if self._need[i]]
        beaten = self._beaten(q, r, self._settled) if self._prune and todo else None
        for w, row in self._stored[q]:
            self._live[w] = _front_add(self._live[w], np.array([row]))
        fresh: dict[tuple[Accelerator, tuple[int, ...]], list[int]] = {}
        for i in todo:
            if beaten is not None and beaten[i - r.start]:
                self._prune_design(i)
                continue
            self._open += 1
            if self._waiting[i]:
                continue  # dispatched speculatively: settled when its last task returns
            if i in self._held:
                self._settle(i)
            else:
                fresh.setdefault(self._groups(q)[1][i - r.start], []).append(i)
        for members in fresh.values():
            self._dispatch(members, self._settled)
        for key in [k for k in self._cache if k[1] <= q]:
            del self._cache[key]

    def _settle(self, i: int) -> None:
        """Design ``i`` of the current round has every tight bound back: prune it (every
        workload's bound dominated by the earlier rounds) or keep it and commit."""
        held = self._held.pop(i)
        if (
            self._prune
            and not self._order[i].name
            and all(_dominated(self._settled[w], np.array([row]))[0] for w, _, row in held)
        ):
            self._held[i] = held  # for the discarded-work count
            self._prune_design(i)
            self._open -= 1
            return
        self._state[i] = _KEEP
        for w, records, _ in held:
            if records is None:  # skipped for this workload, but another keeps the design
                self._dispatch([i], None, workloads=(w,))
            else:
                self._commit(i, w, records)
        self._finish_if_done(i)

    def _finish_if_done(self, i: int) -> None:
        if not self._waiting[i]:
            self.evaluated += 1
            self._open -= 1
            self._bar.advance()

    def _speculate(self) -> bool:
        """Dispatch the next design of round ``_cur + 1`` that no point so far dominates, with
        its HBM siblings; False when there is none."""
        q = self._cur + 1
        if q >= len(self._rounds):
            return False
        r = self._rounds[q]
        while self._next < len(r):
            i = r.start + self._next
            self._next += 1
            if self._waiting[i] or not self._need[i] or self._beaten(q, [i], self._live)[0]:
                continue
            groups, key_of = self._groups(q)
            members = [
                j
                for j in groups[key_of[i - r.start]]
                if j == i
                or (
                    not self._waiting[j]
                    and j not in self._held
                    and not self._beaten(q, [j], self._live)[0]
                )
            ]
            self._dispatch(members, self._live)
            return True
        return False

    def _dispatch(
        self,
        members: Sequence[int],
        fronts: Sequence[np.ndarray] | None,
        *,
        workloads: Sequence[int] | None = None,
    ) -> None:
        """Queue the tasks of designs that share their layer schedules and workloads; with
        ``fronts`` (per workload), workers may skip designs those fronts prune."""
        designs = tuple(self._order[i] for i in members)
        need = self._need[members[0]] if workloads is None else workloads
        for i in members:
            self._waiting[i] += len(need)
        for w in need:
            self._serial += 1
            self._members[self._serial] = tuple(members)
            front = fronts[w] if fronts is not None and self._prune else None
            self._queue.append(_Task(designs, w, self._serial, front))

    def _commit(self, i: int, w: int, records: Sequence[dict[str, Any]]) -> None:
        for rec in records:
            self._store.put_point(rec)
        rows = [[s * rec[n] for n, s in self._signs] for rec in records if rec["feasible"]]
        if rows:
            self._live[w] = _front_add(self._live[w], np.array(rows))

    def _prune_design(self, i: int) -> None:
        held = self._held.pop(i, ())
        if self._waiting[i] or any(records is not None for _, records, _ in held):
            self.discarded += 1  # evaluated speculatively, then pruned
        self._state[i] = _PRUNED
        devices = self._shared.ctx.cluster.devices
        for name, _ in self._shared.workloads:
            for k in self._shared.knobs:
                self._store.put_point(_pruned_record(self._order[i], name, k, devices))
        self.pruned += 1
        self._bar.skip(1)

    def _beaten(self, q: int, which: Iterable[int], fronts: Sequence[np.ndarray]) -> np.ndarray:
        """For designs ``which`` (positions in the order) of round ``q``: is the cheap bound
        of each dominated on every workload by ``fronts``? (Never for a preset.)"""
        r = self._rounds[q]
        idx = np.fromiter((i - r.start for i in which), dtype=np.intp)
        rows = self._bounds(q)[:, idx]
        out = np.array([not self._order[r.start + j].name for j in idx], dtype=bool)
        for w, front in enumerate(fronts):
            out &= _dominated(front, rows[w])
        return out

    def _bounds(self, q: int) -> np.ndarray:
        """Minimised bound rows of round ``q``'s designs: (workloads, designs, objectives)."""
        key = ("bounds", q)
        if key not in self._cache:
            start = time.perf_counter()
            r = self._rounds[q]
            designs = [self._order[i] for i in r]
            costs = np.array([self._costs_usd[i] for i in r])
            ctx = self._shared.ctx
            self._cache[key] = np.array(
                [
                    np.stack(
                        [s * f for f, s in _bound_columns(designs, costs, m, ctx, self._signs)],
                        axis=1,
                    )
                    for _, m in self._shared.workloads
                ]
            ).reshape(len(self._shared.workloads), len(r), len(self._signs))
            self.bounds_s += time.perf_counter() - start
        return self._cache[key]

    def _groups(self, q: int) -> tuple[dict[Any, list[int]], list[Any]]:
        """Round ``q``'s designs grouped by (layer-timing design, workloads to do), and the
        group key of each design."""
        key = ("groups", q)
        if key not in self._cache:
            r = self._rounds[q]
            keys = [(timing_design(self._order[i]), self._need[i]) for i in r]
            groups: dict[Any, list[int]] = {}
            for i, k in zip(r, keys, strict=True):
                groups.setdefault(k, []).append(i)
            self._cache[key] = (groups, keys)
        return self._cache[key]


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
        rec = {k: first[k] for k in DESIGN_COLUMNS}
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
