"""Exact fit of a model's constants that enter it linearly, used by the calibration scripts.

The area and the GEMM power of a chip are affine in each per-unit constant of the technology
tables (a count times a constant, plus terms that do not depend on it), so ``n`` constants
are pinned by ``n`` published figures: evaluate the model at zero and at each unit vector and
solve the linear system.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

__all__ = ["fit_linear"]


def fit_linear(
    targets: Mapping[str, float], model: Callable[[str, Sequence[float]], float], n: int
) -> tuple[float, ...]:
    """The ``n`` constants that put ``model(name, constants)`` at ``targets[name]`` for every
    name (as many names as constants), for a model affine in its constants.

    Examples
    --------
    >>> fit_linear({"a": 5.0, "b": 7.0}, lambda k, x: {"a": 1, "b": 2}[k] * x[0] + x[1], 2)
    (2.0, 3.0)
    """
    if len(targets) != n:
        raise ValueError(f"{n} constants need {n} published figures, got {len(targets)}")
    rows, rhs = [], []
    for name, target in targets.items():
        base = model(name, (0.0,) * n)
        rows.append([model(name, tuple(float(i == j) for j in range(n))) - base for i in range(n)])
        rhs.append(target - base)
    return tuple(float(x) for x in np.linalg.solve(np.array(rows), np.array(rhs)))
