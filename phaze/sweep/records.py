"""Store records of a sweep's points: flat, column-named dicts (see :mod:`results.schema`)."""

from __future__ import annotations

import dataclasses
import functools
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from arch_space import Accelerator, design_id, device_cost_usd
from arch_space.area import made_die_area_mm2
from arch_space.power import headroom
from ilp import Method, PassTiming
from phaze.model.pipeline import Evaluation
from placement import Layout, Placement
from workloads.precision import DEFAULT_PRECISION

__all__ = [
    "point_key",
    "design_columns",
    "headroom_columns",
    "placement_summary",
    "schedule_exactness",
    "record_of",
    "pruned_record",
]


def point_key(workload: str, design: str, knobs: Layout) -> str:
    """The content key of one point (the store's primary key): its workload, design,
    micro-batch, recompute mode and, other than bf16, precision recipe."""
    key = f"{workload}|{design}|mbs={knobs.mbs}|recompute={knobs.recompute}"
    return key if knobs.precision == DEFAULT_PRECISION else f"{key}|precision={knobs.precision}"


@functools.lru_cache(maxsize=4096)
def design_columns(acc: Accelerator) -> Mapping[str, Any]:
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
            "formats": "+".join(acc.format_names),
            "area_mm2": made_die_area_mm2(acc) * acc.dies,  # the silicon made, spare cores too
            "peak_flops": acc.peak_flops,
            "device_cost_usd": device_cost_usd(acc),
        }
    )


@functools.lru_cache(maxsize=4096)
def headroom_columns(acc: Accelerator) -> Mapping[str, float]:
    """The design's area and tensor-load power against its budgets (cached per design), the
    figures ``phaze evaluate`` prints and the report shows."""
    return MappingProxyType(headroom(acc).figures())


def placement_summary(pl: Placement) -> str:
    """The placement as compact JSON text: its layout as the strategy string that gives it
    back (:func:`placement.parse_strategy`) and each stage's layer range (the time terms are
    columns of their own)."""
    return json.dumps(
        {
            "strategy": str(pl.layout),
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


def schedule_exactness(passes: Sequence[PassTiming]) -> tuple[float, str]:
    """How exact the layer schedules of ``passes`` are: the worst gap to a proven lower
    bound (0 when every pass is proven optimal), and the methods that closed the passes
    that take time as ``method:count`` sorted by name (e.g. ``bound:12,list:4``)."""
    timed = [p for p in passes if p.method != Method.EMPTY]
    methods = Counter(str(p.method) for p in timed)
    return (
        max((p.gap for p in timed), default=0.0),
        ",".join(f"{m}:{n}" for m, n in sorted(methods.items())),
    )


def record_of(ev: Evaluation, devices: int) -> dict[str, Any]:
    """A store record (flat, column-named) of one evaluation: the design's columns and
    headroom, the knobs, and for a feasible point its score, placement and the terms of its
    iteration time (which sum to ``iteration_s``)."""
    cols = design_columns(ev.design)
    rec: dict[str, Any] = {
        "key": point_key(ev.workload, cols["design_id"], ev.knobs),
        "workload": ev.workload,
        **cols,
        "devices": devices,
        "mode": "train",
        "micro_batch": ev.knobs.mbs,
        "recompute": ev.knobs.recompute,
        "precision": ev.knobs.precision,
        "feasible": ev.feasible,
        "reason": ev.reason or None,
        "embodied_kgco2e": None,
        **headroom_columns(ev.design),
    }
    if ev.placement is not None and ev.score is not None:
        pl, sc = ev.placement, ev.score
        rec.update(dataclasses.asdict(sc))
        rec.update(
            tp=pl.layout.t,
            pp=pl.layout.p,
            dp=pl.layout.d,
            **pl.breakdown.terms(),
            memory_per_device_bytes=pl.memory_breakdown.total_bytes,
            placement=placement_summary(pl),
        )
        rec["schedule_gap_max"], rec["schedule_methods"] = schedule_exactness(ev.pass_timings)
    return rec


def pruned_record(acc: Accelerator, workload: str, knobs: Layout, devices: int) -> dict[str, Any]:
    """The record of a point left out because its design was pruned."""
    cols = design_columns(acc)
    return {
        "key": point_key(workload, cols["design_id"], knobs),
        "workload": workload,
        **cols,
        "devices": devices,
        "mode": "train",
        "micro_batch": knobs.mbs,
        "recompute": knobs.recompute,
        "precision": knobs.precision,
        "feasible": False,
        "reason": "pruned: its optimistic bound is dominated by an evaluated design",
    }
