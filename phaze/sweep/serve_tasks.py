"""A serving sweep's unit of work and its records (``[sweep] mode = "serve"``).

A task's worker serves its workload on each of its designs at each batch size of the sweep:
the best serving layout at that batch (:func:`phaze.model.serving.search`: tensor, pipeline and
expert parallelism, replicas, chunked prefill, disaggregated pools), meeting the latency
limits when some layout does, else the one with the lowest TPOT (``meets_slo`` 0). One
design's points over the batches are its throughput-latency curve.

With a ``rate`` (:class:`AtRate`), each point's layout is also simulated under that many
requests per second arriving (:func:`phaze.model.serving_load.simulate_load`): its p50 and p99
TTFT and TPOT, whether it is stable, its SLO attainment and goodput against the limits at
the rate (the p99 limits when given, else the mean ones), and its cost per million output
tokens at the rate; a point unstable or missing the limits there is
``feasible_at_rate`` 0 (kept, not deleted).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from arch_space import Accelerator
from phaze.model.serving import ServeContext, ServingPoint
from phaze.model.serving_arrivals import generate
from phaze.model.serving_load import load_settings, simulate_load
from phaze.model.serving_search import search
from phaze.sweep.records import design_columns, headroom_columns
from phaze_common.errors import ConfigError, Infeasible
from placement import parse_serving
from workloads import Model
from workloads.serving import serving_settings

__all__ = ["AtRate", "serve_point_key", "serve_record", "serve_design_records"]


@dataclass(frozen=True, slots=True)
class AtRate:
    """A serving sweep's load: requests per second arriving (Poisson), how many are
    simulated, the arrivals' seed, and the p99 TTFT and TPOT limits each request is held to
    (None: not given; with neither, the sweep's mean limits, as ``phaze serve --rate``)."""

    rate_per_s: float
    requests: int
    seed: int
    p99_ttft_limit_s: float | None = None
    p99_tpot_limit_s: float | None = None

    def key(self) -> str:
        key = f"|rate={self.rate_per_s:g}|requests={self.requests}|seed={self.seed}"
        for name, v in (("p99_ttft", self.p99_ttft_limit_s), ("p99_tpot", self.p99_tpot_limit_s)):
            key += "" if v is None else f"|{name}={v:g}"
        return key

    def limits(self, ctx: ServeContext) -> tuple[float | None, float | None]:
        """The TTFT and TPOT limits (s) a request is held to at the rate: the p99 limits
        when either is given, else ``ctx``'s mean limits."""
        p99 = (self.p99_ttft_limit_s, self.p99_tpot_limit_s)
        return p99 if any(x is not None for x in p99) else (ctx.ttft_limit_s, ctx.tpot_limit_s)


def serve_point_key(
    workload: str,
    design: str,
    batch: int,
    ctx: ServeContext,
    weights: str = "bf16",
    at_rate: AtRate | None = None,
) -> str:
    """The content key of one serving point: workload, design, batch, request lengths,
    other than bf16 the weights' format, and the load when simulated at a rate."""
    r = ctx.requests
    key = (
        f"{workload}|{design}|serve|batch={batch}|isl={r.mean_input_tokens:g}"
        f"|osl={r.mean_output_tokens:g}"
    )
    key = key if weights == "bf16" else f"{key}|weights={weights}"
    return key if at_rate is None else key + at_rate.key()


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
    at_rate: AtRate | None = None,
) -> dict[str, Any]:
    """A store record of one serving point at weight format ``weights`` (its ``precision``
    the format's recipe), or of why nothing fits (``found`` the reason)."""
    cols = design_columns(acc)
    r = ctx.requests
    rec: dict[str, Any] = {
        "key": serve_point_key(workload, cols["design_id"], batch, ctx, weights, at_rate),
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
        return rec if at_rate is None else {**rec, "feasible_at_rate": 0}
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
    at_rate: AtRate | None = None,
) -> tuple[dict[str, Any], ...]:
    """The records of one design serving ``model`` at each batch size, for each weight
    format of ``formats`` (the strategy names a format other than bf16: ``weights=``), each
    simulated at ``at_rate`` when given (:func:`at_rate_columns`)."""
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
            rec = serve_record(workload, acc, b, ctx, found, fmt, at_rate)
            if at_rate is not None and not isinstance(found, str):
                rec.update(at_rate_columns(model, found, ctx, at_rate))
            records.append(rec)
    return tuple(records)


def at_rate_columns(
    model: Model, point: ServingPoint, ctx: ServeContext, at_rate: AtRate
) -> dict[str, Any]:
    """The columns of ``point``'s layout simulated at ``at_rate``: p50 and p99 TTFT and TPOT
    (None when unstable), stability, the share of requests within the latency limits
    (:meth:`AtRate.limits`; None without limits) and the rate of those (goodput), and
    whether the layout serves the rate within the limits (stable, and the attainment
    capacity planning asks for); only then its cost per million output tokens at the rate
    (the device-hours over the tokens served), so that ranking by it ranks the layouts that
    meet the SLO at the rate. A layout the simulation cannot run (static batching, a request
    larger than a replica's KV cache) is infeasible at the rate, its figures None."""
    r = ctx.requests
    arrivals = generate(
        at_rate.rate_per_s,
        at_rate.requests,
        round(r.mean_input_tokens),
        round(r.mean_output_tokens),
        seed=at_rate.seed,
    )
    ttft_limit_s, tpot_limit_s = at_rate.limits(ctx)
    try:
        res = simulate_load(
            model, point, ctx, arrivals, ttft_limit_s=ttft_limit_s, tpot_limit_s=tpot_limit_s
        )
    except (ConfigError, Infeasible):
        return {"feasible_at_rate": 0}
    tokens_per_s = res.requests_per_s * float(np.mean(arrivals.output_tokens))
    sc = point.score
    met = res.slo_attainment is None or res.slo_attainment >= load_settings().capacity_attainment
    feasible = res.stable and met
    usd = sc.usd_per_device_hour * sc.devices / 3600 / tokens_per_s * 1e6
    return {
        "ttft_p99_s": res.ttft_s[2] if res.stable else None,
        "tpot_p99_s": res.tpot_s[2] if res.stable else None,
        "ttft_p50_s": res.ttft_s[0] if res.stable else None,
        "tpot_p50_s": res.tpot_s[0] if res.stable else None,
        "stable": int(res.stable),
        "slo_attainment": res.slo_attainment if res.stable else None,
        "goodput_requests_per_s": res.goodput_requests_per_s if res.stable else None,
        "usd_per_million_tokens_at_rate": usd if feasible else None,
        "feasible_at_rate": int(feasible),
    }
