"""Resources as data: the scheduler knows the kinds of compute unit only by name and count.

A third kind of unit (a DMA engine that runs the elementwise ops) is costed by the op model
like the tensor and vector cores and scheduled with no change to ``ilp``; its schedules, and
those of random graphs on kinds of any name, match the brute force of ``ilp_oracle``.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import networkx as nx
import pytest
from budget import budget
from hypothesis import given
from hypothesis import strategies as st
from ilp_oracle import US, brute_force, check_schedule, run_exact, run_list

from arch_space import area_breakdown_mm2, area_mm2, describe, design_id, peak_power_w
from arch_space.accelerator import Cluster, ComputeUnit
from arch_space.area import with_uncore
from arch_space.perf import default_settings, op_costs
from arch_space.presets import preset
from arch_space.tech import tech_node
from ilp import ScheduleStatus, pass_schedule, solve_schedule
from ilp.timing import channels, costed_graph
from phaze.cli.arch_cmd import render_accelerator
from phaze_common.errors import ConfigError
from workloads.ops import CoreType, Op, OpGraph, OpKind

ILP = Path(__file__).resolve().parents[1] / "ilp"
# What would tie the scheduler to the two kinds of core the op model knows (the
# tensor-parallel dimension is no kind of unit).
_NAMED = re.compile(
    r"\b(TC|VC|TCandVC|Nop|num_tc|num_vc|tc_rows|tc_cols|vc_lanes)\b|tensor(?![ -]parallel)"
    r"|vector",
    re.IGNORECASE,
)

DMA = ComputeUnit(
    "DMA", count=2, rows=1, cols=64, runs=("elementwise",), pj_per_op=0.4, area_mm2=0.3
)
BASE = dataclasses.replace(preset("tpuv4"), name="")  # a design no preset profile matches
ONE = Cluster(devices=1)


def _acc():
    return dataclasses.replace(BASE, extra_units=(DMA,))


def _matmul(name, m):
    return Op(name, OpKind.MATMUL, CoreType.TC, flops=2 * m**3, bytes_read=4 * m * m,
              bytes_written=2 * m * m, m=m, k=m, n=m)  # fmt: skip


def _vector(name, kind, elements):
    return Op(name, kind, CoreType.VC, flops=elements, bytes_read=2 * elements,
              bytes_written=2 * elements, elements=elements)  # fmt: skip


def _graph() -> OpGraph:
    """Two GEMMs, each followed by an elementwise op (on the DMA engine), joined by a norm."""
    ops = (
        _matmul("mm1", 1024),
        _vector("add1", OpKind.ELEMENTWISE, 2**20),
        _matmul("mm2", 2048),
        _vector("add2", OpKind.ELEMENTWISE, 2**21),
        _vector("norm", OpKind.NORM, 2**20),
    )
    return OpGraph(ops, ((0, 1), (2, 3), (1, 4), (3, 4)))


def test_no_ilp_module_names_a_kind_of_core():
    named = {
        f.name: sorted({m.group(0) for m in _NAMED.finditer(f.read_text(encoding="utf-8"))})
        for f in sorted(ILP.glob("*.py"))
    }
    assert {f: words for f, words in named.items() if words} == {}


def test_a_further_unit_is_costed_like_the_cores():
    acc = _acc()
    table = op_costs(_graph(), acc, ONE)
    units = dict(zip(table.names, table.units, strict=True))
    assert units == {
        "mm1": ("TC",),
        "add1": ("DMA",),
        "mm2": ("TC",),
        "add2": ("DMA",),
        "norm": ("VC",),
    }
    clock = acc.clock_hz  # a design of no preset: no sustained-clock discount
    overhead = default_settings().issue_overhead_s
    tech = tech_node(acc.node_nm)
    k = table.index("add2")
    flops = _graph().ops[k].flops
    # compute-bound on the engine: its operations at one unit's rate, or at both units'
    assert table.latency_s[k] == pytest.approx(flops / (64 * clock) + overhead, rel=1e-12)
    assert table.parallel_latency_s[k] == pytest.approx(flops / (128 * clock) + overhead)
    # its compute energy: operations x the unit's pJ each, with the uncore share
    assert table.parts_j[k][0] == pytest.approx(with_uncore(tech, flops * DMA.pj_per_op) * 1e-12)
    # the norm stays on the vector cores: the same cost as on the design without the engine
    plain = op_costs(_graph(), BASE, ONE)
    n = table.index("norm")
    assert table.latency_s[n] == plain.latency_s[n] and table.energy_j[n] > 0


def test_a_third_kind_is_scheduled_exactly():
    acc = _acc()
    costed = costed_graph(_graph(), acc, ONE)
    assert costed.nodes["add1"]["units"] == {"DMA": 1}
    s = solve_schedule(costed, acc.capacity, resources=channels(costed), time_limit_s=60.0)
    assert dict(s.capacity) == {"TC": 8, "VC": 2, "DMA": 2} and s.core_kinds == ("TC", "VC", "DMA")
    check_schedule(costed, s, dict(acc.capacity))
    assert s.status == ScheduleStatus.OPTIMAL
    best = brute_force(costed, dict(acc.capacity))
    assert best * (1 - 1e-9) <= s.makespan_s <= best * (1 + 1e-4)
    assert s.held["add2"].keys() == {"DMA"} or "add2" in s.parallel
    assert s.utilisation["DMA"] > 0
    # the layer-pass entry point schedules the same problem
    assert pass_schedule(_graph(), acc, ONE, solver="list").makespan_s == pytest.approx(
        s.makespan_s, rel=1e-4
    )


_KINDS = ("A", "B", "C")
_UNITS = ({}, {"A": 1}, {"B": 1}, {"C": 1}, {"A": 1, "C": 1}, {"B": 1, "C": 1})


@st.composite
def _three_kinds(draw, max_ops=6):
    """A random op graph whose ops run on any of three kinds of unit (or several, or none),
    with the units of each kind and whether split ops block the chip."""
    n = draw(st.integers(1, max_ops))
    g = nx.DiGraph()
    for i in range(n):
        units = dict(draw(st.sampled_from(_UNITS)))
        attrs = {"units": units, "latency_s": draw(st.integers(1 if units else 0, 9)) * US}
        if units:
            attrs["parallel_latency_s"] = draw(st.integers(1, 9)) * US
        g.add_node(f"op{i}", **attrs)
    for i in range(n):
        for j in range(i + 1, n):
            if draw(st.booleans()) and draw(st.booleans()):
                g.add_edge(f"op{i}", f"op{j}")
    caps = {k: draw(st.integers(1, 3)) for k in _KINDS}
    return g, caps, draw(st.booleans())


@budget(80, deadline=None)
@given(_three_kinds())
def test_three_kinds_of_any_name_are_scheduled_exactly(case):
    g, caps, blocks_all = case
    run_exact(g, caps, blocks_all, solver="list")
    run_list(g, caps, blocks_all)


def test_the_design_describes_its_further_units():
    acc, plain = _acc(), BASE
    assert [u.kind for u in acc.units] == ["TC", "VC", "DMA"]
    assert dict(acc.capacity) == {"TC": 8, "VC": 2, "DMA": 2}
    parts = area_breakdown_mm2(acc)
    assert parts["extra_units"] == pytest.approx(2 * 0.3)
    assert "extra_units" not in area_breakdown_mm2(plain)
    assert area_mm2(acc) == pytest.approx(area_mm2(plain) + with_uncore(tech_node(7), 0.6))
    assert peak_power_w(acc) > peak_power_w(plain)
    assert design_id(acc) != design_id(plain)
    assert describe(acc)["extra_units"][0]["kind"] == "DMA" and describe(plain)["extra_units"] == []
    text = render_accelerator(describe(acc))
    assert re.search(
        r"DMA units +2 x 1x64 ops/cycle, 0.4 pJ/op, 0.3 mm2 each; runs elementwise", text
    )


@pytest.mark.parametrize(
    ("unit", "message"),
    [
        (dataclasses.replace(DMA, kind="TC"), "kind = 'TC' must be a new name"),
        (dataclasses.replace(DMA, count=3), "dies = 2 must divide count = 3"),
        (dataclasses.replace(DMA, runs=("collective",)), "runs 'collective', which is not one of"),
        (dataclasses.replace(DMA, runs=()), "runs = () must name op kinds it runs"),
        (dataclasses.replace(DMA, pj_per_op=0.0), "pj_per_op = 0.0 must be a positive number"),
        (dataclasses.replace(DMA, rows=0), "rows = 0 must be a positive integer"),
    ],
)
def test_bad_further_units_are_named(unit, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        dataclasses.replace(BASE, dies=2, extra_units=(unit,))


def test_two_units_cannot_run_one_op_kind():
    other = dataclasses.replace(DMA, kind="DMA2")
    with pytest.raises(ConfigError, match="runs 'elementwise', which 'DMA' runs already"):
        dataclasses.replace(BASE, extra_units=(DMA, other))
