"""Legal tensor-parallel widths and the :class:`LayerGraph` of a model (docs/models.md)."""

from __future__ import annotations

import operator
from dataclasses import replace
from functools import lru_cache
from types import MappingProxyType

from phaze_common.errors import ConfigError
from workloads.framework import apply_framework
from workloads.layer_graph import Layer, LayerEdge, LayerGraph, LayerKind, PassGraphs
from workloads.memory import (
    block_activation_bytes,
    boundary_bytes,
    dispatch_bytes,
    embedding_activation_bytes,
    head_activation_bytes,
    kv_bytes,
)
from workloads.model import Model, padded_vocab
from workloads.moe_ops import (
    grouped_in_stream_order,
    host_bound,
    launched_per_expert,
    waits_on_host_counts,
)
from workloads.mtp_ops import mtp_activation_bytes, mtp_head_pass_graphs
from workloads.op_graphs import block_pass_graphs, embedding_pass_graphs, head_pass_graphs
from workloads.ops import OpGraph
from workloads.precision import apply_precision
from workloads.setup import Recompute, TrainingSetup

__all__ = [
    "DENSE_BLOCK_CLASS",
    "valid_tp_widths",
    "tp_width_problems",
    "build_layer_graph",
    "check_setup",
]

EMBEDDING_CLASS = "embedding"
BLOCK_CLASS = "block"
DENSE_BLOCK_CLASS = "dense_block"  # an MoE model's leading dense blocks
HEAD_CLASS = "head"


def valid_tp_widths(model: Model, max_tp: int | None = None) -> tuple[int, ...]:
    """Every tensor-parallel width ``t <= max_tp`` (default: the heads) ``model`` shards to.

    ``t`` must divide the attention heads and the FFN widths (dense and expert; Megatron
    asserts each), and divide the key/value heads or be a multiple of them (each K/V head then
    replicated over ``t / kv_heads`` ranks, :meth:`Model.kv_heads_per_rank`); the vocabulary
    need not divide, it is padded (see :func:`workloads.model.padded_vocab`).

    >>> from workloads.catalog import get_model
    >>> valid_tp_widths(get_model("llama2-70b"), max_tp=16)
    (1, 2, 4, 8, 16)
    >>> valid_tp_widths(get_model("gpt2-xl"))
    (1, 5, 25)
    """
    limit = model.heads if max_tp is None else min(max_tp, model.heads)
    return tuple(t for t in range(1, limit + 1) if tp_width_problems(model, t) == [])


def tp_width_problems(model: Model, tp: int) -> list[str]:
    """The widths of ``model`` that tensor-parallel width ``tp`` does not divide, each as
    ``field = value`` (an MoE model's expert width too; the key/value heads when ``tp``
    neither divides them nor is a multiple of them); empty when ``tp`` is valid."""
    expert = (("expert_ffn_hidden", model.expert_width),) if model.is_moe else ()
    bad = [
        f"{field} = {value}"
        for field, value in (("heads", model.heads), ("ffn_hidden", model.ffn_hidden), *expert)
        if value % tp
    ]
    if model.kv_heads % tp and tp % model.kv_heads:
        bad.insert(1, f"kv_heads = {model.kv_heads} (or be a multiple of it)")
    return bad


def _check(model: Model, setup: TrainingSetup, tp: int) -> None:
    problems = []
    bad = tp_width_problems(model, tp)
    if bad:
        widths = ", ".join(map(str, valid_tp_widths(model)))
        problems.append(f"tp = {tp} must divide {' and '.join(bad)} (valid widths: {widths})")
    if setup.sequence_parallel and tp > 1 and setup.seq_len % tp:
        problems.append(
            f"seq_len = {setup.seq_len} must be a multiple of tp = {tp} with sequence parallelism"
        )
    beyond = model.context_problem(
        f"seq_len = {setup.seq_len}",
        setup.seq_len,
        allow_extension=setup.allow_context_extension,
    )
    if beyond:
        problems.append(beyond)
    if problems:
        raise ConfigError(f"model {model.name!r}: " + "; ".join(problems))


