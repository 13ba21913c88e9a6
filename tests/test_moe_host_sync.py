"""A ``flex`` dispatcher (DeepEP, HybridEP) waits on the host for the token counts in every
MoE layer's forward pass, so the host keeps no lead over the device: each pass of such a
layer takes at least its kernels times the stack's host time per kernel."""

from __future__ import annotations

import pytest

from workloads import TrainingSetup, build_layer_graph, get_model
from workloads.build import BLOCK_CLASS
from workloads.framework import framework_profile

FLEX = "megatron-bridge-2025:moe_dispatcher=flex"


def _graphs(framework: str, model: str = "qwen3-30b-a3b", ep: int = 16):
    setup = TrainingSetup(4096, 16, expert_parallel=ep, framework=framework)
    return build_layer_graph(get_model(model), setup, 1).op_graphs


def test_megatron_bridge_prices_the_host_per_kernel():
    assert framework_profile("megatron-bridge-2025").host_s_per_kernel == pytest.approx(20e-6)
    assert framework_profile("megatron-core-2024").host_s_per_kernel == 0


def test_every_pass_of_a_flex_moe_layer_is_host_bound():
    h = framework_profile(FLEX).host_s_per_kernel
    block = _graphs(FLEX)[BLOCK_CLASS]
    for graph in (block.forward, block.backward):
        assert graph.host_s == pytest.approx(len(graph.ops) * h)
        assert graph.host_s > 0


def test_the_alltoall_dispatcher_and_dense_layers_keep_the_host_s_lead():
    assert _graphs("megatron-bridge-2025")[BLOCK_CLASS].forward.host_s == 0
    dense = _graphs(FLEX, "llama3-8b", 1)[BLOCK_CLASS]
    assert dense.forward.host_s == dense.backward.host_s == 0


def test_a_pass_takes_at_least_its_host_time():
    """Qwen3-30B-A3B at ep 16 in FP8 on an H100 (8 local experts, 4,096 tokens): with 20 us of host
    time per kernel and no lead, the device waits for the host in the forward pass."""
    from arch_space import Cluster, preset
    from ilp.timing import layer_timing

    acc, cluster = preset("h100"), Cluster(devices=16, devices_per_node=8)
    timings = {}
    for fw in (f"{FLEX},host_s_per_kernel=0", FLEX):
        lg = build_layer_graph(
            get_model("qwen3-30b-a3b"),
            TrainingSetup(4096, 16, expert_parallel=16, framework=fw, precision="fp8-te-current"),
            1,
        )
        timings[fw] = (lg.op_graphs[BLOCK_CLASS], layer_timing(lg, acc, cluster)[BLOCK_CLASS])
    block, bound = timings[FLEX]
    _, ahead = timings[f"{FLEX},host_s_per_kernel=0"]
    assert block.forward.host_s > ahead.forward.makespan_s
    assert bound.forward.makespan_s == pytest.approx(block.forward.host_s)
    assert bound.backward.makespan_s >= ahead.backward.makespan_s
