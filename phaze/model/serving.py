"""Serving a model on a design: one serving layout's TTFT, TPOT, throughput, memory, energy,
cost and carbon, and the search for the layout that meets a latency target (docs/serving.md).

:func:`evaluate_layout` prices one complete :class:`~placement.serving_layout.ServingLayout`:
each pool's passes scheduled by the layer scheduler (:func:`ilp.serving.serving_pass_time`),
split into pipeline stages, with the expert-parallel token all-to-alls and the pipeline sends
priced by the cluster's links (:mod:`placement.network`); the memory of a device (weights,
the largest pass's workspace, the paged KV cache of its sequences) against its capacity; the
engine's steady state (:mod:`placement.serving_engine`); and the metrics
(:mod:`phaze.model.serving_score`).

:mod:`phaze.model.serving_search` searches the layouts a partial one leaves open.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Final, Literal, get_args

from arch_space import Accelerator, Cluster
from arch_space.formats import check_precision
from arch_space.perf import default_settings
from arch_space.perf.device import DeviceProfile
from ilp.serving import ServingPassTime, serving_device_profile, serving_pass_time
from phaze.model.context import SolverSettings
from phaze.model.pipeline import timing_design
from phaze.model.scoring import ScoringParams
from phaze.model.serving_engines import engine_profile
from phaze.model.serving_score import ServingScore, serving_score
from phaze_common.errors import ConfigError, Infeasible
from phaze_common.units import fmt_noun
from placement import network as net
from placement.adapt import tp_collectives
from placement.collectives import link_energy_j
from placement.ep_cp import all_to_all_s
from placement.layout import Layout
from placement.ledger import serving_ledger
from placement.serving_engine import (
    EngineResult,
    Lengths,
    PassCost,
)
from placement.serving_layout import ServingLayout
from workloads import Model
from workloads.serving import (
    KV_ADMISSIONS,
    RequestBatch,
    ServingPass,
    kv_cache_bytes_per_sequence,
    serving_settings,
)
from workloads.serving_costs import (
    KvCapacity,
    kv_cache_capacity,
    stage_block_counts,
)
from workloads.serving_ops import check_serving, pass_workspace_bytes, serving_layer_graph

__all__ = [
    "Objective",
    "OBJECTIVES",
    "ServeContext",
    "PoolMemory",
    "ServingPoint",
    "check_layout",
    "check_weight_format",
    "layout_context",
    "decode_step",
    "chunk_pass",
    "pass_cost",
    "prefill_cost",
    "pj_j",
    "pool_kv_capacity",
    "pool_memory",
    "evaluate_layout",
]

Objective = Literal["tokens_per_s_per_device", "usd_per_million_tokens"]
OBJECTIVES: Final = get_args(Objective)


@dataclass(frozen=True, slots=True)
class ServeContext:
    """What every serving evaluation of a search or sweep shares: the cluster, the requests
    (a :class:`~workloads.serving.RequestBatch` of their lengths; its ``batch`` is unused),
    the latency limits (None: no limit; they bound the model's mean TTFT and TPOT), the
    objective, the batch sizes and chunk budgets searched (None: the engine's whole-prompt
    prefill), whether disaggregated layouts are searched, the serving workload's output
    tokens (tCDP), solver and scoring settings, an optional device profile, and how the
    engine's scheduler reserves a request's KV cache (``kv_admission``, one of
    ``KV_ADMISSIONS``; None: the default of ``workloads/data/serving.toml``), and the
    serving engine's profile (``engine``, a name of :mod:`phaze.model.serving_engines`; None: the
    generic engine of ``workloads/data/serving.toml``): its scheduler's rules are the
    defaults of ``kv_admission``, ``batches`` and ``chunks``, and its passes are priced under
    it (:func:`pass_cost`)."""

    cluster: Cluster
    requests: RequestBatch
    ttft_limit_s: float | None = None
    tpot_limit_s: float | None = None
    objective: Objective = "tokens_per_s_per_device"
    batches: tuple[int, ...] = ()
    chunks: tuple[int | None, ...] = ()
    disaggregate: bool = True
    tokens_to_serve: float | None = None
    solver: SolverSettings = dataclasses.field(default_factory=SolverSettings)
    scoring: ScoringParams = dataclasses.field(default_factory=ScoringParams)
    device: DeviceProfile | None = None
    kv_admission: str | None = None
    engine: str | None = None

    def __post_init__(self) -> None:
        settings = serving_settings()
        profile = None if self.engine is None else engine_profile(self.engine)
        problems = []
        for name in ("ttft_limit_s", "tpot_limit_s"):
            v = getattr(self, name)
            if v is not None and not (isinstance(v, int | float) and 0 < v < math.inf):
                problems.append(f"{name} = {v!r} must be a positive number of seconds")
        if self.objective not in OBJECTIVES:
            problems.append(
                f"objective = {self.objective!r} must be one of {', '.join(OBJECTIVES)}"
            )
        if self.requests.mean_output_tokens < 2:
            problems.append(
                f"output_tokens = {self.requests.mean_output_tokens:g} must be at least 2 on "
                "average (TPOT needs a decode step)"
            )
        if self.kv_admission is not None and self.kv_admission not in KV_ADMISSIONS:
            problems.append(
                f"kv_admission = {self.kv_admission!r} must be one of {', '.join(KV_ADMISSIONS)}"
            )
        if problems:
            raise ConfigError("serve: " + "; ".join(problems))
        if self.kv_admission is None:
            admission = settings.kv_admission if profile is None else profile.kv_admission
            object.__setattr__(self, "kv_admission", admission)
        if not self.batches:
            limit = settings.max_num_seqs
            batches = tuple(2**i for i in range(limit.bit_length()) if 2**i <= limit)
            object.__setattr__(self, "batches", batches if profile is None else profile.batches)
        if not self.chunks:
            chunks = (None, *settings.chunk_tokens) if profile is None else profile.chunks
            object.__setattr__(self, "chunks", chunks)
        if self.tokens_to_serve is None:
            object.__setattr__(self, "tokens_to_serve", settings.tokens_to_serve)

    @property
    def lengths(self) -> Lengths:
        return Lengths(self.requests.mean_input_tokens, self.requests.mean_output_tokens)

    @property
    def token_budget(self) -> int:
        """The most prompt tokens a prefill step carries: the engine's, else
        ``workloads/data/serving.toml``'s ``max_batched_tokens``."""
        budget = None if self.engine is None else engine_profile(self.engine).token_budget
        return budget or serving_settings().max_batched_tokens


