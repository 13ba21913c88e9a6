"""Closed-form FLOP counts (a multiply-accumulate = 2 FLOPs), matrix multiplies only.

These are the papers' counts (docs/models.md): a GPT block's forward pass is
``24 b s h^2 + 4 b s^2 h`` FLOPs (FFN width 4h), the logits ``2 b s h V``, and one
iteration with full recompute ``96 B s l h^2 (1 + s/(6h) + V/(16 l h))`` (Narayanan et al.,
"Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM", SC21,
eq. 3). The attention score and value GEMMs count the whole ``s x s`` matrix also for causal
models, as the papers do (with a sliding window, ``s x min(s, window)``). The backward pass is twice the forward (input and weight
gradients). MoE blocks count the router, the ``top_k`` activated experts per token and the
shared experts; an MoE model's leading dense blocks count their dense FFN. Multi-head latent
attention counts its down- and up-projections.
Vector-op FLOPs (norms, softmax, activations) are in the op graphs, not here.
"""

from __future__ import annotations

from workloads.model import Model
from workloads.recompute_modules import MODULES_PREFIX, parse_modules
from workloads.setup import Recompute

__all__ = [
    "attention_core_flops",
    "attention_projection_flops",
    "block_forward_flops",
    "embedding_forward_flops",
    "head_forward_flops",
    "mtp_forward_flops",
    "forward_flops_per_sequence",
    "model_flops_per_sequence",
    "hardware_flops_per_sequence",
    "recomputed_group_flops",
]


def attention_core_flops(model: Model, seq_len: int, batch: int = 1) -> int:
    """Forward FLOPs of QK^T and attention x V: ``4 b s^2 a d`` (= ``4 b s^2 h``);
    ``2 b s^2 a (d_qk + d_v)`` with MLA's distinct key and value head widths. With a
    sliding window ``w`` each query's keys are at most ``w``: ``s min(s, w)`` scores in
    place of ``s^2`` (the whole-matrix convention, inside the window)."""
    width = model.head_dim + model.value_head_dim
    return 2 * batch * seq_len * model.kv_tokens(seq_len) * model.heads * width


def attention_projection_flops(model: Model, tokens: int) -> int:
    """Forward FLOPs of Q, K, V and the output projection on ``tokens`` tokens (MLA: the
    down-projections to the latents, then the per-head up-projections)."""
    h, d, a = model.hidden, model.head_dim, model.heads
    if not model.mla:
        return 2 * tokens * h * (a + 2 * model.kv_heads) * d + 2 * tokens * a * d * h
    kr, v = model.kv_lora_rank, model.value_head_dim
    if model.q_lora_rank is None:
        q = h * a * d
    else:
        q = model.q_lora_rank * (h + a * d)
    kv = h * (kr + model.qk_rope_head_dim) + kr * a * (model.qk_nope_head_dim + v)
    return 2 * tokens * (q + kv + a * v * h)


def block_forward_flops(model: Model, seq_len: int, batch: int = 1, dense: bool = False) -> int:
    """Forward FLOPs of one transformer block on ``batch`` sequences (``dense``: one of an
    MoE model's leading dense blocks).

    >>> from workloads.catalog import get_model
    >>> m = get_model("gpt3-175b"); b, s, h = 1, 2048, m.hidden
    >>> block_forward_flops(m, s, b) == 24 * b * s * h**2 + 4 * b * s**2 * h
    True
    """
    tokens, h = batch * seq_len, model.hidden
    per_width = 2 * (3 if model.ffn_kind.gated else 2) * tokens * h
    if model.is_moe and not dense:
        widths = (model.top_k + model.shared_experts) * model.expert_width
        ffn = per_width * widths + 2 * tokens * h * model.experts  # experts + router
    else:
        ffn = per_width * model.ffn_hidden
    attention = attention_projection_flops(model, tokens)
    return attention + attention_core_flops(model, seq_len, batch) + ffn


def _blocks_forward_flops(model: Model, seq_len: int) -> int:
    """Forward FLOPs of all blocks of one sequence."""
    dense = model.dense_layers * block_forward_flops(model, seq_len, dense=True)
    return dense + (model.layers - model.dense_layers) * block_forward_flops(model, seq_len)


def embedding_forward_flops(model: Model, seq_len: int, batch: int = 1) -> int:
    """GEMM FLOPs of the embedding layer: OPT's project-in, else none (a lookup)."""
    e, h = model.embedding_dim, model.hidden
    return 2 * batch * seq_len * e * h if e != h else 0


