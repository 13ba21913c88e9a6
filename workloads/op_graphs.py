"""Forward, backward and recompute op graphs of each distinct layer (docs/models.md).

Megatron-LM tensor parallelism on ``t`` devices (Shoeybi et al. 2019; Narayanan et al. 2021):
Q, K, V and FC1 (gate/up for SwiGLU, each expert's for MoE) are column-parallel, the attention
output projection and FC2 row-parallel, each followed by an all-reduce; the embedding and the
LM head are vocab-parallel, with the vocab-parallel cross entropy's two small all-reduces.
With sequence parallelism (Korthikanti et al. 2022) the norms, dropouts and residual adds run
on ``s/t`` tokens, and each all-reduce becomes a reduce-scatter after the row-parallel GEMM and
an all-gather before the column-parallel ones. ``t = 1`` has no collectives.

Multi-head latent attention (DeepSeek-V2/V3) runs as trained: replicated down-projections
to the latents and their norms, then column-parallel up-projections to per-head Q, K and V.
MoE blocks (router, token permutation, experts, combine) come from :mod:`workloads.moe_ops`;
the shared experts run as one dense FFN beside the routed ones.

Independent work is kept as separate nodes so a scheduler can overlap it: unfused Q, K, V
projections; the attention core split into up to
:data:`~workloads.attention_ops.MAX_HEAD_GROUPS` head groups; one GEMM chain per MoE expert;
input- and weight-gradient GEMMs in the backward pass.

The attention core follows the framework profile's kernel, ``unfused`` or ``flash``
(:mod:`workloads.attention_ops`), and the cross entropy its ``cross_entropy`` kernel
(:func:`head_pass_graphs`); inference passes put their KV-cache cores in the same
blocks (:func:`inference_block_graph`, :mod:`workloads.serving_ops`). Q/K/V biases ride in their GEMMs
(cuBLAS epilogue, no FLOPs counted); FC1's bias is part of its fused bias + activation
epilogue; row-parallel biases are added after the all-reduce in the fused
bias-dropout-residual op, as Megatron does. Backward vector ops take twice their forward
FLOPs (a modelling convention: local derivative and chain-rule product per forward FLOP).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial

from workloads._autodiff import (
    Grad,
    Node,
    backward_graph,
    collective,
    forward_graph,
    gemm,
    sub_graph,
    vector,
)
from workloads.attention_ops import (
    ADD_FLOPS,
    CORE_PREFIX,
    DROPOUT_FLOPS,
    flash_core,
    unfused_core,
)
from workloads.layer_graph import PassGraphs
from workloads.model import FfnKind, Model, NormKind, PositionKind, padded_vocab
from workloads.moe_ops import MoeKernels, moe_nodes, stack_kernels
from workloads.ops import CollectiveKind, CoreType, Op, OpGraph, OpKind
from workloads.recompute_modules import op_groups
from workloads.remat_dce import partially_evaluated
from workloads.setup import Recompute, TrainingSetup

__all__ = [
    "NORM_FLOPS",
    "AttentionCore",
    "embedding_pass_graphs",
    "block_pass_graphs",
    "head_pass_graphs",
    "inference_block_graph",
    "inference_embedding_graph",
]

# FLOPs per element of vector ops (an exp, tanh, division or rsqrt counts as one FLOP):
NORM_FLOPS = {
    NormKind.LAYERNORM: 7,  # mean add, centre, square, variance add, normalise, scale, shift
    NormKind.RMSNORM: 4,  # square, add, normalise, scale
}
_GELU_FLOPS = 8  # tanh form: x^3 (2), x 0.044715, + x, x sqrt(2/pi), tanh, + 1, x 0.5x
_RELU_FLOPS = 1
_GATE_FLOPS = {
    FfnKind.SWIGLU: 5,  # sigmoid (exp, add, divide), x gate, x up
    FfnKind.GEGLU: 9,  # tanh-form GELU of the gate (8), x up
}
_ROPE_FLOPS = 3  # x cos + rotate(x) sin: two multiplies, one add
_BIAS_FLOPS = 1
_CE_MAX_FLOPS = 1  # running max over the local logits
_CE_SOFTMAX_FLOPS = 3  # subtract max, exp, sum (and pick the target logit)
_CE_LOSS_FLOPS = 2  # log of the sum, subtract the target logit (per token)
_FP32_BYTES = 4  # cross-entropy statistics are all-reduced in fp32 (Megatron)


#: ``core(nodes, q, k)`` appends an attention core reading the query and key tensors named
#: ``q`` and ``k`` (values: ``v``) and returns the names of its outputs, which the output
#: projection reads (:mod:`workloads.attention_ops`).
AttentionCore = Callable[[list[Node], str, str], tuple[str, ...]]


@dataclass(frozen=True, slots=True)
class _Dims:
    """Per-shard sizes of one micro-batch: ``tokens`` for GEMMs, ``local`` for ops sequence
    parallelism splits, ``b`` x ``s`` for the attention core; ``training``: MoE auxiliary loss."""

    b: int
    s: int
    tokens: int
    local: int
    t: int
    p: int
    sp: bool
    flash: bool
    training: bool = True
    ep: int = 1  # expert-parallel ranks sharing the routed experts (a rank holds 1/ep of them)
    moe: MoeKernels = MoeKernels()  # the stack's token permutation kernels
    unpad: bool = False  # the stack copies Q, K, V unpadded around a fused core (training)
    fused_activation: bool = True  # a non-gated FFN's activation in FC1's epilogue
    split_grads: bool = False  # weight gradients accumulated into fp32 in a pass of their own

    @classmethod
    def of(cls, setup: TrainingSetup, tp: int) -> _Dims:
        b, s = setup.micro_batch, setup.seq_len
        sp = setup.sequence_parallel and tp > 1
        local = b * s // tp if sp else b * s
        fw = setup.profile
        return cls(
            b,
            s,
            b * s,
            local,
            tp,
            setup.precision_bytes,
            sp,
            fw.fused_attention,
            ep=setup.expert_parallel,
            moe=stack_kernels(fw, setup.recipe.gemm_format),
            unpad=fw.attention_unpad and fw.fused_attention,
            fused_activation=fw.activation == "fused",
            split_grads=setup.state_parts.accumulates_apart,
        )


def _inference_dims(tokens: int, tp: int, precision_bytes: int, ep: int = 1) -> _Dims:
    """An inference pass over ``tokens`` tokens: no sequence parallelism, no training."""
    return _Dims(1, tokens, tokens, tokens, tp, precision_bytes, False, True, False, ep)


def _pass_graphs(
    nodes: list[Node], d: _Dims, recompute: frozenset[str] | None = None
) -> PassGraphs:
    """Forward, backward and recompute graphs; ``recompute`` None = the whole forward."""
    forward = forward_graph(nodes)
    backward = backward_graph(nodes, d.p, d.t, d.split_grads)
    if recompute is None:
        again = forward
    else:
        again = sub_graph(nodes, set(recompute))
    return PassGraphs(forward=forward, backward=backward, recompute=again)


_EMPTY: frozenset[str] = frozenset()


def _row_parallel_reduce(nodes: list[Node], src: str, d: _Dims, h: int) -> str:
    """The collective after a row-parallel GEMM (all-reduce, or reduce-scatter with SP)."""
    if d.t == 1:
        return src
    if d.sp:
        op = collective(
            f"{src}.reduce_scatter", CollectiveKind.REDUCE_SCATTER, d.p * d.tokens * h, d.t
        )
        nodes.append(Node(op, (src,), Grad.SCATTER))
    else:
        op = collective(f"{src}.allreduce", CollectiveKind.ALL_REDUCE, d.p * d.tokens * h, d.t)
        nodes.append(Node(op, (src,), Grad.IDENTITY))
    return op.name


def _column_parallel_input(nodes: list[Node], src: str, d: _Dims, width: int) -> str:
    """With SP, all-gather the sequence-sharded input of column-parallel GEMMs."""
    if not d.sp:
        return src
    op = collective(f"{src}.allgather", CollectiveKind.ALL_GATHER, d.p * d.tokens * width, d.t)
    nodes.append(Node(op, (src,), Grad.GATHER))
    return op.name


def _norm(
    nodes: list[Node], name: str, src: tuple[str, ...], model: Model, d: _Dims, tp_next: bool
) -> str:
    op = vector(name, OpKind.NORM, d.local * model.hidden, NORM_FLOPS[model.norm], d.p)
    nodes.append(Node(op, src, enter_tp=tp_next and not d.sp))
    return name


def _residual(nodes: list[Node], name: str, src: str, model: Model, d: _Dims) -> str:
    """(Bias +) (dropout +) residual add on the sequence-local tokens."""
    flops = ADD_FLOPS + (_BIAS_FLOPS if model.biases else 0)
    flops += DROPOUT_FLOPS if model.dropout else 0
    n = d.local * model.hidden
    op = vector(
        name, OpKind.ELEMENTWISE, n, flops, d.p, inputs=2, mask_bytes=n if model.dropout else 0
    )
    nodes.append(Node(op, (src,)))
    return name


# ---- transformer block -------------------------------------------------------------------


def _latent_norm(nodes: list[Node], name: str, src: str, width: int, model: Model, d: _Dims) -> str:
    """An MLA latent's norm on every token (replicated over the tensor-parallel group; its
    output feeds column-parallel up-projections)."""
    op = vector(name, OpKind.NORM, d.tokens * width, NORM_FLOPS[model.norm], d.p)
    nodes.append(Node(op, (src,), enter_tp=d.t > 1))
    return name


def _mla_projections(
    nodes: list[Node], src: str, model: Model, d: _Dims, kv_up: bool
) -> tuple[str, str]:
    """Multi-head latent attention's Q, K, V as trained: replicated down-projections to the
    latents (and the shared rotary key part), their norms, column-parallel per-head
    up-projections; the rotary parts rotated. Nodes ``q``, ``k``, ``v`` (or ``q.rope``,
    ``k.rope`` after rotation, returned) hold the per-head tensors the attention core reads.
    Without ``kv_up`` K and V stay in the latent ``kv.down.norm`` (an absorbed decode)."""
    h, p, T, a_t = model.hidden, d.p, d.tokens, model.heads // d.t
    nope, rope, kr = model.qk_nope_head_dim, model.qk_rope_head_dim, model.kv_lora_rank
    q_src, q_width = src, h
    if model.q_lora_rank is not None:
        q_width = model.q_lora_rank
        nodes.append(Node(gemm("q.down", T, h, q_width, p), (src,), Grad.GEMM))
        q_src = _latent_norm(nodes, "q.down.norm", "q.down", q_width, model, d)
    nodes.append(Node(gemm("q", T, q_width, a_t * (nope + rope), p), (q_src,), Grad.GEMM))
    nodes.append(Node(gemm("kv.down", T, h, kr + rope, p), (src,), Grad.GEMM))
    latent = _latent_norm(nodes, "kv.down.norm", "kv.down", kr, model, d)
    if kv_up:
        nodes.append(Node(gemm("k", T, kr, a_t * nope, p), (latent,), Grad.GEMM))
        nodes.append(Node(gemm("v", T, kr, a_t * model.v_head_dim, p), (latent,), Grad.GEMM))
    q_rope = vector("q.rope", OpKind.ELEMENTWISE, T * a_t * rope, _ROPE_FLOPS, p)
    k_rope = vector("k.rope", OpKind.ELEMENTWISE, T * rope, _ROPE_FLOPS, p, inputs=2)
    k_inputs = ("k", "kv.down") if kv_up else ("kv.down",)
    nodes += [Node(q_rope, ("q",)), Node(k_rope, k_inputs, enter_tp=d.t > 1)]
    return "q.rope", "k.rope"


def _attention(
    nodes: list[Node],
    src: str,
    model: Model,
    d: _Dims,
    core: AttentionCore | None = None,
    kv_up: bool = True,
) -> str:
    """Q, K, V projections, the attention core (``core``, else the framework profile's
    training kernel) and the output projection; ``kv_up``: see :func:`_mla_projections`."""
    h, hd, p, t, T = model.hidden, model.head_dim, d.p, d.t, d.tokens
    a_t, g_t = model.heads // t, model.kv_heads_per_rank(t)
    bias = model.biases
    if model.mla:
        q_in, k_in = _mla_projections(nodes, src, model, d, kv_up)
    else:
        q = gemm("q", T, h, a_t * hd, p, bias=bias)
        k = gemm("k", T, h, g_t * hd, p, bias=bias)
        v = gemm("v", T, h, g_t * hd, p, bias=bias)
        nodes += [
            Node(q, (src,), Grad.GEMM),
            Node(k, (src,), Grad.GEMM),
            Node(v, (src,), Grad.GEMM),
        ]
        q_in, k_in = "q", "k"
    if model.positions is PositionKind.ROTARY and not model.mla:
        for name, width in (("q", a_t), ("k", g_t)):
            rope = vector(f"{name}.rope", OpKind.ELEMENTWISE, T * width * hd, _ROPE_FLOPS, p)
            nodes.append(Node(rope, (name,)))
        q_in, k_in = "q.rope", "k.rope"
    if core is None:
        kernel = flash_core if d.flash else unfused_core
        if d.unpad:
            q_in = k_in = _copies(
                nodes, "attn.unpad", (q_in, k_in, "v"), T * hd * (a_t + 2 * g_t), p
            )
        outputs = kernel(nodes, q_in, k_in, model, d.b, d.s, t, p)
        if d.unpad:
            outputs = (
                _copies(nodes, "attn.pad", outputs, T * a_t * model.value_head_dim, p, pad=True),
            )
    else:
        outputs = core(nodes, q_in, k_in)
    proj = gemm("proj", T, a_t * model.value_head_dim, h, p)
    nodes.append(Node(proj, outputs, Grad.GEMM))
    return proj.name


def _copies(
    nodes: list[Node], name: str, inputs: tuple[str, ...], elements: int, p: int, pad=False
) -> str:
    """llm-foundry's unpadding around a fused attention kernel (``flash_attn_fn``:
    ``bert_padding.unpad_input`` gathers Q, K and V into new tensors, ``pad_input`` scatters
    the output into zeros): a gather reads and writes ``elements``; a scatter writes the
    zeros, then reads and writes ``elements``. Each one's backward is the other."""
    gather = (p * elements, p * elements)
    scatter = (p * elements, 2 * p * elements)
    fwd, bwd = (scatter, gather) if pad else (gather, scatter)

    def op(suffix: str, rw: tuple[int, int]) -> Op:
        return Op(
            name=name + suffix,
            kind=OpKind.ELEMENTWISE,
            core=CoreType.VC,
            bytes_read=rw[0],
            bytes_written=rw[1],
            elements=elements,
        )

    nodes.append(Node(op("", fwd), inputs, Grad.FUSED, backward=op(".bwd", bwd)))
    return name


