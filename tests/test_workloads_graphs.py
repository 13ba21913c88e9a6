"""Layer and op graphs: DAGs, backward mirrors forward, Megatron sharding and collectives."""

import networkx as nx
import pytest

from phaze_common.errors import ConfigError
from workloads import (
    CollectiveKind,
    CoreType,
    LayerKind,
    OpKind,
    TrainingSetup,
    build_layer_graph,
    get_model,
    valid_tp_widths,
)


def build(name, s=320, b=2, tp=1, sp=False, recompute="none", framework="megatron-2022"):
    """The unfused attention core (framework megatron-2022) unless ``framework`` says."""
    setup = TrainingSetup(
        seq_len=s,
        global_batch=b,
        micro_batch=b,
        recompute=recompute,
        sequence_parallel=sp,
        framework=framework,
    )
    return build_layer_graph(get_model(name), setup, tp)


COMBOS = [
    (name, tp, sp, rc, fw)
    for fw in ("megatron-2022", "overlap-all")
    for name in ("gpt3-175b", "llama2-70b", "mixtral-8x7b", "bert-large", "opt-350m", "gpt2-xl")
    for tp in (1, 5, 8)
    for sp in (False, True)
    for rc in ("none", "selective", "full")
    if tp in valid_tp_widths(get_model(name))
]


@pytest.mark.parametrize(("name", "tp", "sp", "rc", "fw"), COMBOS)
def test_graphs_are_dags_with_unique_names(name, tp, sp, rc, fw):
    lg = build(name, tp=tp, sp=sp, recompute=rc, framework=fw)
    for cid, pg in lg.op_graphs.items():
        for g in (pg.forward, pg.backward, pg.recompute):
            names = [op.name for op in g.ops]
            assert len(set(names)) == len(names), cid
            nxg = g.to_networkx()
            assert nx.is_directed_acyclic_graph(nxg)
            assert nxg.number_of_nodes() == len(g.ops)
            for op in g.ops:
                if op.kind is OpKind.COLLECTIVE:
                    assert op.core is CoreType.NOP and op.group == tp and op.collective_bytes > 0
                    assert tp > 1, "t = 1 has no tensor-parallel communication"
                elif op.kind is OpKind.COMM_SHARE:
                    # the compute its asynchronous collective holds
                    assert op.core is CoreType.TC_AND_VC and op.name.removesuffix(".share") in names
                elif op.is_gemm:
                    assert op.flops == 2 * op.batch * op.m * op.k * op.n > 0
                elif op.kind in (OpKind.ATTENTION_FORWARD, OpKind.ATTENTION_BACKWARD):
                    assert fw == "overlap-all" and op.core is CoreType.TC_AND_VC
                    assert op.flops == 2 * op.batch * op.m * op.k * op.n + op.epilogue_flops
                else:
                    assert op.core is CoreType.VC and op.elements > 0


def _gemm_dag(g):
    """Reachability among the GEMMs of a graph (through any ops)."""
    nxg = g.to_networkx()
    gemms = [op.name for op in g.ops if op.is_gemm]
    return {u: nx.descendants(nxg, u) & set(gemms) for u in gemms}


@pytest.mark.parametrize("name", ["gpt3-175b", "llama3-8b", "bert-large", "opt-350m"])
@pytest.mark.parametrize(("tp", "sp"), [(1, False), (4, False), (4, True)])
def test_backward_mirrors_forward(name, tp, sp):
    lg = build(name, tp=tp, sp=sp)
    for cid, pg in lg.op_graphs.items():
        fwd = {op.name: op for op in pg.forward.ops if op.is_gemm}
        bwd = {op.name: op for op in pg.backward.ops if op.is_gemm}
        assert set(bwd) == {f"{n}.{g}" for n in fwd for g in ("dgrad", "wgrad")}, cid
        for n, op in fwd.items():
            d, w = bwd[f"{n}.dgrad"], bwd[f"{n}.wgrad"]
            assert (d.batch, d.m, d.k, d.n) == (op.batch, op.m, op.n, op.k)
            assert (w.batch, w.m, w.k, w.n) == (op.batch, op.k, op.m, op.n)
            assert d.flops == w.flops == op.flops
        fwd_reach, bwd_reach = _gemm_dag(pg.forward), _gemm_dag(pg.backward)
        for u, later in fwd_reach.items():
            for v in later:  # u before v forward => a gradient of v before both of u's
                after_v = bwd_reach[f"{v}.dgrad"] | bwd_reach[f"{v}.wgrad"]
                assert {f"{u}.dgrad", f"{u}.wgrad"} <= after_v, (cid, u, v)
        # and nothing backward that forward does not order
        for v, earlier in bwd_reach.items():
            for u in earlier:
                fu, fv = u.rsplit(".", 1)[0], v.rsplit(".", 1)[0]
                assert fv in fwd_reach[fu] or fu == fv, (cid, v, u)


