"""Per-preset sustained rates: the data file, the lookup and their effect on op costs."""

import dataclasses

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from arch_space import Cluster
from arch_space.perf import op_costs
from arch_space.perf.device import (
    MODELLED,
    device_profile,
    generic_profile,
    preset_profile,
    profile_from_mapping,
)
from arch_space.perf.residual import design_clock_residual
from arch_space.presets import preset
from phaze_common.errors import ConfigError
from workloads import CollectiveKind, CoreType, OpGraph, OpKind
from workloads.ops import Op

A100 = preset_profile("a100")


def test_shipped_a100_and_h100_figures():
    assert A100.sustained_tensor_fraction == pytest.approx(267.9 / 312, abs=5e-4)
    assert preset_profile("h100").sustained_tensor_fraction == pytest.approx(792.1 / 989, 5e-4)
    assert set(A100.fitted) <= {"sustained_clock_fraction", "collective_compute_share"}
    assert "phaze validate megatron --fit" in A100.provenance
    assert A100.intra_node.busbw_bytes_per_s[-1] == 234.89e9
    # a preset without measurements gets the generic GEMM cap, never none
    assert preset_profile("tpuv4") == dataclasses.replace(
        MODELLED,
        name="tpuv4",
        sustained_tensor_fraction=generic_profile().sustained_tensor_fraction,
        sustained_clock_fraction=design_clock_residual(),
        board_limit_w=preset_profile("tpuv4").board_limit_w,
    )
    assert preset_profile("tpuv4").sustained_tensor_fraction == 0.830
    # the V100's GEMM share is measured (DeepBench's best fp16 shape, 112.28 of 125 TFLOP/s);
    # its clock and collectives stay the unmeasured chip's
    assert preset_profile("v100") == dataclasses.replace(
        MODELLED,
        name="v100",
        sustained_tensor_fraction=pytest.approx(112.28 / 125, abs=5e-4),
        sustained_clock_fraction=design_clock_residual(),
        board_limit_w=preset_profile("v100").board_limit_w,
        attention_kernels=("unfused",),
    )


def test_the_generic_share_is_the_mean_of_the_measured_ones():
    h100 = preset_profile("h100").sustained_tensor_fraction
    generic = generic_profile()
    assert generic.sustained_tensor_fraction == pytest.approx(
        (A100.sustained_tensor_fraction + h100) / 2, abs=5e-4
    )
    assert generic.fitted == () and generic.intra_node is None
    assert generic.sustained_clock_fraction == 1.0 and generic.collective_compute_share == 0.0


def test_a_preset_keeps_its_profile_without_its_name_or_hbm_size():
    acc = preset("a100")
    assert device_profile(acc) == A100
    assert device_profile(dataclasses.replace(acc, name="", hbm_bytes=1 << 30)) == A100
    assert device_profile(dataclasses.replace(acc, clock_hz=1.5e9)) is generic_profile()


@given(st.floats(1.0, 1e11))
def test_curve_follows_the_measurements(nbytes):
    curve = A100.intra_node
    eff = float(curve.efficiency(np.array([nbytes]), np.array([True]))[0])
    sizes, bws = curve.size_bytes, curve.busbw_bytes_per_s
    if nbytes < sizes[0]:
        # below the smallest measured size the time stays the smallest size's
        assert nbytes / (eff * curve.line_rate_bytes_per_s) == pytest.approx(sizes[0] / bws[0])
    else:
        j = min(np.searchsorted(sizes, nbytes), len(sizes) - 1)
        lo, hi = sorted((bws[max(j - 1, 0)], bws[j]))
        # within the neighbouring measurements, but for the few per cent the curve gives up
        # where a larger size measured a shorter time
        assert lo * 0.99 <= eff * curve.line_rate_bytes_per_s <= hi * (1 + 1e-9)


@given(st.floats(1.0, 1e11), st.floats(1.0, 1e3), st.booleans())
def test_a_larger_collective_or_send_never_takes_less_time(nbytes, factor, all_reduce):
    for curve in (A100.intra_node, preset_profile("h100").intra_node):
        sizes = np.array([nbytes, nbytes * factor])
        eff = curve.efficiency(sizes, np.array([all_reduce] * 2))
        times = sizes / eff
        assert times[1] >= times[0] * (1 - 1e-12)
        p2p = sizes / curve.p2p_efficiency(sizes)
        assert p2p[1] >= p2p[0] * (1 - 1e-12)


def _costs(op, acc, device=None):
    return op_costs(OpGraph((op,), ()), acc, Cluster(devices=8), device=device)


def test_gemms_run_at_most_at_the_sustained_rate():
    acc = preset("a100")
    op = Op("g", OpKind.MATMUL, CoreType.TC, flops=2 * 8192**3, m=8192, k=8192, n=8192)
    for device in (A100, A100.alone(), MODELLED):
        t = float(_costs(op, acc, device).parallel_latency_s[0])
        cap = acc.peak_flops * device.sustained_tensor_fraction * device.sustained_clock_fraction
        assert 2 * 8192**3 / t <= cap * (1 + 1e-12)
    assert float(_costs(op, acc, A100).parallel_latency_s[0]) > float(
        _costs(op, acc, MODELLED).parallel_latency_s[0]
    )


