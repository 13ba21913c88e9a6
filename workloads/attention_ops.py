"""Attention cores: the kernels between the Q/K/V projections and the output projection.

A core reads the projected query, key and value tensors of one tensor-parallel shard (``a/t``
query and ``g/t`` key/value heads) and returns the names of its outputs, which the output
projection (:mod:`workloads.op_graphs`) reads. The training passes run one of two kernels,
the framework profile's:

* ``unfused`` (Megatron-LM of 2022): QK^T, a softmax (and dropout) materialised over the full
  ``s x s`` scores, AV; its FLOPs count the full score matrix, also for causal models, as the
  closed forms do.
* ``flash`` (FlashAttention-2, Dao 2023, arXiv:2307.08691): one fused op per head group and
  pass, whose scores never leave the chip; it executes the ``B x B`` tiles (``B =``
  :data:`FLASH_BLOCK`) at or below the diagonal for a causal model (:func:`flash_scores`),
  with the matmuls of QK^T and AV forward and five backward (the scores and probabilities
  recomputed, dV, dP, dQ, dK).

Inference passes keep a KV cache (docs/serving.md). Each new token's keys and values are
written into it (``kv.write``, vLLM's ``reshape_and_cache``), and the core reads every cached
token's from it at the cache's bytes per element:

* a prefill chunk of ``C`` tokens per sequence after ``P`` cached ones runs the flash kernel
  over ``P`` keys in full and the chunk's own causally (:func:`cached_core`);
* a decode step (one token per sequence) runs a paged decode kernel (vLLM PagedAttention,
  Kwon et al. SOSP 2023; Flash-Decoding, Dao et al. 2023) whose matmuls have one query row
  per query head: the query heads that share a key/value head are packed into the rows of
  one product (FlashInfer, Ye et al. 2025, arXiv:2501.01005), so each key/value head of
  the cache is read once. Its cost is the cache it reads; the op model finds it memory-bound
  from its shape and bytes, as it finds any op;
* multi-head latent attention (DeepSeek-V2, arXiv:2405.04434, §2.1) caches the
  ``kv_lora_rank`` latent and the shared rotary key, the same on every tensor-parallel rank.
  A prefill up-projects K and V and runs the flash kernel (the cached context's latents
  up-projected too); a decode step absorbs the key up-projection into the query and the
  value up-projection into the output (§2.1.2) and attends in the latent space, all the
  shard's heads reading the one latent cache (DeepSeek's FlashMLA kernel).
"""

from __future__ import annotations

from workloads._autodiff import Grad, Node, gemm, vector
from workloads.memory import LSE_BYTES
from workloads.model import Model, PositionKind
from workloads.ops import CoreType, Op, OpKind

__all__ = [
    "FLASH_BLOCK",
    "MAX_HEAD_GROUPS",
    "CORE_PREFIX",
    "ADD_FLOPS",
    "DROPOUT_FLOPS",
    "head_groups",
    "flash_scores",
    "attended_scores",
    "attended_tokens",
    "flash_forward_epilogue_flops",
    "fused_attention_op",
    "unfused_core",
    "flash_core",
    "cached_core",
    "mla_decode_core",
]

MAX_HEAD_GROUPS = 4  # attention head groups per shard (independent nodes for the scheduler)
CORE_PREFIX = "heads"  # op names of the attention core (QK^T, softmax, dropout, AV): heads0.qk
FLASH_BLOCK = 128  # query and key tile of FlashAttention-2/3 kernels at head dimension 128

# FLOPs per element (an exp or a division counts as one FLOP):
ADD_FLOPS = 1
DROPOUT_FLOPS = 2  # compare a random draw with the keep probability, scale
_SOFTMAX_FLOPS = 7  # scale, causal mask, max, subtract, exp, sum, divide
# Fused attention, per executed score: scale, running max, subtract, exp, running sum (the
# division is once per row); backward: scale, subtract the log-sum-exp, exp (recomputing
# P), dS = P (dP - D) (subtract, multiply). Plus per row and key block, rescaling the
# output accumulator (head_dim multiplies) forward; D = rowsum(dO o O) backward.
_FLASH_FORWARD_FLOPS = 5
_FLASH_BACKWARD_FLOPS = 5
_FLASH_MATMULS_FORWARD = 2  # S = Q K^T, O = P V
_FLASH_MATMULS_BACKWARD = 5  # S = Q K^T again, dV = P^T dO, dP = dO V^T, dQ = dS K, dK = dS^T Q


