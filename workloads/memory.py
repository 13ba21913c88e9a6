"""Stashed-activation and boundary bytes per layer, per micro-batch, per device (docs/models.md).

Transformer blocks follow Korthikanti et al., "Reducing Activation Recomputation in Large
Transformer Models", 2022, §4 (Table 2): with 2-byte activations and 1-byte dropout masks a
GPT block stashes

* ``s b h (34 + 5 a s / h)`` bytes without parallelism,
* ``s b h (10 + 24/t + 5 a s / (h t))`` with tensor parallelism,
* ``s b h / t (34 + 5 a s / h)`` with tensor and sequence parallelism,
* ``s b h (10 + 24/t)``, or ``34 s b h / t`` with sequence parallelism, with selective
  recompute, and
* ``2 s b h`` (the block input; ``/t`` with sequence parallelism) with full recompute.

The terms, generalised here term by term:

* replicated over the tensor-parallel group (split by ``t`` with sequence parallelism): the
  two norm inputs, the Q/K/V input and the MLP input (``p s b h`` each; one norm input and
  one shared GEMM input for a parallel block with one norm, two more norm inputs with
  post-norms) and the two dropout masks after attention and MLP (``s b h`` bytes each, only
  if the model uses dropout);
* split by ``t``: Q, K and V (``p s b (a + 2 g) d``: smaller K and V with grouped-query
  attention), the output-projection input ``p s b h``, and the FFN's inner tensors: the
  activation input and FC2 input (``2 p s b f``) for a GELU/ReLU MLP, the gate, up and FC2
  inputs (``3 p s b f``) for SwiGLU, times ``top_k`` for MoE (each token passes through
  ``top_k`` experts);
* the attention core, split by ``t``, dropped by selective recompute: the softmax output
  (``p a s^2 b``) and, with dropout, its mask (``a s^2 b``) and output (``p a s^2 b``);
  with the framework's ``flash`` kernel (FlashAttention keeps no score, probability or
  mask: its backward recomputes them from Q, K, V, the output and the random seed) only
  the fp32 log-sum-exp per query row (``4 a s b``), so a block stashes
  ``s b h (34 + 4 a / h)`` bytes without parallelism and ``34 s b h / t + 4 a s b / t``
  with tensor and sequence parallelism (``p = 2``, dropout);
* MoE only, computed after the all-gather so not split by sequence parallelism: the router
  probabilities (``p s b E``) and the dispatched expert inputs (``p s b k h``); shared
  experts stash their inner tensors as a dense FFN of their width does. An MoE model's
  leading dense blocks stash as a dense block of width ``ffn_hidden``.
* multi-head latent attention as trained (no absorbed up-projections): the up-projected Q,
  K (``a (d_nope + d_rope)`` each) and V (``a d_v``) and the output-projection input
  (``a d_v``), split by ``t``; the latents, which the replicated down-projections make on
  every tensor-parallel rank (Megatron-LM's ``MLASelfAttention``): Q's latent norm input and
  up-projection input (``2 q_r``), K/V's (``2 kv_r``) and the rotary key part (``d_rope``).

``p`` is the setup's precision in bytes, so ``p = 2`` gives the paper's formulas exactly. A
precision recipe that runs the Linear GEMMs in fp8 stashes their inputs (the Q/K/V, FFN,
output-projection and FC2 inputs, an MoE expert's dispatched input) at its
``saved_linear_input_bytes`` (one byte: Transformer Engine keeps the fp8 column copy the
weight gradient reads; DeepSeek-V3 caches fp8 activations), the rest at ``p``.
"""

from __future__ import annotations

from workloads.model import Model, padded_vocab
from workloads.setup import Recompute, TrainingSetup

__all__ = [
    "MASK_BYTES",
    "LOGIT_BYTES",
    "LSE_BYTES",
    "block_activation_bytes",
    "embedding_activation_bytes",
    "head_activation_bytes",
    "boundary_bytes",
    "dispatch_bytes",
    "kv_bytes",
]

