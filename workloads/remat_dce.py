"""Full recomputation as JAX runs it: only the forward ops the backward pass reads.

``jax.checkpoint`` (``nn.remat`` in Flax) recomputes a block's forward inside the backward
pass by partial evaluation, which keeps only the ops whose results the backward needs and
drops the rest as dead code; PyTorch's ``torch.utils.checkpoint`` (Megatron's full
recompute) re-runs the whole forward. A framework profile with ``recompute_dce`` takes the
block's recompute graph from :func:`partially_evaluated`.
"""

from __future__ import annotations

from workloads._autodiff import Grad, Node
from workloads.ops import OpKind

__all__ = ["partially_evaluated"]


def partially_evaluated(nodes: list[Node], precision: int) -> frozenset[str]:
    """The forward ops a full recompute re-runs when the stack re-derives only what the
    backward pass reads (JAX's ``jax.checkpoint``: the recomputed forward is partially
    evaluated and dead code dropped): walking back from the block's end, an op is dropped
    when no kept op consumes it, nothing's backward reads its output (a weight GEMM, a
    collective, a residual add without a dropout mask) and no consumer's backward reads it
    as an input. In a pre-norm block that drops the last row-parallel GEMM, its collective
    and the residual add: the backward reads FC2's input, not its output."""
    consumers: dict[str, list[Node]] = {n.op.name: [] for n in nodes}
    for node in nodes:
        for src in node.inputs:
            consumers[src].append(node)
    dead: set[str] = set()
    for node in reversed(nodes):
        after = consumers[node.op.name]
        if (
            _output_unread_by_backward(node, precision)
            and all(c.op.name in dead for c in after)
            and not any(_backward_reads_inputs(c) for c in after)
        ):
            dead.add(node.op.name)
    return frozenset(n.op.name for n in nodes if n.op.name not in dead)


def _is_residual_add(node: Node, precision: int) -> bool:
    """A residual add with no dropout mask (its backward passes the gradient through)."""
    op = node.op
    return op.name.endswith("residual") and op.bytes_written == precision * op.elements


def _output_unread_by_backward(node: Node, precision: int) -> bool:
    return (
        node.op.kind is OpKind.COLLECTIVE
        or node.grad is Grad.GEMM
        or _is_residual_add(node, precision)
    )


def _backward_reads_inputs(node: Node) -> bool:
    """Whether a consumer's backward reads its inputs: a collective's and an add's do not."""
    if node.op.kind is OpKind.COLLECTIVE:
        return node.grad is Grad.GATHER  # a sequence-parallel re-gather reads the input
    return not node.op.name.endswith("residual")
