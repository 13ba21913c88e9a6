"""The ledger of collectives: its bytes against the algorithms' closed forms and a brute-force
ring, and time and energy priced from the same records."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from arch_space import Cluster
from placement import Layout, PlacementProblem, StageEdge, StageGraph, StageLayer, evaluate_fixed
from placement import network as net
from placement.collectives import Collective, collective_s, ledger_bytes, link_energy_j
from placement.dp_comm import dp_time
from placement.energy import iteration_energy
from placement.ep_cp import all_to_all_s, ring_s
from placement.iteration import EnergyRates
from placement.ledger import iteration_ledger

_CLUSTER = Cluster(devices=16, devices_per_node=8)


def _ring_all_reduce_sent(n: int, nbytes: float) -> float:
    """Bytes device 0 sends in a ring all-reduce, by running it: a reduce-scatter then an
    all-gather, each step every device passing one chunk of ``nbytes / n`` to its right
    neighbour; checks that every device ends with every chunk fully reduced."""
    chunk = nbytes / n
    # partial[i][c]: the set of devices whose contribution device i holds for chunk c
    partial = [[{i} for _ in range(n)] for i in range(n)]
    sent = 0.0
    for step in range(n - 1):  # reduce-scatter
        moves = [(i, (i - step) % n) for i in range(n)]
        incoming = [(i, c, set(partial[i][c])) for i, c in moves]
        for i, c, held in incoming:
            partial[(i + 1) % n][c] |= held
        sent += chunk
    for i in range(n):
        assert partial[i][(i + 1) % n] == set(range(n)), "device owns a reduced chunk"
    full = [{(i + 1) % n} for i in range(n)]
    for step in range(n - 1):  # all-gather
        incoming = [(i, (i + 1 - step) % n) for i in range(n)]
        for i, c in incoming:
            full[(i + 1) % n].add(c)
        sent += chunk
    assert all(f == set(range(n)) for f in full), "every device holds every chunk"
    return sent


@given(n=st.integers(1, 16), nbytes=st.floats(1.0, 1e12), count=st.integers(1, 9))
def test_ledger_bytes_are_the_closed_forms(n, nbytes, count):
    """All-reduce 2 (n - 1) / n, reduce-scatter, all-gather and all-to-all (n - 1) / n, a ring
    pass n - 1 chunks, a send its bytes: per device, per run."""

    def sent(kind: str) -> float:
        return Collective(kind, "dp", n, nbytes, False, count, 3).total_bytes / (3 * count)

    assert sent("all_reduce") == pytest.approx(2 * (n - 1) / n * nbytes)
    for kind in ("reduce_scatter", "all_gather", "all_to_all"):
        assert sent(kind) == pytest.approx((n - 1) / n * nbytes)
    assert sent("ring_pass") == pytest.approx((n - 1) * nbytes)
    assert sent("send") == pytest.approx(nbytes)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
def test_ring_all_reduce_run_step_by_step_sends_the_closed_form(n):
    nbytes = 1e6
    record = Collective("all_reduce", "dp", n, nbytes, False, 1, 1)
    assert _ring_all_reduce_sent(n, nbytes) == pytest.approx(record.total_bytes)


def test_an_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="broadcast"):
        Collective("broadcast", "dp", 2, 1.0, False, 1, 1)


def test_link_energy_prices_each_record_at_its_link():
    intra = Collective("all_gather", "tp", 4, 8.0, False, 2, 4)  # 2 * 4 * 3/4 * 8 = 48 B
    inter = Collective("send", "pp", 2, 5.0, True, 3, 1)  # 15 B
    routed = Collective("all_to_all", "ep", 16, 9.0, True, 1, 2, routed=(1.0, 2.0))
    got = link_energy_j((intra, inter, routed), 1.0, 10.0)
    want = (48 * 1.0 + 15 * 10.0 + 2 * (1.0 * 10.0 + 2.0 * 1.0)) * 8e-12
    assert got == pytest.approx(want)
    assert ledger_bytes((intra, inter, routed), "tp") == 48.0


def _rates(**kw) -> EnergyRates:
    base = dict(
        compute_j=0.0,
        memory_j=0.0,
        network_j=0.0,
        static_w_per_device=0.0,
        intra_node_link_pj_per_bit=1.0,
        inter_node_link_pj_per_bit=10.0,
        model_parameters=0.0,
        boundary_bytes=0.0,
    )
    return EnergyRates(**{**base, **kw})


def _chain(tp: int = 1, blocks: int = 4, params: int = 1000) -> StageGraph:
    layers = tuple(
        StageLayer(f"b{i}", 1e-3, 2e-3, parameters=params, stash_bytes=1e3) for i in range(blocks)
    )
    edges = tuple(StageEdge(i, i + 1, 1e6) for i in range(blocks - 1))
    return StageGraph(layers, edges, Layout(t=tp))


def test_pipeline_sends_carry_one_tth_without_sequence_parallelism():
    """Megatron's scatter/gather: each of the t devices sends 1/t of the boundary tensor
    across the pipeline's link, and the next stage all-gathers it over its tensor-parallel
    group inside the node; with sequence parallelism the (already split) tensor goes as it
    is. Before the ledger, energy counted all t copies of the whole tensor on the
    pipeline's link."""
    cluster = Cluster(devices=16, devices_per_node=8)
    problem = PlacementProblem((_chain(tp=4),), cluster, hbm_bytes=1e12, global_batch=8)
    pl = evaluate_fixed(problem, Layout(t=4, p=4, d=1))
    rates = _rates(boundary_bytes=1e6)
    mb = 8
    ledger = iteration_ledger(pl, rates, cluster, mb)
    sends = [c for c in ledger if c.parallel == "pp" and c.kind == "send"]
    gathers = [c for c in ledger if c.parallel == "pp" and c.kind == "all_gather"]
    crossings = 2 * (4 - 1) * mb
    assert [c.bytes for c in sends] == [1e6 / 4] and sends[0].inter
    assert ledger_bytes(sends) == pytest.approx(crossings * 1e6)  # t devices x 1/t each
    assert ledger_bytes(gathers) == pytest.approx(crossings * 4 * 3 / 4 * 1e6)
    assert not gathers[0].inter
    energy = iteration_energy(pl, rates, cluster, mb).network_j
    assert energy == pytest.approx((crossings * 1e6 * 10.0 + crossings * 3e6 * 1.0) * 8e-12)
    sp = dataclasses.replace(pl, layout=dataclasses.replace(pl.layout, sp=True))
    (send,) = [c for c in iteration_ledger(sp, rates, cluster, mb) if c.parallel == "pp"]
    assert send.bytes == 1e6 and send.devices == 4


