"""The layer graph of a model at one tensor-parallel width (docs/models.md).

Nodes are layers (embedding, each transformer block, the head); edges carry the bytes of the
boundary tensor per micro-batch. Identical layers share a ``class_id``; the forward and
backward :class:`~workloads.ops.OpGraph` of each distinct layer is kept once in
``op_graphs``, so each is scheduled once.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType

from workloads.ops import OpGraph

__all__ = ["LayerKind", "Layer", "LayerEdge", "PassGraphs", "LayerGraph"]


class LayerKind(StrEnum):
    EMBEDDING = "embedding"
    BLOCK = "block"
    HEAD = "head"  # final norm + LM head (or pooler/MLM head) + loss


@dataclass(frozen=True, slots=True)
class Layer:
    """One layer on one device of its tensor-parallel group, for one micro-batch.

    ``parameters`` is this shard's parameter count; ``activation_bytes`` what the layer
    stashes for its backward pass per micro-batch under the setup's recompute mode (and
    sequence parallelism), per device. ``tied_parameters`` are parameters shared with
    another layer and counted there (a tied LM head): a pipeline stage holding this layer
    but not that one keeps a copy, as Megatron-LM does. ``expert_parameters`` is the part
    of ``parameters`` in MoE experts (what expert parallelism spreads); ``dispatch_bytes``
    what one token all-to-all sends from this device and ``kv_bytes`` the keys and values
    context parallelism exchanges, per micro-batch (:mod:`workloads.memory`).
    ``extra_classes`` are other layers' classes whose passes this layer runs once more after
    its own (the head's multi-token-prediction blocks: :mod:`workloads.mtp_ops`), so their
    schedules are shared rather than solved again inside this layer's graphs.
    """

    index: int
    name: str
    kind: LayerKind
    class_id: str
    parameters: int
    activation_bytes: int
    tensor_parallel: bool
    tied_parameters: int = 0
    expert_parameters: int = 0
    dispatch_bytes: int = 0
    kv_bytes: int = 0
    extra_classes: tuple[str, ...] = ()

    @property
    def classes(self) -> tuple[str, ...]:
        """Every class whose passes make up this layer's: its own, then the extra ones."""
        return (self.class_id, *self.extra_classes)


@dataclass(frozen=True, slots=True)
class LayerEdge:
    """Producer -> consumer, with the boundary tensor's bytes per micro-batch per device."""

    src: int
    dst: int
    bytes: int


@dataclass(frozen=True, slots=True)
class PassGraphs:
    """Forward and backward op graphs of one distinct layer.

    ``recompute`` is the work re-run before the backward pass under the setup's recompute
    mode (an empty graph with no recompute; the attention core with selective; the whole
    forward with full).
    """

    forward: OpGraph
    backward: OpGraph
    recompute: OpGraph


@dataclass(frozen=True, slots=True)
class LayerGraph:
    """All layers of a model at tensor-parallel width ``tp``, in topological order;
    ``experts`` counts the model's MoE experts per block (1: dense), ``top_k`` the experts
    a token is routed to; ``expert_groups`` and ``routed_groups`` its group-limited routing
    (:class:`workloads.model.Model`; 0: none)."""

    tp: int
    layers: tuple[Layer, ...]
    edges: tuple[LayerEdge, ...]
    op_graphs: MappingProxyType[str, PassGraphs]
    experts: int = 1
    top_k: int = 1
    expert_groups: int = 0
    routed_groups: int = 0

    def pass_graphs(self, layer: Layer) -> PassGraphs:
        return self.op_graphs[layer.class_id]
