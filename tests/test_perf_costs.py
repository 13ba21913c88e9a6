"""The operator cost model: closed forms, bounds, monotonicity, caching and errors."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from budget import budget
from hypothesis import example, given
from hypothesis import strategies as st

from arch_space.accelerator import Accelerator, Cluster
from arch_space.area import mac_energy_pj, tensor_load_power_w
from arch_space.perf import (
    BOUNDS,
    OpCost,
    PerfSettings,
    costs,
    default_settings,
    gemm_report,
    matmul_cycles,
    op_costs,
)
from arch_space.perf.costs import evaluate_ops, op_key
from arch_space.perf.device import MODELLED
from arch_space.perf.gemm import GemmShape, gemm_hbm_bytes
from arch_space.perf.multinode import nic_busbw_fraction
from arch_space.tech import tech_node
from phaze_common.errors import ConfigError
from workloads.ops import CollectiveKind, CoreType, Op, OpGraph, OpKind

TECH = tech_node(7)
STATIC_W = 20.0
CLUSTER = Cluster(devices=16, devices_per_node=8)
SETTINGS = default_settings()
MIB = 2**20


def _acc(**kw) -> Accelerator:
    base = dict(
        num_tc=8,
        tc_rows=128,
        tc_cols=128,
        num_vc=2,
        vc_lanes=128,
        glb_bytes=32 * MIB,
        hbm_bytes=32 * 2**30,
        hbm_bandwidth_bytes_per_s=1.2e12,
        clock_hz=1.05e9,
    )
    base.update(kw)
    return Accelerator(**base)


def _gemm(m, k, n, batch=1, name="g", core=CoreType.TC, epilogue=0) -> Op:
    return Op(
        name=name,
        kind=OpKind.BATCHED_MATMUL if batch > 1 else OpKind.MATMUL,
        core=core,
        flops=2 * batch * m * k * n,
        bytes_read=2 * batch * (m * k + k * n),
        bytes_written=2 * batch * m * n,
        batch=batch,
        m=m,
        k=k,
        n=n,
        epilogue_flops=epilogue,
    )


def _vector(kind, elements, flops_per_element=1, name="v") -> Op:
    return Op(
        name=name,
        kind=kind,
        core=CoreType.VC,
        flops=flops_per_element * elements,
        bytes_read=2 * elements,
        bytes_written=2 * elements,
        elements=elements,
    )


# the op model's own rates: a chip's sustained caps are tested in test_perf_device.py
def _terms(ops, acc, parallel=True, cluster=CLUSTER, tech=TECH, static_w=STATIC_W):
    keys = [op_key(o) for o in ops]
    one, every = evaluate_ops(keys, acc, cluster, tech, static_w, SETTINGS, MODELLED)
    return every if parallel else one


def _table(ops, acc, **kw):
    kw.setdefault("device", MODELLED)
    return op_costs(OpGraph(tuple(ops), ()), acc, CLUSTER, tech=TECH, static_w=STATIC_W, **kw)


dims = st.integers(1, 6000)
pow2 = st.sampled_from([2, 4, 8, 16, 32, 64, 128, 256])
designs = st.builds(
    _acc,
    num_tc=st.sampled_from([1, 2, 4, 8, 64, 432, 4096]),
    tc_rows=pow2,
    tc_cols=pow2,
    glb_bytes=st.sampled_from([2, 8, 32, 128]).map(lambda x: x * MIB),
    hbm_bandwidth_bytes_per_s=st.sampled_from([0.4e12, 1.2e12, 3.2e12]),
)


# --- closed forms -------------------------------------------------------------------------


@given(rows=pow2, cols=pow2, m=st.integers(1, 5000), kf=st.integers(1, 20), nf=st.integers(1, 20))
def test_single_core_compute_is_matmul_cycles(rows, cols, m, kf, nf):
    acc = _acc(tc_rows=rows, tc_cols=cols, glb_bytes=128 * MIB)
    t = _terms([_gemm(m, kf * rows, nf * cols, batch=3)], acc, parallel=False)
    cycles = t.compute_s[0] * acc.clock_hz
    assert cycles == pytest.approx(3 * matmul_cycles(rows, cols, m, kf * rows, nf * cols))


@given(cores=st.sampled_from([1, 2, 4, 8, 16]), waves=st.integers(1, 8), m=st.integers(1, 4000))
def test_parallel_compute_splits_exact_tiles_evenly(cores, waves, m):
    acc = _acc(num_tc=cores, tc_rows=16, tc_cols=16, glb_bytes=128 * MIB)
    n = 16 * cores * waves  # column folds divide evenly over the cores
    t = _terms([_gemm(m, 64, n)], acc)
    assert t.compute_s[0] * acc.clock_hz == pytest.approx(matmul_cycles(16, 16, m, 64, n) / cores)


@given(
    kf=st.integers(1, 600),
    nf=st.integers(1, 40),
    cores=st.sampled_from([8, 64, 528]),
    m=st.integers(1, 16),
)
def test_a_gemm_with_fewer_output_tiles_than_cores_splits_k(kf, nf, cores, m):
    # a decode step's GEMV: its output tiles cannot fill the cores, so K is split over them
    # (brute force over the splits of m and of K, on a buffer too fast to matter)
    acc = _acc(num_tc=cores, tc_rows=16, tc_cols=32, glb_bytes=4096 * MIB)
    t = _terms([_gemm(m, 16 * kf, 32 * nf)], acc)

    def cycles(s, q):
        return -(-nf * s * q // cores) * -(-kf // q) * (2 * 16 + 32 + -(-m // s) - 2)

    m_splits = [cycles(s, 1) for s in (2**i for i in range(17)) if s <= m]
    k_splits = [cycles(1, q) for q in (2**i for i in range(1, 17)) if q <= kf]
    best = min(m_splits + (k_splits if nf < cores else []))
    assert t.compute_s[0] * acc.clock_hz == pytest.approx(best)


def test_a_decode_gemv_on_many_cores_is_memory_bound():
    h100 = dict(num_tc=528, tc_rows=16, tc_cols=32, glb_bytes=50 * MIB, clock_hz=1.83e9)
    acc = _acc(**h100, hbm_bandwidth_bytes_per_s=3.35e12)
    gemv = _gemm(1, 8192, 1024)  # Llama 2 70B's Q projection at t = 8, one token
    t = _terms([gemv], acc)
    hbm_s = 2 * (8192 * 1024 + 8192 + 1024) / (3.35e12 * SETTINGS.hbm_efficiency)
    assert t.latency_s[0] == pytest.approx(hbm_s + SETTINGS.issue_overhead_s, rel=1e-3)
    assert BOUNDS[t.bound_code[0]] == "memory"


def test_collectives_follow_the_ring_formulas():
    nbytes = 64 * MIB
    acc = _acc()
    ops = [
        Op(
            "ar4",
            OpKind.COLLECTIVE,
            CoreType.NOP,
            collective=CollectiveKind.ALL_REDUCE,
            collective_bytes=nbytes,
            group=4,
        ),
        Op(
            "rs4",
            OpKind.COLLECTIVE,
            CoreType.NOP,
            collective=CollectiveKind.REDUCE_SCATTER,
            collective_bytes=nbytes,
            group=4,
        ),
        Op(
            "ag4",
            OpKind.COLLECTIVE,
            CoreType.NOP,
            collective=CollectiveKind.ALL_GATHER,
            collective_bytes=nbytes,
            group=4,
        ),
        Op(
            "ar16",
            OpKind.COLLECTIVE,
            CoreType.NOP,
            collective=CollectiveKind.ALL_REDUCE,
            collective_bytes=nbytes,
            group=16,
        ),
        Op(
            "ar1",
            OpKind.COLLECTIVE,
            CoreType.NOP,
            collective=CollectiveKind.ALL_REDUCE,
            collective_bytes=nbytes,
            group=1,
        ),
    ]
    t = _terms(ops, acc)
    bw_in, lat_in = CLUSTER.group_link(4)
    # across nodes the ring drives the NICs of its 8 members in each node (the one link model
    # of every collective, arch_space.perf.multinode), never faster than inside the node
    bw_out = min(CLUSTER.group_link(16)[0] * 8 * nic_busbw_fraction(), bw_in)
    lat_out = CLUSTER.group_link(16)[1]
    assert t.latency_s[0] == pytest.approx(lat_in + 2 * 3 / 4 * nbytes / bw_in)
    assert t.latency_s[1] == pytest.approx(lat_in + 3 / 4 * nbytes / bw_in)
    assert t.latency_s[2] == t.latency_s[1]
    assert t.latency_s[3] == pytest.approx(lat_out + 2 * 15 / 16 * nbytes / bw_out)
    assert t.latency_s[4] == 0 and t.energy_j[4] == 0
    assert [BOUNDS[b] for b in t.bound_code] == ["network"] * 4 + ["none"]
    # Inter-node bits cost more than intra-node bits.
    per_byte_in = (t.energy_j[0] - STATIC_W * t.latency_s[0]) / (2 * 3 / 4 * nbytes)
    per_byte_out = (t.energy_j[3] - STATIC_W * t.latency_s[3]) / (2 * 15 / 16 * nbytes)
    assert per_byte_out > per_byte_in


def test_collective_costs_the_same_on_one_core_and_all():
    op = Op(
        "ar",
        OpKind.COLLECTIVE,
        CoreType.NOP,
        collective=CollectiveKind.ALL_REDUCE,
        collective_bytes=MIB,
        group=8,
    )
    table = _table([op], _acc())
    assert table.single(0) == table.parallel(0)


def test_empty_nop_costs_nothing():
    table = _table([Op("join", OpKind.NOP, CoreType.NOP)], _acc())
    assert table.single(0) == OpCost(0.0, 0.0) == table.parallel(0)
    assert table.bound(0) == "none"


# --- vector ops ---------------------------------------------------------------------------


def test_vector_op_is_memory_bound_when_lanes_are_plenty():
    acc = _acc(num_vc=64, vc_lanes=1024)
    op = _vector(OpKind.ELEMENTWISE, 2**26)
    t = _terms([op], acc)
    sustained = acc.hbm_bandwidth_bytes_per_s * SETTINGS.hbm_efficiency
    hbm_s = (op.bytes_read + op.bytes_written) / sustained
    assert BOUNDS[t.bound_code[0]] == "memory"
    assert t.latency_s[0] == pytest.approx(hbm_s + SETTINGS.issue_overhead_s)


def test_vector_op_is_lane_bound_when_work_per_element_is_high():
    acc = _acc(num_vc=1, vc_lanes=8)
    op = _vector(OpKind.ELEMENTWISE, 2**20, flops_per_element=50)
    t = _terms([op], acc)
    assert BOUNDS[t.bound_code[0]] == "compute"
    assert t.latency_s[0] == pytest.approx(
        op.flops / (8 * acc.clock_hz) + SETTINGS.issue_overhead_s
    )


def test_softmax_and_norm_pass_over_their_rows_more_than_elementwise():
    acc = _acc(glb_bytes=2 * MIB, num_vc=64, vc_lanes=1024)
    ops = [_vector(k, 2**26) for k in (OpKind.ELEMENTWISE, OpKind.NORM, OpKind.SOFTMAX)]
    t = _terms(ops, acc)
    assert t.buffer_s[0] < t.buffer_s[1] < t.buffer_s[2]
    assert t.energy_j[0] < t.energy_j[1] < t.energy_j[2]
    assert len(set(t.hbm_bytes)) == 1  # the extra passes hit the buffer, not HBM


def test_more_vector_cores_are_faster_on_lane_bound_ops():
    op = _vector(OpKind.SOFTMAX, 2**22, flops_per_element=20)
    one = _table([op], _acc(num_vc=1)).parallel(0).latency_s
    four = _table([op], _acc(num_vc=4)).parallel(0).latency_s
    assert four < one


# --- GEMMs --------------------------------------------------------------------------------


def test_fused_epilogue_overlaps_until_it_dominates():
    acc = _acc(num_vc=1, vc_lanes=1024)
    plain = _gemm(2048, 2048, 2048)
    small = dataclasses.replace(plain, core=CoreType.TC_AND_VC, epilogue_flops=2048 * 2048)
    big = dataclasses.replace(plain, core=CoreType.TC_AND_VC, epilogue_flops=2048**3)
    t = _terms([plain, small, big], acc)
    assert t.latency_s[1] == pytest.approx(t.latency_s[0])
    assert t.energy_j[1] > t.energy_j[0]  # the epilogue's lane operations cost energy
    assert t.latency_s[2] == pytest.approx(
        2048**3 / (1024 * acc.clock_hz) + SETTINGS.issue_overhead_s
    )


def test_gemv_is_memory_bound_and_big_gemm_compute_bound():
    acc = _acc(num_tc=64, tc_rows=32, tc_cols=32)
    assert gemm_report(acc, 1, 8192, 8192, tech=TECH, static_w=STATIC_W).bound == "memory"
    assert gemm_report(acc, 8192, 8192, 8192, tech=TECH, static_w=STATIC_W).bound == "compute"


def test_many_cores_on_a_small_buffer_are_buffer_bound():
    acc = _acc(num_tc=256, glb_bytes=2 * MIB)
    assert gemm_report(acc, 8192, 8192, 8192, tech=TECH, static_w=STATIC_W).bound == "buffer"


def test_hbm_traffic_is_compulsory_when_everything_fits():
    g = GemmShape(*(np.array([v], dtype=float) for v in (2, 256, 512, 384)))
    reads, writes = gemm_hbm_bytes(g, 128, 128, 128 * MIB, 2, 4)
    assert reads[0] == 2 * 2 * (256 * 512 + 512 * 384)
    assert writes[0] == 2 * 2 * 256 * 384


def test_gemm_report_fields_agree():
    acc = _acc()
    r = gemm_report(acc, 4096, 1024, 2048, batch=2, tech=TECH, static_w=STATIC_W)
    assert r.flops_per_s == pytest.approx(2 * 2 * 4096 * 1024 * 2048 / r.latency_s)
    assert r.flops_per_s <= acc.peak_flops
    assert r.latency_s == pytest.approx(
        max(r.compute_s, r.hbm_s, r.buffer_s) + SETTINGS.issue_overhead_s
    )
    assert r.energy_j > STATIC_W * r.latency_s


@pytest.mark.parametrize(("field", "value"), [("m", 0), ("k", -3), ("batch", 1.5)])
def test_gemm_report_rejects_bad_dims(field, value):
    kw = {"m": 8, "k": 8, "n": 8, "batch": 1, field: value}
    with pytest.raises(ConfigError, match=f"gemm: {field} = {value!r} must be positive"):
        gemm_report(
            _acc(), kw["m"], kw["k"], kw["n"], batch=kw["batch"], tech=TECH, static_w=STATIC_W
        )


# --- properties ---------------------------------------------------------------------------


@given(acc=designs, m=dims, k=dims, n=dims, batch=st.integers(1, 8))
@example(acc=_acc(num_tc=4096, tc_rows=2, tc_cols=2, glb_bytes=2 * MIB), m=1, k=1, n=1, batch=1)
@budget(150)
def test_latency_never_below_peak_or_bandwidth(acc, m, k, n, batch):
    op = _gemm(m, k, n, batch)
    vec = _vector(OpKind.SOFTMAX, m * n, flops_per_element=batch)
    compulsory = 2 * batch * (m * k + k * n + m * n)
    for parallel, cores in ((False, 1), (True, acc.num_tc)):
        t = _terms([op, vec], acc, parallel=parallel)
        peak = 2 * acc.tc_rows * acc.tc_cols * cores * acc.clock_hz
        assert t.latency_s[0] >= op.flops / peak * (1 - 1e-12)
        assert t.hbm_bytes[0] >= compulsory
        assert t.latency_s[0] >= t.hbm_bytes[0] / acc.hbm_bandwidth_bytes_per_s * (1 - 1e-12)
        lanes = acc.vc_lanes * (acc.num_vc if parallel else 1)
        assert t.latency_s[1] >= vec.flops / (lanes * acc.clock_hz) * (1 - 1e-12)
        vec_bytes = vec.bytes_read + vec.bytes_written
        assert t.latency_s[1] >= vec_bytes / acc.hbm_bandwidth_bytes_per_s * (1 - 1e-12)


@given(
    acc=designs,
    m=dims,
    k=dims,
    n=dims,
    batch=st.integers(1, 8),
    extra=st.sampled_from([2, 3, 8, 100]),
)
@budget(150)
def test_more_cores_never_slower(acc, m, k, n, batch, extra):
    ops = [_gemm(m, k, n, batch), _vector(OpKind.SOFTMAX, m * n, 5)]
    base = _table(ops, acc)
    more = _table(
        ops, dataclasses.replace(acc, num_tc=acc.num_tc * extra, num_vc=acc.num_vc * extra)
    )
    assert np.all(more.parallel_latency_s <= base.parallel_latency_s)
    assert np.all(base.parallel_latency_s <= base.latency_s)


@given(
    acc=designs, m=dims, k=dims, n=dims, batch=st.integers(1, 8), factor=st.sampled_from([2, 4, 64])
)
@budget(150)
def test_larger_buffer_never_more_hbm_traffic(acc, m, k, n, batch, factor):
    op = _gemm(m, k, n, batch)
    small = _terms([op], acc)
    large = _terms([op], dataclasses.replace(acc, glb_bytes=acc.glb_bytes * factor))
    assert large.hbm_bytes[0] <= small.hbm_bytes[0]
    assert large.latency_s[0] <= small.latency_s[0] * (1 + 1e-12)


@given(
    acc=designs,
    m=dims,
    k=dims,
    n=dims,
    batch=st.integers(1, 8),
    elements=st.integers(1, 10**8),
    flops_per_element=st.integers(1, 30),
)
@budget(150)
def test_energy_grows_with_work(acc, m, k, n, batch, elements, flops_per_element):
    for parallel in (False, True):
        t = _terms(
            [
                _gemm(m, k, n, batch),
                _gemm(m, k, n, 2 * batch),
                _vector(OpKind.NORM, elements, flops_per_element),
                _vector(OpKind.NORM, 2 * elements, flops_per_element),
            ],
            acc,
            parallel=parallel,
        )
        assert t.energy_j[1] > t.energy_j[0]
        assert t.energy_j[3] > t.energy_j[2]


# --- tables, caching, settings -------------------------------------------------------------


def test_table_is_by_content_not_by_position_or_name():
    acc = _acc()
    a, b = _gemm(512, 1024, 2048, name="a"), _vector(OpKind.SOFTMAX, 10**6, name="b")
    twin = dataclasses.replace(a, name="a-twin")
    t1 = _table([a, b, twin], acc)
    t2 = _table([b, twin, a], acc)
    assert t1.names == ("a", "b", "a-twin")
    assert t1.single(0) == t1.single(2) == t2.single(1) == t2.single(2)
    assert t1.parallel(1) == t2.parallel(0)
    assert t1.bound(t1.index("b")) == t2.bound(0)


def test_table_arrays_are_read_only_and_cached(monkeypatch):
    acc = _acc()
    ops = [_gemm(256, 256, 256)]
    t = _table(ops, acc)
    with pytest.raises(ValueError):
        t.latency_s[0] = 0.0
    calls = []
    evaluate = costs.evaluate_ops
    monkeypatch.setattr(costs, "evaluate_ops", lambda *a: calls.append(a) or evaluate(*a))
    again = _table(ops, dataclasses.replace(acc, name="same hardware, other name"))
    assert again.single(0) == t.single(0)
    assert calls == []  # the name does not change a cost: served from the cache
    _table([_gemm(263, 257, 251)], acc)  # a shape no other test costs
    assert len(calls) == 1


def test_table_index_suggests_nearest_name():
    t = _table([_gemm(8, 8, 8, name="qkv_proj")], _acc())
    with pytest.raises(ConfigError, match="unknown op 'qkv_prj'; did you mean qkv_proj"):
        t.index("qkv_prj")


def test_default_energy_inputs_come_from_the_node():
    acc = _acc()
    graph = OpGraph((_gemm(64, 64, 64),), ())
    from arch_space.area import static_power_w

    explicit = op_costs(graph, acc, CLUSTER, tech=TECH, static_w=static_power_w(acc, TECH))
    assert op_costs(graph, acc, CLUSTER).single(0) == explicit.single(0)


def test_settings_reject_unknown_keys_and_bad_values():
    with pytest.raises(
        ConfigError, match="unknown key 'softmax_pass'; did you mean softmax_passes"
    ):
        PerfSettings.from_mapping({"softmax_pass": 3}, source="perf.toml")
    with pytest.raises(ConfigError, match=r"issue_overhead_s = -1.0 must be >= 0.*norm_passes = 0"):
        PerfSettings(issue_overhead_s=-1.0, norm_passes=0)
    with pytest.raises(ConfigError, match=r"hbm_efficiency = 1.5 must be <= 1"):
        PerfSettings(hbm_efficiency=1.5)


def test_settings_change_the_model():
    acc = _acc()
    op = _gemm(64, 64, 64)
    slow = dataclasses.replace(SETTINGS, issue_overhead_s=1e-3)
    assert _table([op], acc, settings=slow).single(0).latency_s > 1e-3


def test_energy_parts_are_the_dynamic_energy():
    """compute + memory + network parts = energy - static power x latency, in both modes;
    the compute part of a plain GEMM is exactly MACs x (arithmetic + control + operand
    delivery of 1/rows + 1/cols elements) with the uncore share on top."""
    acc = _acc()
    coll = Op(
        name="ar",
        kind=OpKind.COLLECTIVE,
        core=CoreType.NOP,
        collective=CollectiveKind.ALL_REDUCE,
        collective_bytes=1 << 24,
        group=8,
    )
    t = _table([_gemm(512, 1024, 2048), _vector(OpKind.SOFTMAX, 1 << 20), coll], acc)
    for parts, energy, latency in (
        (t.parts_j, t.energy_j, t.latency_s),
        (t.parallel_parts_j, t.parallel_energy_j, t.parallel_latency_s),
    ):
        assert parts.shape == (3, 3) and np.all(parts >= 0)
        np.testing.assert_allclose(parts.sum(axis=1), energy - STATIC_W * latency, rtol=1e-9)
        operand_bytes = acc.bytes_per_element * (1 / acc.tc_rows + 1 / acc.tc_cols)
        pj = TECH.mac_energy_pj + TECH.control_pj_per_mac + operand_bytes * TECH.operand_pj_per_byte
        uncore = 1 + TECH.overhead_fraction
        assert parts[0, 0] == pytest.approx(512 * 1024 * 2048 * pj * uncore * 1e-12)
        assert parts[2, 2] > 0 and parts[2, 0] == 0


def test_one_mac_energy_everywhere():
    """The op model and the tensor-load power charge a MAC the same energy, uncore share
    included (``area.mac_energy_pj``, which the pruning bound reads)."""
    acc = _acc()
    per_mac = mac_energy_pj(acc, TECH)
    op = _gemm(4096, 4096, 4096)
    one, _ = evaluate_ops([op_key(op)], acc, CLUSTER, TECH, STATIC_W, SETTINGS, MODELLED)
    assert one.parts_j[0][0] == pytest.approx(op.macs * per_mac * 1e-12, rel=1e-12)
    power = tensor_load_power_w(
        TECH,
        num_tc=acc.num_tc,
        tc_rows=acc.tc_rows,
        tc_cols=acc.tc_cols,
        clock_hz=acc.clock_hz,
        bytes_per_element=acc.bytes_per_element,
        area_mm2=0.0,
    )
    assert power == pytest.approx(acc.macs_per_cycle * acc.clock_hz * per_mac * 1e-12, rel=1e-12)
