"""Independent oracles for the ilp tests: a brute-force optimum, a schedule checker, and
random op graphs. Nothing here imports the scheduler's internals.

The brute force enumerates every precedence-feasible order x every mode of every op (also
dominated ones), placing each op at its earliest feasible start (serial schedule
generation, which reaches an optimal schedule over all orders; Kolisch, EJOR 1996), pruning
branches already no better than the best found. Resources are a capacity per kind: the
cores (the chip's kinds of compute unit, here mostly the tensor cores "TC" and the vector
cores "VC", but any names) and any further kinds. A node's ``units`` attribute gives the units
of each core kind it holds in its single mode (it holds every unit of those kinds split, or
every core at all when split ops block the chip); its ``demand`` attribute adds units of the
further kinds, held in either mode.
"""

from __future__ import annotations

import math

import networkx as nx
import pytest
from hypothesis import strategies as st

from ilp import DEFAULT_MIP_GAP, ScheduleStatus, makespan_lower_bound, solve_schedule

__all__ = [
    "CORES",
    "US",
    "cores",
    "node_units",
    "assert_optimal",
    "branchy",
    "brute_force",
    "cost_bound",
    "check_schedule",
    "collective_dags",
    "dags",
    "graph",
    "held",
    "run_exact",
    "run_list",
]

CORES = ("TC", "VC", "TCandVC", "Nop")  # the op model's core types, as the tests name them
US = 1e-6  # latencies in microseconds, to exercise the solver's scaling


def node_units(core):
    """The ``units`` attribute of a node of core type ``core`` (one of :data:`CORES`)."""
    return {"TC": {"TC": 1}, "VC": {"VC": 1}, "TCandVC": {"TC": 1, "VC": 1}, "Nop": {}}[core]


def cores(num_tc, num_vc):
    """The cores of a design of ``num_tc`` tensor and ``num_vc`` vector cores."""
    return {"TC": num_tc, "VC": num_vc}


def _holds_core(attrs):
    return any(attrs.get("units", {}).values())


def held(attrs, parallel, units, resources, blocks_all):
    """Units of each kind an op with node ``attrs`` holds in the given mode, on the cores
    ``units`` and the further ``resources``."""
    extra = attrs.get("demand", {})
    out = {k: extra.get(k, 0) for k in {**units, **resources}}
    if not _holds_core(attrs):
        return out
    if parallel and blocks_all:  # every core, and of the further kinds only its demand
        return {**out, **units}
    for kind, n in attrs["units"].items():
        if n:
            out[kind] = units[kind] if parallel else n
    return out


def _fits(placed, start, dur, need, caps):
    """Do ops in ``placed`` (start, dur, units) leave room for ``need`` on [start, start+dur)?"""
    if dur == 0:
        return True
    points = [start] + [s for s, _, _ in placed if start < s < start + dur]
    for p in points:
        for kind, cap in caps.items():
            used = need[kind] + sum(u[kind] for s, d, u in placed if s <= p < s + d)
            if used > cap:
                return False
    return True


def brute_force(g, units, blocks_all=True, resources=None):
    """Optimal makespan by exhaustive search over orders x modes (with bound pruning)."""
    nodes = list(g.nodes)
    resources = resources or {}
    caps = {**units, **resources}
    modes = {v: ((False, True) if _holds_core(g.nodes[v]) else (False,)) for v in nodes}
    best = [math.inf]

    def dur(v, par):
        a = g.nodes[v]
        return a["parallel_latency_s"] if par else a.get("latency_s", 0.0)

    def twin_key(v):
        a = g.nodes[v]
        attrs = tuple(sorted((k, repr(x)) for k, x in a.items() if "energy" not in k))
        return attrs, frozenset(g.predecessors(v)), frozenset(g.successors(v))

    # Ops with equal costs, demands, predecessors and successors are interchangeable: a
    # completion that lists one first maps onto one that lists the other first.
    twin = {v: twin_key(v) for v in nodes}

    def rec(done, placed, finish, span):
        if span >= best[0] * (1 - 1e-12) and len(done) < len(nodes):
            return
        if len(done) == len(nodes):
            best[0] = min(best[0], span)
            return
        tried = set()
        for v in nodes:
            if v in done or any(p not in done for p in g.predecessors(v)) or twin[v] in tried:
                continue
            tried.add(twin[v])
            est = max((finish[p] for p in g.predecessors(v)), default=0.0)
            for par in modes[v]:
                d = dur(v, par)
                need = held(g.nodes[v], par, units, resources, blocks_all)
                cands = sorted({est} | {s + dd for s, dd, _ in placed if s + dd > est})
                c = next(c for c in cands if _fits(placed, c, d, need, caps))
                rec(done | {v}, placed + [(c, d, need)], {**finish, v: c + d}, max(span, c + d))

    rec(frozenset(), [], {}, 0.0)
    return best[0] if nodes else 0.0


