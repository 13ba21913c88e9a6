"""Framework overlap profiles: barriers, compute shares and channels in the op graphs."""

import itertools

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arch_space import Cluster
from arch_space.perf import op_costs
from arch_space.presets import preset
from ilp import layer_timing
from phaze_common.errors import ConfigError
from workloads import CollectiveKind, CoreType, OpGraph, OpKind, TrainingSetup, build_layer_graph
from workloads.catalog import get_model
from workloads.framework import (
    apply_framework,
    framework_names,
    framework_profile,
    layout_refusals,
    profile_from_mapping,
)
from workloads.ops import CommRole, Op


def _block(framework, sp=False, recompute="full"):
    setup = TrainingSetup(
        seq_len=256,
        global_batch=2,
        micro_batch=2,
        recompute=recompute,
        sequence_parallel=sp,
        framework=framework,
    )
    return build_layer_graph(get_model("gpt3-175b"), setup, 8).op_graphs["block"]


def test_the_profiles():
    assert framework_names() == (
        "megatron-2022",
        "overlap-all",
        "none",
        "megatron-core-2024",
        "deepspeed-2022",
        "fsdp2-2024",
        "fsdp1-2023",
        "deepseek-2024",
        "megatron-bridge-2025",
        "maxtext-2023",
    )
    m = framework_profile("megatron-2022")
    assert m.tp_overlap == {CommRole.COLUMN_BACKWARD} and not m.dp_overlap
    assert m.p2p_overlap == "never" and m.zero_stages == (0, 1)
    assert framework_profile("overlap-all").tp_overlap == set(CommRole)
    assert framework_profile("none").tp_overlap == set()
    core = framework_profile("megatron-core-2024")
    assert core.tp_overlap == set(CommRole) and core.param_gather_overlap and core.dp_overlap
    assert core.p2p_overlap == "interleaved" and core.pipeline == "interleaved"
    ds = framework_profile("deepspeed-2022")
    assert ds.pipeline == "1f1b" and ds.p2p_overlap == "never" and not ds.dp_overlap
    fsdp = framework_profile("fsdp2-2024")
    assert fsdp.pipeline == "none" and fsdp.sharded_prefetch
    assert fsdp.reduce_bytes_per_parameter == 4.0 and 1 not in fsdp.zero_stages
    bridge = framework_profile("megatron-bridge-2025")
    # Megatron-Core 0.14 as the 2024 profile, but the fused cross entropy
    assert bridge.cross_entropy == "fused" and core.cross_entropy == "unfused-fp32"
    assert bridge.tp_overlap == core.tp_overlap and bridge.attention == core.attention == "flash"
    assert (bridge.dp_overlap, bridge.param_gather_overlap, bridge.pipeline) == (
        True,
        True,
        "interleaved",
    )
    assert not bridge.ep_overlap and bridge.moe_dispatcher == "alltoall"
    # FSDP's ZeRO-2 gathers again for every micro-batch; DeepSpeed's once per step
    assert fsdp.regather_per_micro_batch
    assert framework_profile("fsdp1-2023").regather_per_micro_batch
    assert not ds.regather_per_micro_batch and not core.regather_per_micro_batch
    assert not framework_profile(
        "fsdp2-2024:regather_per_micro_batch=false"
    ).regather_per_micro_batch
    with pytest.raises(ConfigError, match="regather_per_micro_batch = 'sometimes'"):
        framework_profile("fsdp2-2024:regather_per_micro_batch=sometimes")
    maxtext = framework_profile("maxtext-2023")
    assert maxtext.tp_overlap == set(CommRole) and maxtext.recompute_dce
    assert maxtext.pipeline == "none" and maxtext.sharded_prefetch


def test_layout_rules_name_the_rule():
    fsdp, ds = framework_profile("fsdp2-2024"), framework_profile("deepspeed-2022")
    assert layout_refusals(fsdp, p=1, v=1, zero=3) == []
    assert [r.split(":")[0] for r in layout_refusals(fsdp, p=2, v=2, zero=1)] == [
        "pipeline",
        "interleaving",
        "zero",
    ]
    assert [r.split(":")[0] for r in layout_refusals(ds, p=4, v=2, zero=1)] == ["interleaving"]
    assert layout_refusals(framework_profile("megatron-core-2024"), p=4, v=2, zero=1) == []


def test_a_damaged_profile_names_every_problem():
    table = {
        "description": "x",
        "tp_overlap": [],
        "dp_overlap": False,
        "p2p_overlap": "sometimes",
        "pipeline": "gpipe",
        "zero_stages": [4],
        "host_s_per_kernal": 1e-6,
        "p2p_sends": 0.5,
        "p2p_gathers": -1,
    }
    with pytest.raises(ConfigError) as err:
        profile_from_mapping("bad", table)
    msg = str(err.value)
    for part in (
        "p2p_overlap = 'sometimes'",
        "pipeline = 'gpipe'",
        "zero_stages",
        "host_s_per_kernel",
        "p2p_sends = 0.5 must be a number >= 1",
        "p2p_gathers = -1 must be a number >= 0",
    ):
        assert part in msg


def test_unknown_profile_names_the_known_ones():
    with pytest.raises(ConfigError, match="megatron-2022.*none.*overlap-all"):
        framework_profile("megatron-2021")
    with pytest.raises(ConfigError, match="framework"):
        TrainingSetup(seq_len=8, global_batch=1, framework="fast")