def _collectives(g):
    return sorted((op.name, op.collective) for op in g.ops if op.kind is OpKind.COLLECTIVE)


def _data_preds(g, name):
    """Predecessors of ``name`` that are not collectives or their compute shares (the
    stream order links those)."""
    comm = {op.name for op in g.ops if op.kind in (OpKind.COLLECTIVE, OpKind.COMM_SHARE)}
    return set(g.to_networkx().predecessors(name)) - comm


def test_megatron_collectives_without_sequence_parallelism():
    pg = build("gpt3-175b", tp=8, framework="overlap-all").op_graphs["block"]
    ar = CollectiveKind.ALL_REDUCE
    assert _collectives(pg.forward) == [("fc2.allreduce", ar), ("proj.allreduce", ar)]
    assert _collectives(pg.backward) == [("ln1.grad_allreduce", ar), ("ln2.grad_allreduce", ar)]
    # the backward all-reduce follows the column-parallel input gradients
    assert _data_preds(pg.backward, "ln1.grad_allreduce") == {"q.dgrad", "k.dgrad", "v.dgrad"}
    assert _data_preds(pg.backward, "ln2.grad_allreduce") == {"fc1.dgrad"}
    assert _data_preds(pg.forward, "proj.allreduce") == {"proj"}
    s, b, h = 320, 2, get_model("gpt3-175b").hidden
    assert {op.collective_bytes for op in pg.forward.ops if op.collective} == {2 * s * b * h}


def test_megatron_collectives_with_sequence_parallelism():
    pg = build("gpt3-175b", tp=8, sp=True).op_graphs["block"]
    ag, rs = CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER
    assert _collectives(pg.forward) == [
        ("fc2.reduce_scatter", rs),
        ("ln1.allgather", ag),
        ("ln2.allgather", ag),
        ("proj.reduce_scatter", rs),
    ]
    assert _collectives(pg.backward) == [
        ("fc2.reduce_scatter.bwd", ag),
        ("ln1.allgather.bwd", rs),
        ("ln1.allgather.regather", ag),
        ("ln2.allgather.bwd", rs),
        ("ln2.allgather.regather", ag),
        ("proj.reduce_scatter.bwd", ag),
    ]
    g = pg.backward.to_networkx()
    wgrads = {n for n in g.successors("ln1.allgather.regather") if n.endswith("wgrad")}
    assert wgrads == {"q.wgrad", "k.wgrad", "v.wgrad"}
    # norms and residuals run on s/t tokens
    h, T = get_model("gpt3-175b").hidden, 320 * 2
    ln1 = next(op for op in pg.forward.ops if op.name == "ln1")
    assert ln1.elements == T * h // 8


def test_independent_work_is_separate_nodes():
    pg = build("llama2-70b", tp=2).op_graphs["block"]
    m = get_model("llama2-70b")
    ops = {op.name: op for op in pg.forward.ops}
    assert ops["q"].n == m.heads // 2 * m.head_dim
    assert ops["k"].n == ops["v"].n == m.kv_heads // 2 * m.head_dim  # GQA: smaller K and V
    g = pg.forward.to_networkx()
    assert not nx.has_path(g, "q", "k") and not nx.has_path(g, "k", "v")
    groups = sorted({n.split(".")[0] for n in ops if n.startswith("heads")})
    assert groups == ["heads0", "heads1", "heads2", "heads3"]
    assert sum(ops[f"{grp}.qk"].batch for grp in groups) == 2 * m.heads // 2
    assert not nx.has_path(g, "heads0.av", "heads1.qk")
    assert ops["fc1.gate"].core is CoreType.TC and not nx.has_path(g, "fc1.gate", "fc1.up")
    assert ops["swiglu"].core is CoreType.VC


def test_gelu_is_fused_into_fc1_and_kinds():
    pg = build("gpt3-175b").op_graphs["block"]
    ops = {op.name: op for op in pg.forward.ops}
    assert ops["fc1"].core is CoreType.TC_AND_VC and ops["fc1"].epilogue_flops > 0
    assert ops["heads0.softmax"].kind is OpKind.SOFTMAX
    assert ops["ln1"].kind is OpKind.NORM and ops["ln2"].kind is OpKind.NORM
    assert ops["heads0.qk"].kind is OpKind.BATCHED_MATMUL
    assert ops["attn.residual"].kind is OpKind.ELEMENTWISE


