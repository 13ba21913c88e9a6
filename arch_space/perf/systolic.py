"""Cycle count of a weight-stationary systolic array (the compute term of every GEMM).

A rows x cols array holds a rows x cols tile of the (k x n) weights (one *fold*); the m rows
of the (m x k) input stream through it. Per fold SCALE-Sim v3 (Samajdar et al., ISPASS 2020;
``scalesim.compute.systolic_compute_ws``) spends ``rows`` cycles loading the weights, then
``m + rows + cols - 2`` cycles streaming the inputs with the skewed fill and the drain of the
partial sums, and the folds run back to back with no overlap:

    cycles = ceil(k / rows) * ceil(n / cols) * (2 * rows + cols + m - 2)

SCALE-Sim reports one less, the zero-based index of the last cycle.
"""

from __future__ import annotations

import numpy as np

from phaze_common.errors import ConfigError

__all__ = ["matmul_cycles", "fold_cycles"]


def fold_cycles(rows: int, cols: int, m: int | np.ndarray) -> int | np.ndarray:
    """Cycles of one fold streaming ``m`` input rows (weights load + fill + stream + drain)."""
    return 2 * rows + cols + m - 2


def matmul_cycles(rows: int, cols: int, m: int, k: int, n: int) -> int:
    """Compute cycles of one weight-stationary ``rows x cols`` array for (m x k) @ (k x n).

    No memory stalls: the array is fed every cycle. Agrees with SCALE-Sim v3 (dataflow
    ``ws``) to within its off-by-one convention (see the module docstring).

    Examples
    --------
    >>> matmul_cycles(8, 8, 16, 16, 16)  # 4 folds x (16 + 8 + 16 - 2); SCALE-Sim reports 151
    152
    >>> matmul_cycles(128, 128, 1, 128, 128)  # one row still pays load, fill and drain
    383
    """
    for name, v in (("rows", rows), ("cols", cols), ("m", m), ("k", k), ("n", n)):
        if not isinstance(v, int | np.integer) or isinstance(v, bool) or v < 1:
            raise ConfigError(f"matmul_cycles: {name} = {v!r} must be a positive integer")
    folds = -(-k // rows) * -(-n // cols)
    return int(folds * fold_cycles(rows, cols, m))