def check_setup(model: Model, setup: TrainingSetup, tp: int = 1) -> None:
    """Raise the ConfigError :func:`build_layer_graph` would raise for these arguments,
    without building anything (so a sweep can check every setup before its workers start)."""
    _check(model, setup, tp)


def build_layer_graph(model: Model, setup: TrainingSetup, tp: int) -> LayerGraph:
    """The layer graph of ``model`` trained with ``setup`` at tensor-parallel width ``tp``.

    Layers: the embedding, ``model.layers`` blocks (one ``class_id``, one set of op graphs;
    an MoE model's leading dense blocks another), the head. Each layer carries its shard's
    parameters and the activation bytes it stashes per micro-batch per device; each edge the
    boundary tensor's bytes.
    Cached by the (frozen) arguments.

    Raises
    ------
    ConfigError
        ``tp`` does not divide the heads, kv heads or FFN width; with sequence parallelism
        ``tp`` does not divide the sequence; the sequence is longer than the model's context
        (:meth:`Model.context_problem`).
    """
    try:
        width = operator.index(tp)
    except TypeError:
        width = 0
    if isinstance(tp, bool) or width <= 0:
        raise ConfigError(f"tp = {tp!r} must be a positive integer")
    return _build(model, setup, width)


@lru_cache(maxsize=2048)
def _build(model: Model, setup: TrainingSetup, tp: int) -> LayerGraph:
    _check(model, setup, tp)
    tensor_parallel = tp > 1
    layers = [
        Layer(
            index=0,
            name="embedding",
            kind=LayerKind.EMBEDDING,
            class_id=EMBEDDING_CLASS,
            parameters=model.embedding_parameters(tp),
            activation_bytes=embedding_activation_bytes(model, setup, tp),
            tensor_parallel=tensor_parallel,
        )
    ]
    dense = model.dense_layers
    layers += [
        Layer(
            index=i,
            name=f"block{i}",
            kind=LayerKind.BLOCK,
            class_id=DENSE_BLOCK_CLASS if i <= dense else BLOCK_CLASS,
            parameters=model.block_parameters(tp, dense=i <= dense),
            activation_bytes=block_activation_bytes(model, setup, tp, dense=i <= dense),
            tensor_parallel=tensor_parallel,
            expert_parameters=0 if i <= dense else model.expert_parameters(tp),
            dispatch_bytes=0 if i <= dense else dispatch_bytes(model, setup, tp),
            kv_bytes=kv_bytes(model, setup, tp),
        )
        for i in range(1, model.layers + 1)
    ]
    layers.append(_head_layer(model, setup, tp))
    edge_bytes = boundary_bytes(model, setup, tp)
    edges = tuple(LayerEdge(i, i + 1, edge_bytes) for i in range(model.layers + 1))
    graphs = {
        EMBEDDING_CLASS: _framed(embedding_pass_graphs(model, setup, tp), setup, False),
        BLOCK_CLASS: _block_graphs(model, setup, tp, False),
        **({DENSE_BLOCK_CLASS: _block_graphs(model, setup, tp, True)} if dense else {}),
        HEAD_CLASS: _head_graphs(model, setup, tp),
    }
    return LayerGraph(
        tp=tp,
        layers=tuple(layers),
        edges=edges,
        op_graphs=MappingProxyType(graphs),
        experts=model.experts,
        top_k=model.top_k,
        **_routing(model, setup),
    )


def _head_layer(model: Model, setup: TrainingSetup, tp: int) -> Layer:
    """The head, with the model's MTP modules (:mod:`workloads.mtp_ops`): their
    parameters, stash, experts, all-to-alls and K/V, and a copy of the embedding table
    (tied: shared with the first stage) when the head's own weights are not it."""
    mtp = model.mtp_layers
    table = padded_vocab(model.vocab, tp) // tp * model.embedding_dim
    return Layer(
        index=model.layers + 1,
        name="head",
        kind=LayerKind.HEAD,
        class_id=HEAD_CLASS,
        parameters=model.head_parameters(tp) + model.mtp_parameters(tp),
        activation_bytes=head_activation_bytes(model, setup, tp)
        + mtp_activation_bytes(model, setup, tp),
        tensor_parallel=tp > 1,
        tied_parameters=model.tied_head_parameters(tp) or (table if mtp else 0),
        expert_parameters=mtp * model.expert_parameters(tp),
        dispatch_bytes=mtp * dispatch_bytes(model, setup, tp),
        kv_bytes=mtp * kv_bytes(model, setup, tp),
        extra_classes=(BLOCK_CLASS,) * mtp,
    )


