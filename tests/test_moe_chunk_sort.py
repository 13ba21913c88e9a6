"""Megatron-Core's ``alltoall`` dispatcher sorts the tokens a rank receives into expert order
before its experts and back after them (``sort_chunks_by_idxs``) when the rank holds more
than one expert; the ``flex`` dispatcher (DeepEP, HybridEP) permutes once after its fused
dispatch."""

from __future__ import annotations

import pytest

from workloads import TrainingSetup, build_layer_graph, get_model
from workloads.build import BLOCK_CLASS
from workloads.moe_ops import FP32_BYTES

SORTS = ("dispatch.sort", "combine.unsort")


def _block(framework: str, ep: int, model: str = "qwen3-30b-a3b"):
    setup = TrainingSetup(4096, 8, expert_parallel=ep, framework=framework)
    return build_layer_graph(get_model(model), setup, 1).op_graphs[BLOCK_CLASS]


def test_the_alltoall_dispatcher_copies_a_rank_s_routed_rows_into_expert_order_and_back():
    """Each sort reads and writes the rank's ``T k`` routed rows and their fp32
    probabilities, forward and backward, and the experts read the sorted rows."""
    m = get_model("qwen3-30b-a3b")
    block = _block("megatron-core-2024", 8)
    rows = 4096 * m.top_k * m.hidden
    nbytes = 2 * rows + FP32_BYTES * 4096 * m.top_k
    for graph, suffix in ((block.forward, ""), (block.backward, ".bwd")):
        ops = {o.name: o for o in graph.ops}
        for name in SORTS:
            op = ops[name + suffix]
            assert (op.elements, op.bytes_read, op.bytes_written) == (rows, nbytes, nbytes)
    f = block.forward
    index = {o.name: i for i, o in enumerate(f.ops)}
    fc1 = [i for i, o in enumerate(f.ops) if o.name.startswith("expert") and "fc1" in o.name]
    assert fc1
    assert all((index["dispatch.sort"], i) in set(f.edges) for i in fc1[:1])
    assert (index["combine.unsort"], index["combine"]) in set(f.edges)


@pytest.mark.parametrize(
    ("framework", "ep", "model"),
    [
        ("megatron-core-2024:moe_dispatcher=flex", 8, "qwen3-30b-a3b"),  # DeepEP/HybridEP
        ("megatron-core-2024", 8, "mixtral-8x7b"),  # one expert per rank: no sort
    ],
)
def test_no_chunk_sort_under_flex_or_with_one_expert_per_rank(framework, ep, model):
    block = _block(framework, ep, model)
    names = {o.name for o in block.forward.ops}
    assert not names & set(SORTS)
    assert "dispatch" in names and "combine" in names


def test_the_chunk_sort_slows_the_alltoall_block():
    """The same block under the flex dispatcher runs two fewer copies each way."""
    from arch_space import Cluster, preset
    from arch_space.perf import op_costs

    acc, cluster = preset("h100"), Cluster(devices=8)
    a2a, flex = (
        _block(f, 8) for f in ("megatron-core-2024", "megatron-core-2024:moe_dispatcher=flex")
    )
    for a, b in ((a2a.forward, flex.forward), (a2a.backward, flex.backward)):
        assert len(a.ops) == len(b.ops) + 2
        slow = op_costs(a, acc, cluster).parallel_latency_s.sum()
        fast = op_costs(b, acc, cluster).parallel_latency_s.sum()
        assert slow > fast
