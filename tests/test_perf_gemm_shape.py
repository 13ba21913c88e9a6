"""GEMM rate by shape: the measured table, its interpolation and its effect on op costs."""

import dataclasses
import doctest

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import arch_space.perf.gemm_shape as gemm_shape
from arch_space import Cluster
from arch_space.perf import op_costs
from arch_space.perf.device import generic_profile, preset_profile, profile_from_mapping
from arch_space.perf.gemm_shape import GemmShapeTable
from arch_space.presets import preset
from phaze_common.errors import ConfigError
from workloads import CoreType, OpGraph, OpKind
from workloads.ops import Op

H100 = preset_profile("h100")
SIZES = (256, 512, 1024, 2048, 4096)


def _rate(m, n, k):
    """The shipped table's TFLOP/s at a grid point (XLA's sm_90 table, as devices.toml lists it)."""
    table = H100.gemm_shapes
    i, j, c = (SIZES.index(x) for x in (m, n, k))
    return table.rates_flops_per_s[(i * len(SIZES) + j) * len(SIZES) + c] / 1e12


def test_docstring_examples():
    assert doctest.testmod(gemm_shape).failed == 0


def test_shipped_h100_table_is_xlas_measurement():
    table = H100.gemm_shapes
    assert table is not None and table.sizes == SIZES
    assert _rate(4096, 4096, 4096) == 783.3
    assert _rate(4096, 2048, 2048) == 716.1
    assert _rate(1024, 1024, 1024) == 236.3
    assert _rate(256, 4096, 4096) == 412.0  # a decode step's GEMM at 256 sequences
    assert _rate(4096, 4096, 256) == 392.2
    # the largest measured shape is within 1.2 % of the best-shape (mamf-finder) rate
    assert _rate(4096, 4096, 4096) / 792.1 == pytest.approx(1.0, abs=0.012)
    assert preset_profile("a100").gemm_shapes is None


def test_designs_take_the_measured_table():
    # a design's share is the measured GPUs' mean; its small GEMMs lose what the H100's do
    assert generic_profile().gemm_shapes == H100.gemm_shapes
    assert preset_profile("tpuv4").gemm_shapes is None


@pytest.mark.parametrize("shape", [(m, n, k) for m in SIZES for n in SIZES for k in SIZES])
def test_grid_points_are_the_measured_ratio(shape):
    assert float(H100.gemm_shapes.factor(*shape)) == pytest.approx(
        _rate(*shape) / _rate(4096, 4096, 4096), rel=1e-12
    )


dim = st.floats(min_value=64, max_value=65536)


@given(dim, dim, dim)
def test_factor_stays_within_the_measured_range_and_holds_at_the_edges(m, n, k):
    table = H100.gemm_shapes
    grid = np.asarray(table.rates_flops_per_s) / table.rates_flops_per_s[-1]
    f = float(table.factor(m, n, k))
    assert grid.min() - 1e-12 <= f <= grid.max() + 1e-12
    clamp = [min(max(x, 256), 4096) for x in (m, n, k)]
    assert f == pytest.approx(float(table.factor(*clamp)), rel=1e-12)


def test_gemms_below_1024_rows_lose_what_the_table_measured():
    # held at the 1024 edge before the 256 and 512 rows: 0.60 of the best shape, not 0.53
    assert float(H100.gemm_shapes.factor(256, 4096, 4096)) == pytest.approx(412.0 / 783.3)
    assert float(H100.gemm_shapes.factor(128, 8192, 8192)) == pytest.approx(412.0 / 783.3)


def test_halfway_in_log_is_the_mean_of_the_neighbours():
    # geometric midpoint of m between 2048 and 4096, on grid n and k
    f = float(H100.gemm_shapes.factor(2048 * 2**0.5, 2048, 2048))
    assert f == pytest.approx((_rate(2048, 2048, 2048) + _rate(4096, 2048, 2048)) / 2 / 783.3)


def _gemm_s(m, n, k, device, fmt="bf16"):
    op = Op("g", OpKind.MATMUL, CoreType.TC, flops=2 * m * n * k, m=m, k=k, n=n, fmt=fmt)
    t = op_costs(OpGraph((op,), ()), preset("h100"), Cluster(devices=8), device=device)
    return float(t.parallel_latency_s[0])


def test_small_bf16_gemms_run_at_their_shapes_rate():
    plain = dataclasses.replace(H100, gemm_shapes=None)
    big = (16384, 16384, 16384)
    assert _gemm_s(*big, H100) == pytest.approx(_gemm_s(*big, plain), rel=1e-12)
    # (4096, 2048, 2048), a 1.7B model's attention projection at 4096 tokens: compute-bound
    slow, fast = _gemm_s(4096, 2048, 2048, H100), _gemm_s(4096, 2048, 2048, plain)
    issue = 1e-6  # arch_space/data/perf.toml issue_overhead_s
    assert (slow - issue) / (fast - issue) == pytest.approx(783.3 / 716.1, rel=1e-3)


def test_fp8_gemms_keep_their_own_share():
    plain = dataclasses.replace(H100, gemm_shapes=None)
    assert _gemm_s(4096, 2048, 2048, H100, "fp8") == _gemm_s(4096, 2048, 2048, plain, "fp8")


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"sizes": [2048, 1024], "flops_per_s": [1.0] * 8}, "ascending"),
        ({"sizes": [1024, 2048], "flops_per_s": [1.0] * 7}, "must list 8 positive rates"),
        ({"sizes": [1024, 2048], "flops_per_s": [1.0] * 7 + [-1.0]}, "positive rates"),
        ({"sizes": [1024, 2048], "flops_per_s": [1.0] * 8, "speed": 1}, "unknown keys speed"),
    ],
)
def test_bad_tables_are_one_error(table, message):
    with pytest.raises(ConfigError, match=message):
        profile_from_mapping("h100", {"gemm_shapes": table}, "calibration [h100]")


def test_a_good_table_loads():
    p = profile_from_mapping(
        "h100", {"gemm_shapes": {"sizes": [1, 2], "flops_per_s": [1.0] * 8}}, "c [h100]"
    )
    assert p.gemm_shapes == GemmShapeTable((1.0, 2.0), (1.0,) * 8)