def test_collectives_take_the_measured_bus_bandwidth():
    acc = preset("a100")
    size = 134217728  # a measured point: 176.92 GB/s
    op = Op(
        "ar",
        OpKind.COLLECTIVE,
        CoreType.NOP,
        collective=CollectiveKind.ALL_REDUCE,
        collective_bytes=size,
        group=8,
    )
    t = float(_costs(op, acc).parallel_latency_s[0])
    assert t == pytest.approx(2 * 7 / 8 * size / 176.92e9, rel=1e-9)
    share = dataclasses.replace(op, name="s", kind=OpKind.COMM_SHARE, core=CoreType.TC_AND_VC)
    s = _costs(share, acc)
    assert float(s.parallel_latency_s[0]) == pytest.approx(t * A100.collective_compute_share)
    assert float(s.parallel_energy_j[0]) < float(_costs(op, acc).parallel_energy_j[0])


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"fitted": {"collective_compute_share": 1.5}}, r"fitted: collective_compute_share"),
        ({"fitted": {"sustained_clock_fraction": 0}}, r"must be in \(0, 1\]"),
        ({"fitted": {"vector_speed": 0.5}}, "unknown parameter 'vector_speed'"),
        ({"sustained_tensor_fraction": 2.0}, "sustained_tensor_fraction = 2.0"),
        ({"collective_compute_share": 0.2, "fitted": {"collective_compute_share": 0.3}}, "once"),
        ({"intra_node": {"size_bytes": [2, 1], "busbw_bytes_per_s": [1, 2]}}, "ascending"),
        ({"speed": 1}, "unknown key 'speed'"),
        (
            {"custom_all_reduce": {"devices": 8, "size_bytes": [1, 2], "latency_s": [1e-6]}},
            "latency_s must list a positive time per size_bytes",
        ),
    ],
)
def test_bad_profiles_are_one_error(table, message):
    with pytest.raises(ConfigError, match=message):
        profile_from_mapping("a100", table, "calibration [a100]")


def _all_reduce_s(profile, nbytes, t=8):
    op = Op(
        "ar",
        OpKind.COLLECTIVE,
        CoreType.NOP,
        collective=CollectiveKind.ALL_REDUCE,
        collective_bytes=int(nbytes),
        group=t,
    )
    cluster = Cluster(devices=t, intra_node_bandwidth_bytes_per_s=450e9)
    return float(op_costs(OpGraph((op,), ()), preset("h100"), cluster, device=profile).latency_s[0])


def test_a_serving_engine_all_reduces_at_its_measured_latency_then_at_nccls():
    h100 = preset_profile("h100")
    engine = h100.for_serving()
    assert h100.custom_all_reduce is not None and engine.custom_all_reduce is not None
    # sglang #2904, vLLM's custom all-reduce on 8 H100 at tp 8: 11.8 us at 32 KiB, 45.0 us
    # at 1 MiB; a decode step's 16 KiB all-reduce between the 4 KiB (held at 512 B's 10.1
    # us, the larger time) and the 32 KiB points
    assert _all_reduce_s(engine, 32768) == pytest.approx(11.8e-6)
    assert _all_reduce_s(engine, 1 << 20) == pytest.approx(45.0e-6)
    assert 10.1e-6 < _all_reduce_s(engine, 16384) < 11.8e-6
    # NCCL's curve beyond the kernel's largest measured size, and for the training passes
    for nbytes in (4 << 20, 1 << 30):
        assert _all_reduce_s(engine, nbytes) == pytest.approx(_all_reduce_s(h100, nbytes))
    assert _all_reduce_s(h100, 32768) == pytest.approx(2 * 7 / 8 * 32768 / 1.44e9)
    assert A100.for_serving() == A100  # no measurement of its engine's kernel


def test_a_preset_with_only_fitted_parameters_keeps_the_generic_gemm_share():
    # the TPU v5p's table holds its fitted clock and collective share, no measured GEMM rate:
    # its GEMMs stay at the unmeasured chip's cap, never uncapped
    v5p = preset_profile("tpuv5p")
    assert v5p.fitted == ("sustained_clock_fraction", "collective_compute_share")
    assert v5p.sustained_tensor_fraction == generic_profile().sustained_tensor_fraction
    assert v5p.sustained_clock_fraction == 0.941 and "--fit tpuv5p" in v5p.provenance


def test_attention_kernels_a_chip_runs():
    assert MODELLED.runs_attention("flash") and A100.runs_attention("flash2")
    v100 = preset_profile("v100")
    assert v100.runs_attention("unfused") and not v100.runs_attention("flash")
    assert not v100.runs_attention("flash2")
    for bad in (["flash"], ["unfused", "flash3"]):
        with pytest.raises(ConfigError, match="attention_kernels"):
            profile_from_mapping("x", {"attention_kernels": bad}, "devices.toml [x]")
