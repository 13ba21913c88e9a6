"""Vectorised GEMM terms: compute split over cores, global-buffer tiling and HBM traffic.

All functions take float64 arrays with one entry per GEMM (``batch`` independent
(m x k) @ (k x n) products) and return arrays of the same length.

*Compute.* The work unit of a weight-stationary array is one column fold (``cols`` output
columns) of one chunk of ``mc`` input rows, run through all ``ceil(k/rows)`` row folds so the
K reduction stays inside the core. The ``batch * ceil(n/cols) * s`` units of a split of m
into ``s`` chunks run on ``cores`` cores in ``ceil(units / cores)`` waves (wave
quantisation); each unit costs ``ceil(k/rows) * fold_cycles(mc)``. A finer split fills more
cores but pays the per-fold load, fill and drain more often. A GEMM with fewer
``rows x cols`` output tiles than cores (a decode step's ``m`` of a few tokens) may split K
instead (split-K, as cuBLAS and CUTLASS do for such shapes): ``q`` units per output tile
each run ``ceil(ceil(k/rows) / q)`` row folds, and their fp32 partial sums meet in the
buffer. The split (of m, or of K) with the least time (compute against buffer bandwidth) is
taken.

*Buffer traffic* (global buffer <-> cores, bytes): every unit loads its weights
(``k x cols``, its share of them under split-K); input rows are multicast to all cores
working on the same rows, so they cross the buffer port once per group of ``cores`` column
folds; outputs are written once (partial sums accumulate in the cores), split-K's ``q``
partial outputs are written and read back by the reduction at ``accumulator_bytes`` per
element. HBM fills and drains also pass through the buffer.

*HBM traffic.* An output tile ``tm x tn`` stays in the buffer (fp32 accumulators) while
double-buffered ``tm x tk`` input and ``tk x tn`` weight panels stream along K (``tk`` = one
fold, the array's rows). Inputs are re-read once per column tile and weights once per row
tile: ``e * (m*k*ceil(n/tn) + k*n*ceil(m/tm)) + e*m*n``. For each candidate ``tm`` the widest
``tn`` that fits is taken, and the candidate with the least traffic wins, so a larger buffer
never moves more bytes (Hong & Kung's I/O bound, STOC 1981, is the limit this approaches).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np

from arch_space.perf.systolic import fold_cycles

__all__ = ["GemmShape", "GemmTerms", "gemm_hbm_bytes", "gemm_terms"]

# Candidate splits of m over cores and candidate row tiles: powers of two (tm also gets m).
_SPLITS: Final = 2.0 ** np.arange(0, 17)
_ROW_TILES: Final = 2.0 ** np.arange(4, 17)


@dataclass(frozen=True, slots=True)
class GemmShape:
    """Float64 arrays, one entry per GEMM: ``batch`` products of (m x k) @ (k x n)."""

    batch: np.ndarray
    m: np.ndarray
    k: np.ndarray
    n: np.ndarray


@dataclass(frozen=True, slots=True)
class GemmTerms:
    """Per-GEMM time terms (s) and buffer traffic (bytes) of the chosen split over cores."""

    compute_s: np.ndarray
    buffer_s: np.ndarray
    buffer_read_bytes: np.ndarray
    buffer_write_bytes: np.ndarray


def gemm_hbm_bytes(
    g: GemmShape,
    rows: int,
    cols: int,
    glb_bytes: float,
    bytes_per_element: int,
    accumulator_bytes: int,
    operand_bytes: np.ndarray | None = None,
    weight_operand_bytes: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(read, write) HBM bytes of the least-traffic tiling that fits the global buffer.

    ``operand_bytes`` (per GEMM; default ``bytes_per_element``) are the bytes of an input
    element, an fp8 GEMM's 1; ``weight_operand_bytes`` (default ``operand_bytes``) those of
    the right (k x n) operand, an int4 weight-only GEMM's 0.625 beside its bf16 input. The
    output is written at ``bytes_per_element``. If no candidate tile fits, every operand
    element is fetched for every product.
    """
    out = float(bytes_per_element)
    e = out if operand_bytes is None else np.asarray(operand_bytes, dtype=float)[:, None]
    w = e if weight_operand_bytes is None else np.asarray(weight_operand_bytes, float)[:, None]
    m, k, n = g.m[:, None], g.k[:, None], g.n[:, None]
    tk = np.minimum(k, rows)
    tm = np.concatenate([np.minimum(_ROW_TILES[None, :], m), m], axis=1)
    widest = np.floor((glb_bytes - 2 * e * tk * tm) / (accumulator_bytes * tm + 2 * w * tk))
    tn = np.minimum(n, widest)
    tn = np.where((tn < n) & (tn >= cols), np.floor(tn / cols) * cols, tn)
    fits = tn >= 1
    tn = np.where(fits, tn, 1.0)
    reads = e * m * k * np.ceil(n / tn) + w * k * n * np.ceil(m / tm)
    no_reuse = (e + w) * m * k * n
    reads = np.where(fits, reads, no_reuse).min(axis=1)
    return g.batch * reads, g.batch * out * g.m * g.n


