"""MoE block ops (router, aux loss, token permutation, combine): op counts, bytes and FLOPs
against closed forms from the model dimensions, their place in the graph, and their price."""

import networkx as nx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from arch_space import Cluster, load_accelerator
from arch_space.perf import op_costs
from workloads import Model, TrainingSetup, block_forward_flops, build_layer_graph, get_model

P = 2  # bf16
IDX = 8  # int64 indices
F32 = 4


def block(model, s=64, b=1, tp=1, framework="overlap-all"):
    setup = TrainingSetup(
        seq_len=s,
        global_batch=b,
        micro_batch=b,
        sequence_parallel=tp > 1,
        framework=framework,
    )
    return build_layer_graph(model, setup, tp).op_graphs["block"]


def ops_of(graph):
    return {op.name: op for op in graph.ops}


def moe_model(experts, top_k, shared=0, ffn=32):
    return Model(
        "moe",
        2,
        32,
        4,
        ffn,
        64,
        ffn_kind="swiglu",
        experts=experts,
        top_k=top_k,
        shared_experts=shared,
        max_positions=256,
    )


@given(
    experts=st.sampled_from([2, 4, 8]),
    top_k=st.integers(1, 4),
    shared=st.integers(0, 2),
    s=st.sampled_from([16, 48, 64]),
    b=st.integers(1, 3),
)
def test_router_and_permutation_bytes_and_flops_match_closed_forms(experts, top_k, shared, s, b):
    top_k = min(top_k, experts)
    m = moe_model(experts, top_k, shared)
    g = block(m, s, b, framework="megatron-2022")  # unfused core: executes all s x s scores
    f, bw = ops_of(g.forward), ops_of(g.backward)
    T, h, E, k = b * s, m.hidden, experts, top_k
    rows = T * k * h
    # router: gate GEMM, top-k + softmax over the k, fp32 softmax of the aux loss
    assert (f["router"].m, f["router"].k, f["router"].n) == (T, h, E)
    assert f["router.topk"].bytes_read == P * T * E
    assert f["router.topk"].bytes_written == (P + IDX) * T * k
    assert f["router.topk"].flops == T * (E * k + 7 * k)
    assert f["router.aux_loss"].bytes_read == (P + F32) * T * E
    assert f["router.aux_loss"].bytes_written == F32 * (T * E + E)
    assert f["router.aux_loss"].flops == 8 * T * E
    # permute: argsort of T k keys, gather of T k rows; its backward a zero fill + scatter-add
    assert f["dispatch"].bytes_read == P * rows + 2 * IDX * T * k
    assert f["dispatch"].bytes_written == P * rows + IDX * T * k
    assert f["dispatch"].flops == 0
    assert bw["dispatch.bwd"].bytes_read == P * (rows + T * h) + IDX * T * k
    assert bw["dispatch.bwd"].bytes_written == 2 * P * T * h
    # unpermute: zero fill + scatter-add, x probabilities, sum over k (+ shared output)
    extra = T * h if shared else 0
    assert f["combine"].bytes_read == P * (4 * rows + T * k + 2 * extra) + IDX * T * k
    assert f["combine"].bytes_written == P * (3 * rows + T * h + extra)
    assert f["combine"].flops == (3 * k - 1) * T * h + extra
    assert bw["combine.bwd"].bytes_read == P * (3 * rows + 2 * T * h + T * k) + IDX * T * k
    assert bw["combine.bwd"].bytes_written == P * (3 * rows + T * k)
    assert bw["combine.bwd"].flops == 3 * rows
    # the block's GEMMs still count exactly the model's FLOPs (router included)
    gemms = sum(op.flops for op in g.forward.ops if op.is_gemm)
    assert gemms == block_forward_flops(m, s, b)
    assert sum(op.flops for op in g.backward.ops if op.is_gemm) == 2 * gemms


@pytest.mark.parametrize("shared", [0, 2])
def test_moe_op_counts_and_order(shared):
    m = moe_model(4, 2, shared)
    g = block(m)
    names = [op.name for op in g.forward.ops]
    moe = [n for n in names if n.startswith(("router", "dispatch", "combine"))]
    # the alltoall dispatcher sorts the rank's rows by its (four) experts and back
    sorts = ["dispatch.sort", "combine.unsort"]
    assert moe == ["router", "router.topk", "router.aux_loss", "dispatch", *sorts, "combine"]
    experts = {n.split(".")[0] for n in names if n.startswith("expert")}
    assert experts == {f"expert{e}" for e in range(4)}
    assert ("shared.fc2" in names) == bool(shared)
    # one backward op per forward vector op; the router's GEMM gives dgrad and wgrad
    back = [op.name for op in g.backward.ops]
    for n in ("router.topk", "router.aux_loss", "dispatch", *sorts, "combine"):
        assert back.count(f"{n}.bwd") == 1
    assert {"router.dgrad", "router.wgrad"} <= set(back)
    fwd, bwd = g.forward.to_networkx(), g.backward.to_networkx()
    # the aux loss rides on the routing probabilities, so the combine waits for it ...
    assert fwd.has_edge("router.aux_loss", "combine") and fwd.has_edge("router.topk", "dispatch")
    assert not nx.has_path(fwd, "router.aux_loss", "dispatch")
    # ... and its backward (and the top-k's) follows the combine's, before the router's
    for n in ("router.aux_loss.bwd", "router.topk.bwd"):
        assert nx.has_path(bwd, "combine.bwd", n) and bwd.has_edge(n, "router.dgrad")
    assert nx.has_path(bwd, "dispatch.bwd", "ln2.bwd")


def test_dense_blocks_have_no_moe_ops():
    for name in ("llama3-8b", "gpt3-175b"):
        g = block(get_model(name), s=128)
        assert not any(
            op.name.startswith(("router", "dispatch", "combine")) for op in g.forward.ops
        )


def test_permutation_is_memory_bound_and_priced_at_hbm_rate():
    """On an H100 the permutation ops move hundreds of MB at the HBM rate, not for free."""
    g = block(get_model("mixtral-8x7b"), s=4096)
    acc = load_accelerator("h100")
    costs = op_costs(g.forward, acc, Cluster(devices=8))
    peak = acc.hbm_bandwidth_bytes_per_s
    for name in ("dispatch", "combine"):
        i = costs.index(name)
        op = g.forward.ops[i]
        assert costs.bound(i) == "memory"
        assert costs.parallel_latency_s[i] >= (op.bytes_read + op.bytes_written) / peak
    # the combine moves T k h elements several times: about 5 x the dispatch's gather
    t = {n: costs.parallel_latency_s[costs.index(n)] for n in ("dispatch", "combine")}
    assert 3 < t["combine"] / t["dispatch"] < 5
