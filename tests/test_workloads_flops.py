"""FLOPs: closed forms (docs/models.md), op-graph sums against them, TP conservation."""

import networkx as nx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from workloads import (
    Model,
    OpGraph,
    Recompute,
    TrainingSetup,
    attention_core_flops,
    block_forward_flops,
    build_layer_graph,
    get_model,
    hardware_flops_per_sequence,
    head_forward_flops,
    model_flops_per_sequence,
    padded_vocab,
    valid_tp_widths,
)
from workloads.moe_ops import expert_tokens


def gemm_flops(g: OpGraph) -> int:
    return sum(op.flops for op in g.ops if op.is_gemm)


def graphs(model, s, b=1, tp=1, sp=False, recompute="none"):
    """Graphs with the unfused attention core (framework megatron-2022), whose GEMMs execute
    the full ``s x s`` scores the closed forms count."""
    setup = TrainingSetup(
        seq_len=s,
        global_batch=b,
        micro_batch=b,
        recompute=recompute,
        sequence_parallel=sp,
        framework="megatron-2022",
    )
    return build_layer_graph(model, setup, tp)


GPT = ["gpt3-175b", "gpt3-1.3b", "megatron-1.7b", "korthikanti-22b", "opt-13b", "gpt2-xl"]


@pytest.mark.parametrize("name", GPT)
@pytest.mark.parametrize(("b", "s"), [(1, 2048), (4, 1024), (3, 512)])
def test_gpt_block_forward_closed_form(name, b, s):
    m = get_model(name)
    s = min(s, m.max_positions)
    h = m.hidden
    expected = 24 * b * s * h * h + 4 * b * s * s * h
    assert block_forward_flops(m, s, b) == expected
    g = graphs(m, s, b).op_graphs["block"]
    assert gemm_flops(g.forward) == expected
    assert gemm_flops(g.backward) == 2 * expected


@pytest.mark.parametrize("name", GPT)
def test_logits_closed_form(name):
    m = get_model(name)
    b, s = 2, 1024
    assert head_forward_flops(m, s, b) == 2 * b * s * m.hidden * m.vocab
    g = graphs(m, s, b).op_graphs["head"]
    assert gemm_flops(g.forward) == 2 * b * s * m.hidden * m.vocab
    assert gemm_flops(g.backward) == 4 * b * s * m.hidden * m.vocab


@pytest.mark.parametrize(
    "name", [n for n in GPT if n != "gpt2-xl"] + ["megatron-1t", "korthikanti-530b"]
)
def test_sc21_eq3_full_recompute(name):
    """Narayanan et al. SC21 eq. 3: 96 B s l h^2 (1 + s/(6h) + V/(16 l h)) per iteration."""
    m = get_model(name)
    B, s, n_l, h, V = 1536, 2048, m.layers, m.hidden, m.vocab
    eq3 = 96 * B * s * n_l * h * h * (1 + s / (6 * h) + V / (16 * n_l * h))
    assert B * hardware_flops_per_sequence(m, s, Recompute.FULL) == pytest.approx(eq3, rel=0.01)
    # The same from the op graphs: (forward + backward + recompute) of every layer.
    lg = graphs(m, s, 1, recompute="full")
    per_sequence = sum(
        gemm_flops(pg.forward) + gemm_flops(pg.backward) + gemm_flops(pg.recompute)
        for pg in (lg.pass_graphs(layer) for layer in lg.layers)
    )
    assert B * per_sequence == pytest.approx(eq3, rel=0.01)


def test_model_and_hardware_flops_by_recompute():
    m = get_model("gpt3-175b")
    s, n_l, h, V = 2048, m.layers, m.hidden, m.vocab
    model_flops = 72 * s * n_l * h * h * (1 + s / (6 * h) + V / (12 * n_l * h))  # no recompute
    assert model_flops_per_sequence(m, s) == pytest.approx(model_flops, rel=1e-12)
    assert hardware_flops_per_sequence(m, s, "none") == model_flops_per_sequence(m, s)
    selective = hardware_flops_per_sequence(m, s, "selective") - model_flops_per_sequence(m, s)
    assert selective == n_l * 4 * s * s * h == n_l * attention_core_flops(m, s)


