"""The engine policies a serving layout runs, each a named entry of a small registry
(docs/serving.md, "Engine policies").

* **batching** (:data:`BATCHING`): how a layout's steps are made, priced into the engine's
  steady state and the memory of a device of each pool: ``static`` (a batch prefilled
  together then decoded to its end), ``continuous`` (whole prompts prefilled in steps of
  their own between decode steps), ``chunked`` (a token budget per step, the decodes first
  and a chunk of a prompt in the rest) and ``disaggregated`` (separate prefill and decode
  pools, the KV cache sent between them). :func:`batching_policy` names the one a layout
  runs.
* **KV admission** (:data:`KV_ADMISSION`): how much of a request's KV cache the scheduler
  holds while it runs: its pages as its tokens arrive (``on-demand``) or its whole prompt
  and output from admission (``whole-request``).
* **preemption** (:data:`PREEMPTION`): what a scheduler does with a request whose next
  page does not fit: ``recompute`` (vLLM's: the request's pages are freed and its prompt
  and generated tokens prefilled again when it is readmitted); the simulation under load
  (:mod:`placement.serving_sim`) runs it.

:func:`phaze.model.serving.evaluate_layout` looks its layout's policies up here; a new policy is a
new entry, not a branch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from arch_space import Accelerator
from arch_space.perf import default_settings
from arch_space.tech import tech_node
from ilp.serving import serving_device_profile
from phaze.model.serving import (
    PoolMemory,
    ServeContext,
    ServingPoint,
    chunk_pass,
    decode_step,
    layout_context,
    pass_cost,
    pj_j,
    pool_memory,
    prefill_cost,
)
from phaze_common.errors import unknown_name
from placement import network as net
from placement.serving_engine import (
    EngineResult,
    Lengths,
    PassCost,
    check_chunk_budget,
    chunked,
    disaggregated,
    mixed,
    prefill_batch,
    prefill_batches,
    prefill_first,
    static,
)
from placement.serving_layout import ServingLayout
from workloads import Model
from workloads.serving import (
    PREEMPTIONS,
    ServingPass,
    kv_cache_bytes_per_token,
    serving_settings,
)
from workloads.serving_costs import pass_kv_read_bytes

__all__ = [
    "KvAdmission",
    "KV_ADMISSION",
    "kv_admission_policy",
    "Preemption",
    "PREEMPTION",
    "BatchingPolicy",
    "BATCHING",
    "batching_policy",
    "price_layout",
    "pair_transfer_s",
]


# ---- KV admission ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class KvAdmission:
    """How a scheduler reserves a request's KV cache: ``whole_request`` holds its prompt and
    whole output from admission; otherwise pages come as tokens arrive, so over its life a
    request holds its prompt and half its output on average."""

    name: str
    whole_request: bool

    def in_flight_tokens(self, lengths: Lengths) -> int:
        """The cache tokens a running sequence holds in steady state."""
        held = lengths.output_tokens if self.whole_request else lengths.output_tokens / 2
        return round(lengths.input_tokens + held)


KV_ADMISSION: Final[Mapping[str, KvAdmission]] = MappingProxyType(
    {
        "on-demand": KvAdmission("on-demand", whole_request=False),
        "whole-request": KvAdmission("whole-request", whole_request=True),
    }
)


def kv_admission_policy(name: str) -> KvAdmission:
    """The registered KV admission policy ``name`` (a ConfigError naming them otherwise)."""
    if name not in KV_ADMISSION:
        raise unknown_name("KV admission policy", name, KV_ADMISSION)
    return KV_ADMISSION[name]


# ---- preemption --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Preemption:
    """What a scheduler does with a running request whose next page does not fit
    (``recompute``: its cache is dropped and its prompt and generated tokens prefilled again
    on readmission, as :func:`placement.serving_sim.simulate_engine` runs it)."""

    name: str


PREEMPTION: Final[Mapping[str, Preemption]] = MappingProxyType(
    {name: Preemption(name) for name in PREEMPTIONS}
)


# ---- batching ----------------------------------------------------------------------------

#: A batching policy's memory: (model, accelerator, layout, context, admission, the decode
#: micro-batch's pass) -> each pool's memory; raises Infeasible where it does not fit, before
#: any pass is priced (a search then prices no pass of a layout that cannot run).
Sizer = Callable[
    [Model, Accelerator, ServingLayout, ServeContext, KvAdmission, ServingPass],
    tuple[PoolMemory, ...],
]
#: A batching policy's pricing: (model, accelerator, layout, context, the decode micro-batch's
#: pass and its cost) -> the engine's steady state.
Pricer = Callable[
    [Model, Accelerator, ServingLayout, ServeContext, ServingPass, PassCost], EngineResult
]


@dataclass(frozen=True, slots=True)
class BatchingPolicy:
    """A named batching policy, its memory (:data:`Sizer`) and its pricing (:data:`Pricer`)."""

    name: str
    memory: Sizer
    price: Pricer


def _common(layout: ServingLayout, ctx: ServeContext) -> dict[str, object]:
    dec = layout.decode
    return {"replicas": dec.d, "replica_devices": dec.t * dec.p, "lengths": ctx.lengths}


def _longest_prompt(ctx: ServeContext) -> int:
    return max(i for i, _, _ in ctx.requests.lengths)


def _static(model, acc, layout, ctx, decode_pass, decode):
    """A batch of prompts prefilled together, then decoded to its end."""
    prefill = prefill_cost(model, acc, layout.decode, layout.batch, ctx)
    return static(decode, prefill, batch=layout.batch, **_common(layout, ctx))


def _static_memory(model, acc, layout, ctx, admission, decode_pass):
    """The device holds the batch's whole cache at its longest (an engine without paging)."""
    r, kw, dec, b = ctx.requests, ctx.requests.pass_formats(), layout.decode, layout.batch
    full = _longest_prompt(ctx) + max(o for _, o, _ in r.lengths) - 1
    passes = [decode_pass, *(ServingPass.prefill(b, i, **kw) for i, _, _ in r.lengths)]
    fraction = serving_settings().static_memory_fraction
    return (pool_memory(model, acc, dec, passes, b, full, ctx, fraction),)


