"""One GEMM on all tensor cores of a design, and the published GEMM measurements.

:func:`gemm_report` lets a user poke the cost model (``phaze arch show NAME --gemm M,K,N``);
:func:`gemm_measurements` returns published latencies of GEMMs on real chips, kept as data
with their citations in ``arch_space/data/gemm_measurements.toml`` for ``phaze validate gemm``.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Final

from arch_space.accelerator import Accelerator, Cluster
from arch_space.perf.costs import BOUNDS, evaluate_ops, op_key, resolve_energy_inputs
from arch_space.perf.device import DeviceProfile
from arch_space.perf.settings import PerfSettings, default_settings
from arch_space.tech import TechNode
from phaze_common.errors import ConfigError
from workloads.ops import CoreType, Op, OpKind

__all__ = ["GemmReport", "GemmMeasurement", "gemm_report", "gemm_measurements"]

_MEASUREMENTS_FILE: Final = "gemm_measurements.toml"
# A GEMM uses no network; any cluster gives the same answer.
_ONE_DEVICE: Final = Cluster(devices=1)


@dataclass(frozen=True, slots=True)
class GemmReport:
    """Cost of one (m x k) @ (k x n) GEMM split over all tensor cores of a design."""

    m: int
    k: int
    n: int
    batch: int
    latency_s: float
    flops_per_s: float
    bound: str  # "compute" | "memory" | "buffer"
    energy_j: float
    compute_s: float
    hbm_s: float
    buffer_s: float
    hbm_bytes: float


@dataclass(frozen=True, slots=True)
class GemmMeasurement:
    """A published GEMM latency on a real chip (``preset`` names the modelled chip)."""

    case: str
    preset: str
    m: int
    k: int
    n: int
    measured_s: float
    source: str


def gemm_report(
    acc: Accelerator,
    m: int,
    k: int,
    n: int,
    *,
    batch: int = 1,
    tech: TechNode | None = None,
    static_w: float | None = None,
    settings: PerfSettings | None = None,
    device: DeviceProfile | None = None,
) -> GemmReport:
    """Latency, achieved FLOP/s, bound and energy of ``batch`` (m x k) @ (k x n) products on
    all tensor cores of ``acc`` (``device`` overrides its preset's sustained rates).

    Examples
    --------
    >>> from arch_space.accelerator import Accelerator
    >>> from arch_space.tech import tech_node
    >>> acc = Accelerator(num_tc=4, tc_rows=128, tc_cols=128, num_vc=1, vc_lanes=128,
    ...                   glb_bytes=32 * 2**20, hbm_bytes=16 * 2**30,
    ...                   hbm_bandwidth_bytes_per_s=1.2e12, clock_hz=1e9)
    >>> gemm_report(acc, 4096, 4096, 4096, tech=tech_node(7), static_w=10.0).bound
    'compute'
    """
    dims = {"m": m, "k": k, "n": n, "batch": batch}
    bad = [
        f"{name} = {v!r}"
        for name, v in dims.items()
        if not isinstance(v, int) or isinstance(v, bool) or v < 1
    ]
    if bad:
        raise ConfigError(f"gemm: {', '.join(bad)} must be positive integers")
    tech, static_w = resolve_energy_inputs(acc, tech, static_w)
    settings = settings or default_settings()
    op = Op(
        name="gemm",
        kind=OpKind.BATCHED_MATMUL if batch > 1 else OpKind.MATMUL,
        core=CoreType.TC,
        flops=2 * batch * m * k * n,
        batch=batch,
        m=m,
        k=k,
        n=n,
    )
    _, t = evaluate_ops([op_key(op)], acc, _ONE_DEVICE, tech, static_w, settings, device)
    latency = float(t.latency_s[0])
    return GemmReport(
        m=m,
        k=k,
        n=n,
        batch=batch,
        latency_s=latency,
        flops_per_s=op.flops / latency,
        bound=BOUNDS[int(t.bound_code[0])],
        energy_j=float(t.energy_j[0]),
        compute_s=float(t.compute_s[0]),
        hbm_s=float(t.hbm_s[0]),
        buffer_s=float(t.buffer_s[0]),
        hbm_bytes=float(t.hbm_bytes[0]),
    )


@lru_cache(maxsize=1)
def gemm_measurements() -> tuple[GemmMeasurement, ...]:
    """The published GEMM measurements of ``arch_space/data/gemm_measurements.toml``."""
    text = resources.files("arch_space").joinpath("data", _MEASUREMENTS_FILE).read_text("utf-8")
    return tuple(GemmMeasurement(**row) for row in tomllib.loads(text)["measurement"])