def _ffn(
    nodes: list[Node], prefix: str, src: str, tokens: int, model: Model, d: _Dims, width: int
) -> str:
    """FC1 (fused bias + activation, or a gated MLP's gate and up) then FC2 of inner width
    ``width``, on ``tokens`` rows."""
    h, f_t, p = model.hidden, width // d.t, d.p
    bias = model.biases
    if model.ffn_kind.gated:
        gate = gemm(f"{prefix}fc1.gate", tokens, h, f_t, p, bias=bias)
        up = gemm(f"{prefix}fc1.up", tokens, h, f_t, p, bias=bias)
        act = vector(
            f"{prefix}{model.ffn_kind}",
            OpKind.ELEMENTWISE,
            tokens * f_t,
            _GATE_FLOPS[model.ffn_kind],
            p,
            inputs=2,
        )
        nodes += [
            Node(gate, (src,), Grad.GEMM),
            Node(up, (src,), Grad.GEMM),
            Node(act, (gate.name, up.name)),
        ]
        hidden = act.name
    else:
        act_flops = _GELU_FLOPS if model.ffn_kind is FfnKind.GELU else _RELU_FLOPS
        flops = act_flops + (_BIAS_FLOPS if bias else 0)
        epilogue = tokens * f_t * flops if d.fused_activation else 0
        fc1 = gemm(f"{prefix}fc1", tokens, h, f_t, p, bias=bias, epilogue_flops=epilogue)
        nodes.append(Node(fc1, (src,), Grad.GEMM))
        hidden = fc1.name
        if not d.fused_activation:  # its own kernel: reads and writes the hidden tensor
            act = vector(f"{prefix}fc1.act", OpKind.ELEMENTWISE, tokens * f_t, flops, p)
            nodes.append(Node(act, (hidden,)))
            hidden = act.name
    fc2 = gemm(f"{prefix}fc2", tokens, f_t, h, p)
    nodes.append(Node(fc2, (hidden,), Grad.GEMM))
    return fc2.name