def check_schedule(g, s, units, blocks_all=True, resources=None):
    """Independent checks: modes and durations, precedence, units of every kind at every
    instant, per-unit labels, makespan, energy, utilisation."""
    eps = 1e-12
    resources = resources or {}
    caps = {**units, **resources}
    assert dict(s.capacity) == caps and s.core_kinds == tuple(units)
    assert set(s.start_s) == set(g.nodes)
    energy = 0.0
    intervals = []
    for v, a in g.nodes(data=True):
        par = v in s.parallel
        d = s.duration_s[v]
        assert s.start_s[v] >= 0
        if not _holds_core(a):
            assert not par and d == a.get("latency_s", 0.0)
        else:
            assert d == (a["parallel_latency_s"] if par else a["latency_s"]) or d == 0.0
        if d > 0:
            need = held(a, par, units, resources, blocks_all)
            assert dict(s.held[v]) == {k: n for k, n in need.items() if n}, (v, s.held[v], need)
            intervals.append((s.start_s[v], s.start_s[v] + d, need, s.core_ids[v], par))
        energy += a.get("parallel_energy_j" if par else "energy_j", 0.0)
    for u, v in g.edges:
        assert s.start_s[u] + s.duration_s[u] <= s.start_s[v] + eps, (u, v)
    for t0, _, _, _, _ in intervals:
        for kind, cap in caps.items():
            used = sum(n[kind] for a, b, n, _, _ in intervals if a <= t0 < b)
            assert used <= cap, (t0, kind, used)
    singles = [
        (a, b, set(lbl.replace(",", "+").split("+")))
        for a, b, _, lbl, par in intervals
        if not par and lbl
    ]
    for k, (a, b, lab) in enumerate(singles):
        for a2, b2, lab2 in singles[k + 1 :]:
            if lab & lab2:
                assert b <= a2 + eps or b2 <= a + eps, (lab, lab2)
    ends = [s.start_s[v] + s.duration_s[v] for v in g.nodes]
    assert s.makespan_s == pytest.approx(max(ends, default=0.0), rel=1e-12, abs=1e-15)
    assert s.energy_j == pytest.approx(energy, rel=1e-9, abs=1e-15)
    assert set(s.utilisation) == set(s.peak_utilisation) == set(caps)
    for x in (*s.utilisation.values(), *s.peak_utilisation.values()):
        assert 0.0 <= x <= 1.0 + 1e-9


@st.composite
def dags(draw, max_ops=6, channel=0):
    """Random op graphs of up to ``max_ops`` ops; with ``channel`` > 0, some ops (``Nop``
    collectives among them) hold 1..``channel`` units of a further kind "channel"."""
    n = draw(st.integers(1, max_ops))
    g = nx.DiGraph()
    for i in range(n):
        core = draw(st.sampled_from(CORES))
        lat = draw(st.integers(0 if core == "Nop" else 1, 9)) * US
        attrs = {"units": node_units(core), "latency_s": lat, "energy_j": float(i + 1)}
        if core != "Nop":
            attrs["parallel_latency_s"] = draw(st.integers(1, 9)) * US
            attrs["parallel_energy_j"] = float(10 * (i + 1))
        if channel and draw(st.booleans()):
            attrs["demand"] = {"channel": draw(st.integers(1, channel))}
        g.add_node(f"op{i}", **attrs)
    for i in range(n):
        for j in range(i + 1, n):
            if draw(st.booleans()) and draw(st.booleans()):
                g.add_edge(f"op{i}", f"op{j}")
    return g


CHANNEL = "channel:tp"  # the tensor-parallel group's communication channel, one unit