def test_dp_record_time_is_the_time_models():
    """The data-parallel all-reduce of one stage over d devices: the ledger's record priced
    on the link model takes what dp_time says (no overlap, dense, rank 0 = the whole
    model)."""
    cluster = Cluster(devices=16, devices_per_node=8)
    problem = PlacementProblem((_chain(),), cluster, hbm_bytes=1e12, global_batch=16)
    pl = evaluate_fixed(problem, Layout(d=16))
    params = 4000.0
    rates = _rates(model_parameters=params)
    (ar,) = [c for c in iteration_ledger(pl, rates, cluster, 16) if c.parallel == "dp"]
    assert (ar.kind, ar.group, ar.inter) == ("all_reduce", 16, True)
    want = dp_time(problem, 1, 0, np.array([16]), np.array([params]), 16).unoverlapped_s[0]
    assert collective_s(ar, cluster) == pytest.approx(float(want))
    # and its energy is the same record's bytes at the inter-node link's energy
    assert iteration_energy(pl, rates, cluster, 16).network_j == pytest.approx(
        ar.total_bytes * 10.0 * 8e-12
    )


def test_expert_and_context_records_time_as_ep_cp_prices_them():
    """An all-to-all and a K/V ring pass: the record's time per run is
    :func:`placement.ep_cp.all_to_all_s` and :func:`placement.ep_cp.ring_s` of its bytes."""
    a2a = Collective("all_to_all", "ep", 8, 3e6, False, 4, 8)
    ln = net.link(_CLUSTER, inter_node=False)
    assert collective_s(a2a, _CLUSTER) == pytest.approx(4 * all_to_all_s(3e6, 8, ln))
    ring = Collective("ring_pass", "cp", 4, 2e6, True, 3, 4)
    ln = net.link(_CLUSTER, inter_node=True)
    assert collective_s(ring, _CLUSTER) == pytest.approx(3 * ring_s(2e6, 4, ln))