def gemm_terms(
    g: GemmShape,
    hbm: tuple[np.ndarray, np.ndarray],
    *,
    rows: int,
    cols: int,
    cores: int,
    clock_hz: float,
    glb_bytes_per_s: float,
    bytes_per_element: int,
    accumulator_bytes: int,
    operand_bytes: np.ndarray | None = None,
    weight_operand_bytes: np.ndarray | None = None,
) -> GemmTerms:
    """Compute and buffer time of the best split over ``cores`` arrays, and the traffic.

    ``hbm`` is the (read, write) HBM traffic of :func:`gemm_hbm_bytes`, which does not
    depend on the number of cores. The arrays read each operand from the buffer at its
    stored width (``operand_bytes`` and ``weight_operand_bytes`` as in
    :func:`gemm_hbm_bytes`): tensor cores take fp8 and fp4 operands from shared memory as
    stored, and weight-only kernels dequantize packed weights in registers after the load.
    Outputs are written at ``bytes_per_element``.
    """
    e = float(bytes_per_element)
    x = e if operand_bytes is None else np.asarray(operand_bytes, dtype=float)[:, None]
    w = x if weight_operand_bytes is None else np.asarray(weight_operand_bytes, float)[:, None]
    b, m, k, n = (a[:, None] for a in (g.batch, g.m, g.k, g.n))
    row_folds = np.ceil(k / rows)
    col_folds = np.ceil(n / cols)
    # candidate (m split, K split) pairs: the m splits with K whole, then the K splits (no
    # more than the cores: more would only add waves) of an unsplit m
    k_splits = _SPLITS[1:][_SPLITS[1:] <= cores]
    s = np.concatenate([_SPLITS, np.ones(len(k_splits))])[None, :]
    q = np.concatenate([np.ones(len(_SPLITS)), k_splits])[None, :]
    waves = np.ceil(b * col_folds * s * q / cores)
    unit_folds = np.ceil(row_folds / q)
    compute_s = waves * unit_folds * fold_cycles(rows, cols, np.ceil(m / s)) / clock_hz

    hbm_read, hbm_write = hbm
    input_passes = np.ceil(col_folds / np.minimum(col_folds, cores))
    partials = np.where(q > 1, accumulator_bytes * b * m * n * q, 0.0)  # written, read back
    buffer_reads = b * (x * m * k * input_passes + w * k * n * s) + hbm_write[:, None] + partials
    buffer_writes = (e * g.batch * g.m * g.n + hbm_read)[:, None] + partials
    buffer_s = (buffer_reads + buffer_writes) / glb_bytes_per_s

    few_tiles = b * col_folds * np.ceil(m / rows) < cores
    valid = (s <= m) & ((q == 1) | (few_tiles & (q <= row_folds)))
    score = np.where(valid, np.maximum(compute_s, buffer_s), np.inf)
    best = np.argmin(score, axis=1)[:, None]

    def pick(a: np.ndarray) -> np.ndarray:
        return np.take_along_axis(a, best, axis=1)[:, 0]

    return GemmTerms(
        compute_s=pick(compute_s),
        buffer_s=pick(buffer_s),
        buffer_read_bytes=pick(buffer_reads),
        buffer_write_bytes=pick(buffer_writes),
    )