def _ffn_or_moe(nodes: list[Node], x: str, model: Model, d: _Dims, dense: bool) -> str:
    if model.is_moe and not dense:

        def ffn(prefix: str, src: str, tokens: int, width: int) -> str:
            return _ffn(nodes, prefix, src, tokens, model, d, width)

        load = model.expert_load_imbalance if d.training else 1.0
        return moe_nodes(nodes, x, model, d.tokens, d.p, ffn, d.training, d.ep, load, d.moe)
    return _ffn(nodes, "", x, d.tokens, model, d, model.ffn_hidden)


def _parallel_block_nodes(
    model: Model, d: _Dims, dense: bool, attention: Callable[[list[Node], str], str]
) -> list[Node]:
    """Attention and FFN on the same (normalised) block input, one residual add of both."""
    nodes: list[Node] = []
    h = model.hidden
    x = _norm(nodes, "ln1", (), model, d, tp_next=True)
    x = _column_parallel_input(nodes, x, d, h)
    y = x
    if model.block_norms == 2:
        y = _norm(nodes, "ln2", (), model, d, tp_next=True)
        y = _column_parallel_input(nodes, y, d, h)
    a = _row_parallel_reduce(nodes, attention(nodes, x), d, h)
    f = _row_parallel_reduce(nodes, _ffn_or_moe(nodes, y, model, d, dense), d, h)
    flops = 2 * ADD_FLOPS + (2 * _BIAS_FLOPS if model.biases else 0)
    flops += 2 * DROPOUT_FLOPS if model.dropout else 0
    n = d.local * h
    mask = 2 * n if model.dropout else 0
    op = vector("residual", OpKind.ELEMENTWISE, n, flops, d.p, inputs=3, mask_bytes=mask)
    nodes.append(Node(op, (a, f)))
    return nodes


