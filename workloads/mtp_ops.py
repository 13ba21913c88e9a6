"""The head layer of a model with multi-token prediction (MTP) modules (docs/models.md).

DeepSeek-V3 (dsv3-report Sec. 2.2) trains ``D`` sequential MTP modules beside the model; the
``k``-th predicts the token ``k + 1`` ahead. Module ``k`` normalises the hidden state the
previous depth produced (the main model's last block for ``k = 0``) and the shared embedding
of the next tokens, projects their concatenation from ``2h`` to ``h``, runs one transformer
block of the model's kind (MLA and MoE in V3) and predicts through the shared output head and
its cross entropy. Megatron-Core (``megatron/core/transformer/multi_token_prediction.py``)
places the modules on the last pipeline stage beside the loss (its layout ``...mL``), as
DeepSeek's DualPipe does, so here they are part of the head layer: its graphs hold each
module's embedding, norms, projection and head beside the main head, and the layer runs the
model's block class once more per module (``extra_classes``: the block is scheduled once,
for the main blocks and the modules alike, as the identical graph it is). The layer holds
the modules' parameters (:meth:`workloads.model.Model.mtp_parameters`), the embedding copy
as tied parameters, their blocks' experts, all-to-alls and K/V, and stashes what the
modules keep (:func:`mtp_activation_bytes`).

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
    _column_parallel_input,
    _Dims,
    _embedding_nodes,
    _norm,
    _pass_graphs,
    head_nodes,
)
from workloads.ops import CollectiveKind
from workloads.setup import TrainingSetup

__all__ = ["mtp_head_pass_graphs", "mtp_activation_bytes"]


def mtp_head_pass_graphs(model: Model, setup: TrainingSetup, tp: int) -> PassGraphs:
    """The head layer's graphs with the model's MTP modules beside the main head, each
    module's block left out: the layer runs the model's block class once more per module
    (:attr:`workloads.layer_graph.Layer.extra_classes`), whose schedules are the main
    blocks'. Nothing here is recomputed (the blocks' recompute is theirs)."""
    d = _Dims.of(setup, tp)
    nodes = head_nodes(model, setup, d)
    for k in range(model.mtp_layers):
        nodes += _module_nodes(model, setup, d, k)
    return _pass_graphs(nodes, d, frozenset())


def _module_nodes(model: Model, setup: TrainingSetup, d: _Dims, k: int) -> list[Node]:
    """MTP module ``k`` around its block: the embedding of the tokens ahead, the two norms,
    the projection (reading the layer's input: the previous depth's hidden state), and
    the module's head (reading the layer's input: its block's output)."""
    tag = f"@mtp{k}"
    h, p = model.hidden, d.p
    nodes = _renamed(_embedding_nodes(model, d), tag)
    emb = _norm(nodes, f"enorm{tag}", (nodes[-1].op.name,), model, d, tp_next=True)
    top = _norm(nodes, f"hnorm{tag}", (), model, d, tp_next=True)
    ins = tuple(_column_parallel_input(nodes, x, d, h) for x in (emb, top))
    proj = gemm(f"eh_proj{tag}", d.tokens, 2 * h, h // d.t, p)
    nodes.append(Node(proj, ins, Grad.GEMM))
    if d.t > 1:  # all_gather_last_dim_from_tensor_parallel_region
        op = collective(f"{proj.name}.allgather", CollectiveKind.ALL_GATHER, p * d.tokens * h, d.t)
        nodes.append(Node(op, (proj.name,), Grad.GATHER))
    return [*nodes, *_renamed(head_nodes(model, setup, d), tag)]


def _renamed(nodes: list[Node], tag: str) -> list[Node]:
    """``nodes`` with ``tag`` after each op's name."""
    out = []
    for n in nodes:
        back = None if n.backward is None else replace(n.backward, name=n.backward.name + tag)
        out.append(
            replace(
                n,
                op=replace(n.op, name=n.op.name + tag),
                inputs=tuple(s + tag for s in n.inputs),
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
