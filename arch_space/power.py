"""Board power of a device while it runs one kind of work, from the op energy model.

The same op costs that price a training iteration (:mod:`arch_space.perf`) give the power
of one op at its modelled rate: energy (dynamic + static) over latency, with the op split
over every core. A large square GEMM is the tensor-load probe a board's power limit is
measured under; a large elementwise op is the memory-bound probe.
"""

from __future__ import annotations

from typing import Final

from arch_space.accelerator import Accelerator, Cluster
from arch_space.perf import op_costs
from arch_space.perf.device import DeviceProfile
from arch_space.tech import TechNode
from workloads.ops import CoreType, Op, OpGraph, OpKind

__all__ = ["GEMM_PROBE", "gemm_power_w", "memory_bound_power_w", "op_power_w", "tdp_w"]

#: (m, k, n) of the tensor-load probe: the square bf16 GEMM matmul benchmarks time.
GEMM_PROBE: Final = (8192, 8192, 8192)
_ELEMENTS: Final = 1 << 28


def op_power_w(
    op: Op, acc: Accelerator, tech: TechNode | None = None, device: DeviceProfile | None = None
) -> float:
    """Average board power (W) of ``acc`` running ``op`` over all its cores; ``device`` (the
    sustained rates) defaults to the preset's profile, as in :func:`op_costs`."""
    table = op_costs(OpGraph((op,), ()), acc, Cluster(devices=1), tech=tech, device=device)
    return float(table.parallel_energy_j[0] / table.parallel_latency_s[0])


def gemm_power_w(
    acc: Accelerator,
    tech: TechNode | None = None,
    shape: tuple[int, int, int] = GEMM_PROBE,
    device: DeviceProfile | None = None,
) -> float:
    """Power (W) of a large GEMM at the rate the op model gives it (tensor load)."""
    m, k, n = shape
    e = acc.bytes_per_element
    op = Op(
        "gemm",
        OpKind.MATMUL,
        CoreType.TC,
        flops=2 * m * k * n,
        bytes_read=e * (m * k + k * n),
        bytes_written=e * m * n,
        m=m,
        k=k,
        n=n,
    )
    return op_power_w(op, acc, tech, device)


def memory_bound_power_w(acc: Accelerator, tech: TechNode | None = None) -> float:
    """Power (W) of a large elementwise add streaming two inputs and one output from HBM."""
    e = acc.bytes_per_element
    op = Op(
        "add",
        OpKind.ELEMENTWISE,
        CoreType.VC,
        flops=_ELEMENTS,
        bytes_read=2 * e * _ELEMENTS,
        bytes_written=e * _ELEMENTS,
        elements=_ELEMENTS,
    )
    return op_power_w(op, acc, tech)


def tdp_w(acc: Accelerator, tech: TechNode | None = None) -> float:
    """A TDP-like power (W): the board power under tensor load, the GEMM probe's power.

    A board's power limit is set for its heaviest sustained work, dense GEMMs on the tensor
    cores; the checks against data sheets are in tests/test_arch_presets.py.
    """
    return gemm_power_w(acc, tech)