MASK_BYTES = 1  # per dropout-mask element (Korthikanti et al. 2022, §4.1)
# the unfused cross entropy keeps its fp32 softmax of the logits for the backward pass
# (Korthikanti et al. 2022, §4.3); a fused kernel keeps the logits' own copy (the precision's
# bytes), as TransformerEngine's parallel_cross_entropy saves its bf16 input
LOGIT_BYTES = 4
LSE_BYTES = 4  # the fp32 log-sum-exp per query row a flash attention forward keeps


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _sp_divisor(setup: TrainingSetup, tp: int) -> int:
    return tp if setup.sequence_parallel and tp > 1 else 1


def block_activation_bytes(model: Model, setup: TrainingSetup, tp: int, dense: bool = False) -> int:
    """Bytes one transformer block stashes for its backward pass, per micro-batch per device
    (``dense``: one of an MoE model's leading dense blocks).

    Examples
    --------
    GPT-3 175B, s = 2048, b = 1, t = 8 with sequence parallelism and selective recompute:
    34 s b h / t.

    >>> from workloads.catalog import get_model
    >>> m, s = get_model("gpt3-175b"), TrainingSetup(2048, 1, recompute="selective",
    ...     sequence_parallel=True)
    >>> block_activation_bytes(m, s, 8) == 34 * 2048 * 12288 // 8
    True
    """
    p, b, s, t = setup.precision_bytes, setup.micro_batch, setup.seq_len, tp
    h, tokens = model.hidden, setup.micro_batch * setup.seq_len
    rep = _sp_divisor(setup, tp)
    if setup.recompute is Recompute.FULL:
        return _ceil_div(p * tokens * h, rep)
    mods = setup.recompute_modules
    mask = MASK_BYTES if model.dropout else 0
    shared = model.block_norms == 1  # one norm output feeds attention and FFN (Falcon-7B)
    post_norms = 2 if model.block_norms == 4 else 0  # Gemma 2: sub-layer outputs normalised
    # norm inputs at p bytes, the Q/K/V and FFN inputs (Linear inputs) at q; recomputed
    # norms leave their outputs, the Linear inputs, to be rebuilt
    q = setup.saved_linear_input_bytes
    # (a parallel block with one norm stashes one tensor there, its GEMMs' shared input)
    linear_inputs = 0 if "layernorm" in mods else 1 if shared else 2
    norms = (0 if shared else 2) + post_norms
    replicated = (norms * p + linear_inputs * q + 2 * mask) * tokens * h
    a, d, latent = model.heads, model.head_dim, 0
    if model.mla:
        # recomputed up-projections leave Q, K, V and the latent norms' outputs to be rebuilt
        up = "mla_up_proj" not in mods
        qkv = p * tokens * a * (2 * d + model.value_head_dim) if up else 0
        out_in = q * tokens * a * model.value_head_dim
        ranks = (model.q_lora_rank or 0) + model.kv_lora_rank
        latents = (2 if up else 1) * ranks + model.qk_rope_head_dim
        latent = p * tokens * latents  # on every rank: not split by t or by sequence
    else:
        qkv = p * tokens * (a + 2 * model.kv_heads_per_rank(t) * t) * d  # K/V replicated
        out_in = q * tokens * h
    inner, moe = _ffn_stash(model, setup, dense)
    total = _ceil_div(replicated, rep) + _ceil_div(qkv + out_in + inner, t) + latent + moe
    if setup.recompute is Recompute.NONE or (mods and "core_attn" not in mods):
        if setup.profile.fused_attention:
            total += _ceil_div(LSE_BYTES * model.heads * s * b, t)
        else:
            per_score = p + (mask + p if model.dropout else 0)
            total += _ceil_div(per_score * model.heads * s * s * b, t)
    return total