@dataclass(frozen=True, slots=True)
class PoolMemory:
    """One device of a pool: its weights, the largest pass's workspace and the KV cache its
    sequences hold, beside the pages it could hold (bytes)."""

    weights_bytes: int
    workspace_bytes: int
    kv_cache_bytes: int
    kv_capacity_bytes: int
    hbm_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.workspace_bytes + self.kv_cache_bytes


@dataclass(frozen=True, slots=True)
class ServingPoint:
    """One serving layout of a model on a design: its engine's steady state, the memory of a
    device of each pool (decode first), its score, and whether it meets the latency limits
    (``slo``: the limits it misses, empty when it meets them)."""

    workload: str
    design: Accelerator
    layout: ServingLayout
    engine: EngineResult
    memory: tuple[PoolMemory, ...]
    score: ServingScore
    slo: tuple[str, ...] = ()

    @property
    def meets_slo(self) -> bool:
        return not self.slo

    @property
    def memory_per_device_bytes(self) -> int:
        return max(m.total_bytes for m in self.memory)

    @property
    def kv_cache_bytes_per_device(self) -> int:
        return max(m.kv_cache_bytes for m in self.memory)

    @property
    def tokens_per_s_per_replica(self) -> float:
        return self.engine.output_tokens_per_s / self.layout.decode.d


# ---- passes ------------------------------------------------------------------------------


@lru_cache(maxsize=8192)
def _timed(
    model: Model,
    acc: Accelerator,
    cluster: Cluster,
    p: ServingPass,
    t: int,
    ep: int,
    device: DeviceProfile | None,
    solver: SolverSettings,
) -> ServingPassTime:
    return serving_pass_time(
        model,
        acc,
        cluster,
        p,
        t,
        ep=ep,
        device=device,
        solver=solver.name,
        time_limit_s=solver.time_limit_s,
        mip_gap=solver.mip_gap,
        search_nodes=solver.search_nodes,
    )