@pytest.mark.parametrize("name", ["gpt3-175b", "llama2-70b", "llama3-8b", "opt-66b", "bert-large"])
@pytest.mark.parametrize("sp", [False, True])
def test_tensor_parallel_conserves_matmul_flops(name, sp):
    m = get_model(name)
    s = 576 if m.max_positions >= 576 else 512  # divisible by every t (sequence parallelism)
    full = graphs(m, s, 2)
    # widths that divide the K/V heads (wider ones replicate them: no longer conserved)
    for t in (t for t in valid_tp_widths(m, max_tp=16)[1:] if m.kv_heads % t == 0):
        shard = graphs(m, s, 2, tp=t, sp=sp)
        for p in ("forward", "backward"):
            one = gemm_flops(getattr(full.op_graphs["block"], p))
            assert t * gemm_flops(getattr(shard.op_graphs["block"], p)) == one, (p, t)
        # The vocab-parallel logits: the vocabulary is padded to a multiple of t.
        logits = [op for op in shard.op_graphs["head"].forward.ops if op.name == "logits"]
        assert t * logits[0].flops == 2 * 2 * s * m.hidden * padded_vocab(m.vocab, t)


def test_moe_flops_count_activated_experts_and_router():
    m = get_model("mixtral-8x7b")
    b, s, h, f, E, k = 1, 1024, m.hidden, m.ffn_hidden, m.experts, m.top_k
    T = b * s
    attention = 2 * T * h * (m.heads + 2 * m.kv_heads) * m.head_dim + 2 * T * h * h
    attention += 4 * b * s * s * h
    expected = attention + 2 * T * h * E + k * 6 * T * h * f
    assert block_forward_flops(m, s, b) == expected
    assert gemm_flops(graphs(m, s, b).op_graphs["block"].forward) == expected
    for t in (2, 4, 8):
        g = graphs(m, s, b, tp=t).op_graphs["block"].forward
        router = 2 * T * h * E  # replicated, not sharded
        assert t * (gemm_flops(g) - router) == expected - router
        experts = {op.name.split(".")[0] for op in g.ops if op.name.startswith("expert")}
        assert len(experts) == E
    assert sum(expert_tokens(T, m)) == T * k
    assert expert_tokens(7, m) == (2, 2, 2, 2, 2, 2, 1, 1)


@given(
    layers=st.integers(1, 3),
    heads=st.sampled_from([1, 2, 4, 6, 8]),
    head_dim=st.sampled_from([8, 16]),
    kv_div=st.sampled_from([1, 2]),
    ffn=st.integers(1, 5),
    swiglu=st.booleans(),
    experts=st.sampled_from([1, 1, 4]),
    s=st.sampled_from([8, 16, 32]),
    b=st.integers(1, 3),
    tp=st.sampled_from([1, 2]),
    sp=st.booleans(),
)
def test_graph_flops_equal_closed_forms_random_models(
    layers, heads, head_dim, kv_div, ffn, swiglu, experts, s, b, tp, sp
):
    kv = max(1, heads // kv_div)
    tp = tp if heads % tp == 0 and kv % tp == 0 else 1
    h = heads * head_dim
    m = Model(
        "random",
        layers,
        h,
        heads,
        ffn * 2 * tp,
        50,
        kv_heads=kv,
        ffn_kind="swiglu" if swiglu else "gelu",
        experts=experts,
        top_k=min(2, experts),
        max_positions=64,
    )
    g = graphs(m, s, b, tp=tp, sp=sp).op_graphs["block"]
    one = gemm_flops(graphs(m, s, b).op_graphs["block"].forward)
    assert one == block_forward_flops(m, s, b)
    router = 2 * b * s * h * experts if experts > 1 else 0
    assert tp * (gemm_flops(g.forward) - router) == one - router
    assert gemm_flops(g.backward) == 2 * gemm_flops(g.forward)
    assert nx.is_directed_acyclic_graph(g.backward.to_networkx())
