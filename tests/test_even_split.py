"""One even split for training's and serving's pipelines, against numpy's array_split."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from arch_space import Cluster
from phaze_common.split import even_counts
from placement.chunks import megatron_chunks
from placement.synthetic import GptShape, gpt_stage_graph
from workloads import get_model
from workloads.serving_costs import stage_block_counts


@given(st.integers(0, 500), st.integers(1, 64))
def test_even_counts_is_numpys_array_split(items, parts):
    assert even_counts(items, parts) == tuple(len(a) for a in np.array_split(range(items), parts))


@pytest.mark.parametrize("parts", [1, 3, 5, 7])
def test_serving_stages_and_training_chunks_hold_the_same_blocks(parts):
    model = get_model("llama2-7b")
    shape = GptShape(layers=model.layers, hidden=model.hidden, heads=model.heads)
    graph = gpt_stage_graph(shape, 1, Cluster(devices=8), flops_per_s=1e15)
    blocks = [
        sum(graph.layers[i].kind == "block" for i in c) for c in megatron_chunks(graph, parts)
    ]
    assert tuple(blocks) == stage_block_counts(model, parts)


def test_a_split_into_no_parts_is_refused():
    with pytest.raises(ValueError, match="0 parts"):
        even_counts(4, 0)
