"""The placement DP and its chain fast path against brute force over every contiguous split."""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import astuple

import numpy as np
import pytest
from budget import budget
from hypothesis import assume, given
from hypothesis import strategies as st

from arch_space.perf.device import CollectiveCurve
from arch_space.perf.multinode import nccl_ring_latency, nic_busbw_fraction
from phaze_common.errors import Infeasible
from placement import (
    Cluster,
    PlacementProblem,
    StageEdge,
    StageGraph,
    StageLayer,
    evaluate_fixed,
    parse_reference_instance,
    place,
    solve_reference,
)
from placement import network as net
from placement.dp_comm import exposed_reduction_parameters
from placement.layout import Layout, parse_strategy
from placement.search import dp_tasks

# --- brute force (independent of the DP code) -----------------------------------------------


def _downset_chains(n: int, edges: list[tuple[int, int]]):
    """Every sequence of stages (first to last) that is a chain of downsets."""
    succ = [0] * n
    for u, v in edges:
        succ[u] |= 1 << v
    downs = [m for m in range(1 << n) if all(succ[v] & ~m == 0 for v in range(n) if m >> v & 1)]

    def rec(cur: int):
        if cur == 0:
            yield []
            return
        for sub in downs:
            if sub & ~cur == 0 and sub != cur:
                stage = [v for v in range(n) if (cur & ~sub) >> v & 1]
                for rest in rec(sub):
                    yield [stage, *rest]

    yield from rec((1 << n) - 1)


def _ref_stage(stage, doc_w, bw, recompute_pass):
    """Reference stage timing: sequential layers, outside inputs at bytes / bandwidth."""
    fw, bk, ins, outs = doc_w
    inside = set(stage)
    fin, prev = {}, 0.0
    for v in stage:
        start = prev
        for u, c in ins[v]:
            start = max(start, fin[u] if u in inside else (0.0 if recompute_pass else c / bw))
        fin[v] = start + fw[v]
        prev = fin[v]
    fwd = prev
    fin, back = {}, (fwd if recompute_pass else 0.0)
    for v in reversed(stage):
        start = back
        for w, c in outs[v]:
            start = max(start, fin[w] if w in inside else c / bw)
        fin[v] = start + bk[v]
        back = fin[v]
    return fwd, back


