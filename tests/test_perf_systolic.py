"""matmul_cycles against its closed form and against SCALE-Sim v3 (dataflow ws)."""

from __future__ import annotations

import contextlib
import io
import itertools
import math

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from arch_space.perf import matmul_cycles
from phaze_common.errors import ConfigError

_SCALESIM_CFG = """[general]
run_name = phaze

[architecture_presets]
ArrayHeight = {rows}
ArrayWidth = {cols}
IfmapSramSzkB = 65536
FilterSramSzkB = 65536
OfmapSramSzkB = 65536
IfmapOffset = 0
FilterOffset = 10000000
OfmapOffset = 20000000
Dataflow = ws
Bandwidth = 10
ReadRequestBuffer = 32
WriteRequestBuffer = 32

[layout]
IfmapCustomLayout = False
IfmapSRAMBankBandwidth = 10
IfmapSRAMBankNum = 10
IfmapSRAMBankPort = 2
FilterCustomLayout = False
FilterSRAMBankBandwidth = 10
FilterSRAMBankNum = 10
FilterSRAMBankPort = 2

[sparsity]
SparsitySupport = false
SparseRep = ellpack_block
OptimizedMapping = false
BlockSize = 8
RandomNumberGeneratorSeed = 40

[run_presets]
InterfaceBandwidth = CALC
UseRamulatorTrace = False
"""


@pytest.fixture
def scalesim_cycles(tmp_path, monkeypatch):
    """A function running SCALE-Sim v3 on one GEMM and returning its compute cycles.

    SCALE-Sim 3.0.0 ends its memory simulation with ``int(max(list of 1-element arrays))``,
    which NumPy 2.4 rejects (conversion of a 1-d array to a scalar); the patch finishes
    that one step with the same arithmetic.
    """
    scale_sim = pytest.importorskip("scalesim.scale_sim")
    dbsp = pytest.importorskip("scalesim.memory.double_buffered_scratchpad_mem")
    original = dbsp.double_buffered_scratchpad.service_memory_requests

    def service(self, *demands):
        try:
            original(self, *demands)
        except TypeError:
            self.total_cycles = int(self.ofmap_trace_matrix[:, 0].max())
            self.traces_valid = True

    monkeypatch.setattr(dbsp.double_buffered_scratchpad, "service_memory_requests", service)

    def run(rows: int, cols: int, m: int, k: int, n: int) -> int:
        d = tmp_path / f"{rows}_{cols}_{m}_{k}_{n}"
        d.mkdir()
        (d / "c.cfg").write_text(_SCALESIM_CFG.format(rows=rows, cols=cols))
        # SCALE-Sim's GEMM topology is "name, M, N, K": (M x K) @ (K x N), K the reduction.
        (d / "t.csv").write_text(f"Layer, M, N, K,\ng, {m}, {n}, {k},\n")
        (d / "l.csv").write_text("Layer,\n")
        sim = scale_sim.scalesim(
            save_disk_space=True,
            verbose=False,
            config=str(d / "c.cfg"),
            topology=str(d / "t.csv"),
            layout=str(d / "l.csv"),
            input_type_gemm=True,
        )
        with contextlib.redirect_stdout(io.StringIO()):
            sim.run_scale(top_path=str(d))
        layer = sim.runner.single_layer_sim_object_list[0]
        total, compute, stalls = layer.get_compute_report_items()[:3]
        assert stalls == 0
        return int(compute)

    return run


def _check_against_scalesim(run, shape):
    ours = matmul_cycles(*shape)
    theirs = run(*shape)
    assert abs(ours - theirs) <= 0.05 * theirs, (shape, ours, theirs)
    # SCALE-Sim reports the zero-based index of the last cycle: exactly one less.
    assert ours == theirs + 1, (shape, ours, theirs)


@pytest.mark.parametrize(
    "shape",
    [
        (8, 8, 16, 16, 16),
        (8, 4, 20, 17, 9),
        (4, 8, 33, 9, 12),
        (16, 16, 64, 40, 50),
        (32, 16, 100, 64, 48),
    ],
)
def test_matches_scalesim_on_a_grid(scalesim_cycles, shape):
    _check_against_scalesim(scalesim_cycles, shape)


@pytest.mark.slow
@pytest.mark.parametrize(
    "shape",
    [
        (r, c, m, k, n)
        for (r, c), (m, k, n) in itertools.product(
            [(8, 8), (16, 16), (32, 8), (8, 32), (64, 64)],
            [(64, 64, 64), (200, 100, 70), (512, 128, 256), (100, 300, 90)],
        )
    ],
)
def test_matches_scalesim_sweep(scalesim_cycles, shape):
    _check_against_scalesim(scalesim_cycles, shape)


@given(
    rows=st.sampled_from([2, 4, 8, 16, 32, 128, 256]),
    cols=st.sampled_from([2, 4, 8, 16, 32, 128, 256]),
    m=st.integers(1, 10_000),
    kf=st.integers(1, 40),
    nf=st.integers(1, 40),
)
@example(rows=128, cols=128, m=1, kf=1, nf=1)
def test_closed_form_on_exact_tiles(rows, cols, m, kf, nf):
    cycles = matmul_cycles(rows, cols, m, kf * rows, nf * cols)
    assert cycles == kf * nf * (2 * rows + cols + m - 2)


@given(
    rows=st.integers(1, 64),
    cols=st.integers(1, 64),
    m=st.integers(1, 500),
    k=st.integers(1, 500),
    n=st.integers(1, 500),
)
def test_cycles_bound_macs_and_pad_up(rows, cols, m, k, n):
    cycles = matmul_cycles(rows, cols, m, k, n)
    assert cycles * rows * cols >= m * k * n  # never faster than every MAC busy
    padded = matmul_cycles(rows, cols, m, math.ceil(k / rows) * rows, math.ceil(n / cols) * cols)
    assert cycles == padded  # a partial fold costs a whole one


def test_accepts_numpy_integers():
    assert matmul_cycles(*np.array([8, 8, 16, 16, 16])) == 152


@pytest.mark.parametrize(
    ("args", "field"), [((0, 8, 1, 1, 1), "rows = 0"), ((8, 8, 1.5, 1, 1), "m = 1.5")]
)
def test_rejects_bad_dims_naming_the_field(args, field):
    with pytest.raises(ConfigError, match=f"matmul_cycles: {field} must be a positive integer"):
        matmul_cycles(*args)