def _ffn_stash(model: Model, setup: TrainingSetup, dense: bool) -> tuple[int, int]:
    """The FFN's or MoE layer's stash beyond its input: the activation's inputs at ``p``
    (gate and up for a gated FFN) and FC2's input at the Linear inputs' ``q``, per expert
    token for the routed experts, and an MoE layer's router probabilities and dispatched
    expert inputs; recompute groups drop what they rebuild (``mlp``: a dense block's inner
    tensors; ``moe``: the MoE layer's; ``shared_experts``: theirs; ``moe_act``: the routed
    experts' FC2 inputs, the activation's outputs). Returns (the inner tensors, split by
    ``t``; the MoE layer's, computed after the all-gather, whole on every rank)."""
    p, tokens = setup.precision_bytes, setup.micro_batch * setup.seq_len
    q, mods = setup.saved_linear_input_bytes, setup.recompute_modules
    act_in = (2 if model.ffn_kind.gated else 1) * p
    if not (model.is_moe and not dense):
        return (0 if "mlp" in mods else (act_in + q) * tokens * model.ffn_hidden), 0
    if "moe" in mods:
        return 0, 0
    routed = (act_in + (0 if "moe_act" in mods else q)) * model.top_k
    kept_shared = 0 if "shared_experts" in mods else model.shared_experts
    inner = (routed + (act_in + q) * kept_shared) * tokens * model.expert_width
    return inner, tokens * (p * model.experts + q * model.top_k * model.hidden)


def embedding_activation_bytes(model: Model, setup: TrainingSetup, tp: int) -> int:
    """The embedding's stash: the dropout mask, the embedding-norm input (BERT) and OPT's
    project-in input (token ids are negligible and not counted)."""
    p, tokens, h = setup.precision_bytes, setup.micro_batch * setup.seq_len, model.hidden
    n = tokens * h * (MASK_BYTES if model.dropout else 0)
    if model.embedding_norm:
        n += p * tokens * h
    if model.embedding_dim != h:
        n += p * tokens * model.embedding_dim
    return _ceil_div(n, _sp_divisor(setup, tp))


def head_activation_bytes(model: Model, setup: TrainingSetup, tp: int) -> int:
    """The head's stash: norm input(s) (and the MLM transform's for an encoder), the logits
    GEMM input, and the logits the cross entropy keeps for its backward pass: their fp32
    softmax under the profile's ``unfused-fp32`` kernel (``4 s b V / t``), else the logits
    themselves in the precision's bytes (``p s b V / t``)."""
    p, tokens, h = setup.precision_bytes, setup.micro_batch * setup.seq_len, model.hidden
    n = p * tokens * h * (1 if model.causal else 3)  # final norm | dense, GELU, norm inputs
    if model.embedding_dim != h:
        n += p * tokens * h  # project-out input
    n += p * tokens * model.embedding_dim  # logits GEMM input
    per_logit = LOGIT_BYTES if setup.profile.cross_entropy == "unfused-fp32" else p
    logits = per_logit * tokens * padded_vocab(model.vocab, tp) // tp
    return _ceil_div(n, _sp_divisor(setup, tp)) + logits


def boundary_bytes(model: Model, setup: TrainingSetup, tp: int) -> int:
    """The tensor passed between consecutive layers, per micro-batch per device:
    ``p s b h``, split by ``t`` with sequence parallelism."""
    p, tokens = setup.precision_bytes, setup.micro_batch * setup.seq_len
    return _ceil_div(p * tokens * model.hidden, _sp_divisor(setup, tp))


def dispatch_bytes(model: Model, setup: TrainingSetup, tp: int) -> int:
    """Bytes one device sends into one MoE block's token all-to-all per micro-batch (0 for a
    dense model; an MoE model's leading dense blocks send none): each of its tokens goes to
    ``top_k`` experts, ``k p s b h`` split by ``t`` with sequence parallelism (Megatron-LM's
    ``alltoall`` token dispatcher; the combine returns as many)."""
    if not model.is_moe:
        return 0
    return model.top_k * boundary_bytes(model, setup, tp)


def kv_bytes(model: Model, setup: TrainingSetup, tp: int) -> int:
    """Keys and values of one block per micro-batch per device, ``2 p s b n_kv d_head / t``
    (MLA: the up-projected ``p s b a (d_qk + d_v) / t``; one replicated head when ``t``
    exceeds ``n_kv``): what context parallelism's ring exchanges (Megatron-LM
    docs/api-guide/context_parallel.md)."""
    p, tokens = setup.precision_bytes, setup.micro_batch * setup.seq_len
    return p * tokens * model.kv_heads_per_rank(tp) * (model.head_dim + model.value_head_dim)
