"""The op graphs of a serving pass, per distinct layer, at tensor-parallel width t
(docs/serving.md).

A pass (:class:`~workloads.serving.ServingPass`) runs the layers the training passes run,
forward only, on the ``batch x new_tokens`` tokens it computes, with the same op vocabulary
and Megatron-style tensor parallelism as vLLM runs it (column-parallel Q/K/V and FC1,
row-parallel output projection and FC2, each followed by an all-reduce; a vocab-parallel
embedding and LM head):

* the embedding: the training pass's, without dropout;
* each block: the training block (:func:`~workloads.op_graphs.inference_block_graph`: no
  dropout, no MoE auxiliary loss), its GEMMs lowered as its weight format's precision
  recipe says (:func:`~workloads.precision.apply_precision`), with a KV-cache attention core
  (:mod:`workloads.attention_ops`): a flash prefill over the cached and new tokens, a paged
  decode kernel, MLA's latent cache;
* the head: the final norm on every token, then only when the pass samples the LM head on
  each sequence's last token (vLLM's ``LogitsProcessor`` selects those rows first), the
  logits gathered from the vocab shards and the sampler over them in fp32.

Every collective is synchronous (the engine's overlap profile, ``serving.toml``). The
workspace of a pass is the most memory its tensors hold at once (:func:`pass_workspace_bytes`),
the transient part of a device's memory beside the weights and the KV cache.

The layer graph (:func:`serving_layer_graph`) has one forward op graph per distinct layer,
with empty backward and recompute graphs, so :func:`ilp.timing.layer_timing` schedules a pass
as it schedules a training micro-batch. Layers stash no activations (``activation_bytes`` is
0); edges carry the hidden states a pipeline stage passes on.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache, partial
from types import MappingProxyType

from phaze_common.errors import ConfigError
from workloads._autodiff import Node, collective, forward_graph, gemm, vector
from workloads.attention_ops import cached_core, mla_decode_core
from workloads.build import (
    BLOCK_CLASS,
    DENSE_BLOCK_CLASS,
    EMBEDDING_CLASS,
    HEAD_CLASS,
    tp_width_problems,
    valid_tp_widths,
)
from workloads.framework import apply_framework, framework_profile
from workloads.layer_graph import Layer, LayerEdge, LayerGraph, LayerKind, PassGraphs
from workloads.model import Model, padded_vocab
from workloads.op_graphs import NORM_FLOPS, inference_block_graph, inference_embedding_graph
from workloads.ops import CollectiveKind, OpGraph, OpKind
from workloads.precision import apply_precision
from workloads.serving import ServingPass, serving_settings, weight_recipe

__all__ = ["check_serving", "serving_layer_graph", "peak_live_bytes", "pass_workspace_bytes"]

_SAMPLE_FLOPS = 7  # per logit: temperature scale, max, subtract, exp, sum, divide, draw
_EMPTY = OpGraph(ops=(), edges=())


def check_serving(model: Model, p: ServingPass, tp: int, ep: int = 1) -> None:
    """Raise one ConfigError naming every reason ``model`` cannot serve ``p`` at width
    ``tp`` with ``ep`` expert-parallel ranks: an encoder, a width Megatron-style sharding
    refuses, an expert-parallel degree that does not divide the routed experts, a context
    longer than the model's positions."""
    problems = []
    if not (isinstance(ep, int) and ep >= 1 and model.experts % ep == 0):
        what = "the routed experts" if model.is_moe else "a dense model's one FFN"
        problems.append(f"ep = {ep!r} must divide {what} ({model.experts})")
    if not model.causal:
        problems.append("causal = false: serving generates tokens with a causal decoder")
    valid = tp in range(1, model.heads + 1) and not tp_width_problems(model, tp)
    if not valid:  # (the valid widths worked out only for the message: a search asks often)
        widths = valid_tp_widths(model)
        problems.append(
            f"tp = {tp!r} must be one of the widths that divide its heads and FFN widths and "
            f"divide (or are a multiple of) its kv_heads ({', '.join(map(str, widths))})"
        )
    beyond = model.context_problem(f"a context of {p.context_tokens} tokens", p.context_tokens)
    if beyond:
        problems.append(beyond)
    if problems:
        raise ConfigError(f"model {model.name!r}: " + "; ".join(problems))


def serving_layer_graph(model: Model, p: ServingPass, tp: int, ep: int = 1) -> LayerGraph:
    """The layer graph of one serving pass of ``model`` at tensor-parallel width ``tp`` on
    one rank of ``ep`` expert-parallel ranks, each running its own ``p`` and holding ``1/ep``
    of an MoE block's routed experts (cached by its frozen arguments).

    Raises
    ------
    ConfigError
        See :func:`check_serving`.
    """
    check_serving(model, p, tp, ep)
    return _build(model, p, tp, ep)


def _core(
    nodes: list[Node], q: str, k: str, *, model: Model, p: ServingPass, tp: int
) -> tuple[str, ...]:
    kw = {"batch": p.batch, "tp": tp, "p": p.precision_bytes, "kv_bytes": p.kv_bytes}
    if model.mla and p.is_decode:
        return mla_decode_core(nodes, q, k, model, cached=p.cached_tokens, **kw)
    return cached_core(nodes, q, k, model, new=p.new_tokens, cached=p.cached_tokens, **kw)


