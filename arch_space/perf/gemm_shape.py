"""A chip's GEMM rate by shape, measured: how far a GEMM of a given (m, n, k) falls below the
best shape's rate.

A preset's sustained tensor share (``sustained_tensor_fraction``) is its best GEMM shape's
rate. Smaller GEMMs run slower on a real chip: fewer output tiles than SMs per wave, a short
K loop whose prologue and epilogue are not amortised, and a fixed launch cost inside the
kernel time. The tiling model (:mod:`arch_space.perf.gemm`) counts wave quantisation of its
own arrays, not a GPU kernel's fixed costs, so a preset with a measured table of rates by
shape (``[<preset>.gemm_shapes]`` of ``arch_space/data/devices.toml``) derates each GEMM by
the table's rate at its shape over the table's rate at its largest shape, or over a
reference rate measured apart where the table's largest shapes are not a whole GEMM's time
(``reference_flops_per_s``; rates above it are held at it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["GemmShapeTable", "gemm_shape_table"]


@dataclass(frozen=True, slots=True)
class GemmShapeTable:
    """Measured GEMM rates (FLOP/s) on the grid ``sizes`` x ``sizes`` x ``sizes`` of
    (m, n, k), ``rates_flops_per_s`` in m-major, k-fastest order; ``sizes`` ascend.
    ``reference_flops_per_s`` is the rate a factor of 1 stands for (None: the rate at the
    largest shape)."""

    sizes: tuple[float, ...]
    rates_flops_per_s: tuple[float, ...]
    reference_flops_per_s: float | None = None

    def factor(self, m, n, k) -> np.ndarray:
        """The rate at each (m, n, k) over the reference rate (the largest measured shape's
        unless given), in (0, 1]: each measured rate is held at the reference, then
        trilinear interpolation in log2 of each dimension, a dimension outside the grid held
        at the grid's edge (no extrapolation: a GEMM larger than the largest measured runs
        at the largest's rate). Arrays broadcast.

        >>> t = GemmShapeTable((1.0, 2.0), (1.0,) * 7 + (2.0,))
        >>> float(t.factor(2.0, 2.0, 2.0)), float(t.factor(1.0, 1.0, 1.0))
        (1.0, 0.5)
        >>> r = GemmShapeTable((1.0, 2.0), (1.0,) * 7 + (4.0,), reference_flops_per_s=2.0)
        >>> float(r.factor(2.0, 2.0, 2.0)), float(r.factor(1.0, 1.0, 1.0))
        (1.0, 0.5)
        """
        size = len(self.sizes)
        grid = np.asarray(self.rates_flops_per_s).reshape(size, size, size)
        reference = self.reference_flops_per_s or grid[-1, -1, -1]
        grid = np.minimum(grid / reference, 1.0)
        logs = np.log2(np.asarray(self.sizes))
        out = 0.0
        weights = [_axis(logs, x) for x in (m, n, k)]
        for corner in range(8):
            w, index = 1.0, []
            for axis, (lo, frac) in enumerate(weights):
                up = (corner >> axis) & 1
                w = w * (frac if up else 1.0 - frac)
                index.append(lo + up)
            out = out + w * grid[index[0], index[1], index[2]]
        return np.asarray(out)


def _axis(logs: np.ndarray, x) -> tuple[np.ndarray, np.ndarray]:
    """(lower grid index, fraction toward the next) of ``x`` on a log2 grid, clamped."""
    lx = np.clip(np.log2(np.maximum(np.asarray(x, dtype=np.float64), 1.0)), logs[0], logs[-1])
    lo = np.clip(np.searchsorted(logs, lx, side="right") - 1, 0, len(logs) - 2)
    return lo, (lx - logs[lo]) / (logs[lo + 1] - logs[lo])


def gemm_shape_table(
    data: Mapping[str, Any], owner: str, problems: list[str]
) -> GemmShapeTable | None:
    """The table of ``[<preset>.gemm_shapes]``; each problem is appended to ``problems``."""
    sizes = data.get("sizes", ())
    rates = data.get("flops_per_s", ())
    reference = data.get("reference_flops_per_s")
    unknown = sorted(set(data) - {"sizes", "flops_per_s", "reference_flops_per_s"})
    if unknown:
        problems.append(f"{owner}.gemm_shapes: unknown keys {', '.join(unknown)}")

    def positive(v: Any) -> bool:
        return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v > 0

    ok_sizes = (
        len(sizes) >= 2
        and all(positive(s) for s in sizes)
        and all(a < b for a, b in zip(sizes, sizes[1:], strict=False))
    )
    if not ok_sizes:
        problems.append(
            f"{owner}.gemm_shapes: sizes = {sizes!r} must be at least 2 ascending positive numbers"
        )
    elif len(rates) != len(sizes) ** 3 or not all(positive(r) for r in rates):
        problems.append(
            f"{owner}.gemm_shapes: flops_per_s must list {len(sizes) ** 3} positive rates "
            f"(one per (m, n, k) of the sizes grid), got {len(rates)}"
        )
    if reference is not None and not positive(reference):
        problems.append(
            f"{owner}.gemm_shapes: reference_flops_per_s = {reference!r} must be a positive "
            "number (the rate a factor of 1 stands for)"
        )
    if problems and any(p.startswith(f"{owner}.gemm_shapes") for p in problems):
        return None
    return GemmShapeTable(
        tuple(map(float, sizes)),
        tuple(map(float, rates)),
        None if reference is None else float(reference),
    )