def _continuous(model, acc, layout, ctx, decode_pass, decode):
    """Continuous batching with whole prompts prefilled in steps of their own."""
    dec, b = layout.decode, layout.batch
    k = prefill_batch(b, ctx.lengths)
    prefill = prefill_cost(model, acc, dec, k, ctx)
    return prefill_first(
        decode, prefill, batch=b, prefill_prompts=k, stages=dec.p, **_common(layout, ctx)
    )


def _continuous_memory(model, acc, layout, ctx, admission, decode_pass):
    r, kw, dec, b = ctx.requests, ctx.requests.pass_formats(), layout.decode, layout.batch
    k = prefill_batch(b, ctx.lengths)
    passes = [decode_pass, *(ServingPass.prefill(k, i, **kw) for i, _, _ in r.lengths)]
    in_flight = admission.in_flight_tokens(ctx.lengths)
    return (pool_memory(model, acc, dec, passes, b, in_flight, ctx),)


def _chunk_passes(model: Model, layout: ServingLayout, ctx: ServeContext) -> list[ServingPass]:
    """The two steps of a chunked-prefill layout: a micro-batch's decode tokens riding on a
    chunk of the mean prompt tokens a step prefills, and on the first chunk (the budget the
    decodes leave, at most a prompt)."""
    lengths, micro = ctx.lengths, layout.batch // layout.decode.p
    mean_tokens = max(1, round(micro * lengths.input_tokens / lengths.steps))
    first_tokens = max(1, min(layout.chunk - micro, _longest_prompt(ctx)))
    return [chunk_pass(n, micro, ctx, model.max_positions) for n in (mean_tokens, first_tokens)]


def _chunk_steps(
    model: Model, acc: Accelerator, layout: ServingLayout, ctx: ServeContext, decode: ServingPass
) -> list[PassCost]:
    """The steps of :func:`_chunk_passes` as the engine prices them, each with the decodes'
    KV-cache reads from HBM."""
    dec = layout.decode
    sustained = acc.hbm_bandwidth_bytes_per_s * default_settings().hbm_efficiency
    kv = pass_kv_read_bytes(model, dec.t, decode)  # one device, every stage
    kv_j = dec.t * kv * tech_node(acc.node_nm).hbm_energy_pj_per_byte * 1e-12
    return [
        mixed(
            pass_cost(model, acc, dec, c, ctx), kv / dec.p / sustained, kv_j, dec.p, dec.t * dec.p
        )
        for c in _chunk_passes(model, layout, ctx)
    ]


def _chunked(model, acc, layout, ctx, decode_pass, decode):
    """Chunked prefill: a token budget per step, the decodes first and a prompt's chunk in
    the rest, both through the same matmuls."""
    steps = _chunk_steps(model, acc, layout, ctx, decode_pass)
    dec, b = layout.decode, layout.batch
    return chunked(
        steps[0],
        steps[1],
        batch=b,
        chunk_tokens=layout.chunk,
        stages=dec.p,
        **_common(layout, ctx),
    )


def _chunked_memory(model, acc, layout, ctx, admission, decode_pass):
    """The engine's chunk budget checked first (as :func:`chunked` does), then the memory."""
    dec, b = layout.decode, layout.batch
    check_chunk_budget(layout.chunk, b, dec.p, ctx.lengths)
    passes = [decode_pass, *_chunk_passes(model, layout, ctx)]
    in_flight = admission.in_flight_tokens(ctx.lengths)
    return (pool_memory(model, acc, dec, passes, b, in_flight, ctx),)


def _prompt_cache_bytes(model: Model, ctx: ServeContext) -> int:
    """The KV cache a disaggregated prefill sends a decode pool for a prompt of the mean
    length: all its tokens', or with a sliding window the window's."""
    prompt = model.kv_tokens(round(ctx.lengths.input_tokens))
    return prompt * kv_cache_bytes_per_token(model, 1, ctx.requests.kv_format)