def _head_graphs(model: Model, setup: TrainingSetup, tp: int) -> PassGraphs:
    """The head's framed graphs: the MTP modules' GEMMs in the recipe's format as a
    block's, the main head's (``logits``) kept high as without them."""
    if model.mtp_layers:
        return _framed(mtp_head_pass_graphs(model, setup, tp), setup, True)
    return _framed(head_pass_graphs(model, setup, tp), setup, False)


def _routing(model: Model, setup: TrainingSetup) -> dict[str, int]:
    """The graph's group-limited routing as the token all-to-alls see it: the model's, or,
    under a ``flex`` dispatcher (DeepEP, HybridEP) and a model routing to any expert, one
    group holding every expert, so a token crosses the network once per node it reaches
    (:func:`placement.ep_cp.routed_bytes`) as those kernels send it."""
    if setup.profile.moe_dispatcher == "flex" and model.experts > 1 and not model.routed_groups:
        return {"expert_groups": 1, "routed_groups": 1}
    return {"expert_groups": model.expert_groups, "routed_groups": model.routed_groups}


def _framed(pg: PassGraphs, setup: TrainingSetup, block: bool) -> PassGraphs:
    """Each pass under the setup's framework profile (a block's GEMMs first in its recipe's
    format: :mod:`workloads.precision`). Under a ``flex`` dispatcher a layer whose forward
    pass holds the token dispatch synchronises the host with the device every layer
    (:func:`workloads.moe_ops.waits_on_host_counts`), so the host never regains a lead: each
    of its passes takes at least its kernels' host time (:func:`workloads.moe_ops.host_bound`;
    the backward pass follows a forward's synchronisation)."""
    passes = [_framed_pass(g, setup, block) for g in (pg.forward, pg.backward, pg.recompute)]
    if setup.profile.moe_dispatcher == "flex" and waits_on_host_counts(passes[0]):
        passes = [host_bound(g, setup.profile.host_s_per_kernel) for g in passes]
    return PassGraphs(*passes)


def _framed_pass(graph: OpGraph, setup: TrainingSetup, block: bool) -> OpGraph:
    if block:
        graph = apply_precision(graph, setup.recipe)
        graph = launched_per_expert(graph, setup.profile.expert_launch_s)
        graph = grouped_in_stream_order(graph, setup.profile.expert_gemm_streams)
    return apply_framework(graph, setup.profile)


def _block_graphs(model: Model, setup: TrainingSetup, tp: int, dense: bool) -> PassGraphs:
    """A block's framed pass graphs. Its forward and backward graphs do not depend on the
    recompute mode, so they are built once per setup without it (:func:`_plain_block`) and
    shared: full recompute re-runs the forward graph itself (less its dead code under a stack
    that drops it, :attr:`~workloads.framework.FrameworkProfile.recompute_dce`); selective
    frames its own."""
    if setup.recompute is Recompute.NONE:
        return _plain_block(model, setup, tp, dense)
    plain = _plain_block(model, replace(setup, recompute=Recompute.NONE), tp, dense)
    if setup.recompute is Recompute.FULL and not setup.profile.recompute_dce:
        again = plain.forward
    else:
        again = _framed_pass(
            block_pass_graphs(model, setup, tp, dense=dense).recompute, setup, True
        )
    return PassGraphs(plain.forward, plain.backward, again)


@lru_cache(maxsize=256)
def _plain_block(model: Model, setup: TrainingSetup, tp: int, dense: bool) -> PassGraphs:
    return _framed(block_pass_graphs(model, setup, tp, dense=dense), setup, True)
