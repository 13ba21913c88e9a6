"""Forward op graphs as node specs, and the backward graph derived from them.

Each forward node names its producers and how its gradient flows; :func:`backward_graph`
walks the forward nodes in reverse and emits, per node, the backward ops Megatron-LM runs:

* a weight GEMM ``Y = X W`` -> ``.dgrad`` (``dX = dY W^T``) and ``.wgrad`` (``dW = X^T dY``);
  a fused GEMM + epilogue first runs the epilogue's derivative (``.epilogue.bwd``);
* a GEMM of two activations (attention) -> ``.dgrad`` (gradient of the left operand) and
  ``.wgrad`` (of the right operand: K or V);
* a vector op -> ``.bwd`` (one op producing the gradients of all its inputs);
* a fused kernel -> the backward op its node names (one op, the gradients of all inputs);
* the tensor-parallel conjugates (Shoeybi et al. 2019, Fig. 3; Korthikanti et al. 2022,
  §4.2.2): forward all-reduce -> identity; a column-parallel entry without sequence
  parallelism -> all-reduce of the input gradient; forward all-gather -> reduce-scatter;
  forward reduce-scatter -> all-gather. With sequence parallelism Megatron does not stash the
  gathered input of a column-parallel GEMM: it all-gathers it again (``.regather``) for the
  weight gradient.

So the backward graph mirrors the forward one by construction: same GEMMs, dependencies
reversed.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from workloads.ops import CollectiveKind, CommRole, CoreType, Op, OpGraph, OpKind

__all__ = [
    "Grad",
    "Node",
    "GRAD_BYTES",
    "gemm",
    "vector",
    "collective",
    "forward_graph",
    "sub_graph",
    "backward_graph",
]

GRAD_BYTES = 4  # fp32 main gradients, accumulated in place (Megatron gradient-accumulation fusion)
_VECTOR_BWD_FLOPS_FACTOR = 2  # local derivative + chain-rule product per forward FLOP (convention)


class Grad(Enum):
    """How the gradient flows back through a forward node."""

    GEMM = "gemm"  # activation x weight: dgrad and wgrad
    BGEMM = "bgemm"  # activation x activation: gradients of both operands
    VECTOR = "vector"  # one backward vector op
    IDENTITY = "identity"  # forward all-reduce: the backward is the identity
    GATHER = "gather"  # forward all-gather: backward reduce-scatter (+ re-gather for wgrad)
    SCATTER = "scatter"  # forward reduce-scatter: backward all-gather
    NONE = "none"  # no gradient (e.g. the max of a stable softmax)
    FUSED = "fused"  # a fused kernel whose node gives its backward op


@dataclass(frozen=True, slots=True)
class Node:
    """A forward op with its producers; ``nondiff`` inputs get no gradient; ``enter_tp``
    marks an output consumed by column-parallel GEMMs without sequence parallelism (its
    gradient is all-reduced over the tensor-parallel group); ``backward`` is the backward op
    of a :attr:`Grad.FUSED` node."""

    op: Op
    inputs: tuple[str, ...] = ()
    grad: Grad = Grad.VECTOR
    nondiff: tuple[str, ...] = ()
    enter_tp: bool = False
    backward: Op | None = None


def gemm(
    name: str,
    m: int,
    k: int,
    n: int,
    precision: int,
    *,
    batch: int = 1,
    batched: bool = False,
    bias: bool = False,
    epilogue_flops: int = 0,
) -> Op:
    """``batch`` products (m x k) @ (k x n); a nonzero epilogue makes it a fused TC+VC op."""
    return Op(
        name=name,
        kind=OpKind.BATCHED_MATMUL if batched else OpKind.MATMUL,
        core=CoreType.TC_AND_VC if epilogue_flops else CoreType.TC,
        flops=2 * batch * m * k * n,
        bytes_read=precision * (batch * (m * k + k * n) + (n if bias else 0)),
        bytes_written=precision * batch * m * n,
        batch=batch,
        m=m,
        k=k,
        n=n,
        elements=batch * m * n if epilogue_flops else 0,
        epilogue_flops=epilogue_flops,
    )


def vector(
    name: str,
    kind: OpKind,
    elements: int,
    flops_per_element: int,
    precision: int,
    *,
    inputs: int = 1,
    read_elements: int | None = None,
    mask_bytes: int = 0,
    flops: int | None = None,
) -> Op:
    """A vector-core op over ``elements`` outputs reading ``inputs`` tensors of that size
    (or ``read_elements`` in all) and writing one (plus a dropout mask of ``mask_bytes``);
    ``flops`` overrides ``flops_per_element x elements`` for reductions."""
    read = inputs * elements if read_elements is None else read_elements
    return Op(
        name=name,
        kind=kind,
        core=CoreType.VC,
        flops=flops_per_element * elements if flops is None else flops,
        bytes_read=precision * read,
        bytes_written=precision * elements + mask_bytes,
        elements=elements,
    )


def collective(
    name: str,
    kind: CollectiveKind,
    tensor_bytes: int,
    group: int,
    role: CommRole = CommRole.FORWARD,
) -> Op:
    """A collective over the tensor-parallel group on a tensor of ``tensor_bytes`` per device."""
    return Op(
        name=name,
        kind=OpKind.COLLECTIVE,
        core=CoreType.NOP,
        collective=kind,
        collective_bytes=tensor_bytes,
        group=group,
        role=role,
    )


def forward_graph(nodes: list[Node]) -> OpGraph:
    """The OpGraph of nodes listed in topological order."""
    return sub_graph(nodes, {n.op.name for n in nodes})


def sub_graph(nodes: list[Node], keep: set[str]) -> OpGraph:
    """The OpGraph of the nodes named in ``keep``, with the edges among them."""
    kept = [n for n in nodes if n.op.name in keep]
    index = {n.op.name: i for i, n in enumerate(kept)}
    edges = tuple((index[s], index[n.op.name]) for n in kept for s in n.inputs if s in index)
    return OpGraph(ops=tuple(n.op for n in kept), edges=edges)


def backward_graph(
    nodes: list[Node], precision: int, tp: int, split_grads: bool = False
) -> OpGraph:
    """The backward OpGraph of a forward graph given as nodes in topological order;
    ``split_grads``: weight gradients written at ``precision`` and accumulated into fp32
    by a pass of their own (:func:`_hp_accumulate`), not in the GEMM."""
    ops: list[Op] = []
    deps: list[list[str]] = []

    def emit(op: Op, after: list[str]) -> str:
        ops.append(op)
        deps.append(list(after))
        return op.name

    consumers: dict[str, list[tuple[str, int]]] = {n.op.name: [] for n in nodes}
    for node in nodes:
        for i, src in enumerate(node.inputs):
            if src not in node.nondiff:
                consumers[src].append((node.op.name, i))
    # the sequence-parallel input of a column-parallel GEMM, gathered again where its weight
    # gradient needs it (once per input)
    regather: dict[str, str] = {}
    gathered = {n.op.name: n.op for n in nodes if n.grad is Grad.GATHER and tp > 1}

    def regathered(src: str) -> str:
        if src not in regather:
            regather[src] = emit(_regather(gathered[src]), [])
        return regather[src]

    grad_of: dict[tuple[str, int], list[str]] = {}
    for node in reversed(nodes):
        op = node.op
        sources = [g for c, i in consumers[op.name] for g in grad_of.get((c, i), ())]
        if node.enter_tp and tp > 1:
            bytes_ = op.bytes_written
            ar = collective(
                f"{op.name}.grad_allreduce",
                CollectiveKind.ALL_REDUCE,
                bytes_,
                tp,
                CommRole.COLUMN_BACKWARD,
            )
            sources = [emit(ar, sources)]
        produced: list[list[str]] = [[] for _ in node.inputs]
        match node.grad:
            case Grad.GEMM:
                if op.epilogue_flops:
                    sources = [emit(_epilogue_bwd(op, precision), sources)]
                dgrad, wgrad = _gemm_grads(op, precision, weight=not split_grads)
                d = emit(dgrad, sources)
                extra = [regathered(s) for s in node.inputs if s in gathered]
                w = emit(wgrad, sources + extra)
                if split_grads:
                    emit(_hp_accumulate(op, precision), [w])
                produced = [[d] for _ in node.inputs]
            case Grad.BGEMM:
                ga, gb = _gemm_grads(op, precision, weight=False)
                produced = [[emit(ga, sources)], [emit(gb, sources)]]
            case Grad.VECTOR:
                b = emit(_vector_bwd(op, precision), sources)
                produced = [[b] for _ in node.inputs]
            case Grad.FUSED:
                if node.backward is None:
                    raise ValueError(f"fused node {op.name!r} names no backward op")
                b = emit(node.backward, sources)
                produced = [[b] for _ in node.inputs]
            case Grad.IDENTITY:
                produced = [list(sources) for _ in node.inputs]
            case Grad.GATHER | Grad.SCATTER:
                gather = node.grad is Grad.GATHER
                kind = CollectiveKind.REDUCE_SCATTER if gather else CollectiveKind.ALL_GATHER
                role = CommRole.COLUMN_BACKWARD if gather else CommRole.ROW_BACKWARD
                c = collective(f"{op.name}.bwd", kind, op.collective_bytes, op.group, role)
                produced = [[emit(c, sources)] for _ in node.inputs]
            case Grad.NONE:
                pass
        for i, names in enumerate(produced):
            grad_of[(op.name, i)] = names
    index = {op.name: i for i, op in enumerate(ops)}
    edges = tuple(sorted({(index[a], j) for j, after in enumerate(deps) for a in after}))
    return OpGraph(ops=tuple(ops), edges=edges)


def _gemm_grads(op: Op, precision: int, weight: bool) -> tuple[Op, Op]:
    """Input- and weight-gradient GEMMs of ``Y = A B``: ``dA = dY B^T``, ``dB = A^T dY``.

    For a weight GEMM the weight gradient is accumulated into the fp32 main gradient
    (read and written at :data:`GRAD_BYTES` per element).
    """
    b, m, k, n = op.batch, op.m, op.k, op.n
    batched = op.kind is OpKind.BATCHED_MATMUL
    dgrad = gemm(f"{op.name}.dgrad", m, n, k, precision, batch=b, batched=batched)
    wgrad = gemm(f"{op.name}.wgrad", k, m, n, precision, batch=b, batched=batched)
    if weight:
        acc = GRAD_BYTES * b * k * n
        wgrad = Op(
            name=wgrad.name,
            kind=wgrad.kind,
            core=wgrad.core,
            flops=wgrad.flops,
            bytes_read=precision * b * (m * k + m * n) + acc,
            bytes_written=acc,
            batch=b,
            m=k,
            k=m,
            n=n,
        )
    return dgrad, wgrad


def _hp_accumulate(op: Op, precision: int) -> Op:
    """DeepSpeed's BF16 optimizer after every backward pass (``update_hp_grads``): each
    weight gradient of ``op`` (written afresh at ``precision``, the low-precision gradients
    being cleared before the pass) cast to an fp32 copy and added into its fp32 accumulator,
    ``hp_grad.add_(lp.grad.to(float32))``: the cast reads ``precision`` and writes 4 B, the
    add reads 4 + 4 B and writes 4 B per element."""
    n = op.batch * op.k * op.n
    return Op(
        name=f"{op.name}.wgrad.accumulate",
        kind=OpKind.ELEMENTWISE,
        core=CoreType.VC,
        flops=n,
        bytes_read=(precision + 2 * GRAD_BYTES) * n,
        bytes_written=2 * GRAD_BYTES * n,
        elements=n,
    )


def _epilogue_bwd(op: Op, precision: int) -> Op:
    """Derivative of a fused epilogue (bias + activation): reads dY and the stashed
    pre-activation, writes the pre-activation gradient."""
    return Op(
        name=f"{op.name}.epilogue.bwd",
        kind=OpKind.ELEMENTWISE,
        core=CoreType.VC,
        flops=_VECTOR_BWD_FLOPS_FACTOR * op.epilogue_flops,
        bytes_read=2 * precision * op.elements,
        bytes_written=precision * op.elements,
        elements=op.elements,
    )


def _vector_bwd(op: Op, precision: int) -> Op:
    """Backward of a vector op: reads its stashed inputs and dY, writes the input gradients."""
    return Op(
        name=f"{op.name}.bwd",
        kind=op.kind,
        core=CoreType.VC,
        flops=_VECTOR_BWD_FLOPS_FACTOR * op.flops,
        bytes_read=op.bytes_read + precision * op.elements,
        bytes_written=op.bytes_read,
        elements=op.elements,
    )


def _regather(op: Op) -> Op:
    return collective(
        f"{op.name}.regather",
        CollectiveKind.ALL_GATHER,
        op.collective_bytes,
        op.group,
        CommRole.COLUMN_BACKWARD,
    )
