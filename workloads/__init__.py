"""LLM workloads: models, training setups, layer graphs and op graphs (docs/models.md), and
the passes of inference serving (docs/serving.md).

>>> from workloads import get_model, TrainingSetup, build_layer_graph
>>> g = build_layer_graph(get_model("gpt3-175b"), TrainingSetup(seq_len=2048, global_batch=1536), 8)
>>> len(g.layers), sorted(g.op_graphs)
(98, ['block', 'embedding', 'head'])
"""

from workloads import flops
from workloads.build import build_layer_graph, check_setup, valid_tp_widths
from workloads.catalog import catalog, get_model, model_names, resolve_model
from workloads.flops import *  # noqa: F403 (re-exports flops.__all__)
from workloads.hf import load_hf_config, model_from_hf
from workloads.hf_write import to_hf_config
from workloads.layer_graph import Layer, LayerEdge, LayerGraph, LayerKind, PassGraphs
from workloads.memory import (
    block_activation_bytes,
    boundary_bytes,
    embedding_activation_bytes,
    head_activation_bytes,
)
from workloads.model import FfnKind, Model, NormKind, PositionKind, padded_vocab
from workloads.ops import CollectiveKind, CoreType, Op, OpGraph, OpKind
from workloads.serving import RequestBatch, ServingPass
from workloads.serving_ops import serving_layer_graph
from workloads.setup import Optimizer, Recompute, TrainingSetup, optimizer_state_bytes

__all__ = [
    "RequestBatch",
    "ServingPass",
    "serving_layer_graph",
    "Model",
    "FfnKind",
    "NormKind",
    "PositionKind",
    "padded_vocab",
    "TrainingSetup",
    "Recompute",
    "Optimizer",
    "optimizer_state_bytes",
    "catalog",
    "model_names",
    "get_model",
    "resolve_model",
    "load_hf_config",
    "model_from_hf",
    "to_hf_config",
    "valid_tp_widths",
    "build_layer_graph",
    "check_setup",
    "Layer",
    "LayerEdge",
    "LayerGraph",
    "LayerKind",
    "PassGraphs",
    "Op",
    "OpGraph",
    "OpKind",
    "CoreType",
    "CollectiveKind",
    *flops.__all__,
    "block_activation_bytes",
    "embedding_activation_bytes",
    "head_activation_bytes",
    "boundary_bytes",
]
