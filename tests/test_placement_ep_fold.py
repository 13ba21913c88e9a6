"""Expert parallelism folded over tensor x data ranks (expert-tensor parallelism 1): layouts
whose ``ep`` does not divide ``d`` but is ``t`` times a divisor of it."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from arch_space import Cluster, load_accelerator
from phaze.api import evaluate
from phaze.config import SolverSettings
from phaze_common.errors import ConfigError
from placement import PlacementProblem, StageEdge, StageGraph, StageLayer
from placement import network as net
from placement.ep_cp import all_to_all_s, ep_cp_graph
from placement.fixed import evaluate_fixed
from placement.layout import Layout, ep_fits, parse_strategy
from placement.partial import completions
from workloads.catalog import get_model as load_model

_CLUSTER = Cluster(devices=16, devices_per_node=8)
_LIST = SolverSettings(name="list")


def _moe_graph(tp: int = 2, experts: int = 8, sp: bool = True) -> StageGraph:
    """Embedding, four MoE blocks (their expert columns the ``1/tp`` shard), head."""

    def block(i: int) -> StageLayer:
        return StageLayer(
            f"b{i}",
            1e-3,
            2e-3,
            parameters=1000,
            stash_bytes=4e6,
            expert_parameters=800.0,
            dispatch_bytes=2e6,
            tp_comm_s=1e-4,
        )

    layers = (
        StageLayer("emb", 1e-4, 2e-4, parameters=100, stash_bytes=1e6, kind="embedding"),
        *(block(i) for i in range(4)),
        StageLayer("head", 1e-4, 2e-4, parameters=100, stash_bytes=1e6, kind="head"),
    )
    edges = tuple(StageEdge(i, i + 1, 1e6) for i in range(len(layers) - 1))
    return StageGraph(layers, edges, Layout(t=tp, sp=sp), experts=experts)


def _lay(text: str, sp: bool = True) -> Layout:
    """A complete layout: ``text`` with the rest at Megatron-LM's defaults."""
    rest = ",v=1,mbs=1,recompute=none,zero=0" + ("" if "cp=" in text else ",cp=1")
    return parse_strategy(f"{text}{rest},sp={'on' if sp else 'off'}")


def _problem(graph: StageGraph) -> PlacementProblem:
    return PlacementProblem((graph,), _CLUSTER, global_batch=32, hbm_bytes=80 * 2**30)


def test_a_fold_needs_ep_t_times_a_divisor_of_d_and_no_context_parallelism():
    assert ep_fits(4, 2, 4, 1) and ep_fits(8, 2, 4, 1) and ep_fits(64, 2, 32, 1)
    assert not ep_fits(8, 2, 4, 2) and not ep_fits(16, 2, 4, 1) and not ep_fits(6, 4, 4, 1)
    folded, plain = _lay("t=2,p=1,d=4,ep=8"), _lay("t=2,p=1,d=4,ep=4")
    assert (folded.folds_experts, folded.etp, folded.ep_d) == (True, 1, 4)
    assert (plain.folds_experts, plain.etp, plain.ep_d) == (False, 2, 4)
    # both expert groups span the same 8 consecutive ranks
    assert folded.groups.ep == plain.groups.ep == 8
    # an open d or cp never folds (a search keeps ep dividing d)
    assert not Layout.searching(t=2, ep=8).folds_experts
    assert not parse_strategy("t=2,p=1,d=4,ep=8").folds_experts


