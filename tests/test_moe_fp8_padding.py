"""Megatron-Core's grouped experts (TEGroupedMLP) in FP8 pad each local expert's rows to the
FP8 GEMM's alignment (TransformerEngine's Fp8Padding, on the rows and their probabilities)
and unpad the output (Fp8Unpadding): copies of the rank's routed rows whenever the counts
per expert vary, as behind the flex dispatcher, which cannot pad to capacity."""

from __future__ import annotations

import networkx as nx
import pytest

from workloads import TrainingSetup, build_layer_graph, get_model
from workloads.build import BLOCK_CLASS

FLEX = "megatron-bridge-2025:moe_dispatcher=flex"


def _block(framework: str, precision: str = "fp8-te-current"):
    setup = TrainingSetup(4096, 16, expert_parallel=16, framework=framework, precision=precision)
    return build_layer_graph(get_model("qwen3-30b-a3b"), setup, 1).op_graphs[BLOCK_CLASS]


def test_flex_fp8_grouped_experts_copy_their_rows_in_and_out_of_alignment():
    block = _block(FLEX)
    ops = {o.name: o for o in block.forward.ops}
    m = get_model("qwen3-30b-a3b")
    rows = 4096 * m.top_k * m.hidden  # the rank's routed rows: T k h
    assert (
        ops["experts.pad"].bytes_read
        == ops["experts.pad"].bytes_written
        == pytest.approx(2 * rows + 4 * 4096 * m.top_k)
    )
    g = block.forward.to_networkx()
    assert "experts.pad" in nx.ancestors(g, "expert0.fc1.gate.amax")
    assert "expert7.fc2" in nx.ancestors(g, "experts.unpad")
    assert {"experts.pad.bwd", "experts.unpad.bwd"} <= {o.name for o in block.backward.ops}


@pytest.mark.parametrize(
    ("framework", "precision"),
    [
        ("megatron-bridge-2025", "fp8-te-current"),  # alltoall: the rows padded to capacity
        (FLEX, "bf16"),  # no FP8 alignment
        ("deepseek-2024", "fp8-blockwise"),  # DeepSeek's own experts, not TEGroupedMLP
    ],
)
def test_no_padding_copies_elsewhere(framework, precision):
    assert not any("pad" in o.name for o in _block(framework, precision).forward.ops)
