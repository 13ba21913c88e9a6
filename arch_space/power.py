"""Board power of a device while it runs one kind of work, from the op energy model.

The same op costs that price a training iteration (:mod:`arch_space.perf`) give the power
of one op at its modelled rate: energy (dynamic + static) over latency, with the op split
over every core. A large square GEMM is the tensor-load probe a board's power limit is
measured under; a large elementwise op is the memory-bound probe. A preset's board limiter
(:mod:`arch_space.power_limit`) holds every op at or below its limit;
:func:`unlimited_gemm_power_w` is what the energy model asks for without it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Final

from arch_space._data import plain_values, shipped_toml
from arch_space.accelerator import Accelerator, Cluster
from arch_space.area import made_die_area_mm2, static_power_w
from arch_space.perf import op_costs
from arch_space.perf.device import DeviceProfile, device_profile
from arch_space.system import board_limit_w
from arch_space.tech import TechNode
from workloads.ops import CoreType, Op, OpGraph, OpKind

__all__ = [
    "GEMM_PROBE",
    "Headroom",
    "gemm_power_w",
    "headroom",
    "memory_bound_power_w",
    "op_power_w",
    "reticle_mm2",
    "tdp_w",
    "unlimited_gemm_power_w",
    "limited_clock_fraction",
]

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


def unlimited_gemm_power_w(acc: Accelerator, tech: TechNode | None = None) -> float:
    """Power (W) the GEMM probe asks for at the device's sustained rates with the board's
    power limiter off: the op model's own tensor-load energy, before the limit holds it."""
    free = dataclasses.replace(device_profile(acc), board_limit_w=math.inf)
    return gemm_power_w(acc, tech, device=free)


def limited_clock_fraction(acc: Accelerator, limit_w: float, tech: TechNode | None = None) -> float:
    """The share of its clock ``acc`` holds under tensor load at a board limit of
    ``limit_w``: the GEMM probe asks :func:`unlimited_gemm_power_w`, dynamic power scales with
    the clock at a fixed voltage and leakage does not (as :mod:`arch_space.space` caps a
    design), so the clock is ``(limit - leakage) / (asked - leakage)``, at most 1."""
    asked = unlimited_gemm_power_w(acc, tech)
    leak = static_power_w(acc, tech)
    return float(min(1.0, max(limit_w - leak, 0.0) / max(asked - leak, 1e-12)))


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
    """A TDP-like power (W): the board power under tensor load, the GEMM probe's power
    (held at a preset's board limit by its limiter).

    A board's power limit is set for its heaviest sustained work, dense GEMMs on the tensor
    cores; the checks against data sheets are in tests/test_arch_presets.py.
    """
    return gemm_power_w(acc, tech)


def reticle_mm2() -> float:
    """The largest single die (mm2): one scanner exposure field (``system.toml``)."""
    return float(plain_values(shipped_toml("system.toml")["reticle"])["area_mm2"])


@dataclass(frozen=True, slots=True)
class Headroom:
    """A design against its budgets: the area of one die as made against the reticle (or a
    space's area budget), and its board power under tensor load against its board limit (its
    host server's, else its node era's; or a space's power budget).

    ``power_asked_w`` is what the energy model asks for without a limiter
    (:func:`unlimited_gemm_power_w`); ``power_drawn_w`` is what the board draws
    (:func:`gemm_power_w`: a preset's limiter holds it at its limit). The power headroom
    measures the asked-for power, so a negative one says how far the limiter throttles.
    Positive headroom is room to spare; negative is over.
    """

    die_area_mm2: float
    area_budget_mm2: float
    power_drawn_w: float
    power_asked_w: float
    power_budget_w: float

    @property
    def area_headroom(self) -> float:
        """Share of the area budget left (``1 - area / budget``)."""
        return 1.0 - self.die_area_mm2 / self.area_budget_mm2

    @property
    def power_headroom(self) -> float:
        """Share of the power budget left (``1 - asked-for power / budget``)."""
        return 1.0 - self.power_asked_w / self.power_budget_w

    def figures(self) -> dict[str, float]:
        """Every figure by name (the fields, then the two headroom shares): what a sweep
        stores in a point's record and ``phaze evaluate --json`` prints."""
        return {
            "die_area_mm2": self.die_area_mm2,
            "area_budget_mm2": self.area_budget_mm2,
            "area_headroom": self.area_headroom,
            "power_drawn_w": self.power_drawn_w,
            "power_asked_w": self.power_asked_w,
            "power_budget_w": self.power_budget_w,
            "power_headroom": self.power_headroom,
        }


def headroom(
    acc: Accelerator,
    area_budget_mm2: float | None = None,
    power_budget: float | None = None,
    tech: TechNode | None = None,
) -> Headroom:
    """``acc``'s die area and tensor-load power (drawn, and asked for without a limiter)
    against the budgets (defaults: the reticle, and its board limit,
    :func:`arch_space.system.board_limit_w`); the area is one die as made
    (:func:`~arch_space.area.made_die_area_mm2`), spare cores included."""
    return Headroom(
        die_area_mm2=made_die_area_mm2(acc, tech),
        area_budget_mm2=area_budget_mm2 if area_budget_mm2 is not None else reticle_mm2(),
        power_drawn_w=gemm_power_w(acc, tech),
        power_asked_w=unlimited_gemm_power_w(acc, tech),
        power_budget_w=(
            power_budget
            if power_budget is not None
            else board_limit_w(acc.profile_name, acc.node_nm)
        ),
    )