def _block_nodes(
    model: Model, d: _Dims, dense: bool, core: AttentionCore | None = None, kv_up: bool = True
) -> list[Node]:
    attention = partial(_attention, model=model, d=d, core=core, kv_up=kv_up)
    if model.parallel_block:
        return _parallel_block_nodes(model, d, dense, attention)
    nodes: list[Node] = []
    h = model.hidden
    post = model.block_norms == 4  # Gemma 2: each sub-layer's output is normalised too
    x = _norm(nodes, "ln1", (), model, d, tp_next=True)
    x = _column_parallel_input(nodes, x, d, h)
    x = attention(nodes, x)
    x = _row_parallel_reduce(nodes, x, d, h)
    if post:
        x = _norm(nodes, "attn.post_norm", (x,), model, d, tp_next=False)
    x = _residual(nodes, "attn.residual", x, model, d)
    x = _norm(nodes, "ln2", (x,), model, d, tp_next=True)
    x = _column_parallel_input(nodes, x, d, h)
    x = _ffn_or_moe(nodes, x, model, d, dense)
    x = _row_parallel_reduce(nodes, x, d, h)
    if post:
        x = _norm(nodes, "mlp.post_norm", (x,), model, d, tp_next=False)
    _residual(nodes, "mlp.residual", x, model, d)
    return nodes


