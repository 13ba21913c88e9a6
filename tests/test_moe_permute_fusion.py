"""TransformerEngine's fused token permutation (Megatron-Core's ``moe_permute_fusion``): the
permute reads each token's row once and writes its ``k`` copies; the unpermute sums each
token's ``k`` rows back, the probabilities having multiplied the experts' activation."""

from __future__ import annotations

from arch_space import Cluster, preset
from arch_space.perf import op_costs
from workloads import TrainingSetup, build_layer_graph, get_model
from workloads.build import BLOCK_CLASS
from workloads.framework import framework_profile
from workloads.moe_ops import FP32_BYTES, MAP_BYTES, MASK_BYTES

FUSED = "megatron-core-2024:moe_permute_fusion=true"


def _block(framework: str, ep: int = 8, model: str = "qwen3-30b-a3b"):
    setup = TrainingSetup(4096, 8, expert_parallel=ep, framework=framework)
    return build_layer_graph(get_model(model), setup, 1).op_graphs[BLOCK_CLASS]


def test_the_fused_permutation_reads_each_row_once_and_sums_the_copies_back():
    m = get_model("qwen3-30b-a3b")
    T, h, E, k, p = 4096, m.hidden, m.experts, m.top_k, 2
    rows, rmap = T * k * h, MAP_BYTES * T * (2 * E + 1)
    block = _block(FUSED)
    f = {o.name: o for o in block.forward.ops}
    b = {o.name: o for o in block.backward.ops}
    assert f["dispatch"].bytes_read == p * T * h + (MASK_BYTES + FP32_BYTES) * T * E
    assert f["dispatch"].bytes_written == p * rows + FP32_BYTES * T * k + rmap
    assert (f["combine"].bytes_read, f["combine"].bytes_written) == (p * rows + rmap, p * T * h)
    assert (b["combine.bwd"].bytes_read, b["combine.bwd"].bytes_written) == (
        p * T * h + rmap,
        p * rows,
    )
    assert b["dispatch.bwd"].bytes_written == p * T * h + FP32_BYTES * T * E
    # the chunk sort copies the same bytes fused or not
    unfused = {o.name: o for o in _block("megatron-core-2024").forward.ops}
    assert f["dispatch.sort"] == unfused["dispatch.sort"]


def test_the_fused_permutation_moves_fewer_bytes_than_core_v0_9_s():
    acc, cluster = preset("h100"), Cluster(devices=8)
    fused, unfused = _block(FUSED), _block("megatron-core-2024")
    for a, b in ((fused.forward, unfused.forward), (fused.backward, unfused.backward)):
        names = ("dispatch", "combine", "dispatch.bwd", "combine.bwd")
        moved = {o.name: o.bytes_read + o.bytes_written for o in a.ops if o.name in names}
        before = {o.name: o.bytes_read + o.bytes_written for o in b.ops if o.name in names}
        assert moved and all(moved[n] < before[n] for n in moved)
        assert op_costs(a, acc, cluster).parallel_latency_s.sum() < (
            op_costs(b, acc, cluster).parallel_latency_s.sum()
        )


def test_megatron_bridge_runs_the_fused_permutation():
    """Megatron-Bridge's Qwen3 MoE provider and DeepSeek-V3 recipe set moe_permute_fusion."""
    assert framework_profile("megatron-bridge-2025").moe_permute_fusion
    assert not framework_profile("megatron-core-2024").moe_permute_fusion