def _checks(g: OpGraph, framework: str) -> None:
    profile = framework_profile(framework)
    nxg = g.to_networkx()
    names = [op.name for op in g.ops]
    colls = [i for i, op in enumerate(g.ops) if op.kind is OpKind.COLLECTIVE]
    for i in colls:
        op = g.ops[i]
        share = f"{op.name}.share"
        if op.role in profile.tp_overlap:
            # asynchronous: its compute share sits between the same neighbours
            assert share in nxg
            assert set(nxg.predecessors(share)) == set(nxg.predecessors(op.name))
            assert set(nxg.successors(share)) == set(nxg.successors(op.name)) - {share}
        else:
            # synchronous: a barrier between everything issued before and after it
            assert share not in nxg
            assert all(nx.has_path(nxg, names[j], op.name) for j in range(i))
            assert all(nx.has_path(nxg, op.name, names[j]) for j in range(i + 1, len(names)))


@pytest.mark.parametrize("framework", ["megatron-2022", "overlap-all", "none"])
@pytest.mark.parametrize("sp", [False, True])
def test_profiles_shape_every_pass(framework, sp):
    pg = _block(framework, sp=sp)
    for g in (pg.forward, pg.backward, pg.recompute):
        assert nx.is_directed_acyclic_graph(g.to_networkx())
        _checks(g, framework)


def test_megatron_2022_overlaps_only_column_backward_collectives():
    pg = _block("megatron-2022", sp=True, recompute="selective")
    shares = {op.name for op in pg.backward.ops if op.kind is OpKind.COMM_SHARE}
    assert shares == {
        "ln1.allgather.bwd.share",  # the gradient reduce-scatter beside the weight gradient
        "ln2.allgather.bwd.share",
        "ln1.allgather.regather.share",  # the re-gather beside the input gradient
        "ln2.allgather.regather.share",
    }
    assert not any(op.kind is OpKind.COMM_SHARE for op in pg.forward.ops)


def _op(i: int, coll: bool, role: CommRole) -> Op:
    if coll:
        return Op(
            f"c{i}",
            OpKind.COLLECTIVE,
            CoreType.NOP,
            collective=CollectiveKind.ALL_REDUCE,
            collective_bytes=64,
            group=2,
            role=role,
        )
    return Op(f"v{i}", OpKind.ELEMENTWISE, CoreType.VC, flops=1, elements=1)


@settings(max_examples=60, deadline=None)
@given(
    kinds=st.lists(st.tuples(st.booleans(), st.sampled_from(list(CommRole))), max_size=9),
    edges=st.sets(st.tuples(st.integers(0, 8), st.integers(0, 8))),
    framework=st.sampled_from(["megatron-2022", "overlap-all", "none"]),
)
def test_random_graphs_keep_their_order_and_gain_the_rules(kinds, edges, framework):
    ops = tuple(_op(i, c, r) for i, (c, r) in enumerate(kinds))
    forward = tuple(sorted((a, b) for a, b in edges if a < b < len(ops)))
    g = OpGraph(ops, forward)
    out = apply_framework(g, framework_profile(framework))
    nxo = out.to_networkx()
    assert nx.is_directed_acyclic_graph(nxo)
    # every original dependency is kept
    assert all(nx.has_path(nxo, ops[a].name, ops[b].name) for a, b in forward)
    assert [op for op in out.ops if op.kind is not OpKind.COMM_SHARE] == list(ops)
    _checks(out, framework)
    # no edge orders two asynchronous collectives: their channel does (the scheduler's choice)
    profile = framework_profile(framework)
    nxg = g.to_networkx()
    sync = [i for i, op in enumerate(ops) if op.kind is OpKind.COLLECTIVE]
    sync = [i for i in sync if ops[i].role not in profile.tp_overlap]
    free = [i for i, op in enumerate(ops) if op.kind is OpKind.COLLECTIVE and i not in sync]
    for a, b in itertools.combinations(free, 2):
        if not nx.has_path(nxg, ops[a].name, ops[b].name) and not any(a < c < b for c in sync):
            assert not nx.has_path(nxo, ops[a].name, ops[b].name)


def test_synchronous_collectives_are_all_exposed_in_the_schedule():
    def timing(framework):
        setup = TrainingSetup(
            seq_len=256, global_batch=2, micro_batch=2, sequence_parallel=True, framework=framework
        )
        lg = build_layer_graph(get_model("gpt3-1.3b"), setup, 4)
        return lg, layer_timing(lg, preset("a100"), Cluster(devices=8), solver="list")["block"]

    lg, none = timing("none")
    g = lg.op_graphs["block"].forward
    table = op_costs(g, preset("a100"), Cluster(devices=8))
    colls = [i for i, op in enumerate(g.ops) if op.kind is OpKind.COLLECTIVE]
    assert none.forward.comm_exposed_s == pytest.approx(
        sum(float(table.parallel_latency_s[i]) for i in colls), rel=1e-9
    )
    _, overlap = timing("overlap-all")
    assert overlap.backward.comm_exposed_s <= none.backward.comm_exposed_s
    assert overlap.backward.makespan_s <= none.backward.makespan_s * (1 + 1e-9)