def block_pass_graphs(
    model: Model, setup: TrainingSetup, tp: int, dense: bool = False
) -> PassGraphs:
    """One transformer block's graphs (``dense``: one of an MoE model's leading dense
    blocks); the recompute graph follows ``setup.recompute``."""
    d = _Dims.of(setup, tp)
    nodes = _block_nodes(model, d, dense)
    return _pass_graphs(nodes, d, _recomputed(nodes, d, model, setup))


def _recomputed(
    nodes: list[Node], d: _Dims, model: Model, setup: TrainingSetup
) -> frozenset[str] | None:
    """The names of a block's ``nodes`` (of dimensions ``d``) the setup's recompute mode
    re-runs (None: all)."""
    match setup.recompute:
        case Recompute.NONE:
            keep: frozenset[str] | None = _EMPTY
        case Recompute.SELECTIVE:
            keep = frozenset(n.op.name for n in nodes if n.op.name.startswith(CORE_PREFIX))
        case Recompute.FULL:
            keep = partially_evaluated(nodes, d.p) if setup.profile.recompute_dce else None
        case Recompute.MODULES:
            keep = frozenset(
                n.op.name
                for n in nodes
                if op_groups(n.op.name, model, CORE_PREFIX) & setup.recompute_modules
            )
    return keep