@pytest.mark.parametrize("sp", [True, False])
def test_folded_layout_prices_the_all_to_all_over_t_ep_ranks_and_nothing_else(sp):
    """t=2, d=4, ep=8 (folded) against t=2, d=4, ep=4 (experts sharded over t): the same
    per-rank expert parameters, the same data-parallel bookkeeping and compute; only the
    all-to-all differs, over 8 consecutive ranks, each sending its 1/t of the tokens."""
    g = _moe_graph(sp=sp)
    problem = _problem(g)
    folded = evaluate_fixed(problem, _lay("t=2,p=1,d=4,ep=8", sp))
    plain = evaluate_fixed(problem, _lay("t=2,p=1,d=4,ep=4", sp))
    assert folded.layout.ep == 8
    f, q = folded.stages[0], plain.stages[0]
    assert f.expert_parameters == q.expert_parameters == 4 * 800.0 / 4
    assert f.memory_bytes == q.memory_bytes
    assert f.compute_s - f.ep_comm_s == pytest.approx(q.compute_s - q.ep_comm_s)
    assert folded.breakdown.dp_comm_exposed_s == plain.breakdown.dp_comm_exposed_s
    link = net.group_link(_CLUSTER, 8)
    sent = 2e6 if sp else 2e6 / 2
    assert f.ep_comm_s == pytest.approx(4 * 4 * all_to_all_s(sent, 8, link))
    assert q.ep_comm_s == pytest.approx(4 * 4 * all_to_all_s(2e6, 4, link))


def test_an_unfoldable_ep_is_one_error_naming_what_is_allowed():
    problem = _problem(_moe_graph())
    with pytest.raises(ConfigError, match=r"ep = 16 .*allowed: 1, 2, 4, 8\)"):
        evaluate_fixed(problem, _lay("t=2,p=1,d=4,ep=16"))
    cp_problem = replace(problem, cp_degrees=(1, 2))
    with pytest.raises(ConfigError, match=r"ep = 8 .*allowed: 1, 2\)"):
        evaluate_fixed(cp_problem, _lay("t=2,p=1,d=2,ep=8,cp=2"))


def test_a_fold_with_e_1_still_exchanges_tokens_between_the_tensor_ranks():
    """ep = t = 2 on any d (e = 1): whole experts, half on each tensor rank, so the two
    ranks exchange tokens; at ep = 1 unfolded nothing changes."""
    g = _moe_graph()
    assert ep_cp_graph(g, 1, 1, _CLUSTER) is g
    folded = ep_cp_graph(g, 1, 1, _CLUSTER, fold=True).layers[1]
    a2a = all_to_all_s(2e6, 2, net.group_link(_CLUSTER, 2))
    assert folded.ep_comm_s == pytest.approx(4 * a2a)
    assert folded.expert_parameters == g.layers[1].expert_parameters


def _per_rank_expert_parameters(placement, model, t: int) -> float:
    """Expert parameters of rank 0's blocks over those of one whole expert in as many blocks."""
    blocks = sum(1 for i in placement.stages[0].layers if i >= 1 and i <= model.layers)
    moe = blocks - min(blocks, model.dense_layers)
    one = model.expert_parameters(1) / model.experts
    return placement.stages[0].expert_parameters / (moe * one)


def _mixtral(strategy: str):
    return evaluate(
        "mixtral-8x7b",
        load_accelerator("h100"),
        Cluster(devices=16),
        global_batch=32,
        strategy=strategy,
        tokens_to_train=10**9,
        solver=_LIST,
    )


def test_mixtral_ep_8_folded_on_t_2_d_4_holds_one_whole_expert_per_rank():
    """The strategy leaves cp open: the fold still builds the op graph at e = ep / t = 4, so
    the layer compute equals that of ep = 4 (experts sharded over t)."""
    ev, plain = _mixtral("t=2,p=2,d=4,ep=8,sp=on,zero=1"), _mixtral("t=2,p=2,d=4,ep=4,sp=on,zero=1")
    assert ev.feasible, ev.reason
    pl = ev.placement
    f, q = pl.stages[0], plain.placement.stages[0]
    assert f.compute_s - f.ep_comm_s == pytest.approx(q.compute_s - q.ep_comm_s)
    assert f.ep_comm_s > q.ep_comm_s  # 7/8 of the tokens leave a rank, not 3/4
    assert (pl.layout.ep, pl.layout.etp, pl.layout.groups.ep) == (8, 1, 8)
    assert "ep=8" in str(pl.layout)
    model = load_model("mixtral-8x7b")
    assert _per_rank_expert_parameters(pl, model, 2) == pytest.approx(1.0)
    assert pl.breakdown.ep_comm_exposed_s > 0


