"""What serving holds and moves: the weights each pipeline stage's device holds, the paged KV
cache it has room for, and a pass's matmul FLOPs and the weight and cache bytes it reads
(docs/serving.md). Closed forms, independent of the op graphs (:mod:`workloads.serving_ops`),
which the tests check against them.
"""

from __future__ import annotations

from dataclasses import dataclass

from phaze_common.split import even_counts
from workloads.attention_ops import attended_scores, attended_tokens
from workloads.flops import attention_core_flops, block_forward_flops, embedding_forward_flops
from workloads.model import Model, PositionKind, padded_vocab
from workloads.moe_ops import expert_tokens
from workloads.serving import (
    ServingPass,
    kv_cache_bytes_per_token,
    serving_settings,
    weight_recipe,
)

__all__ = [
    "KvCapacity",
    "kv_cache_capacity",
    "attention_flops",
    "pass_flops",
    "weight_bytes_per_device",
    "pass_weight_read_bytes",
    "pass_kv_read_bytes",
    "stage_block_counts",
    "stage_parameters",
    "stage_weight_bytes",
    "block_weight_bytes",
]


@dataclass(frozen=True, slots=True)
class KvCapacity:
    """The paged KV cache one device holds: of its ``usable_bytes`` (the engine's share of
    memory), the weights and the largest pass's workspace are taken first, the rest is
    ``pages`` pages of ``page_tokens`` tokens, ``page_bytes`` each (all the device's
    blocks); ``pages`` is 0 when the weights and workspace do not fit."""

    usable_bytes: int
    weights_bytes: int
    workspace_bytes: int
    page_tokens: int
    page_bytes: int
    pages: int

    @property
    def tokens(self) -> int:
        return self.pages * self.page_tokens

    @property
    def kv_cache_bytes(self) -> int:
        return self.pages * self.page_bytes

    def sequences(self, tokens: int) -> int:
        """Sequences of ``tokens`` tokens each that fit at once."""
        return self.pages // -(-tokens // self.page_tokens)


