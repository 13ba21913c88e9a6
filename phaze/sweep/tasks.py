"""A sweep's unit of work, run by a worker: some designs on one workload, every knob setting
(a serving sweep's: every batch size, :mod:`phaze.sweep.serve_tasks`)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from arch_space import Accelerator
from phaze.model.pipeline import evaluate
from phaze.sweep.optimistic import tight_bound
from phaze.sweep.planning import Shared, design_knobs, serve_formats
from phaze.sweep.records import record_of
from phaze.sweep.serve_tasks import serve_design_records
from results.fronts import dominated

__all__ = ["Task", "TaskResult", "run_task"]


@dataclass(frozen=True, slots=True)
class Task:
    """Designs that differ only in HBM capacity (they share every layer schedule, so one
    worker's caches compute each once) on one workload (index into ``Shared.workloads``),
    every knob setting. ``serial`` numbers the tasks of a sweep.

    ``front`` (minimised objective rows of points of earlier rounds, or None) lets the
    worker skip a design whose tight bound it dominates: such a design is pruned whatever
    else the earlier rounds hold."""

    designs: tuple[Accelerator, ...]
    workload: int
    serial: int
    front: np.ndarray | None = None


@dataclass(frozen=True, slots=True)
class TaskResult:
    """Per design of a task: its records (one per knob setting; None when the task's front
    dominates its tight bound, so it was not evaluated) and its tight bound row; and the
    worker's wall and CPU time (the CPU time does not grow when other processes share the
    cores)."""

    records: tuple[tuple[dict[str, Any], ...] | None, ...]
    rows: tuple[tuple[float, ...], ...]
    wall_s: float
    cpu_s: float


def run_task(shared: Shared, task: Task) -> TaskResult:
    """Evaluate a task's designs on its workload for every knob setting (runs in a worker),
    except designs whose tight bound the task's front dominates (never a preset)."""
    start, cpu = time.perf_counter(), time.process_time()
    name, model = shared.workloads[task.workload]
    devices = shared.ctx.cluster.devices
    records: list[tuple[dict[str, Any], ...] | None] = []
    rows = []
    if shared.serve is not None:  # a serving sweep: no bounds, every batch of every design
        for a in task.designs:
            rows.append(())
            formats = serve_formats(shared, a)
            records.append(
                serve_design_records(
                    name, model, a, shared.batches, shared.serve, formats, shared.at_rate
                )
            )
        return TaskResult(
            tuple(records), tuple(rows), time.perf_counter() - start, time.process_time() - cpu
        )
    for a in task.designs:
        row: tuple[float, ...] = ()
        if task.front is not None and not a.name:  # presets are never pruned
            b = tight_bound(a, model, design_knobs(shared, a), shared.ctx)
            row = tuple(sign * getattr(b, n) for n, sign in shared.signs)
            if dominated(task.front, np.array([row]))[0]:
                rows.append(row)
                records.append(None)
                continue
        rows.append(row)
        records.append(
            tuple(
                record_of(evaluate(name, model, a, k, shared.ctx), devices)
                for k in design_knobs(shared, a)
            )
        )
    return TaskResult(
        tuple(records), tuple(rows), time.perf_counter() - start, time.process_time() - cpu
    )