def test_moe_block_structure():
    m = get_model("mixtral-8x7b")
    g = build("mixtral-8x7b", tp=2).op_graphs["block"].forward.to_networkx()
    # the alltoall dispatcher's chunk sort stands between the permutation and the experts
    assert g.has_edge("dispatch", "dispatch.sort") and g.has_edge("combine.unsort", "combine")
    for e in range(m.experts):
        assert g.has_edge("dispatch.sort", f"expert{e}.fc1.gate")
        assert g.has_edge(f"expert{e}.fc2", "combine.unsort")
        assert not nx.has_path(g, "expert0.fc2", f"expert{e}.fc1.gate") or e == 0
    assert nx.has_path(g, "router", "combine")


def test_recompute_graphs():
    none = build("gpt3-175b", recompute="none").op_graphs["block"]
    sel = build("gpt3-175b", recompute="selective").op_graphs["block"]
    full = build("gpt3-175b", recompute="full").op_graphs["block"]
    assert none.recompute.ops == ()
    assert {op.name.split(".")[0] for op in sel.recompute.ops} == {f"heads{i}" for i in range(4)}
    m, s, b = get_model("gpt3-175b"), 320, 2
    gemm = sum(op.flops for op in sel.recompute.ops if op.is_gemm)
    assert gemm == 4 * b * s * s * m.hidden
    assert full.recompute == full.forward
    assert build("gpt3-175b", recompute="full").op_graphs["head"].recompute.ops == ()


def test_layer_graph_nodes_and_edges():
    m = get_model("gpt3-175b")
    lg = build("gpt3-175b", tp=8)
    assert lg.tp == 8 and len(lg.layers) == m.layers + 2
    kinds = [layer.kind for layer in lg.layers]
    assert kinds == [LayerKind.EMBEDDING] + [LayerKind.BLOCK] * m.layers + [LayerKind.HEAD]
    assert {layer.class_id for layer in lg.layers[1:-1]} == {"block"}
    assert [layer.index for layer in lg.layers] == list(range(m.layers + 2))
    assert [(e.src, e.dst) for e in lg.edges] == [(i, i + 1) for i in range(m.layers + 1)]
    assert all(layer.tensor_parallel for layer in lg.layers)
    assert not any(layer.tensor_parallel for layer in build("gpt3-175b").layers)
    assert lg.layers[1].parameters == m.block_parameters(8)
    one = build("gpt3-175b")
    assert sum(layer.parameters for layer in one.layers) == m.parameters
    assert one.layers[-1].tied_parameters == m.vocab * m.hidden  # tied LM head
    assert build("llama2-7b").layers[-1].tied_parameters == 0


def test_build_is_cached_by_content():
    assert build("gpt3-175b", tp=8) is build("gpt3-175b", tp=8)


def test_tp_errors_name_field_value_and_valid_widths():
    with pytest.raises(
        ConfigError,
        match=r"tp = 3 must divide heads = 64 and kv_heads = 8 \(or be a multiple of it\) .*"
        r"valid widths: 1, 2, 4, 8, 16, 32, 64\)",
    ):
        build("llama2-70b", tp=3)
    with pytest.raises(ConfigError, match=r"tp = 7 must divide heads = 96"):
        build("gpt3-175b", tp=7)
    with pytest.raises(ConfigError, match="tp = 0 must be a positive integer"):
        build("gpt3-175b", tp=0)
    with pytest.raises(ConfigError, match="seq_len = 100 must be a multiple of tp = 8"):
        build("gpt3-175b", s=100, tp=8, sp=True)
    with pytest.raises(ConfigError, match=r"seq_len = 4096 exceeds .*max_positions = 2048"):
        build("gpt3-175b", s=4096)


def test_valid_tp_widths():
    assert valid_tp_widths(get_model("gpt2-xl")) == (1, 5, 25)
    # 8 K/V heads: wider t replicates them (128 query heads, FFN 53248 = 2^12 x 13)
    assert valid_tp_widths(get_model("llama3-405b")) == (1, 2, 4, 8, 16, 32, 64, 128)
    assert valid_tp_widths(get_model("gpt3-175b"), max_tp=8) == (1, 2, 3, 4, 6, 8)