def _head_graph(model: Model, p: ServingPass, tp: int) -> OpGraph:
    h, e, b, pb, tokens = model.hidden, model.embedding_dim, p.batch, p.precision_bytes, p.tokens
    nodes = [Node(vector("final_norm", OpKind.NORM, tokens * h, NORM_FLOPS[model.norm], pb))]
    x = "final_norm"
    if e != h:  # OPT's project-out runs in the model, on every token
        nodes.append(Node(gemm("head.project_out", tokens, h, e, pb), (x,)))
        x = "head.project_out"
    if p.samples:
        vocab = padded_vocab(model.vocab, tp)
        nodes.append(Node(gemm("logits", b, e, vocab // tp, pb), (x,)))
        x = "logits"
        if tp > 1:
            gather = collective("logits.gather", CollectiveKind.ALL_GATHER, pb * b * vocab, tp)
            nodes.append(Node(gather, (x,)))
            x = gather.name
        logit_bytes = serving_settings().logit_bytes
        sample = vector("sample", OpKind.SOFTMAX, b * model.vocab, _SAMPLE_FLOPS, logit_bytes)
        nodes.append(Node(sample, (x,)))
    return forward_graph(nodes)


@lru_cache(maxsize=512)
def _build(model: Model, p: ServingPass, tp: int, ep: int) -> LayerGraph:
    m = replace(model, dropout=False)
    core = partial(_core, model=m, p=p, tp=tp)
    kv_up = not (model.mla and p.is_decode)

    def block(dense: bool) -> OpGraph:  # its GEMMs in the weight format's recipe
        g = inference_block_graph(
            m, p.tokens, tp, p.precision_bytes, core, kv_up=kv_up, dense=dense, ep=ep
        )
        return apply_precision(g, weight_recipe(p.weight_format))

    def head() -> OpGraph:  # its GEMMs too where the weight format quantizes the head
        r = weight_recipe(p.weight_format)
        g = _head_graph(m, p, tp)
        return apply_precision(g, r) if r.quantizes_head and not model.tied_embeddings else g

    framework = framework_profile(serving_settings().framework)
    graphs = {
        EMBEDDING_CLASS: inference_embedding_graph(m, p.tokens, tp, p.precision_bytes),
        BLOCK_CLASS: block(False),
        **({DENSE_BLOCK_CLASS: block(True)} if model.dense_layers else {}),
        HEAD_CLASS: head(),
    }
    boundary = p.precision_bytes * p.tokens * model.hidden
    tensor_parallel, dense = tp > 1, model.dense_layers
    # the routed experts' parameters the other ep - 1 ranks hold
    expert_held = model.expert_parameters(tp) - model.expert_parameters(tp) // ep
    layers = [
        Layer(
            0,
            "embedding",
            LayerKind.EMBEDDING,
            EMBEDDING_CLASS,
            model.embedding_parameters(tp),
            0,
            tensor_parallel,
        ),
        *(
            Layer(
                i,
                f"block{i}",
                LayerKind.BLOCK,
                DENSE_BLOCK_CLASS if i <= dense else BLOCK_CLASS,
                model.block_parameters(tp, dense=i <= dense) - (0 if i <= dense else expert_held),
                0,
                tensor_parallel,
                expert_parameters=0 if i <= dense else model.expert_parameters(tp) // ep,
                dispatch_bytes=model.top_k * boundary if model.is_moe and i > dense else 0,
            )
            for i in range(1, model.layers + 1)
        ),
        Layer(
            model.layers + 1,
            "head",
            LayerKind.HEAD,
            HEAD_CLASS,
            model.head_parameters(tp),
            0,
            tensor_parallel,
            tied_parameters=model.tied_head_parameters(tp),
        ),
    ]
    return LayerGraph(
        tp=tp,
        layers=tuple(layers),
        edges=tuple(LayerEdge(i, i + 1, boundary) for i in range(model.layers + 1)),
        op_graphs=MappingProxyType(
            {
                cid: PassGraphs(apply_framework(g, framework), _EMPTY, _EMPTY)
                for cid, g in graphs.items()
            }
        ),
        experts=model.experts,
    )


def peak_live_bytes(graph: OpGraph, input_bytes: int) -> int:
    """The most bytes of tensors alive at once when the graph's ops run in their order: the
    input throughout, each op's output from the op until its last consumer (the cache write
    stores into the KV cache, which is not workspace)."""
    last = list(range(len(graph.ops)))
    for a, b in graph.edges:
        last[a] = max(last[a], b)
    freed = [0] * len(graph.ops)
    live = peak = input_bytes
    for i, op in enumerate(graph.ops):
        out = 0 if op.name == "kv.write" else op.bytes_written
        live += out
        peak = max(peak, live)
        freed[last[i]] += out
        live -= freed[i]
    return peak


@lru_cache(maxsize=4096)
def pass_workspace_bytes(model: Model, p: ServingPass, tp: int, ep: int = 1) -> int:
    """The transient memory of a pass on one device: the most any of its layers' op graphs
    holds at once (:func:`peak_live_bytes`), layers running one after another (cached by its
    frozen arguments: a serving search asks it of every layout's passes)."""
    graph = serving_layer_graph(model, p, tp, ep)
    boundary = graph.edges[0].bytes
    return max(peak_live_bytes(pg.forward, boundary) for pg in graph.op_graphs.values())
