"""The head layer of a model with multi-token prediction (MTP) modules (docs/models.md).

DeepSeek-V3 (dsv3-report Sec. 2.2) trains ``D`` sequential MTP modules beside the model; the
``k``-th predicts the token ``k + 1`` ahead. Module ``k`` normalises the hidden state the
previous depth produced (the main model's last block for ``k = 0``) and the shared embedding
of the next tokens, projects their concatenation from ``2h`` to ``h``, runs one transformer
block of the model's kind (MLA and MoE in V3) and predicts through the shared output head and
its cross entropy. Megatron-Core (``megatron/core/transformer/multi_token_prediction.py``)
places the modules on the last pipeline stage beside the loss (its layout ``...mL``), as
DeepSeek's DualPipe does, so here they are part of the head layer's graphs: the layer holds
its parameters (:meth:`workloads.model.Model.mtp_parameters`), the embedding copy as tied
parameters, its block's experts, all-to-alls and K/V, and stashes what the module keeps
(:func:`mtp_activation_bytes`).

The projection is Megatron-Core's ``eh_proj``: column-parallel (its input gathered over the
sequence with sequence parallelism), its output gathered over the tensor ranks. The module's
block is recomputed as a main block is (Megatron-Core checkpoints the MTP layer under full
recompute); the embedding lookup, projection and head never are. Ops of module ``k`` carry
the suffix ``@mtp<k>`` so names stay unique beside the main head's (a recipe keeps the MTP
logits GEMM in high precision as the main head's: :data:`workloads.precision._KEPT`).
"""

from __future__ import annotations

from dataclasses import replace

from workloads._autodiff import Grad, Node, collective, gemm
from workloads.layer_graph import PassGraphs
from workloads.memory import (
    block_activation_bytes,
    embedding_activation_bytes,
    head_activation_bytes,
)
from workloads.model import Model
from workloads.op_graphs import (
    _block_nodes,
    _column_parallel_input,
    _Dims,
    _embedding_nodes,
    _norm,
    _pass_graphs,
    head_nodes,
    recomputed,
)
from workloads.ops import CollectiveKind
from workloads.setup import TrainingSetup

__all__ = ["mtp_head_pass_graphs", "mtp_activation_bytes"]


def mtp_head_pass_graphs(model: Model, setup: TrainingSetup, tp: int) -> PassGraphs:
    """The head layer's graphs with the model's MTP modules after the main head; the
    recompute graph holds what the setup re-runs of each module's block."""
    d = _Dims.of(setup, tp)
    nodes = head_nodes(model, setup, d)
    again: set[str] = set()
    hidden = None  # the layer's input: the main model's last hidden state
    for k in range(model.mtp_layers):
        module, block, hidden = _module_nodes(model, setup, d, hidden, k)
        nodes += module
        again |= block
    return _pass_graphs(nodes, d, frozenset(again))


def _module_nodes(
    model: Model, setup: TrainingSetup, d: _Dims, hidden: str | None, k: int
) -> tuple[list[Node], set[str], str]:
    """(nodes of MTP module ``k`` reading ``hidden`` (None: the layer's input), the names
    of its block's nodes the setup recomputes, the name of its block's output)."""
    tag = f"@mtp{k}"
    h, p = model.hidden, d.p
    nodes = _renamed(_embedding_nodes(model, d), tag, None)
    emb = _norm(nodes, f"enorm{tag}", (nodes[-1].op.name,), model, d, tp_next=True)
    top = _norm(nodes, f"hnorm{tag}", (hidden,) if hidden else (), model, d, tp_next=True)
    ins = tuple(_column_parallel_input(nodes, x, d, h) for x in (emb, top))
    proj = gemm(f"eh_proj{tag}", d.tokens, 2 * h, h // d.t, p)
    nodes.append(Node(proj, ins, Grad.GEMM))
    x = proj.name
    if d.t > 1:  # all_gather_last_dim_from_tensor_parallel_region
        op = collective(f"{x}.allgather", CollectiveKind.ALL_GATHER, p * d.tokens * h, d.t)
        nodes.append(Node(op, (x,), Grad.GATHER))
        x = op.name
    block = _block_nodes(model, d, dense=False)
    keep = recomputed(block, model, setup)
    names = {n.op.name for n in block} if keep is None else set(keep)
    block = _renamed(block, tag, x)
    out = block[-1].op.name
    head = _renamed(head_nodes(model, setup, d), tag, out)
    return [*nodes, *block, *head], {n + tag for n in names}, out


def _renamed(nodes: list[Node], tag: str, root: str | None) -> list[Node]:
    """``nodes`` with ``tag`` after each op's name; nodes reading the layer's input read
    ``root`` instead (None: the layer's input still)."""
    out = []
    for n in nodes:
        inputs = tuple(s + tag for s in n.inputs) or ((root,) if root else ())
        back = None if n.backward is None else replace(n.backward, name=n.backward.name + tag)
        out.append(
            replace(
                n,
                op=replace(n.op, name=n.op.name + tag),
                inputs=inputs,
                nondiff=tuple(s + tag for s in n.nondiff),
                backward=back,
            )
        )
    return out


def mtp_activation_bytes(model: Model, setup: TrainingSetup, tp: int) -> int:
    """What the model's MTP modules stash per micro-batch per device: each module's
    embedding, its two norm inputs and the projection's input (``2 h`` wide), its block's
    stash under the setup's recompute mode, and its head's (logits included)."""
    if not model.mtp_layers:
        return 0
    p, tokens, h = setup.precision_bytes, setup.micro_batch * setup.seq_len, model.hidden
    sp = tp if setup.sequence_parallel and tp > 1 else 1
    inputs = -(-(2 * p * tokens * h) // sp) + 2 * p * tokens * h  # norm inputs; eh_proj input
    per = (
        embedding_activation_bytes(model, setup, tp)
        + inputs
        + block_activation_bytes(model, setup, tp)
        + head_activation_bytes(model, setup, tp)
    )
    return model.mtp_layers * per