def _ref_brute(doc) -> float:
    best = math.inf
    bw, mem, devs, mbs = (
        doc["bandwidth"],
        doc["maxMemoryPerDevice"],
        doc["maxDevices"],
        doc["mbsInBatch"],
    )
    rec, adam = doc["activationRecomputation"], doc["optimizerAlgorithm"] == "Adam"
    for w, nodes in doc["nodes"].items():
        t = int(w)
        n = len(nodes)
        fw = [x["optimalLatencyFw"] for x in nodes]
        bk = [x["optimalLatencyBw"] for x in nodes]
        ins = [[] for _ in range(n)]
        outs = [[] for _ in range(n)]
        edges = []
        for e in doc["edges"][w]:
            u, v = e["sourceId"] // 3, e["destId"] // 3
            ins[v].append((u, e["communicationCost"]))
            outs[u].append((v, e["communicationCost"]))
            edges.append((u, v))
        for stages in _downset_chains(n, edges):
            big_s = len(stages)
            if big_s > min(devs, n):
                continue
            load, used, ok = 0.0, 0, True
            for i, stage in enumerate(stages):
                s = big_s - i
                f, b = _ref_stage(stage, (fw, bk, ins, outs), bw, False)
                if rec and s > 1:
                    _, comb = _ref_stage(stage, (fw, bk, ins, outs), bw, True)
                    ld = f + comb
                else:
                    ld = f + b
                p = sum(nodes[v]["parameterSize"] for v in stage)
                act = sum(nodes[v]["activationSize"] for v in stage)
                const = 2 * p + (p if adam else 0) + act
                inside = set(stage)
                stash = sum(c for v in stage for u, c in ins[v] if u not in inside) if rec else act
                ok &= const + (s - 1) * stash <= mem
                load = max(load, ld)
                used += t if any(nodes[v]["isTensorParallelized"] for v in stage) else 1
            if not ok:
                continue
            p1 = sum(nodes[v]["parameterSize"] for v in stages[0])
            for d in range(1, min(devs, mbs) + 1):
                if used > devs // d:
                    continue
                tpb = load * (-(-mbs // d) + big_s - 1) + 4.0 * (d - 1) * p1 / bw / d
                best = min(best, tpb)
    return best


ints = st.integers


@st.composite
def reference_docs(draw, max_layers: int, chain: bool):
    n = draw(ints(1, max_layers))
    if chain:
        edges = [(i, i + 1) for i in range(n - 1)]
    else:
        pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
        edges = [e for e in pairs if draw(st.booleans())]
    widths = draw(st.sets(st.sampled_from([1, 2, 4]), min_size=1, max_size=3))
    doc = {
        "maxMemoryPerDevice": draw(ints(4, 80)),
        "maxDevices": draw(ints(1, 8)),
        "bandwidth": draw(st.sampled_from([0.5, 1.0, 2.0, 4.0])),
        "mbsInBatch": draw(ints(1, 8)),
        "activationRecomputation": draw(st.booleans()),
        "optimizerAlgorithm": draw(st.sampled_from(["SGD", "Adam"])),
        "nodes": {},
        "edges": {},
    }
    for w in sorted(widths):
        doc["nodes"][str(w)] = [
            {
                "id": 3 * i,
                "parameterSize": draw(ints(0, 6)),
                "activationSize": draw(ints(0, 6)),
                "optimalLatencyFw": draw(ints(0, 9)),
                "optimalLatencyBw": draw(ints(0, 9)),
                "isTensorParallelized": w > 1 and draw(st.booleans()),
            }
            for i in range(n)
        ]
        doc["edges"][str(w)] = [
            {"sourceId": 3 * u, "destId": 3 * v, "communicationCost": draw(ints(0, 40))}
            for u, v in edges
        ]
    return doc


def _check_reference(doc, methods):
    ins = parse_reference_instance(doc)
    want = _ref_brute(doc)
    for method in methods:
        if math.isinf(want):
            with pytest.raises(Infeasible):
                solve_reference(ins, method=method)
            continue
        got = solve_reference(ins, method=method)
        assert math.isclose(got.final_time_per_batch, want, rel_tol=1e-9), method
        covered = sorted(v for s in got.stages for v in s.nodes)
        assert covered == sorted(x["id"] for x in next(iter(doc["nodes"].values())))


@budget(150)
@given(reference_docs(max_layers=8, chain=True))
def test_reference_chain_matches_brute_force(doc):
    _check_reference(doc, ("chain", "dag"))


@budget(100)
@given(reference_docs(max_layers=6, chain=False))
def test_reference_dag_matches_brute_force(doc):
    _check_reference(doc, ("auto",))


# --- our model ------------------------------------------------------------------------------


def _phaze_brute(problem: PlacementProblem) -> float:
    netw = problem.cluster

    def link(inter: bool) -> tuple[float, float]:
        if inter:
            return netw.inter_node_bandwidth_bytes_per_s, netw.inter_node_latency_s
        return netw.intra_node_bandwidth_bytes_per_s, netw.intra_node_latency_s

    best = math.inf
    curve = problem.collectives
    state = problem.state_bytes_per_parameter
    weights = min(2.0, state)
    grads = state - weights - min(12.0, state - weights)  # the optimizer's own: 12 B
    for g, zero in itertools.product(problem.graphs, problem.zero_stages):
        # ZeRO: optimizer state, then gradients, then weights split over the d replicas
        sharded = (0.0, state - weights - grads, state - weights, state)[zero]
        gather = 2.0 * weights if zero == 3 else 0.0
        n = len(g.layers)
        m = problem.global_batch // g.micro_batch
        edges = [(e.src, e.dst) for e in g.edges]
        cap = min(n, netw.devices, problem.max_stages or n)
        for stages in _downset_chains(n, edges):
            p = len(stages)
            if p > cap:
                continue
            used, parts, mems, copies = 0, [], [], 0.0
            for i, stage in enumerate(stages):
                pos = p - i
                ls = [g.layers[v] for v in stage]
                inside = set(stage)
                cut = [e.bytes for e in g.edges if (e.src in inside) != (e.dst in inside)]
                parts.append((sum(x.fwd_s + x.bwd_s + x.recompute_s for x in ls), cut))
                # a stage after the first keeps a copy of its layers' tied weights
                copy = sum(x.tied_parameters for x in ls) if i else 0.0
                copies += copy
                params = sum(x.parameters for x in ls) + copy
                # the stashes of the pos micro-batches in flight, and at the backward pass of
                # a layer its workspace beside what the stage's later layers still hold
                held = pos * sum(x.stash_bytes for x in ls)
                fixed = (
                    max(
                        [held]
                        + [
                            held - sum(y.stash_bytes for y in ls[k + 1 :]) + x.workspace_bytes
                            for k, x in enumerate(ls)
                        ]
                    )
                    # ZeRO-3: one layer (with its tied weights), prefetched
                    + max(x.parameters + x.tied_parameters for x in ls) * gather
                )
                mems.append((fixed + params * (state - sharded), params * sharded))
                used += g.tp if any(x.tensor_parallel for x in ls) else 1
            p1 = sum(g.layers[v].parameters for v in stages[0])
            for d in range(1, min(netw.devices, m) + 1):
                if used > netw.devices // d or m % d:  # whole micro-batches per replica
                    continue
                # sharded state: each of the d replicas keeps 1/d of it
                if any(fixed + part / d > problem.hbm_bytes for fixed, part in mems):
                    continue
                bw, lat = link(d * used > netw.devices_per_node)  # stage boundaries
                if problem.collectives is not None:  # measured rates at the message size
                    size = max((e.bytes for e in g.edges), default=0.0)
                    bw, lat = net.boundary_link(netw, d * used, g.tp, False, curve, size)
                elif g.tp > 1:  # scatter over t links, all-gather in the node (SC21 §4.1)
                    tp_bw, tp_lat = link(g.tp > netw.devices_per_node)
                    if g.tp > netw.devices_per_node:  # one ring per NIC of the node
                        nics = netw.devices_per_node * nic_busbw_fraction()
                        tp_bw = min(tp_bw * nics, link(False)[0])
                    bw = 1.0 / (1.0 / (g.tp * bw) + (g.tp - 1) / (g.tp * tp_bw))
                    lat += tp_lat
                sends = [sum(lat + x / bw for x in cut) for _, cut in parts]
                if problem.p2p_overlap:  # transfers beside compute: only the excess shows
                    load = max(max(c, x) for (c, _), x in zip(parts, sends, strict=True))
                else:
                    load = max(c + x for (c, _), x in zip(parts, sends, strict=True))
                ar = 0.0
                # an overlapped reduction leaves only the last bucket of parameters exposed
                reduced = min(p1, max(40e6, 1e6 * d)) if problem.dp_overlap else p1
                if d > 1:
                    inter = g.tp * d > netw.devices_per_node  # data-parallel ring
                    share = (d - 1) / d
                    grad_bytes = reduced * problem.gradient_bytes_per_parameter
                    # one ring per NIC of the group's members in a node, at the measured share
                    nics = max(1, min(netw.devices_per_node // g.tp, d))

                    def ring(nbytes, kind, halves, inter=inter, share=share, nics=nics, d=d):
                        if curve is None:
                            b2, l2 = link(inter)
                            if inter:
                                b2 = min(b2 * nics * nic_busbw_fraction(), link(False)[0])
                        else:
                            b2, l2 = net.measured_link(
                                netw, curve, inter, nbytes, kind, halves * share, nics
                            )
                        if inter and kind == "ring":  # NCCL's ring: a latency per step
                            base, nvlink, net_hop = nccl_ring_latency()
                            nodes = -(-d // nics)
                            l2 = base + (d - nodes) * nvlink + (nodes - 1) * net_hop
                        return float(l2 + halves * share * nbytes / b2)

                    rs = ring(grad_bytes, "ring", 1.0)
                    ag = ring(p1 * 2.0, "ring", 1.0)  # 2-byte weights
                    whole = ring(grad_bytes, "all_reduce", 2.0)
                    ar = (whole, rs + ag, m // d * rs + ag, m // d * (rs + 2 * ag))[zero]
                opt = p1 * problem.optimizer_s_per_parameter  # the step after the collectives
                tied = 0.0  # the copies' gradients all-reduced with the first stage's
                if copies:
                    nbytes = copies * problem.gradient_bytes_per_parameter
                    inter = d * used > netw.devices_per_node  # as the stage boundaries
                    b2, l2 = net.measured_link(netw, curve, inter, nbytes, "all_reduce")
                    tied = float(l2 + nbytes / b2)
                # cached low-precision weight copies re-cast from the weights a device holds
                refresh = p1 * problem.weight_refresh_s_per_parameter / (d if zero == 3 else 1)
                step = opt / (d if zero else 1) + refresh
                best = min(best, load * (m // d + p - 1) + ar + tied + step)
    return best


@st.composite
def problems(draw, max_layers: int, chain: bool):
    n = draw(ints(1, max_layers))
    if chain:
        edge_list = [(i, i + 1) for i in range(n - 1)]
    else:
        edge_list = [(i, j) for i in range(n) for j in range(i + 1, n) if draw(st.booleans())]
    graphs = []
    for t in sorted(draw(st.sets(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=3))):
        layers = tuple(
            StageLayer(
                f"l{i}",
                fwd_s=draw(ints(0, 9)),
                bwd_s=draw(ints(0, 9)),
                recompute_s=draw(ints(0, 3)),
                parameters=draw(ints(0, 5)),
                stash_bytes=draw(ints(0, 5)),
                workspace_bytes=draw(ints(0, 3)),
                tensor_parallel=t > 1 and draw(st.booleans()),
                tied_parameters=draw(st.sampled_from([0, 0, 1, 3])),
            )
            for i in range(n)
        )
        edges = tuple(StageEdge(u, v, draw(ints(0, 8))) for u, v in edge_list)
        graphs.append(StageGraph(layers, edges, Layout(t=t)))
    per_node = draw(ints(1, 4))
    # a cluster is whole nodes, or part of one
    devices = draw(st.sampled_from([x for x in range(1, 9) if x <= per_node or x % per_node == 0]))
    netw = Cluster(
        devices=devices,
        devices_per_node=per_node,
        intra_node_bandwidth_bytes_per_s=4.0,
        inter_node_bandwidth_bytes_per_s=draw(st.sampled_from([1.0, 2.0])),
        intra_node_latency_s=0.0,
        inter_node_latency_s=draw(st.sampled_from([0.0, 0.5])),
    )
    return PlacementProblem(
        tuple(graphs),
        netw,
        hbm_bytes=draw(ints(6, 60)),
        global_batch=draw(ints(1, 8)),
        state_bytes_per_parameter=draw(st.sampled_from([2.0, 3.0])),
        gradient_bytes_per_parameter=1.0,
        optimizer_s_per_parameter=draw(st.sampled_from([0.0, 0.5, 3.0])),
        weight_refresh_s_per_parameter=draw(st.sampled_from([0.0, 0.25])),
    )


def _check_phaze(problem, methods):
    want = _phaze_brute(problem)
    for method in methods:
        if math.isinf(want):
            with pytest.raises(Infeasible):
                place(problem, method=method)
            continue
        got = place(problem, method=method)
        assert math.isclose(got.breakdown.iteration_s, want, rel_tol=1e-9), method
        assert got.memory_breakdown.total_bytes <= problem.hbm_bytes
        assert got.devices_used <= problem.cluster.devices
        assert sorted(v for s in got.stages for v in s.layers) == list(
            range(len(problem.graphs[0].layers))
        )


@budget(150)
@given(problems(max_layers=8, chain=True))
def test_phaze_chain_matches_brute_force(problem):
    _check_phaze(problem, ("chain", "dag"))


@budget(100)
@given(problems(max_layers=6, chain=False))
def test_phaze_dag_matches_brute_force(problem):
    _check_phaze(problem, ("auto",))


@st.composite
def sharded_problems(draw, max_layers: int, chain: bool):
    """Problems whose memory per device depends on d: ZeRO stages split state over replicas."""
    problem = draw(problems(max_layers, chain))
    stages = draw(st.sets(st.sampled_from([0, 1, 2, 3]), min_size=1))
    return dataclasses.replace(
        problem,
        state_bytes_per_parameter=draw(st.sampled_from([3.0, 7.0, 18.0])),
        zero_stages=tuple(sorted(stages)),
        hbm_bytes=problem.hbm_bytes + draw(ints(0, 60)),
        global_batch=draw(ints(1, 12)),
    )


@st.composite
def overlapped_problems(draw, max_layers: int, chain: bool):
    """Problems under a framework that overlaps p2p sends and the gradient reduction."""
    problem = draw(problems(max_layers, chain))
    return dataclasses.replace(
        problem, p2p_overlap=draw(st.booleans()), dp_overlap=draw(st.booleans())
    )


# a measured curve at the toy problems' sizes: a steep small-message floor, then flat
_CURVE = CollectiveCurve(4.0, (1.0, 4.0, 16.0), (0.5, 1.5, 3.0), 2.5, 2)


@st.composite
def measured_problems(draw, max_layers: int, chain: bool):
    """Problems on a device with a measured collective curve inside a node."""
    problem = draw(st.one_of(overlapped_problems(max_layers, chain), problems(max_layers, chain)))
    return dataclasses.replace(problem, collectives=_CURVE)


@budget(100)
@given(measured_problems(max_layers=7, chain=True))
def test_measured_collectives_match_brute_force_chain(problem):
    _check_phaze(problem, ("chain", "dag"))


@budget(60)
@given(measured_problems(max_layers=5, chain=False))
def test_measured_collectives_match_brute_force_dag(problem):
    _check_phaze(problem, ("auto",))


@budget(100)
@given(overlapped_problems(max_layers=7, chain=True))
def test_overlapped_transfers_match_brute_force_chain(problem):
    _check_phaze(problem, ("chain", "dag"))


@budget(60)
@given(overlapped_problems(max_layers=5, chain=False))
def test_overlapped_transfers_match_brute_force_dag(problem):
    _check_phaze(problem, ("auto",))


def test_an_overlapped_reduction_exposes_one_bucket():
    p = PlacementProblem((StageGraph((StageLayer("l", 1, 1, 1, 0),), ()),), Cluster(8), 1, 1)
    d = np.arange(1, 200)
    params = np.full(d.shape, 1e8)
    assert (exposed_reduction_parameters(p, d, params) == params).all()
    over = exposed_reduction_parameters(dataclasses.replace(p, dp_overlap=True), d, params)
    assert (over == np.minimum(1e8, np.maximum(40e6, 1e6 * d))).all()
    assert (np.diff(over) >= 0).all()


@budget(150)
@given(sharded_problems(max_layers=7, chain=True))
def test_memory_that_depends_on_d_matches_brute_force_chain(problem):
    _check_phaze(problem, ("chain", "dag"))


@budget(80)
@given(sharded_problems(max_layers=5, chain=False))
def test_memory_that_depends_on_d_matches_brute_force_dag(problem):
    _check_phaze(problem, ("auto",))


def _exact_by_degree_and_stages(task) -> dict[tuple[int, int], float]:
    """The best time of a chain task at each (degree, stage count), by trying every split of
    its layers: the figure a lower bound at that degree and stage count must not exceed."""
    costs, t, m = task.costs, task.t, task.micro_batches
    size = costs.n_states
    n = size - 1
    top = max(1, min(task.max_devices, m))
    best: dict[tuple[int, int], float] = {}
    for d in (d for d in range(1, top + 1) if m % d == 0 and d % task.d_multiple == 0):
        table = costs.max_s if task.max_s_at is None else task.max_s_at(d)
        for s in range(1, min(n, task.max_stages) + 1):
            for cuts in itertools.combinations(range(1, n), s - 1):
                bounds = (0, *cuts, n)
                qs = [(n - a) * size + (n - b) for a, b in itertools.pairwise(bounds)]
                if any(table[q] < s - i for i, q in enumerate(qs)):
                    continue  # stage i sits s - i places from the end
                devices = sum(1 if costs.one[q] and t > 1 else t for q in qs)
                if devices * d > task.max_devices:
                    continue
                load = max(costs.load_mid[q] for q in qs[:-1]) if s > 1 else 0.0
                load = max(load, costs.load_last[qs[-1]])
                first = qs[0]
                time = load * (m // d + s - 1)
                time += float(
                    task.tail(np.array([d]), np.array([costs.params[first]]), np.array([load]))[0]
                )
                time += 0.0 if costs.tied_s is None else float(costs.tied_s[first])
                best[d, s] = min(best.get((d, s), math.inf), time)
    return best


@budget(100)
@given(st.one_of(sharded_problems(6, chain=True), measured_problems(6, chain=True)), st.data())
def test_the_search_bounds_hold_at_every_degree_and_stage_count(problem, data):
    """Both lower bounds of every DP task, per degree and stage count, stay under the best
    time of any pipeline with that many stages at that degree: the search skips degrees and
    stops its DPs at stage counts on their word. The sharper one, asked for some cells only,
    gives the same figures there and no bound (-inf) elsewhere."""
    for graph in problem.graphs:
        for task, _, _ in dp_tasks(problem, graph, "chain", problem.cluster.devices):
            exact = _exact_by_degree_and_stages(task.build())
            assume(exact)
            ds = np.array(sorted({d for d, _ in exact}))
            for bound in (task.bound, task.sharper):
                table = bound(ds)
                assert table.shape == (ds.size, task.max_stages)
                for (d, s), want in exact.items():
                    got = table[np.searchsorted(ds, d), s - 1]
                    assert got <= want * (1 + 1e-9) + 1e-12, (d, s, got, want)
            cells = ds.size * task.max_stages
            live = np.array(data.draw(st.lists(st.booleans(), min_size=cells, max_size=cells)))
            live = live.reshape(ds.size, task.max_stages)
            want = np.where(live, task.sharper(ds), -np.inf)
            assert np.array_equal(task.sharper(ds, live), want)


def _searched(problem: PlacementProblem):
    try:
        return place(problem)
    except Infeasible:
        return None


@budget(60)
@given(
    st.one_of(
        problems(max_layers=7, chain=True),
        sharded_problems(6, chain=True),
        measured_problems(6, chain=True),
    )
)
def test_fixed_strategy_reproduces_the_searched_placement(problem):
    """Evaluating the DP's own stages as a fixed strategy gives the same time, the same
    named terms and the same memory parts: one iteration model prices both."""
    best = _searched(problem)
    assume(best is not None)
    # fixed strategies put t devices on every stage
    assume(all(s.devices == best.layout.t for s in best.stages))
    graph = next(g for g in problem.graphs if g.tp == best.layout.t)
    # printed as a strategy string and read back, the layout names the same stages
    got = evaluate_fixed(problem, parse_strategy(str(best.layout)), check_memory=False)
    assert [s.layers for s in got.stages] == [s.layers for s in best.stages]
    assert math.isclose(got.breakdown.iteration_s, best.breakdown.iteration_s, rel_tol=1e-9)
    assert math.isclose(
        got.memory_breakdown.total_bytes, best.memory_breakdown.total_bytes, rel_tol=1e-9
    )
    for a, b in zip(astuple(got.breakdown), astuple(best.breakdown), strict=True):
        assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    assert got.memory_breakdown == best.memory_breakdown
    assert graph.tp == got.layout.t


@budget(100)
@given(st.one_of(problems(max_layers=7, chain=True), sharded_problems(5, chain=False)))
def test_named_terms_sum_to_the_iteration(problem):
    """The DP's optimum is the iteration model's price of its placement, term by term."""
    best = _searched(problem)
    assume(best is not None)
    b = best.breakdown
    assert math.isclose(sum(b.terms().values()), b.iteration_s, rel_tol=1e-9, abs_tol=1e-12)
    assert b.iteration_s == best.breakdown.iteration_s
    assert b.tp_comm_exposed_s == 0.0  # inside the layer times
    assert math.isclose(best.memory_breakdown.total_bytes, best.memory_breakdown.total_bytes)
    assert best.memory_breakdown.total_bytes <= problem.hbm_bytes