@pytest.mark.parametrize(("t", "sp"), [(4, False), (8, True), (16, True)])
def test_tensor_parallel_records_price_what_the_op_model_prices(t, sp):
    """The tensor-parallel collectives the ledger records from a width's op graphs cost the
    link energy the op model gives them (the same bytes on the same link, inside a node
    and, at t = 16, across two), so the iteration's energy reads them from the ledger."""
    import phaze.model.pipeline as pipeline
    from arch_space.perf import default_settings
    from arch_space.presets import preset
    from phaze.config import SolverSettings
    from phaze.model.context import Context
    from workloads import resolve_model

    cluster = Cluster(devices=32, devices_per_node=8)
    ctx = Context(
        cluster,
        seq_len=512,
        global_batch=8,
        max_tp=16,
        sequence_parallel=sp,
        solver=SolverSettings("list"),
    )
    model = resolve_model("gpt3-350m")
    setup = pipeline.training_setup(model, ctx, Layout.searching(mbs=1, recompute="none"))
    variant = pipeline.width_variant(model, setup, t, preset("h100"), cluster, ctx.solver)
    perf = default_settings()
    rates = _rates(
        intra_node_link_pj_per_bit=perf.intra_node_link_pj_per_bit,
        inter_node_link_pj_per_bit=perf.inter_node_link_pj_per_bit,
        tp_collectives=variant.tp_collectives,
    )
    pl = evaluate_fixed(
        PlacementProblem((_chain(tp=t),), cluster, hbm_bytes=1e12, global_batch=8),
        Layout(t=t, p=1, d=1),
    )
    ledger = iteration_ledger(pl, rates, cluster, 3)
    tp = [c for c in ledger if c.parallel == "tp"]
    assert tp and all(c.inter == (t > 8) for c in tp)
    got = link_energy_j(tp, rates.intra_node_link_pj_per_bit, rates.inter_node_link_pj_per_bit)
    assert got == pytest.approx(3 * variant.network_j, rel=1e-9)