def inference_block_graph(
    model: Model,
    tokens: int,
    tp: int,
    precision_bytes: int,
    core: AttentionCore,
    *,
    kv_up: bool = True,
    dense: bool = False,
    ep: int = 1,
) -> OpGraph:
    """One block's forward graph on ``tokens`` tokens per shard as inference runs it: no
    dropout, no MoE auxiliary loss, no sequence parallelism, the attention ``core`` given
    (``kv_up``: see :func:`_mla_projections`); an MoE block's rank holds ``1/ep`` of the
    routed experts (:func:`~workloads.moe_ops.expert_tokens`)."""
    d = _inference_dims(tokens, tp, precision_bytes, ep)
    return forward_graph(_block_nodes(replace(model, dropout=False), d, dense, core, kv_up))


# ---- embedding and head ------------------------------------------------------------------


def embedding_pass_graphs(model: Model, setup: TrainingSetup, tp: int) -> PassGraphs:
    """Vocab-parallel lookup, its reduction, (OPT project-in,) position/type add, dropout,
    (BERT embedding norm). Never recomputed."""
    d = _Dims.of(setup, tp)
    return _pass_graphs(_embedding_nodes(model, d), d, _EMPTY)


def inference_embedding_graph(model: Model, tokens: int, tp: int, precision_bytes: int) -> OpGraph:
    """The embedding's forward graph on ``tokens`` tokens as inference runs it (no dropout)."""
    d = _inference_dims(tokens, tp, precision_bytes)
    return forward_graph(_embedding_nodes(replace(model, dropout=False), d))


def _embedding_nodes(model: Model, d: _Dims) -> list[Node]:
    h, e, p, T = model.hidden, model.embedding_dim, d.p, d.tokens
    nodes: list[Node] = []
    lookup = vector("embed.lookup", OpKind.ELEMENTWISE, T * e, 0, p)
    nodes.append(Node(lookup))
    x = _row_parallel_reduce(nodes, lookup.name, d, e)
    if e != h:
        proj = gemm("embed.project_in", d.local, e, h, p)
        nodes.append(Node(proj, (x,), Grad.GEMM))
        x = proj.name
    adds = int(model.positions is PositionKind.LEARNED) + int(model.type_vocab > 0)
    if adds:
        op = vector(
            "embed.add_positions",
            OpKind.ELEMENTWISE,
            d.local * h,
            adds * ADD_FLOPS,
            p,
            inputs=1 + adds,
        )
        nodes.append(Node(op, (x,)))
        x = op.name
    if model.embedding_norm:
        x = _norm(nodes, "embed.norm", (x,), model, d, tp_next=False)
    if model.dropout:
        n = d.local * h
        op = vector("embed.dropout", OpKind.ELEMENTWISE, n, DROPOUT_FLOPS, p, mask_bytes=n)
        nodes.append(Node(op, (x,)))
    return nodes


def _passes(name: str, elements: int, *, reads: int, writes: int, flops: int) -> Op:
    """Unfused elementwise kernels over ``elements``, reading ``reads`` and writing
    ``writes`` bytes per element in all (each pass through HBM)."""
    return Op(
        name=name,
        kind=OpKind.ELEMENTWISE,
        core=CoreType.VC,
        flops=flops,
        bytes_read=reads * elements,
        bytes_written=writes * elements,
        elements=elements,
    )


