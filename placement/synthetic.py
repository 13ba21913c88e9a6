"""Closed-form GPT stage graphs, for the benchmark, the tests and the shipped example.

Per-layer times are FLOPs over an assumed sustained throughput plus Megatron's tensor-parallel
all-reduces on the network model; bytes follow the closed forms of docs/models.md. These are
stand-ins when the real pipeline (op graphs, ILP schedules) is not wanted.
"""

from __future__ import annotations

from dataclasses import dataclass

from arch_space.accelerator import Cluster
from placement import network as net
from placement.layout import Layout
from placement.types import RecomputeMode, StageEdge, StageGraph, StageLayer

__all__ = ["GptShape", "GPT3_175B", "gpt_stage_graph"]

_BYTES: float = 2.0  # fp16/bf16 activations and weights


@dataclass(frozen=True, slots=True)
class GptShape:
    layers: int
    hidden: int
    heads: int
    vocab: int = 51200
    seq_len: int = 2048


# source: Brown et al. 2020, Table 2.1 (GPT-3 175B: 96 layers, d_model 12288, 96 heads).
GPT3_175B = GptShape(layers=96, hidden=12288, heads=96)


def gpt_stage_graph(
    shape: GptShape,
    t: int,
    cluster: Cluster,
    *,
    micro_batch: int = 1,
    flops_per_s: float,
    recompute: RecomputeMode = "none",
    sequence_parallel: bool = False,
) -> StageGraph:
    """Embedding, ``shape.layers`` blocks and the head as a chain at tensor-parallel width t.

    Block forward FLOPs ``24 b s h^2 + 4 b s^2 h`` and logits ``2 b s h V`` (Narayanan et al.
    SC21 §5.1), split over ``t``; backward is twice the forward; full recompute re-runs the
    forward, selective the attention core (``4 b s^2 h``). Per block, two all-reduces of
    ``b s h`` activations forward and two backward (Megatron). Stash per block (Korthikanti et
    al. 2022, Table 2): ``s b h (10 + 24/t + 5 a s / (h t))`` bytes, ``34 s b h / t`` with
    selective recompute and sequence parallelism, ``s b h (10 + 24/t)`` with selective alone,
    ``2 s b h`` (the input) with full recompute (``/ t`` with sequence parallelism).
    """
    b, s, h, a, v = micro_batch, shape.seq_len, shape.hidden, shape.heads, shape.vocab
    act = b * s * h * _BYTES
    ar = 2 * net.tp_collective_s("all_reduce", act, t, cluster) if t > 1 else 0.0
    block_f = (24 * b * s * h * h + 4 * b * s * s * h) / t / flops_per_s + ar
    attn_f = 4 * b * s * s * h / t / flops_per_s
    rec = {"none": 0.0, "selective": attn_f, "full": block_f}[recompute]
    if recompute == "full":
        stash = 2 * s * b * h / (t if sequence_parallel else 1)
    elif recompute == "selective":
        stash = 34 * s * b * h / t if sequence_parallel else s * b * h * (10 + 24 / t)
    elif sequence_parallel:
        stash = s * b * h * (34 + 5 * a * s / h) / t
    else:
        stash = s * b * h * (10 + 24 / t + 5 * a * s / (h * t))
    tp = t > 1
    head_f = 2 * b * s * h * v / t / flops_per_s
    layers = [
        StageLayer(
            "embedding",
            1e-6,
            2e-6,
            parameters=v * h // t,
            stash_bytes=act,
            tensor_parallel=tp,
            kind="embedding",
        ),
    ]
    layers += [
        StageLayer(
            f"block{i}",
            block_f,
            2 * block_f,
            parameters=(12 * h * h + 13 * h) // t,
            stash_bytes=stash,
            tensor_parallel=tp,
            recompute_s=rec,
            kind="block",
        )
        for i in range(shape.layers)
    ]
    layers.append(
        StageLayer(
            "head",
            head_f,
            2 * head_f,
            parameters=v * h // t + 2 * h,
            stash_bytes=4 * b * s * v / t,
            tensor_parallel=tp,
            kind="head",
        )
    )
    boundary = act / (t if sequence_parallel else 1)
    edges = tuple(StageEdge(i, i + 1, boundary) for i in range(len(layers) - 1))
    layout = Layout(t=t, mbs=micro_batch, recompute=recompute, sp=sequence_parallel)
    return StageGraph(tuple(layers), edges, layout)
