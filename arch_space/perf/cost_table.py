"""What :func:`arch_space.perf.costs.op_costs` returns: every op's latency, energy and bound
on one unit of each of its kinds and split over all units of its kinds."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np

from phaze_common.errors import unknown_name

__all__ = ["BOUNDS", "OpCost", "OpCostTable"]

#: Names of what limits an op, indexed by :attr:`OpCostTable.bound_code`.
BOUNDS: Final = ("compute", "memory", "buffer", "network", "none")


@dataclass(frozen=True, slots=True)
class OpCost:
    """Latency and energy of one op under one placement on the cores."""

    latency_s: float
    energy_j: float


@dataclass(frozen=True, slots=True)
class OpCostTable:
    """Costs of every op of a graph, in graph order (read-only numpy arrays).

    ``units[i]`` are the kinds of compute unit op i runs on (none for collectives and
    joins). ``latency_s``/``energy_j`` are on one unit of each of its kinds; ``parallel_*``
    split the op over all units of its kinds. ``hbm_bytes`` and ``bound`` belong to the
    parallel estimate.
    ``energy_j`` includes the chip's static power over the op's latency; ``*parts_j`` (ops x 3)
    split the dynamic energy alone into compute (MACs, lanes), memory (buffer, HBM) and
    network (link) joules, for totals where static power is counted once per chip.
    """

    names: tuple[str, ...]
    units: tuple[tuple[str, ...], ...]
    latency_s: np.ndarray
    energy_j: np.ndarray
    parallel_latency_s: np.ndarray
    parallel_energy_j: np.ndarray
    hbm_bytes: np.ndarray
    bound_code: np.ndarray
    parts_j: np.ndarray
    parallel_parts_j: np.ndarray

    def __len__(self) -> int:
        return len(self.names)

    def index(self, name: str) -> int:
        """Position of the op called ``name``."""
        try:
            return self.names.index(name)
        except ValueError:
            raise unknown_name("op", name, self.names) from None

    def single(self, i: int) -> OpCost:
        """Cost of op ``i`` on one unit of each of its kinds."""
        return OpCost(float(self.latency_s[i]), float(self.energy_j[i]))

    def parallel(self, i: int) -> OpCost:
        """Cost of op ``i`` split over all units of its kinds."""
        return OpCost(float(self.parallel_latency_s[i]), float(self.parallel_energy_j[i]))

    def bound(self, i: int) -> str:
        """What limits op ``i`` (one of :data:`BOUNDS`)."""
        return BOUNDS[int(self.bound_code[i])]