def head_groups(heads: int) -> tuple[int, ...]:
    """Split a shard's ``heads`` into up to :data:`MAX_HEAD_GROUPS` near-equal groups.

    >>> head_groups(12), head_groups(3)
    ((3, 3, 3, 3), (1, 1, 1))
    """
    n = min(MAX_HEAD_GROUPS, heads)
    return tuple(heads // n + (1 if i < heads % n else 0) for i in range(n))


def flash_scores(s: int, causal: bool, block: int = FLASH_BLOCK, window: int | None = None) -> int:
    """Scores a flash kernel computes per head: ``s^2``, or for a causal mask the ``B x B``
    tiles at or below the diagonal, ``sum_i rows_i x min(s, (i + 1) B)`` over the query
    tiles ``i``; ``s (s + B) / 2`` when ``B`` divides ``s``. A sliding ``window`` (causal)
    also skips the key tiles wholly before every query's window (FlashAttention-2's
    ``window_size``): query tile ``i`` starts at the tile holding key ``i B - window + 1``.

    >>> flash_scores(256, False), flash_scores(256, True), 256 * (256 + 128) // 2
    (65536, 49152, 49152)
    >>> flash_scores(100, True)
    10000
    >>> flash_scores(1024, True, window=256), flash_scores(1024, True, window=2048)
    (344064, 589824)
    """
    if not causal:
        return s * s
    w = s if window is None else window
    return sum(
        min(block, s - q) * (min(s, q + block) - max(0, q - w + 1) // block * block)
        for q in range(0, s, block)
    )


def attended_scores(new: int, cached: int, window: int | None = None) -> int:
    """Scores per head of ``new`` tokens after ``cached`` ones, each attending the cached
    ones and the new ones up to itself (a causal decoder), at most ``window`` keys each:
    ``sum_i min(cached + i + 1, window)``, or ``new cached + new (new + 1) / 2``.

    >>> attended_scores(4, 10), attended_scores(4, 10, window=12), attended_scores(1, 9000, 4096)
    (50, 47, 4096)
    """
    first = cached + 1  # keys of the first new token
    if window is None or first + new - 1 <= window:
        return new * first + new * (new - 1) // 2
    below = max(0, min(new, window - first))  # the new tokens that see fewer than window
    return below * first + below * (below - 1) // 2 + (new - below) * window


def attended_tokens(new: int, cached: int, window: int | None = None) -> int:
    """Tokens whose keys and values ``new`` tokens after ``cached`` ones read: all, or with
    a sliding ``window`` the new ones and the last ``window - 1`` cached ones.

    >>> attended_tokens(1, 9000), attended_tokens(1, 9000, 4096), attended_tokens(5, 10, 4096)
    (9001, 4096, 15)
    """
    return new + (cached if window is None else min(cached, window - 1))


def _score_extra_flops(model: Model) -> int:
    """FLOPs per score beside the softmax: ALiBi's bias, dropout."""
    alibi = ADD_FLOPS if model.positions is PositionKind.ALIBI else 0
    return alibi + (DROPOUT_FLOPS if model.dropout else 0)


def flash_forward_epilogue_flops(model: Model, rows: int, keys: int, head_dim: int) -> int:
    """Vector FLOPs beside a fused forward kernel's matmuls over ``rows`` query rows (all its
    heads) of ``keys`` executed keys each: the online softmax per score (and ALiBi's bias and
    dropout where the model has them), and the output accumulator rescaled once per row and
    key block (``head_dim`` multiplies)."""
    rescale = rows * -(-keys // FLASH_BLOCK) * head_dim
    return rows * keys * (_FLASH_FORWARD_FLOPS + _score_extra_flops(model)) + rescale


def fused_attention_op(
    name: str,
    kind: OpKind,
    batch: int,
    mkn: tuple[int, int, int],
    *,
    epilogue: int,
    read: int,
    written: int,
) -> Op:
    """A fused attention op: ``batch`` (m x k) @ (k x n) products with ``epilogue`` vector
    FLOPs beside them, reading and writing only the given bytes."""
    m, k, n = mkn
    macs = batch * m * k * n
    return Op(
        name=name,
        kind=kind,
        core=CoreType.TC_AND_VC,
        flops=2 * macs + epilogue,
        bytes_read=read,
        bytes_written=written,
        batch=batch,
        m=m,
        k=k,
        n=n,
        elements=batch * m * n,
        epilogue_flops=epilogue,
    )


# ---- training --------------------------------------------------------------------------


def unfused_core(
    nodes: list[Node], q: str, k: str, model: Model, b: int, s: int, tp: int, p: int
) -> tuple[str, ...]:
    """QK^T, (ALiBi,) softmax, (dropout,) AV per head group of ``b`` sequences of ``s``
    tokens at ``p`` bytes per element."""
    hd, a_t = model.head_dim, model.heads // tp
    outputs = []
    for i, hg in enumerate(head_groups(a_t)):
        bh = b * hg
        qk = gemm(f"{CORE_PREFIX}{i}.qk", s, hd, s, p, batch=bh, batched=True)
        nodes.append(Node(qk, (q, k), Grad.BGEMM))
        scores = qk.name
        if model.positions is PositionKind.ALIBI:  # a fixed bias per head and distance
            alibi = vector(f"{CORE_PREFIX}{i}.alibi", OpKind.ELEMENTWISE, bh * s * s, ADD_FLOPS, p)
            nodes.append(Node(alibi, (scores,)))
            scores = alibi.name
        sm = vector(f"{CORE_PREFIX}{i}.softmax", OpKind.SOFTMAX, bh * s * s, _SOFTMAX_FLOPS, p)
        nodes.append(Node(sm, (scores,)))
        probs = sm.name
        if model.dropout:
            n = bh * s * s
            dr = vector(
                f"{CORE_PREFIX}{i}.dropout", OpKind.ELEMENTWISE, n, DROPOUT_FLOPS, p, mask_bytes=n
            )
            nodes.append(Node(dr, (probs,)))
            probs = dr.name
        av = gemm(f"{CORE_PREFIX}{i}.av", s, s, model.value_head_dim, p, batch=bh, batched=True)
        nodes.append(Node(av, (probs, "v"), Grad.BGEMM))
        outputs.append(av.name)
    return tuple(outputs)


def flash_core(
    nodes: list[Node], q: str, k: str, model: Model, b: int, s: int, tp: int, p: int
) -> tuple[str, ...]:
    """One fused forward op per head group (its backward the node's fused backward op). Each
    op's shape is ``matmuls x b x heads`` products of ``(s x d_head) @ (d_head x n)``, ``n``
    the executed keys per query (rounded up), so its MACs are the executed tiles'; its bytes
    are Q, K, V and O (and the log-sum-exp). With MLA's wider query/key than value heads,
    ``d_head`` is their mean (the same MACs)."""
    hd = (model.head_dim + model.value_head_dim) // 2
    a_t, g_t = model.heads // tp, model.kv_heads_per_rank(tp)
    keys = -(-flash_scores(s, model.causal, window=model.sliding_window) // s)
    scores = s * keys
    row = p * b * s * hd  # one head's Q, K, V, O or their gradients
    lse = LSE_BYTES * b * s
    extra = _score_extra_flops(model)
    outputs = []
    for i, hg in enumerate(head_groups(a_t)):
        bh, kv = b * hg, -(-hg * g_t // a_t)
        name = f"{CORE_PREFIX}{i}.flash"
        forward = fused_attention_op(
            name,
            OpKind.ATTENTION_FORWARD,
            _FLASH_MATMULS_FORWARD * bh,
            (s, hd, keys),
            epilogue=flash_forward_epilogue_flops(model, bh * s, keys, hd),
            read=row * (hg + 2 * kv),
            written=row * hg + lse * hg,
        )
        backward = fused_attention_op(
            f"{name}.bwd",
            OpKind.ATTENTION_BACKWARD,
            _FLASH_MATMULS_BACKWARD * bh,
            (s, hd, keys),
            epilogue=bh * scores * (_FLASH_BACKWARD_FLOPS + extra) + 2 * bh * s * hd,
            read=row * (3 * hg + 2 * kv) + lse * hg,
            written=row * (hg + 2 * kv),
        )
        nodes.append(Node(forward, (q, k, "v"), Grad.FUSED, backward=backward))
        outputs.append(name)
    return tuple(outputs)


# ---- inference with a KV cache -------------------------------------------------------------


def _kv_write(
    nodes: list[Node], inputs: tuple[str, ...], elements: int, p: int, kv_bytes: int
) -> str:
    """Store ``elements`` new key/value (or latent) elements into the paged cache."""
    op = Op(
        name="kv.write",
        kind=OpKind.ELEMENTWISE,
        core=CoreType.VC,
        bytes_read=p * elements,
        bytes_written=kv_bytes * elements,
        elements=elements,
    )
    nodes.append(Node(op, inputs))
    return op.name


def _cached_kernel(
    name: str,
    model: Model,
    shape: tuple[int, int, int, int],
    head_dim: int,
    read: int,
    written: int,
) -> Op:
    """The two matmuls (QK^T and PV) of ``batch`` products of ``rows`` query rows over
    ``queries`` new tokens each attending the cached ones (causally among themselves):
    ``shape = (batch, rows, queries, cached)``; a decode kernel has one query and packs the
    query heads of one key/value head into its rows. With a sliding window each query
    attends at most that many keys."""
    batch, rows, queries, cached = shape
    w = model.sliding_window
    if w is None:
        keys = cached + -(-flash_scores(queries, model.causal) // queries)
    else:  # each query's window, on the mean (a paged kernel skips the pages before it)
        keys = -(-attended_scores(queries, cached, w) // queries)
    return fused_attention_op(
        name,
        OpKind.ATTENTION_FORWARD,
        _FLASH_MATMULS_FORWARD * batch,
        (rows, head_dim, keys),
        epilogue=flash_forward_epilogue_flops(model, batch * rows, keys, head_dim),
        read=read,
        written=written,
    )


def cached_core(
    nodes: list[Node],
    q: str,
    k: str,
    model: Model,
    *,
    batch: int,
    new: int,
    cached: int,
    tp: int,
    p: int,
    kv_bytes: int,
) -> tuple[str, ...]:
    """Write ``batch x new`` tokens' keys and values into the cache, then attend each new
    token to the ``cached`` tokens before it and the new ones up to it, within the model's
    sliding window if it has one (one kernel per group of key/value heads). MLA (K and V up-projected, ``kv_up``): the latent is cached, and the
    cached context's latents are up-projected (``k.context``, ``v.context``) for the kernel."""
    a_t, g_t, dv = model.heads // tp, model.kv_heads_per_rank(tp), model.value_head_dim
    hd = (model.head_dim + dv) // 2
    keys = attended_tokens(new, cached, model.sliding_window)
    if model.mla:
        latent = model.kv_lora_rank + model.qk_rope_head_dim
        cache = _kv_write(nodes, ("kv.down.norm", k), batch * new * latent, p, kv_bytes)
        inputs: tuple[str, ...] = (q, k, "v")
        if cached:
            kr, nope = model.kv_lora_rank, model.qk_nope_head_dim
            for name, width in (("k.context", nope), ("v.context", dv)):
                nodes.append(Node(gemm(name, batch * cached, kr, a_t * width, p), (cache,)))
            inputs += ("k.context", "v.context")
        kv_read = p * batch * keys * (model.head_dim + dv)  # per head, up-projected
    else:
        width = g_t * (model.head_dim + dv)
        cache = _kv_write(nodes, (k, "v"), batch * new * width, p, kv_bytes)
        inputs = (q, cache)
        kv_read = kv_bytes * batch * keys * (model.head_dim + dv)  # per key/value head
    decode = new == 1
    groups = head_groups(a_t if model.mla else g_t)
    outputs = []
    for i, n in enumerate(groups):
        heads = n if model.mla else n * (a_t // g_t)  # query heads of the group
        kv_heads = heads if model.mla else n
        if decode:
            shape = (batch * kv_heads, heads // kv_heads, 1, cached)
        else:
            shape = (batch * heads, new, new, cached)
        name = f"{CORE_PREFIX}{i}.{'decode' if decode else 'flash'}"
        read = p * batch * new * heads * model.head_dim + kv_read * kv_heads
        op = _cached_kernel(name, model, shape, hd, read, p * batch * new * heads * dv)
        nodes.append(Node(op, inputs))
        outputs.append(name)
    return tuple(outputs)


def mla_decode_core(
    nodes: list[Node],
    q: str,
    k: str,
    model: Model,
    *,
    batch: int,
    cached: int,
    tp: int,
    p: int,
    kv_bytes: int,
) -> tuple[str, ...]:
    """An absorbed MLA decode step (K and V not up-projected): the new latent written to the
    cache, each head's query taken into the latent space (``q.absorb``, the key
    up-projection's weights), one kernel of all the shard's heads over the latent cache, the
    output taken back to the value heads (``v.absorb``, the value up-projection's)."""
    a_t, kr, rope = model.heads // tp, model.kv_lora_rank, model.qk_rope_head_dim
    nope, dv = model.qk_nope_head_dim, model.value_head_dim
    cache = _kv_write(nodes, ("kv.down.norm", k), batch * (kr + rope), p, kv_bytes)
    absorb = gemm("q.absorb", batch, nope, kr, p, batch=a_t, batched=True)
    nodes.append(Node(absorb, (q,)))
    keys = cached + 1
    read = kv_bytes * batch * keys * (kr + rope) + p * batch * a_t * (kr + rope)
    shape = (batch, a_t, 1, cached)  # every head's query reads the one latent "head"
    name = f"{CORE_PREFIX}0.decode"
    kernel = _cached_kernel(name, model, shape, (2 * kr + rope) // 2, read, p * batch * a_t * kr)
    nodes.append(Node(kernel, (absorb.name, cache)))
    out = gemm("v.absorb", batch, kr, dv, p, batch=a_t, batched=True)
    nodes.append(Node(out, (name,)))
    return (out.name,)