@st.composite
def collective_dags(draw, max_ops=4, max_collectives=3):
    """Random op graphs of compute ops and collectives the way a framework profile builds
    them: each collective a ``Nop`` holding the one unit of :data:`CHANNEL`, behind some
    compute ops and before others, and, if asynchronous, a ``TCandVC`` compute-share op
    between the same neighbours."""
    g = draw(dags(max_ops=max_ops))
    compute = list(g.nodes)
    for c in range(draw(st.integers(1, max_collectives))):
        name = f"coll{c}"
        g.add_node(name, latency_s=draw(st.integers(1, 9)) * US, demand={CHANNEL: 1})
        preds = [v for v in compute if draw(st.booleans()) and draw(st.booleans())]
        succs = [
            v
            for v in compute
            if v not in preds
            and not any(nx.has_path(g, v, p) for p in preds)
            and draw(st.booleans())
        ]
        g.add_edges_from((p, name) for p in preds)
        g.add_edges_from((name, v) for v in succs)
        if draw(st.booleans()):
            share = f"{name}.share"
            lat = draw(st.integers(1, 9))
            g.add_node(
                share,
                units=node_units("TCandVC"),
                latency_s=lat * US,
                parallel_latency_s=lat * US / 2,
            )
            g.add_edges_from((p, share) for p in preds)
            g.add_edges_from((share, v) for v in succs)
    return g


@st.composite
def branchy(draw):
    """A fork, k copies of one random branch (a short chain or a diamond-free pair), a
    join, and maybe a side op: the symmetry-breaking constraints get exercised."""
    g = nx.DiGraph()
    g.add_node("fork", units=node_units("VC"), latency_s=1 * US, parallel_latency_s=1 * US)
    g.add_node("join", units=node_units("VC"), latency_s=1 * US, parallel_latency_s=1 * US)
    copies = draw(st.integers(2, 3))
    length = draw(st.integers(1, 2 if copies == 2 else 1))
    spec = [
        (draw(st.sampled_from(CORES[:3])), draw(st.integers(1, 9)), draw(st.integers(1, 9)))
        for _ in range(length)
    ]
    for c in range(copies):
        prev = "fork"
        for k, (core, lat, par) in enumerate(spec):
            name = f"b{c}.{k}"
            g.add_node(
                name, units=node_units(core), latency_s=lat * US, parallel_latency_s=par * US
            )
            g.add_edge(prev, name)
            prev = name
        g.add_edge(prev, "join")
    if draw(st.booleans()):
        g.add_node(
            "side",
            units=node_units("TC"),
            latency_s=draw(st.integers(1, 9)) * US,
            parallel_latency_s=draw(st.integers(1, 9)) * US,
        )
        g.add_edge("fork", "side")
    return g


def graph(spec, edges=()):
    """An op graph from (name, core type, latency_s, parallel_latency_s) rows and edges."""
    g = nx.DiGraph()
    for name, core, lat, par in spec:
        g.add_node(name, units=node_units(core), latency_s=lat, parallel_latency_s=par)
    g.add_edges_from(edges)
    return g


def assert_optimal(makespan, best):
    """Feasible schedules cannot beat the optimum; the solver stops within its MIP gap."""
    assert best * (1 - 1e-9) <= makespan <= best * (1 + DEFAULT_MIP_GAP) + 1e-15


def run_exact(g, units, blocks_all, resources=None, **kw):
    """Solve, check the schedule, and compare its makespan with the brute force."""
    s = solve_schedule(
        g,
        units,
        parallel_blocks_all=blocks_all,
        time_limit_s=60.0,
        resources=resources,
        **kw,
    )
    check_schedule(g, s, units, blocks_all, resources)
    assert s.status == ScheduleStatus.OPTIMAL
    assert_optimal(s.makespan_s, brute_force(g, units, blocks_all, resources))
    return s


def run_list(g, units, blocks_all, resources=None):
    """The list schedule alone (no search, no MIP): checked, and never below the brute force."""
    s = solve_schedule(
        g,
        units,
        solver="list",
        search_nodes=0,
        parallel_blocks_all=blocks_all,
        resources=resources,
    )
    check_schedule(g, s, units, blocks_all, resources)
    assert s.makespan_s >= brute_force(g, units, blocks_all, resources) * (1 - 1e-9)
    return s


def cost_bound(g, units, blocks_all, channel=None):
    """:func:`ilp.makespan_lower_bound` of ``g`` from its ops' units, times and edges (what
    the sweep reads); with ``channel``, ops with a ``demand`` hold that channel."""
    order = list(nx.topological_sort(g))
    pos = {v: k for k, v in enumerate(order)}
    a = g.nodes
    return makespan_lower_bound(
        [a[v].get("units", {}) for v in order],
        [a[v]["latency_s"] for v in order],
        [a[v].get("parallel_latency_s", a[v]["latency_s"]) for v in order],
        [[pos[p] for p in g.predecessors(v)] for v in order],
        units,
        parallel_blocks_all=blocks_all,
        channels=[channel if a[v].get("demand") else None for v in order],
    )