def head_forward_flops(model: Model, seq_len: int, batch: int = 1) -> int:
    """Logits ``2 b s h V`` (+ OPT's project-out, + BERT's MLM dense layer)."""
    tokens, e, h = batch * seq_len, model.embedding_dim, model.hidden
    n = 2 * tokens * e * model.vocab
    if e != h:
        n += 2 * tokens * h * e
    if not model.causal:
        n += 2 * tokens * h * h
    return n


def mtp_forward_flops(model: Model, seq_len: int, batch: int = 1) -> int:
    """GEMM FLOPs of the model's multi-token-prediction modules: each one's ``2h -> h``
    projection, block and logits (:mod:`workloads.mtp_ops`), as Megatron-LM's
    ``num_floating_point_operations`` counts them (its norms aside)."""
    tokens, h = batch * seq_len, model.hidden
    per = 2 * tokens * 2 * h * h + block_forward_flops(model, seq_len, batch)
    return model.mtp_layers * (per + 2 * tokens * model.embedding_dim * model.vocab)


def forward_flops_per_sequence(model: Model, seq_len: int) -> int:
    """Forward FLOPs of one sequence: embedding, blocks, head and MTP modules."""
    return (
        embedding_forward_flops(model, seq_len)
        + _blocks_forward_flops(model, seq_len)
        + head_forward_flops(model, seq_len)
        + mtp_forward_flops(model, seq_len)
    )


def model_flops_per_sequence(model: Model, seq_len: int) -> int:
    """Forward + backward FLOPs of one sequence, no recompute (the MFU numerator)."""
    return 3 * forward_flops_per_sequence(model, seq_len)


def hardware_flops_per_sequence(
    model: Model, seq_len: int, recompute: Recompute | str = "none"
) -> int:
    """:func:`model_flops_per_sequence` plus the recomputed forward work of each block:
    the whole block (full), the attention core (selective) or the GEMMs of the named
    recompute groups (``modules:a+b``, :func:`recomputed_group_flops`).

    >>> from workloads.catalog import get_model
    >>> m = get_model("megatron-1t"); s, l, h, V = 2048, m.layers, m.hidden, m.vocab
    >>> exact = 96 * s * l * h**2 * (1 + s / (6 * h) + V / (16 * l * h))
    >>> abs(hardware_flops_per_sequence(m, s, "full") / exact - 1) < 1e-3
    True
    """
    if str(recompute).startswith(MODULES_PREFIX):
        groups = parse_modules(str(recompute))
        moe_layers = model.layers - model.dense_layers if model.is_moe else 0
        dense = model.layers - moe_layers
        moe_layers += model.mtp_layers  # an MTP module's block is of the model's kind
        extra = dense * recomputed_group_flops(model, seq_len, groups, True)
        extra += moe_layers * recomputed_group_flops(model, seq_len, groups, False)
        return model_flops_per_sequence(model, seq_len) + extra
    match Recompute(recompute):
        case Recompute.NONE:
            extra = 0
        case Recompute.SELECTIVE:
            extra = (model.layers + model.mtp_layers) * attention_core_flops(model, seq_len)
        case _:
            mtp = model.mtp_layers * block_forward_flops(model, seq_len)
            extra = _blocks_forward_flops(model, seq_len) + mtp
    return model_flops_per_sequence(model, seq_len) + extra


def recomputed_group_flops(model: Model, seq_len: int, groups: frozenset[str], dense: bool) -> int:
    """GEMM FLOPs of one sequence the recompute ``groups`` rebuild in one block (``dense``:
    a dense block): the attention core, MLA's up-projections (and Q's projection without a
    Q latent), a dense FFN, the MoE layer's experts and router or the shared experts alone;
    norms and activations run on the vector cores."""
    tokens, h = seq_len, model.hidden
    per_width = 2 * (3 if model.ffn_kind.gated else 2) * tokens * h
    n = attention_core_flops(model, seq_len) if "core_attn" in groups else 0
    if "mla_up_proj" in groups and model.mla:
        a, kr = model.heads, model.kv_lora_rank
        n += 2 * tokens * (model.q_lora_rank or h) * a * model.head_dim
        n += 2 * tokens * kr * a * (model.qk_nope_head_dim + model.value_head_dim)
    if not (model.is_moe and not dense):
        return n + (per_width * model.ffn_hidden if "mlp" in groups else 0)
    if "moe" in groups:
        widths = (model.top_k + model.shared_experts) * model.expert_width
        return n + per_width * widths + 2 * tokens * h * model.experts
    if "shared_experts" in groups:
        n += per_width * model.shared_experts * model.expert_width
    return n