def _prompt_transfer(
    model: Model,
    acc: Accelerator,
    layout: ServingLayout,
    ctx: ServeContext,
    inter: bool | None = None,
) -> tuple[float, float]:
    """Seconds and joules of a disaggregated layout's handing a prompt's KV cache from its
    prefill pool to its decode pool: each prefill device sends its shard (under MLA, whose
    latent cache every tensor-parallel device holds whole, its stage's share) over the
    measured point-to-point link, within a node or across nodes (``inter``; None: across
    when the layout's devices span nodes)."""
    pre = layout.prefill
    per_request = _prompt_cache_bytes(model, ctx)
    shard = per_request / (pre.t * pre.p) if not model.mla else per_request / pre.p
    if inter is None:
        inter = bool(ctx.cluster.spans_nodes(layout.devices))
    curve = (ctx.device or serving_device_profile(acc)).intra_node
    bw, lat = (float(x) for x in net.measured_link(ctx.cluster, curve, inter, shard, "p2p"))
    return lat + shard / bw, pj_j(per_request, inter)


def pair_transfer_s(model: Model, point: ServingPoint, ctx: ServeContext) -> float:
    """Seconds to send a prompt's KV cache from ``point``'s prefill pool to a decode pool on
    other machines (a pair of designs: :mod:`phaze.sweep.pairs`), across nodes."""
    ctx = layout_context(point.layout, ctx)
    return _prompt_transfer(model, point.design, point.layout, ctx, inter=True)[0]


def _disaggregated(model, acc, layout, ctx, decode_pass, decode):
    """Separate prefill and decode pools, each request's KV cache sent between them."""
    dec, pre, b = layout.decode, layout.prefill, layout.batch
    ks = prefill_batches(ctx.token_budget // _longest_prompt(ctx))
    prefills = {k: prefill_cost(model, acc, pre, k, ctx) for k in ks}
    transfer_s, transfer_j = _prompt_transfer(model, acc, layout, ctx)
    return disaggregated(
        decode,
        prefills,
        batch=b,
        decode_stages=dec.p,
        decode_replicas=dec.d,
        decode_devices=dec.t * dec.p,
        prefill_stages=pre.p,
        prefill_replicas=pre.d,
        prefill_devices=pre.t * pre.p,
        transfer_s=transfer_s,
        transfer_j=transfer_j,
        lengths=ctx.lengths,
    )


def _disaggregated_memory(model, acc, layout, ctx, admission, decode_pass):
    r, kw = ctx.requests, ctx.requests.pass_formats()
    dec, pre, b = layout.decode, layout.prefill, layout.batch
    isl = _longest_prompt(ctx)
    ks = prefill_batches(ctx.token_budget // isl)
    micro = b // dec.p
    in_flight = admission.in_flight_tokens(ctx.lengths)
    prompts = [ServingPass.prefill(max(ks), i, **kw) for i, _, _ in r.lengths]
    return (
        pool_memory(model, acc, dec, [decode_pass], micro * dec.p, in_flight, ctx),
        pool_memory(model, acc, pre, prompts, max(ks), isl, ctx),
    )


BATCHING: Final[Mapping[str, BatchingPolicy]] = MappingProxyType(
    {
        p.name: p
        for p in (
            BatchingPolicy("static", _static_memory, _static),
            BatchingPolicy("continuous", _continuous_memory, _continuous),
            BatchingPolicy("chunked", _chunked_memory, _chunked),
            BatchingPolicy("disaggregated", _disaggregated_memory, _disaggregated),
        )
    }
)


def batching_policy(layout: ServingLayout) -> BatchingPolicy:
    """The batching policy a complete layout runs: separate pools, else its batching, with
    a chunk budget the chunked policy."""
    if layout.prefill is not None:
        return BATCHING["disaggregated"]
    if layout.batching == "static":
        return BATCHING["static"]
    return BATCHING["continuous" if layout.chunk is None else "chunked"]


def price_layout(
    model: Model,
    acc: Accelerator,
    layout: ServingLayout,
    ctx: ServeContext,
    policy: BatchingPolicy | None = None,
) -> tuple[EngineResult, tuple[PoolMemory, ...]]:
    """The engine's steady state and each pool's memory under the layout's batching policy
    (or ``policy``, one not registered yet) and the context's KV admission. The memory
    comes first: a layout that does not fit raises Infeasible before any of its passes is
    priced (the costly step)."""
    admission = kv_admission_policy(ctx.kv_admission)
    policy = batching_policy(layout) if policy is None else policy
    decode_pass = decode_step(layout.batch // layout.decode.p, ctx)
    memory = policy.memory(model, acc, layout, ctx, admission, decode_pass)
    decode = pass_cost(model, acc, layout.decode, decode_pass, ctx)
    return policy.price(model, acc, layout, ctx, decode_pass, decode), memory