def test_evaluate_json_lists_the_ledger_its_energy_prices():
    """``phaze evaluate --json``'s collectives are the records the energy priced: their link
    energies sum to the network energy of the breakdown (the op model adds none)."""
    import json

    from click.testing import CliRunner

    from phaze.cli import cli

    args = ["evaluate", "--workload", "gpt3-350m", "--arch", "h100", "--devices", "16"]
    args += ["--global-batch", "16", "--seq-len", "512", "--strategy", "t=4,p=2,d=2", "--json"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    rows = doc["collectives"]
    assert {r["parallel"] for r in rows} >= {"tp", "dp", "pp"}
    total = sum(r["energy_j"] for r in rows)
    assert total == pytest.approx(doc["energy_breakdown"]["network_j"], rel=1e-9)
    for r in rows:
        c = Collective(**{k: r[k] for k in Collective.__slots__ if k != "routed"})
        assert r["sent_bytes"] == pytest.approx(c.total_bytes)


def test_a_serving_pass_records_its_sends_gathers_and_all_to_alls():
    """One serving pass through 4 tensor ranks, 3 stages and 8 expert ranks: 1/t of the
    activation from each device at each of the 2 boundaries (the whole activation across
    them), all-gathered on the tensor group (3 more copies inside the node); a dispatch and
    a combine per MoE block, 7/8 of each device's top-k copies leaving it. Before the
    ledger, serving's energy left the all-gathers out."""
    from placement.ledger import serving_ledger

    ledger = serving_ledger(
        t=4,
        stages=3,
        ep=8,
        dispatch_bytes=80.0,
        moe_blocks=5,
        boundary_bytes=100.0,
        inter=(False, True, True),
    )
    assert ledger_bytes(ledger, "ep") == pytest.approx(2 * 5 * 7 / 8 * 80.0 * 4)
    sends = [c for c in ledger if c.kind == "send"]
    gathers = [c for c in ledger if c.kind == "all_gather"]
    assert ledger_bytes(sends) == pytest.approx(2 * 100.0) and sends[0].inter
    assert ledger_bytes(gathers) == pytest.approx(2 * 3 * 100.0) and not gathers[0].inter
    want = (2 * 5 * 7 / 8 * 80.0 * 4 * 10.0 + 200.0 * 10.0 + 600.0 * 1.0) * 8e-12
    assert link_energy_j(ledger, 1.0, 10.0) == pytest.approx(want)


@pytest.mark.parametrize(
    ("kind", "group"), [("all_reduce", 4), ("all_gather", 8), ("reduce_scatter", 16)]
)
def test_a_tensor_parallel_record_takes_the_op_models_time(kind, group):
    """One run of a tensor-parallel record takes what the op cost model gives the same
    collective op on an H100 (its measured curve inside a node, NIC sharing across
    nodes): the two price through the one link model."""
    from arch_space.perf import op_costs
    from arch_space.perf.device import device_profile
    from arch_space.presets import preset
    from workloads.ops import CollectiveKind, CoreType, Op, OpGraph, OpKind

    acc = preset("h100")
    cluster = Cluster(devices=32, devices_per_node=8)
    op = Op(
        "c",
        OpKind.COLLECTIVE,
        CoreType.NOP,
        collective=CollectiveKind(kind),
        collective_bytes=3 << 20,
        group=group,
    )
    table = op_costs(OpGraph((op,), ()), acc, cluster)
    inter = bool(cluster.spans_nodes(group))
    record = Collective(kind, "tp", group, float(3 << 20), inter, 1, group)
    curve = device_profile(acc).intra_node
    assert collective_s(record, cluster, curve) == pytest.approx(float(table.latency_s[0]))


@pytest.mark.parametrize(("name", "t", "ep"), [("llama2-7b", 4, 1), ("mixtral-8x7b", 8, 2)])
def test_a_serving_pass_records_its_tensor_parallel_collectives(name, t, ep):
    """A decode step's tensor-parallel collectives, read from its op graphs into the
    serving ledger, cost the link energy the op model gives the pass on its t devices."""
    from arch_space.perf import default_settings
    from arch_space.presets import preset
    from ilp.serving import serving_pass_time
    from placement.adapt import tp_collectives
    from placement.ledger import serving_ledger
    from workloads import resolve_model
    from workloads.serving import ServingPass
    from workloads.serving_ops import serving_layer_graph

    model, p = resolve_model(name), ServingPass(8, 1, 512)
    cluster = Cluster(devices=16, devices_per_node=8)
    spt = serving_pass_time(model, preset("h100"), cluster, p, t, ep=ep, solver="list")
    ledger = serving_ledger(
        t=t,
        stages=1,
        ep=1,
        dispatch_bytes=0.0,
        moe_blocks=0,
        boundary_bytes=0.0,
        inter=(False, False, False),
        tp_collectives=tp_collectives(serving_layer_graph(model, p, t, ep)),
    )
    assert ledger and {c.parallel for c in ledger} == {"tp"}
    perf = default_settings()
    got = link_energy_j(ledger, perf.intra_node_link_pj_per_bit, perf.inter_node_link_pj_per_bit)
    assert got == pytest.approx(t * spt.dynamic_j[2], rel=1e-9)