def test_deepseek_v3_ep_64_on_d_32_with_t_2():
    """DeepSeek-V3's EP 64 folded over t = 2 and d = 32 (1,024 H100): 4 of the 256 routed
    experts, whole, per rank; the all-to-all over 64 consecutive ranks (8 nodes)."""
    ev = evaluate(
        "deepseek-v3",
        load_accelerator("h100"),
        Cluster(devices=1024),
        seq_len=4096,
        global_batch=1024,
        strategy="t=2,p=16,d=32,ep=64,sp=on,zero=1,recompute=full",
        tokens_to_train=10**9,
        solver=_LIST,
    )
    assert ev.feasible, ev.reason
    pl = ev.placement
    assert (pl.layout.ep, pl.layout.ep_d, pl.layout.groups.ep) == (64, 32, 64)
    model = load_model("deepseek-v3")
    assert _per_rank_expert_parameters(pl, model, 2) == pytest.approx(256 / 64)


def test_a_partial_strategy_with_ep_given_completes_folded_layouts_too():
    """ep = 8 at t = 2 on 16 devices: d = 8 (ep divides d) or d = 4 (folded)."""
    lays = completions(_problem(_moe_graph()), parse_strategy("t=2,p=1,ep=8,cp=1"))
    assert {x.d for x in lays if x.folds_experts} == {4}
    assert {x.d for x in lays if not x.folds_experts} == {8}
    # with cp open a fold stays at cp = 1 (Megatron-Core folds over t x cp x d; not modelled)
    cp_problem = replace(_problem(_moe_graph()), cp_degrees=(1, 2))
    lays = completions(cp_problem, parse_strategy("t=2,p=1,d=4,ep=8"))
    assert lays and {x.cp for x in lays} == {1}


def test_folded_all_to_all_is_priced_as_network_energy_over_its_ranks():
    from placement.energy import iteration_energy
    from placement.iteration import EnergyRates

    problem = replace(_problem(_moe_graph()), hbm_bytes=1e12, global_batch=16)
    rates = EnergyRates(
        compute_j=0.0,
        memory_j=0.0,
        network_j=0.0,
        static_w_per_device=0.0,
        intra_node_link_pj_per_bit=1.0,
        inter_node_link_pj_per_bit=5.0,
        model_parameters=0.0,
        boundary_bytes=0.0,
        dispatch_bytes=3.0,
        kv_bytes=0.0,
    )

    def network_j(ep: int) -> float:
        pl = evaluate_fixed(problem, Layout(t=2, p=1, d=4, ep=ep, sp=True))
        return iteration_energy(pl, rates, _CLUSTER, micro_batches=16).network_j

    # four all-to-alls per micro-batch, (ep - 1) / ep of 3 bytes leaving each of t = 2
    # devices, 1 pJ/bit inside the node
    assert network_j(8) == pytest.approx(4 * 7 / 8 * 2 * 3.0 * 16 * 8e-12)
    assert network_j(4) == pytest.approx(4 * 3 / 4 * 2 * 3.0 * 16 * 8e-12)


def test_evaluate_json_names_the_folded_layout(cli_run):
    r = cli_run(
        "evaluate",
        "--workload",
        "mixtral-8x7b",
        "--arch",
        "h100",
        "--devices",
        16,
        "--global-batch",
        32,
        "--strategy",
        "t=2,p=2,d=4,ep=8,sp=on,zero=1",
        "--json",
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    lay = parse_strategy(doc["placement"]["strategy"])
    assert (lay.t, lay.d, lay.ep, lay.folds_experts) == (2, 4, 8, True)
    assert doc["breakdown"]["ep_comm_exposed_s"] > 0