@lru_cache(maxsize=8192)
def _tp_collectives(model: Model, p: ServingPass, t: int, ep: int):
    """The tensor-parallel collectives of pass ``p``'s op graphs (for its ledger)."""
    return tp_collectives(serving_layer_graph(model, p, t, ep))


def pj_j(nbytes: float, inter_node: bool) -> float:
    """Joules of ``nbytes`` over a link (docs/models.md: pJ per bit)."""
    perf = default_settings()
    pj = perf.inter_node_link_pj_per_bit if inter_node else perf.intra_node_link_pj_per_bit
    return nbytes * 8 * pj * 1e-12


def pass_cost(
    model: Model, acc: Accelerator, pool: Layout, p: ServingPass, ctx: ServeContext
) -> PassCost:
    """Pass ``p`` through a replica of ``pool`` (its ``t``, ``p``, ``ep``) as the engine sees
    it: the busiest stage's time, the latency through the stages with the sends between
    them, the device-seconds and the dynamic energy, the expert-parallel all-to-alls and the
    pipeline sends priced by the cluster's links. Under a named engine (``ctx.engine``) its
    all-reduce, its measured small-batch decode bandwidth and the wait before each of the
    pass's kernels (:class:`~phaze.model.serving_engines.EngineProfile`)."""
    t, stages, ep = pool.t, pool.p, pool.ep
    engine = None if ctx.engine is None else engine_profile(ctx.engine)
    device = ctx.device or (serving_device_profile(acc) if engine is None else engine.device(acc))
    design = acc
    if engine is not None:  # a small decode batch at the engine's measured bandwidth
        decodes = p.batch if p.new_tokens == 1 and p.cached_tokens else None
        design = engine.design(acc, decodes, p.weight_format)
    spt = _timed(model, timing_design(design), ctx.cluster, p, t, ep, device, ctx.solver)
    per_stage = list(spt.stage_latencies_s(model, stages))
    if engine is not None:  # the wait before each kernel of the step
        gaps = spt.stage_kernels(model, stages)
        per_stage = [s + n * engine.kernel_gap_s for s, n in zip(per_stage, gaps, strict=True)]
    # the op graphs' link energy is their tensor-parallel collectives': the ledger's records
    compute_j, memory_j = (t * x for x in spt.dynamic_j[:2])
    blocks = stage_block_counts(model, stages)
    # a dispatch and a combine all-to-all per MoE block (vLLM's expert parallelism: each
    # rank sends its tokens' top-k copies to the experts' ranks and back)
    per_device = model.top_k * p.tokens * model.hidden * p.precision_bytes
    nbytes = p.tokens * model.hidden * p.precision_bytes
    span = pool.groups.ep
    if ep > 1 and model.is_moe:
        a2a_s = 2 * all_to_all_s(per_device, ep, net.group_link(ctx.cluster, span))
        first = 1
        for i, n in enumerate(blocks):
            moe = sum(1 for b in range(first, first + n) if b > model.dense_layers)
            per_stage[i] += moe * a2a_s
            first += n
    send_s = 0.0
    if stages > 1:
        link = net.boundary_link(ctx.cluster, pool.devices, t, False, device.intra_node, nbytes)
        send_s = net.p2p_s(nbytes, link)
    cl = ctx.cluster
    ledger = serving_ledger(
        t=t,
        stages=stages,
        ep=ep,
        dispatch_bytes=per_device if model.is_moe else 0.0,
        moe_blocks=model.layers - model.dense_layers,
        boundary_bytes=nbytes,
        inter=(
            bool(cl.spans_nodes(t)),
            bool(cl.spans_nodes(span)),
            bool(cl.spans_nodes(pool.devices)),
        ),
        tp_collectives=_tp_collectives(model, p, t, ep),
    )
    perf = default_settings()
    network_j = link_energy_j(
        ledger, perf.intra_node_link_pj_per_bit, perf.inter_node_link_pj_per_bit
    )
    return PassCost(
        stage_s=max(per_stage),
        latency_s=sum(per_stage) + (stages - 1) * send_s,
        busy_device_s=t * sum(per_stage),
        compute_j=compute_j,
        memory_j=memory_j,
        network_j=network_j,
    )


