"""An MoE block's router, token permutation and experts as Megatron-Core runs them (docs/models.md).

The ops follow Megatron-Core v0.9 (``core_v0.9.0``: ``megatron/core/transformer/moe/``
``router.py``, ``moe_utils.py``, ``token_dispatcher.py``, ``experts.py``), the release of
its published Mixtral 8x7B figure, with the ``alltoall`` dispatcher, dropless aux-loss
routing and no fused permutation kernels (those came later). Per micro-batch, on the
``T`` tokens of one tensor-parallel rank, ``h`` hidden, ``E`` experts, ``k`` experts per
token, ``p`` bytes per element:

* ``router``: the gate GEMM ``T x h x E``.
* ``router.topk`` (``topk_softmax_with_capacity``): top-k of the ``T x E`` logits, a
  softmax over the ``k`` chosen, the token counts per expert; it writes the probabilities
  and the int64 expert indices. Backward: the softmax's, scattered into ``T x E``.
* ``router.aux_loss`` (``switch_load_balancing_loss_func``): an fp32 softmax over all
  ``T x E`` logits, summed per expert. ``MoEAuxLossAutoScaler`` attaches the loss to the
  routing probabilities, so the combine waits for it and its backward follows the
  combine's.
* ``dispatch`` (``permute``): a stable argsort of the ``T k`` expert indices and a gather of
  each token's row once per chosen expert: ``T k h`` elements read and written. Backward
  (``moe_gather.backward``): a zero-filled ``T x h`` gradient and a scatter-add of the
  ``T k h`` gradients into it.
* one FFN per expert on the tokens routed to it (:func:`expert_tokens`), each GEMM at its
  own row count.
* ``combine`` (``unpermute``): a zero-filled ``T k x h`` tensor and a scatter-add of the
  expert outputs into token order, a multiply by the probabilities, a sum over the ``k``
  (plus the shared experts' output). Backward: the sum's is a broadcast view (no kernel);
  the multiply's two products (the input gradient and, reduced over ``h``, the
  probabilities' gradient); the scatter's, a gather of ``T k h`` elements.

Bytes count every element a kernel reads or writes in device memory, a gathered row once
per copy (copies of a row land far apart); only a row a broadcast re-reads at once (the
gradient of the sum over ``k``, the probabilities beside a row) is counted once.

At ``ep > 1`` a rank runs ``E / ep`` experts on ``ep`` times the rows (:func:`expert_tokens`):
the same FLOPs, ``1/ep`` of the expert weights to read and cast; training graphs take ``ep``
from ``TrainingSetup.expert_parallel``.

* ``dispatch.sort`` and ``combine.unsort`` (``sort_chunks_by_idxs``, the ``alltoall``
  dispatcher's "permutation 2"): the all-to-all delivers a rank's tokens grouped by source
  rank, so with several experts on the rank they are copied into expert order before the
  experts (``T k h`` elements and their fp32 probabilities read and written) and back
  after them; each backward is the inverse copy. Megatron-Core runs them whenever a rank
  holds more than one expert (``num_local_experts > 1``: ``token_dispatcher.py`` at
  core_v0.9.0 and core_r0.14.0); the ``flex`` dispatcher (DeepEP, HybridEP) permutes once,
  after its fused dispatch, which ``dispatch`` stands for.

Under ``moe_permute_fusion`` (TransformerEngine's fused kernels, which Megatron-Core's
``permute``, ``unpermute`` and ``sort_chunks_by_idxs`` call: ``moe_utils.py`` at
core_r0.14.0) ``dispatch`` reads each token's row once and writes its ``k`` copies with their
fp32 probabilities (and an int32 row map of ``2 E + 1`` entries a token, built from
the routing mask); the
probabilities multiply the experts' activation, so ``combine`` only sums each token's ``k``
rows back (reading ``T k h``, writing ``T h``); each backward is the other kernel on the
gradients. The chunk sort copies the same bytes fused or not.

Stream order (``grouped_in_stream_order``): a stack running the routed experts as grouped
modules (Megatron-Core's ``TEGroupedMLP``: one TransformerEngine ``GroupedLinear`` for FC1 of
all local experts, the activation over all their rows, one for FC2) issues each op for every
local expert before the next op, on one CUDA stream: the quantization of each expert's rows
in turn (``split_quantize``; current scaling has no multi-tensor kernel), then the experts'
GEMMs spread over a few compute streams (``nvte_multi_stream_cublas_gemm``), the main stream
waiting for all of them. The op graph gives each expert its own chain, which a schedule would
run side by side (one expert's casts beside another's GEMMs); under the stack's
``expert_gemm_streams`` each op waits for the same op of the previous expert (of the expert
``expert_gemm_streams`` back for a GEMM) and for the previous op of every expert.

Not modelled: the dispatcher's small all-gather of token counts over the expert-parallel
group and the host synchronisation before the all-to-all. Routing is taken as balanced, what the auxiliary
loss aims for, unless the model states an ``expert_load_imbalance``: training passes then
run the busiest rank's experts on that many times the mean copies (the all-to-all volumes
stay the mean's; serving passes keep balanced routing).
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Final

from workloads._autodiff import Grad, Node, gemm
from workloads.model import Model
from workloads.ops import CoreType, Op, OpGraph, OpKind

if TYPE_CHECKING:
    from workloads.framework import FrameworkProfile

__all__ = [
    "INDEX_BYTES",
    "FP32_BYTES",
    "MoeKernels",
    "ROUTED_EXPERT",
    "expert_tokens",
    "grouped_in_stream_order",
    "launched_per_expert",
    "moe_nodes",
    "router_topk_flops",
]

#: a routed expert's ops (its GEMMs, activation and casts), named ``expert<e>.`` by moe_nodes
ROUTED_EXPERT: Final = re.compile(r"expert\d+\.")

INDEX_BYTES = 8  # int64 expert indices and sort keys (torch.topk, torch.argsort)
FP32_BYTES = 4  # the load-balancing softmax runs in fp32 (router.py)
_SOFTMAX_FLOPS = 7  # as the attention softmax: scale, mask, max, subtract, exp, sum, divide
_SUM_FLOPS = 1  # one add per element reduced

MASK_BYTES = 1  # the T x E boolean routing mask
MAP_BYTES = 4  # TransformerEngine's int32 row map, 2 E + 1 entries a token (permutation.py)


@dataclass(frozen=True, slots=True)
class MoeKernels:
    """How a stack permutes an MoE block's tokens: ``sort_chunks``, the ``alltoall``
    dispatcher's chunk sort around a rank's several experts; ``fused``, TransformerEngine's
    fused permutation kernels (``moe_permute_fusion``); ``fp8_padding``, the copies of the
    rank's routed rows into and out of low-precision GEMM alignment around grouped experts
    (``experts.pad``, ``experts.unpad``: Megatron-Core's ``TEGroupedMLP`` runs
    TransformerEngine's ``Fp8Padding`` on the rows and their probabilities and
    ``Fp8Unpadding`` on the output whenever a local expert's row count is not a multiple of
    the alignment, as with dropless routing's varying counts)."""

    sort_chunks: bool = False
    fused: bool = False
    fp8_padding: bool = False


def stack_kernels(profile: FrameworkProfile, gemm_format: str) -> MoeKernels:
    """The permutation kernels of a stack (``profile``) running GEMMs in ``gemm_format``:
    the chunk sort under the ``alltoall`` dispatcher; the FP8 padding copies with grouped
    experts (``expert_gemm_streams``, Megatron-Core's ``TEGroupedMLP``) in fp8 behind the
    ``flex`` dispatcher, whose counts per expert vary (``MoEFlexTokenDispatcher`` refuses
    ``moe_pad_expert_input_to_capacity``: Megatron-Core core_r0.14.0 ``token_dispatcher.py``)."""
    return MoeKernels(
        sort_chunks=profile.moe_dispatcher == "alltoall",
        fused=profile.moe_permute_fusion,
        fp8_padding=profile.moe_dispatcher == "flex"
        and profile.expert_gemm_streams > 0
        and gemm_format == "fp8",
    )


#: ``ffn(prefix, src, tokens, width)`` adds an FFN's nodes and returns its output's name.
Ffn = Callable[[str, str, int, int], str]


def expert_tokens(tokens: int, model: Model, ep: int = 1, load: float = 1.0) -> tuple[int, ...]:
    """Tokens each expert of a rank processes: ``tokens x top_k`` routed copies spread
    evenly (the balanced routing that auxiliary load-balancing losses aim for). With expert
    parallelism over ``ep`` ranks, each running ``tokens`` tokens, a rank holds ``E / ep``
    experts and receives as many routed copies as it sends, so its experts share the same
    ``tokens x top_k`` copies, ``ep`` times as many each. ``load``: the busiest rank's share
    over the mean (:attr:`workloads.model.Model.expert_load_imbalance`), whose experts get
    ``load`` times the copies; the others wait for it at the combine.

    >>> m = Model("m", 1, 8, 1, 8, 8, experts=4, top_k=2)
    >>> expert_tokens(10, m), expert_tokens(10, m, ep=2)
    ((5, 5, 5, 5), (10, 10))
    """
    routed, e = round(tokens * model.top_k * load), model.experts // ep
    return tuple(routed // e + (1 if i < routed % e else 0) for i in range(e))


def router_topk_flops(tokens: int, experts: int, top_k: int) -> int:
    """Top-k by ``top_k`` passes of a max over each token's logits, then a softmax over the
    ``top_k`` chosen."""
    return tokens * (experts * top_k + _SOFTMAX_FLOPS * top_k)


def _op(name: str, kind: OpKind, elements: int, flops: int, read: int, written: int) -> Op:
    """A vector-core op with its bytes given in full."""
    return Op(
        name=name,
        kind=kind,
        core=CoreType.VC,
        flops=flops,
        bytes_read=read,
        bytes_written=written,
        elements=elements,
    )


def _router_nodes(src: str, model: Model, T: int, p: int, aux_loss: bool) -> list[Node]:
    h, E, k = model.hidden, model.experts, model.top_k
    topk = _op(
        "router.topk",
        OpKind.SOFTMAX,
        T * E,
        router_topk_flops(T, E, k),
        read=p * T * E,
        written=(p + INDEX_BYTES) * T * k,
    )
    topk_bwd = _op(
        "router.topk.bwd",
        OpKind.SOFTMAX,
        T * E,
        2 * _SOFTMAX_FLOPS * T * k,
        read=2 * p * T * k + INDEX_BYTES * T * k,
        written=p * T * E,
    )
    aux_flops = (_SOFTMAX_FLOPS + _SUM_FLOPS) * T * E
    aux = _op(
        "router.aux_loss",
        OpKind.SOFTMAX,
        T * E,
        aux_flops,
        read=p * T * E + FP32_BYTES * T * E,
        written=FP32_BYTES * T * E + FP32_BYTES * E,
    )
    aux_bwd = _op(
        "router.aux_loss.bwd",
        OpKind.SOFTMAX,
        T * E,
        2 * aux_flops,
        read=2 * FP32_BYTES * T * E + FP32_BYTES * E,
        written=FP32_BYTES * T * E + p * T * E,
    )
    nodes = [
        Node(gemm("router", T, h, E, p), (src,), Grad.GEMM),
        Node(topk, ("router",), Grad.FUSED, backward=topk_bwd),
    ]
    return nodes + ([Node(aux, ("router",), Grad.FUSED, backward=aux_bwd)] if aux_loss else [])


def _dispatch(src: str, model: Model, T: int, p: int) -> Node:
    h, k = model.hidden, model.top_k
    rows = T * k * h
    forward = _op(
        "dispatch",
        OpKind.ELEMENTWISE,
        rows,
        0,
        read=p * rows + 2 * INDEX_BYTES * T * k,
        written=p * rows + INDEX_BYTES * T * k,
    )
    backward = _op(
        "dispatch.bwd",
        OpKind.ELEMENTWISE,
        rows,
        _SUM_FLOPS * rows,
        read=p * rows + INDEX_BYTES * T * k + p * T * h,
        written=2 * p * T * h,
    )
    return Node(
        forward, (src, "router.topk"), Grad.FUSED, nondiff=("router.topk",), backward=backward
    )


def _fused_dispatch(src: str, model: Model, T: int, p: int) -> Node:
    """TransformerEngine's fused permute with probabilities: each row read once, its ``k``
    copies and their probabilities written, through an int32 row map built from the mask;
    backward, the fused unpermute of the gradients and of the probabilities' gradients."""
    h, E, k = model.hidden, model.experts, model.top_k
    rows, probs, rmap = T * k * h, FP32_BYTES * T * k, MAP_BYTES * T * (2 * E + 1)
    forward = _op(
        "dispatch",
        OpKind.ELEMENTWISE,
        rows,
        0,
        read=p * T * h + (MASK_BYTES + FP32_BYTES) * T * E,
        written=p * rows + probs + rmap,
    )
    backward = _op(
        "dispatch.bwd",
        OpKind.ELEMENTWISE,
        rows,
        _SUM_FLOPS * rows,
        read=p * rows + probs + rmap,
        written=p * T * h + FP32_BYTES * T * E,
    )
    return Node(
        forward, (src, "router.topk"), Grad.FUSED, nondiff=("router.topk",), backward=backward
    )


def _fused_combine(
    outs: list[str], model: Model, T: int, p: int, shared: bool, aux_loss: bool
) -> Node:
    """TransformerEngine's fused unpermute: each token's ``k`` rows summed back (the
    probabilities already multiplied the experts' activation), plus the shared experts'
    output; backward, the fused permute of the output gradient."""
    h, E, k = model.hidden, model.experts, model.top_k
    rows, rmap = T * k * h, MAP_BYTES * T * (2 * E + 1)
    extra = T * h if shared else 0
    forward = _op(
        "combine",
        OpKind.ELEMENTWISE,
        T * h,
        (k - 1) * T * h + extra,
        read=p * (rows + 2 * extra) + rmap,
        written=p * (T * h + extra),
    )
    backward = _op(
        "combine.bwd", OpKind.ELEMENTWISE, rows, 0, read=p * T * h + rmap, written=p * rows
    )
    inputs = (*outs, "router.topk", *(("router.aux_loss",) if aux_loss else ()))
    return Node(forward, inputs, Grad.FUSED, backward=backward)


def _combine(outs: list[str], model: Model, T: int, p: int, shared: bool, aux_loss: bool) -> Node:
    h, k = model.hidden, model.top_k
    rows = T * k * h
    # zero fill + scatter-add (read the outputs, read-modify-write the target), multiply by
    # the probabilities, sum over the k; the shared experts' output added
    forward = _op(
        "combine",
        OpKind.ELEMENTWISE,
        T * h,
        (3 * k - 1) * T * h + (T * h if shared else 0),
        read=p * (4 * rows + T * k) + INDEX_BYTES * T * k + (2 * p * T * h if shared else 0),
        written=p * (3 * rows + T * h) + (p * T * h if shared else 0),
    )
    # the multiply's input gradient and probability gradient (product, sum over h), the
    # scatter's gather
    backward = _op(
        "combine.bwd",
        OpKind.ELEMENTWISE,
        rows,
        3 * rows,
        read=p * (3 * rows + 2 * T * h + T * k) + INDEX_BYTES * T * k,
        written=p * (3 * rows + T * k),
    )
    inputs = (*outs, "router.topk", *(("router.aux_loss",) if aux_loss else ()))
    return Node(forward, inputs, Grad.FUSED, backward=backward)


def _chunk_sort(name: str, inputs: tuple[str, ...], model: Model, T: int, p: int) -> Node:
    """A copy of the rank's ``T k`` routed rows (and their fp32 probabilities) into another
    chunk order; its backward is the inverse copy of the gradients."""
    rows, probs = T * model.top_k * model.hidden, FP32_BYTES * T * model.top_k
    nbytes = p * rows + probs

    def copy(suffix: str) -> Op:
        return _op(name + suffix, OpKind.ELEMENTWISE, rows, 0, read=nbytes, written=nbytes)

    return Node(copy(""), inputs, Grad.FUSED, backward=copy(".bwd"))


def moe_nodes(
    nodes: list[Node],
    src: str,
    model: Model,
    T: int,
    p: int,
    ffn: Ffn,
    aux_loss: bool = True,
    ep: int = 1,
    load: float = 1.0,
    kernels: MoeKernels = MoeKernels(),
) -> str:
    """Append an MoE block's router, dispatch, routed experts (each ``ffn`` on its tokens),
    the shared experts (one ``ffn`` of their total width on every token) and combine to
    ``nodes``; return the combine's name. ``T`` tokens per rank, ``p`` bytes per element;
    ``aux_loss``: the load-balancing loss (training only); ``ep``: the rank holds ``1/ep`` of
    the routed experts and ``load`` the busiest rank's share of them (:func:`expert_tokens`);
    ``kernels``: the stack's permutation kernels."""
    nodes += _router_nodes(src, model, T, p, aux_loss)
    nodes.append((_fused_dispatch if kernels.fused else _dispatch)(src, model, T, p))
    counts = expert_tokens(T, model, ep, load)
    sort = kernels.sort_chunks and len(counts) > 1
    if sort:
        nodes.append(_chunk_sort("dispatch.sort", ("dispatch",), model, T, p))
    width = model.expert_width
    into = "dispatch.sort" if sort else "dispatch"
    if kernels.fp8_padding:
        nodes.append(_chunk_sort("experts.pad", (into,), model, T, p))
        into = "experts.pad"
    outs = [ffn(f"expert{e}.", into, n, width) for e, n in enumerate(counts) if n]
    if kernels.fp8_padding:
        nodes.append(_chunk_sort("experts.unpad", tuple(outs), model, T, p))
        outs = ["experts.unpad"]
    if sort:
        nodes.append(_chunk_sort("combine.unsort", tuple(outs), model, T, p))
        outs = ["combine.unsort"]
    shared = model.shared_experts
    if shared:
        outs.append(ffn("shared.", src, T, shared * width))
    combine = _fused_combine if kernels.fused else _combine
    nodes.append(combine(outs, model, T, p, bool(shared), aux_loss))
    return "combine"


def launched_per_expert(graph: OpGraph, launch_s: float) -> OpGraph:
    """``graph`` with every routed expert's op waiting ``launch_s`` of host launch beyond the
    cost model's issue overhead: a stack that launches each expert's kernels eagerly, one
    kernel per expert and step (:attr:`~workloads.framework.FrameworkProfile.expert_launch_s`)."""
    if launch_s <= 0:
        return graph
    ops = tuple(
        replace(op, launch_s=launch_s) if ROUTED_EXPERT.match(op.name) else op for op in graph.ops
    )
    return OpGraph(ops=ops, edges=graph.edges)


def waits_on_host_counts(graph: OpGraph) -> bool:
    """Whether ``graph`` (a block's forward pass) holds the token dispatch: under a
    dispatcher that reads the token counts on the host (DeepEP's and HybridEP's dispatch,
    the ``flex`` dispatcher) the host waits there for the device before it can size the
    experts' GEMMs, so the device has drained and the host keeps no lead over it."""
    return any(op.name == "dispatch" for op in graph.ops)


def host_bound(graph: OpGraph, host_s_per_kernel: float) -> OpGraph:
    """``graph`` taking at least its kernels times ``host_s_per_kernel``: a pass whose
    kernels a host with no lead issues one by one
    (:attr:`~workloads.framework.FrameworkProfile.host_s_per_kernel`; 0: the graph itself)."""
    if host_s_per_kernel <= 0:
        return graph
    return replace(graph, host_s=len(graph.ops) * host_s_per_kernel)


def grouped_in_stream_order(graph: OpGraph, gemm_streams: int) -> OpGraph:
    """``graph`` with its routed experts' ops in the order a stack running them as grouped
    modules issues them (module docstring): each op of an expert (``expert<e>.<op>``) after
    the op before it of every expert, and after the same op of the previous expert (for a
    GEMM, of the expert ``gemm_streams`` back: that many GEMMs run at once). 0 streams: the
    graph itself, every expert's ops independent of the others'."""
    if gemm_streams <= 0:
        return graph
    where: dict[int, tuple[str, str]] = {}  # op index -> (its expert's prefix, the op's rest)
    for i, op in enumerate(graph.ops):
        m = ROUTED_EXPERT.match(op.name)
        if m:
            where[i] = (m.group(), op.name[m.end() :])
    if not where:
        return graph
    phase: dict[str, list[int]] = {}  # an op's rest -> its index in each expert, in order
    for i, (_, rest) in where.items():
        phase.setdefault(rest, []).append(i)
    lag = {
        rest: gemm_streams if graph.ops[ops[0]].kind is OpKind.MATMUL else 1
        for rest, ops in phase.items()
    }
    # an expert's own edges become edges between its phases: the last `lag` ops of a phase
    # end its chains and the first `lag` of the next start them, so these edges order every
    # op of the one before every op of the other
    inner = {(a, b) for a, b in graph.edges if a in where and b in where}
    edges = set(graph.edges) - inner
    for ops in phase.values():
        edges.update(zip(ops, ops[lag[where[ops[0]][1]] :], strict=False))
    for a, b in inner:
        before, after = where[a][1], where[b][1]
        edges.update(
            (i, j) for i in phase[before][-lag[before] :] for j in phase[after][: lag[after]]
        )
    return _in_topological_order(graph.ops, edges)


def _in_topological_order(ops: tuple[Op, ...], edges: set[tuple[int, int]]) -> OpGraph:
    """The graph of ``ops`` and ``edges`` with its ops reordered so every edge points
    forward, each op as early as its inputs allow (ties by its old place)."""
    succ: list[list[int]] = [[] for _ in ops]
    waiting = [0] * len(ops)
    for a, b in edges:
        succ[a].append(b)
        waiting[b] += 1
    ready = [i for i, w in enumerate(waiting) if not w]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for j in succ[i]:
            waiting[j] -= 1
            if not waiting[j]:
                heapq.heappush(ready, j)
    at = {old: new for new, old in enumerate(order)}
    return OpGraph(
        ops=tuple(ops[i] for i in order), edges=tuple(sorted((at[a], at[b]) for a, b in edges))
    )
