"""A serving sweep's unit of work and its records (``[sweep] mode = "serve"``).

A task's worker serves its workload on each of its designs at each batch size of the sweep:
the best serving layout at that batch (:func:`phaze.serving.search`: tensor, pipeline and
expert parallelism, replicas, chunked prefill, disaggregated pools), meeting the latency
limits when some layout does, else the one with the lowest TPOT (``meets_slo`` 0). One
design's points over the batches are its throughput-latency curve.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from arch_space import Accelerator
from phaze.serving import ServeContext, ServingPoint
from phaze.serving_search import search
from phaze.sweep.records import design_columns, headroom_columns
from phaze_common.errors import Infeasible
from placement import parse_serving
from workloads import Model
from workloads.serving import serving_settings

__all__ = ["serve_point_key", "serve_record", "serve_design_records"]


def serve_point_key(
    workload: str, design: str, batch: int, ctx: ServeContext, weights: str = "bf16"
) -> str:
    """The content key of one serving point: workload, design, batch, request lengths and,
    other than bf16, the weights' format."""
    r = ctx.requests
    key = (
        f"{workload}|{design}|serve|batch={batch}|isl={r.mean_input_tokens:g}"
        f"|osl={r.mean_output_tokens:g}"
    )
    return key if weights == "bf16" else f"{key}|weights={weights}"


def _layout_summary(point: ServingPoint) -> str:
    """The layout as JSON text: its strategy string (``parse_serving`` reads it back), the
    pools' loads and memory, what bounds the rate, the energy per token by cause."""
    e = point.engine
    return json.dumps(
        {
            "strategy": str(point.layout),
            "bound": e.bound,
            "kv_transfer_s": e.transfer_s,
            "pools": [
                {"name": p.name, "replicas": p.replicas, "devices": p.devices, "busy": p.busy}
                for p in e.pools
            ],
            "memory": [dataclasses.asdict(m) for m in point.memory],
            "energy_per_token_j": point.score.energy.terms(),
            "slo_missed": list(point.slo),
        },
        sort_keys=True,
    )


def serve_record(
    workload: str,
    acc: Accelerator,
    batch: int,
    ctx: ServeContext,
    found: ServingPoint | str,
    weights: str = "bf16",
) -> dict[str, Any]:
    """A store record of one serving point at weight format ``weights`` (its ``precision``
    the format's recipe), or of why nothing fits (``found`` the reason)."""
    cols = design_columns(acc)
    r = ctx.requests
    rec: dict[str, Any] = {
        "key": serve_point_key(workload, cols["design_id"], batch, ctx, weights),
        "workload": workload,
        **cols,
        "devices": ctx.cluster.devices,
        "mode": "serve",
        "batch": batch,
        "input_tokens": round(r.mean_input_tokens),
        "output_tokens": round(r.mean_output_tokens),
        "precision": serving_settings().weight_recipes[weights],
        "feasible": not isinstance(found, str),
        "reason": found if isinstance(found, str) else None,
        **headroom_columns(acc),
    }
    if isinstance(found, str):
        return rec
    p, sc, e = found, found.score, found.engine
    rec.update(
        tp=p.layout.decode.t,
        pp=p.layout.decode.p,
        dp=p.layout.decode.d,
        ttft_s=e.ttft_s,
        tpot_s=e.tpot_s,
        output_tokens_per_s=e.output_tokens_per_s,
        tokens_per_s_per_device=sc.tokens_per_s_per_device,
        requests_per_s=e.requests_per_s,
        kv_cache_bytes_per_device=p.kv_cache_bytes_per_device,
        memory_per_device_bytes=p.memory_per_device_bytes,
        energy_per_token_j=sc.energy_per_token_j,
        avg_power_w=sc.avg_power_w,
        usd_per_million_tokens=sc.usd_per_million_tokens,
        usd_per_device_hour=sc.usd_per_device_hour,
        kgco2e_per_million_tokens=sc.kgco2e_per_million_tokens,
        system_cost_usd=sc.system_cost_usd,
        embodied_kgco2e=sc.embodied_kgco2e,
        operational_kgco2e=sc.operational_kgco2e,
        total_kgco2e=sc.total_kgco2e,
        tcdp=sc.tcdp,
        tcdp_kgco2e_days=sc.tcdp / 86400.0,
        meets_slo=int(p.meets_slo),
        placement=_layout_summary(p),
    )
    return rec


def serve_design_records(
    workload: str,
    model: Model,
    acc: Accelerator,
    batches: tuple[int, ...],
    ctx: ServeContext,
    formats: tuple[str, ...] = ("bf16",),
) -> tuple[dict[str, Any], ...]:
    """The records of one design serving ``model`` at each batch size, for each weight
    format of ``formats`` (the strategy names a format other than bf16: ``weights=``)."""
    records = []
    for fmt in formats:
        for b in batches:
            layout = dataclasses.replace(
                parse_serving(""),
                batch=b,
                open=frozenset({"chunk", "batching"}),
                weights=None if fmt == "bf16" else fmt,
            )
            try:
                found: ServingPoint | str = search(workload, model, acc, layout, ctx)
            except Infeasible as e:
                found = e.reason
            records.append(serve_record(workload, acc, b, ctx, found, fmt))
    return tuple(records)