def _mean(costs: list[tuple[float, PassCost]]) -> PassCost:
    """The weighted mean of passes (a request mix's prompts)."""
    total = sum(w for w, _ in costs)
    values = [
        sum(w * getattr(c, f.name) for w, c in costs) / total for f in dataclasses.fields(PassCost)
    ]
    return PassCost(*values)


def prefill_cost(model, acc, pool: Layout, prompts: int, ctx: ServeContext) -> PassCost:
    """A prefill of ``prompts`` whole prompts of each input length of the mix, weighted."""
    r, kw = ctx.requests, ctx.requests.pass_formats()
    costs = [
        (w, pass_cost(model, acc, pool, ServingPass.prefill(prompts, i, **kw), ctx))
        for i, _, w in r.lengths
    ]
    return _mean(costs)


def decode_step(b: int, ctx: ServeContext) -> ServingPass:
    """The decode step of ``b`` sequences at the requests' mean context."""
    r = ctx.requests
    return dataclasses.replace(r, batch=b).decode_pass()


def chunk_pass(tokens: int, decodes: int, ctx: ServeContext, positions: int) -> ServingPass:
    """A prefill step of ``tokens`` prompt tokens and ``decodes`` decode tokens riding on its
    matmuls: whole prompts of the mean input length (each ``decodes / k`` tokens longer)
    when it holds one or more, else one chunk at the mean position of a prompt's chunks.
    Where the decodes would stretch a row past the model's ``positions``, they ride on more
    rows (the same tokens through the matmuls; the decodes are sequences of their own)."""
    r, kw = ctx.requests, ctx.requests.pass_formats()
    isl = max(1, round(r.mean_input_tokens))
    if tokens >= isl:
        k = max(1, tokens // isl)
        rows = max(k, -(-(k * isl + decodes) // positions))
        return ServingPass.prefill(rows, -(-(k * isl + decodes) // rows), **kw)
    cached = (isl - tokens) // 2
    rows = max(1, -(-(tokens + decodes) // max(1, positions - cached)))
    return ServingPass(rows, -(-(tokens + decodes) // rows), cached, samples=False, **kw)


# ---- memory ------------------------------------------------------------------------------


def pool_kv_capacity(
    model: Model,
    acc: Accelerator,
    pool: Layout,
    workspace_bytes: int,
    ctx: ServeContext,
    memory_fraction: float | None = None,
) -> KvCapacity:
    """The KV pages a device of ``pool`` holds beside its weights and ``workspace_bytes``
    (``memory_fraction``: the engine's share of the memory, default vLLM's)."""
    return kv_cache_capacity(
        model,
        pool.t,
        acc.hbm_bytes,
        workspace_bytes,
        ep=pool.ep,
        pp=pool.p,
        memory_fraction=memory_fraction,
        **ctx.requests.pass_formats(),
    )


def pool_memory(
    model: Model,
    acc: Accelerator,
    pool: Layout,
    passes: list[ServingPass],
    sequences: int,
    tokens: int,
    ctx: ServeContext,
    fraction: float | None = None,
) -> PoolMemory:
    """A device of ``pool`` holding ``sequences`` sequences of ``tokens`` tokens of cache
    (``fraction``: the engine's share of the memory, default vLLM's)."""
    r = ctx.requests
    workspace = max(pass_workspace_bytes(model, p, pool.t, pool.ep) for p in passes)
    cap = pool_kv_capacity(model, acc, pool, workspace, ctx, fraction)
    blocks = max(stage_block_counts(model, pool.p))
    need = sequences * kv_cache_bytes_per_sequence(
        model, pool.t, tokens, r.kv_format, layers=blocks
    )
    held = model.kv_tokens(tokens)  # a sliding window holds its last tokens only
    pages_need = sequences * -(-held // cap.page_tokens)
    if pages_need > cap.pages:
        window = f" ({held} in the sliding window)" if held < tokens else ""
        raise Infeasible(
            f"KV cache: {fmt_noun(sequences, 'sequence')} of {tokens} tokens{window} need "
            f"{pages_need} pages of "
            f"{cap.page_tokens} tokens per device, the device holds {cap.pages} (of "
            f"{cap.usable_bytes / 2**30:.1f} GiB usable: weights {cap.weights_bytes / 2**30:.1f} "
            f"GiB, workspace {workspace / 2**30:.2f} GiB) at t={pool.t}, p={pool.p}, ep={pool.ep}"
        )
    return PoolMemory(cap.weights_bytes, workspace, need, cap.kv_cache_bytes, acc.hbm_bytes)


# ---- one layout --------------------------------------------------------------------------


def check_layout(model: Model, acc: Accelerator, layout: ServingLayout, ctx: ServeContext) -> None:
    """Raise a ConfigError when ``layout`` is not a complete layout of the cluster's devices
    that suits ``model`` (widths, expert degree, pipeline depth, micro-batches)."""
    if not layout.complete:
        raise ConfigError(f"serve: layout {layout} leaves fields open; evaluate a complete one")
    if layout.devices != ctx.cluster.devices:
        raise ConfigError(
            f"serve: the layout {layout} uses {fmt_noun(layout.devices, 'device')}, "
            "the cluster has "
            f"{ctx.cluster.devices} (t x p x d of each pool must add up to the devices)"
        )
    pools = (layout.decode, *((layout.prefill,) if layout.prefill else ()))
    probe = ServingPass.prefill(1, 1)
    for pool in pools:
        check_serving(model, probe, pool.t, pool.ep)
        if pool.p > model.layers:
            raise ConfigError(f"serve: p = {pool.p} must be at most the {model.layers} blocks")
    if layout.batching == "static" and layout.decode.p > 1:
        raise ConfigError("serve: static batching runs one pipeline stage (p = 1)")
    if layout.batch % layout.decode.p:
        raise ConfigError(
            f"serve: batch = {layout.batch} must be a multiple of p = {layout.decode.p} "
            "(one micro-batch per pipeline stage)"
        )


def layout_context(layout: ServingLayout, ctx: ServeContext) -> ServeContext:
    """``ctx`` with its requests' weight format the layout's, where the layout fixes one."""
    if layout.weights is None or layout.weights == ctx.requests.weight_format:
        return ctx
    requests = dataclasses.replace(ctx.requests, weight_format=layout.weights)
    return dataclasses.replace(ctx, requests=requests)


def check_weight_format(acc: Accelerator, ctx: ServeContext) -> None:
    """Raise one ConfigError naming the formats ``acc`` runs when its tensor cores lack the
    GEMM format of the requests' weight format."""
    fmt = ctx.requests.weight_format
    check_precision(acc, serving_settings().weight_recipes[fmt], f"weight format {fmt}")


def evaluate_layout(
    workload: str, model: Model, acc: Accelerator, layout: ServingLayout, ctx: ServeContext
) -> ServingPoint:
    """Price one complete serving layout (see the module docstring).

    Raises
    ------
    ConfigError
        The layout is incomplete, uses more devices than the cluster has, or does not suit
        the model.
    Infeasible
        Its sequences' KV cache does not fit, or its chunk budget cannot hold its batch.
    """
    ctx = layout_context(layout, ctx)
    check_weight_format(acc, ctx)
    check_layout(model, acc, layout, ctx)
    # the layout's batching and KV admission policies (a registry: phaze.model.serving_policies,
    # which prices passes with this module's functions, hence the import here)
    from phaze.model.serving_policies import price_layout

    engine, memory = price_layout(model, acc, layout, ctx)
    score = serving_score(
        engine,
        acc=acc,
        devices=layout.devices,
        devices_per_node=ctx.cluster.devices_per_node,
        tokens_to_serve=float(ctx.tokens_to_serve),
        params=ctx.scoring,
    )
    slo = []
    if ctx.ttft_limit_s is not None and engine.ttft_s > ctx.ttft_limit_s:
        slo.append("ttft")
    if ctx.tpot_limit_s is not None and engine.tpot_s > ctx.tpot_limit_s:
        slo.append("tpot")
    return ServingPoint(workload, acc, layout, engine, memory, score, tuple(slo))
