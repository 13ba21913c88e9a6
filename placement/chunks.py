"""The pipeline chunks of a layout on a stage graph: which layers each of its ``p v`` model
chunks holds, from the layout's ``split`` (Megatron-Core's pipeline layout) or Megatron-LM's
default even split, and the split that writes a given set of chunks back."""

from __future__ import annotations

import numpy as np

from phaze_common.errors import ConfigError
from phaze_common.split import even_counts
from phaze_common.units import fmt_noun
from placement.layout import LAYER_SYMBOLS, Layout, format_split
from placement.types import StageGraph

__all__ = ["layer_symbols", "megatron_chunks", "split_chunks", "layout_chunks", "chunk_split"]


def layer_symbols(graph: StageGraph) -> str:
    """The graph's layers as Megatron-Core layout symbols, in order (``Ettt...L``)."""
    return "".join(LAYER_SYMBOLS[x.kind] for x in graph.layers)


def megatron_chunks(graph: StageGraph, chunks: int) -> tuple[tuple[int, ...], ...]:
    """Megatron-LM's split of ``graph`` (a chain) into ``chunks`` contiguous model chunks.

    Blocks (``kind == "block"``) are split as evenly as possible, earlier chunks taking the
    remainder; layers before the first block go to chunk 0, after the last block to the last.
    """
    blocks = [i for i, layer in enumerate(graph.layers) if layer.kind == "block"]
    _need_chain(graph)
    if len(blocks) < chunks:
        raise ConfigError(
            f"strategy: p * v = {chunks} model chunks but the model has {len(blocks)} blocks; "
            "each chunk needs at least one (or give the stages' layers with split=...)"
        )
    sizes = even_counts(len(blocks), chunks)
    cuts = np.cumsum([0, *sizes])
    n = len(graph.layers)
    out = []
    for c in range(chunks):
        lo = 0 if c == 0 else blocks[cuts[c]]
        hi = n if c == chunks - 1 else blocks[cuts[c + 1]]
        out.append(tuple(range(lo, hi)))
    return tuple(out)


def split_chunks(graph: StageGraph, split: tuple[str, ...]) -> tuple[tuple[int, ...], ...]:
    """The layer indices of each chunk of an explicit ``split`` (Megatron-Core's layout);
    ConfigError when its symbols are not the graph's layers in order."""
    _need_chain(graph)
    have = layer_symbols(graph)
    if "".join(split) != have:
        raise ConfigError(
            f"strategy: split = {format_split(split)} must list the model's layers in order: "
            f"{format_split((have,))} ({fmt_noun(len(have), 'layer')})"
        )
    cuts = np.cumsum([0, *(len(c) for c in split)]).tolist()
    return tuple(tuple(range(a, b)) for a, b in zip(cuts[:-1], cuts[1:], strict=True))


def _need_chain(graph: StageGraph) -> None:
    if not graph.is_chain:
        raise ConfigError(f"strategy: tp={graph.tp} graph is not a chain; give the stages")


def layout_chunks(graph: StageGraph, lay: Layout) -> tuple[tuple[int, ...], ...]:
    """The layers of each of the layout's ``p v`` chunks: its split, else Megatron-LM's,
    which at ``v >= 2`` must be even (Megatron's interleaved schedule needs the blocks per
    rank divisible by ``v``, ``megatron/core/transformer/transformer_config.py``)."""
    if lay.split is not None:
        return split_chunks(graph, lay.split)
    blocks = sum(x.kind == "block" for x in graph.layers)
    if lay.v > 1 and blocks % lay.chunks:
        even = [k for k in range(2, blocks + 1) if blocks % (lay.p * k) == 0]
        raise ConfigError(
            f"strategy: p * v = {lay.p} * {lay.v} = {lay.chunks} interleaved chunks must divide "
            f"the {blocks} blocks (Megatron-LM's interleaved schedule splits them evenly; "
            f"allowed v at p = {lay.p}: {', '.join(map(str, even)) or 'none'}; or give the "
            "chunks' layers with split=...)"
        )
    return megatron_chunks(graph, lay.chunks)


def chunk_split(
    graph: StageGraph, parts: tuple[tuple[int, ...], ...], v: int = 1
) -> tuple[str, ...] | None:
    """The ``split`` of a layout whose chunks are ``parts`` (layer indices, chunk order):
    None when they are Megatron-LM's default split (or the graph is not a chain, whose
    stages no split describes), else each chunk's layer symbols."""
    if not graph.is_chain:
        return None
    blocks = sum(x.kind == "block" for x in graph.layers)
    if len(parts) <= blocks and (v == 1 or blocks % len(parts) == 0):
        if tuple(parts) == megatron_chunks(graph, len(parts)):
            return None
    symbols = layer_symbols(graph)
    return tuple("".join(symbols[i] for i in c) for c in parts)