def kv_cache_capacity(
    model: Model,
    tp: int,
    hbm_bytes: int,
    workspace_bytes: int,
    *,
    kv_format: str = "bf16",
    precision_bytes: int = 2,
    page_tokens: int | None = None,
    ep: int = 1,
    pp: int = 1,
    memory_fraction: float | None = None,
    weight_format: str = "bf16",
) -> KvCapacity:
    """The KV cache one device of a replica of ``pp`` pipeline stages of ``tp`` devices each
    (one of ``ep`` ranks sharing the routed experts) can keep (vLLM's sizing:
    ``gpu_memory_utilization`` x memory, less the weights and the peak activation memory
    its profiling pass measures): the stage with the fewest pages decides, every stage
    holding the cache of its own blocks for the same sequences. ``memory_fraction`` overrides
    the engine's share of the memory (a static-batch engine's is all of it)."""
    settings = serving_settings()
    page = page_tokens or settings.page_tokens
    usable = int((memory_fraction or settings.memory_fraction) * hbm_bytes)
    per_token = kv_cache_bytes_per_token(model, tp, kv_format, layers=1)
    stages = [
        (weights, page * per_token * blocks)
        for weights, blocks in zip(
            stage_weight_bytes(model, tp, ep, pp, precision_bytes, weight_format),
            stage_block_counts(model, pp),
            strict=True,
        )
    ]
    pages = min(max(0, (usable - w - workspace_bytes) // max(b, 1)) for w, b in stages)
    weights, page_bytes = max(w for w, _ in stages), max(b for _, b in stages)
    return KvCapacity(usable, weights, workspace_bytes, page, page_bytes, pages)


def stage_block_counts(model: Model, pp: int = 1) -> tuple[int, ...]:
    """Blocks on each of ``pp`` pipeline stages: as even as can be, the first stages taking
    one more when ``pp`` does not divide the blocks (vLLM's ``get_pp_indices`` gives its
    extra layers to stages before the last), the rule of training's default stage split."""
    return even_counts(model.layers, pp)


def stage_parameters(model: Model, tp: int, ep: int = 1, pp: int = 1) -> tuple[int, ...]:
    """Parameters one device of each pipeline stage holds: its blocks' shards (an MoE
    block's routed experts over ``ep`` ranks), the embedding on the first stage, the head
    on the last (with a copy of a tied LM-head matrix when that is not the first stage)."""
    return tuple(b + e for b, e in _stage_split(model, tp, ep, pp))


def _stage_split(model: Model, tp: int, ep: int, pp: int) -> tuple[tuple[int, int], ...]:
    """(block parameters, embedding and head parameters) of each stage's device."""
    dense = model.dense_layers
    experts = model.expert_parameters(tp)
    moe = model.block_parameters(tp) - experts + experts // ep
    out, first = [], 1
    for i, n in enumerate(stage_block_counts(model, pp)):
        blocks = range(first, first + n)
        first += n
        params = sum(model.block_parameters(tp, dense=True) if b <= dense else moe for b in blocks)
        edges = model.embedding_parameters(tp) if i == 0 else 0
        if i == pp - 1:
            edges += model.head_parameters(tp) + (model.tied_head_parameters(tp) if i else 0)
        out.append((params, edges))
    return tuple(out)


def block_weight_bytes(
    precision_bytes: int = 2, weight_format: str = "bf16", row_elements: int = 1
) -> float:
    """Bytes of one block weight stored in ``weight_format``: the recipe's stored element
    and its share of the scales when it stores its weights narrower than bf16 (a
    per-output-channel scale counted once per ``row_elements`` weights), else
    ``precision_bytes``."""
    r = weight_recipe(weight_format)
    if r.stores_low_weights or r.dequantizes_weights:
        return r.weight_element_bytes(row_elements)
    return precision_bytes


def stage_weight_bytes(
    model: Model,
    tp: int,
    ep: int = 1,
    pp: int = 1,
    precision_bytes: int = 2,
    weight_format: str = "bf16",
) -> tuple[int, ...]:
    """Weight bytes one device of each stage holds: the blocks' weights in ``weight_format``
    (their norm gains too, a few thousandths of a percent of them), the embedding and head
    in ``precision_bytes`` (the fp8 recipe keeps them in bf16). A per-output-channel scale
    is counted once per ``hidden`` weights: the rows of every block matrix but the FFN's
    down projection (whose rows are longer) are ``hidden`` long."""
    block = block_weight_bytes(precision_bytes, weight_format, model.hidden)
    out = [round(block * b) + precision_bytes * e for b, e in _stage_split(model, tp, ep, pp)]
    out[-1] -= _head_saving(model, tp, precision_bytes, weight_format)
    return tuple(out)


def _head_saving(model: Model, tp: int, precision_bytes: int, weight_format: str) -> int:
    """Bytes the LM-head matrix shard (untied) saves when the weight format quantizes it too
    (gpt-fast quantizes every Linear, the output head among them), else 0."""
    r = weight_recipe(weight_format)
    if not (r.quantizes_head and (r.stores_low_weights or r.dequantizes_weights)):
        return 0
    if model.tied_embeddings:
        return 0
    e = model.embedding_dim
    lm = padded_vocab(model.vocab, tp) // tp * e
    return round((precision_bytes - r.weight_element_bytes(e)) * lm)


# ---- FLOPs and bytes of a pass ----------------------------------------------------------------


def _absorbed(model: Model, p: ServingPass) -> bool:
    """MLA decodes in the latent space (keys and values never up-projected)."""
    return model.mla and p.is_decode


def attention_flops(model: Model, p: ServingPass) -> int:
    """QK^T and PV of a pass over all heads: each of a sequence's ``C`` new tokens attends
    the ``P`` cached ones and the new ones up to itself (a causal decoder),
    ``C P + C (C + 1) / 2`` scores per head (at most the sliding window's keys each:
    :func:`~workloads.attention_ops.attended_scores`), ``2 (d_qk + d_v)`` FLOPs each (an
    absorbed MLA decode: ``2 (2 kv_lora_rank + qk_rope_head_dim)``, over the latent)."""
    c, cached = p.new_tokens, p.cached_tokens
    scores = attended_scores(c, cached, model.sliding_window)
    if _absorbed(model, p):
        width = 2 * model.kv_lora_rank + model.qk_rope_head_dim
    else:
        width = model.head_dim + model.value_head_dim
    return 2 * p.batch * model.heads * scores * width


def pass_flops(model: Model, p: ServingPass) -> int:
    """Matmul FLOPs of one pass over all devices: ``2`` per weight per token through the
    blocks (only the ``top_k`` routed experts and the shared ones), the attention
    (:func:`attention_flops`), OPT's embedding projections, and the LM head on each
    sequence's last token only when the pass samples; MLA up-projects its cached context's
    latents in a chunked prefill."""
    b, c = p.batch, p.new_tokens
    dense = model.dense_layers
    blocks = sum(
        n * (block_forward_flops(model, c, b, dense=kind) - attention_core_flops(model, c, b))
        for n, kind in ((dense, True), (model.layers - dense, False))
    )
    if model.mla and p.cached_tokens and not p.is_decode:
        up = model.kv_lora_rank * model.heads * (model.qk_nope_head_dim + model.value_head_dim)
        blocks += 2 * b * p.cached_tokens * up * model.layers
    e, h = model.embedding_dim, model.hidden
    edges = embedding_forward_flops(model, c, b) + (2 * b * c * h * e if e != h else 0)
    head = 2 * b * e * model.vocab if p.samples else 0
    return blocks + model.layers * attention_flops(model, p) + edges + head


def weight_bytes_per_device(
    model: Model,
    tp: int,
    precision_bytes: int = 2,
    ep: int = 1,
    pp: int = 1,
    weight_format: str = "bf16",
) -> int:
    """Bytes of the weights one device holds, of a replica of ``pp`` pipeline stages of a
    tensor-parallel group of ``tp`` each (the fullest stage's; :func:`stage_weight_bytes`):
    with the whole model on one group, embedding, blocks and head shards (a tied LM head
    once)."""
    return max(stage_weight_bytes(model, tp, ep, pp, precision_bytes, weight_format))


def pass_weight_read_bytes(model: Model, tp: int, p: ServingPass, ep: int = 1) -> int:
    """Weight bytes one device must read in a pass: every block weight but, in MoE blocks,
    only the experts some token is routed to of the ``1/ep`` the device holds (balanced
    routing, :func:`~workloads.moe_ops.expert_tokens`); the final norm (and OPT's projection) and,
    when the pass samples, the LM-head matrix; the embedding rows of the pass's tokens
    (and position rows, OPT's input projection); the block weights in the pass's weight
    format."""
    dense = model.dense_layers
    blocks = dense * model.block_parameters(tp, dense=True)
    if model.is_moe:
        per_expert = model.expert_parameters(tp) // model.experts
        reached = sum(1 for n in expert_tokens(p.tokens, model, ep) if n)
        moe = model.block_parameters(tp) - model.expert_parameters(tp) + reached * per_expert
        blocks += (model.layers - dense) * moe
    else:
        blocks += (model.layers - dense) * model.block_parameters(tp)
    e, h = model.embedding_dim, model.hidden
    lm = padded_vocab(model.vocab, tp) // tp * e
    params = model.head_parameters(tp) + model.tied_head_parameters(tp) - (0 if p.samples else lm)
    rows = p.tokens * (e + (h if model.positions is PositionKind.LEARNED else 0))
    params += rows + (e * h if e != h else 0)
    block = block_weight_bytes(p.precision_bytes, p.weight_format, model.hidden)
    head = _head_saving(model, tp, p.precision_bytes, p.weight_format) if p.samples else 0
    return round(block * blocks) + p.precision_bytes * params - head


def pass_kv_read_bytes(model: Model, tp: int, p: ServingPass) -> int:
    """Cache bytes one device reads in a pass: every sequence's keys and values (or latents)
    of all its ``cached + new`` tokens (with a sliding window, the new ones and the cached
    ones inside it: :func:`~workloads.attention_ops.attended_tokens`), each once, in every
    block."""
    tokens = attended_tokens(p.new_tokens, p.cached_tokens, model.sliding_window)
    return p.batch * tokens * kv_cache_bytes_per_token(model, tp, p.kv_format)