def head_pass_graphs(model: Model, setup: TrainingSetup, tp: int) -> PassGraphs:
    """Final norm (decoder) or MLM transform (encoder), (OPT project-out,) vocab-parallel
    logits and cross entropy. Never recomputed.

    The cross entropy is the profile's kernel: ``fused`` reads the bf16 logits (a max, then
    a softmax); ``unfused-fp32`` is Megatron-LM's ``vocab_parallel_cross_entropy`` on
    ``logits.float()`` (megatron/core/tensor_parallel/cross_entropy.py): per logit the cast
    reads 2 and writes 4 bytes, the max reads 4, subtract, exp and divide each read and
    write 4 in place, the sum reads 4 (forward: 22 read, 16 written); backward the in-place
    multiply by the loss gradient reads and writes 4 and the cast back reads 4 and writes 2."""
    d = _Dims.of(setup, tp)
    return _pass_graphs(head_nodes(model, setup, d), d, _EMPTY)


def head_nodes(model: Model, setup: TrainingSetup, d: _Dims) -> list[Node]:
    """The nodes of :func:`head_pass_graphs` (its first norm reads the layer's input)."""
    h, e, p, T, t = model.hidden, model.embedding_dim, d.p, d.tokens, d.t
    v_t = padded_vocab(model.vocab, t) // t
    nodes: list[Node] = []
    if model.causal:
        x = _norm(nodes, "final_norm", (), model, d, tp_next=e == h)
    else:  # BERT: dense + bias + GELU, norm
        epi = d.local * h * (_GELU_FLOPS + _BIAS_FLOPS)
        dense = gemm("mlm.dense", d.local, h, h, p, bias=True, epilogue_flops=epi)
        nodes.append(Node(dense, (), Grad.GEMM))
        x = _norm(nodes, "mlm.norm", (dense.name,), model, d, tp_next=e == h)
    if e != h:
        proj = gemm("head.project_out", d.local, h, e, p)
        nodes.append(Node(proj, (x,), Grad.GEMM, enter_tp=not d.sp))
        x = proj.name
    x = _column_parallel_input(nodes, x, d, e)
    logits = gemm("logits", T, e, v_t, p, bias=not model.causal)
    nodes.append(Node(logits, (x,), Grad.GEMM))
    n = T * v_t
    unfused = setup.profile.cross_entropy == "unfused-fp32"
    src, ce_bytes = logits.name, p
    if unfused:  # logits.float(): an fp32 copy the cross entropy works on in place
        cast_bwd = _passes("ce.float.bwd", n, reads=_FP32_BYTES, writes=p, flops=n)
        cast = _passes("ce.float", n, reads=p, writes=_FP32_BYTES, flops=n)
        nodes.append(Node(cast, (src,), Grad.FUSED, backward=cast_bwd))
        src, ce_bytes = cast.name, _FP32_BYTES
    ce_max = vector(
        "ce.max", OpKind.ELEMENTWISE, T, 0, ce_bytes, read_elements=n, flops=_CE_MAX_FLOPS * n
    )
    nodes.append(Node(ce_max, (src,), Grad.NONE))
    m = ce_max.name
    if t > 1:
        ar = collective("ce.max.allreduce", CollectiveKind.ALL_REDUCE, _FP32_BYTES * T, t)
        nodes.append(Node(ar, (m,), Grad.NONE))
        m = ar.name
    if unfused:
        # sub_ (read, write), exp (read, write), sum (read), div_ (read, write), each over
        # the fp32 copy; backward: grad.mul_ in place (read, write)
        sm_bwd = _passes("ce.softmax.bwd", n, reads=_FP32_BYTES, writes=_FP32_BYTES, flops=n)
        sm = _passes(
            "ce.softmax",
            n,
            reads=4 * _FP32_BYTES,
            writes=3 * _FP32_BYTES,
            flops=(_CE_SOFTMAX_FLOPS + 1) * n,
        )
        nodes.append(Node(sm, (src, m), Grad.FUSED, nondiff=(m,), backward=sm_bwd))
    else:
        sm = vector("ce.softmax", OpKind.SOFTMAX, n, _CE_SOFTMAX_FLOPS, p)
        nodes.append(Node(sm, (src, m), nondiff=(m,)))
    x = sm.name
    if t > 1:
        ar = collective("ce.sum.allreduce", CollectiveKind.ALL_REDUCE, 2 * _FP32_BYTES * T, t)
        nodes.append(Node(ar, (x,), Grad.IDENTITY))
        x = ar.name
    loss = vector("ce.loss", OpKind.ELEMENTWISE, T, _CE_LOSS_FLOPS, p)
    nodes.append(Node(loss, (x,)))
    return nodes
