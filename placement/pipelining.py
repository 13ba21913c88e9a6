"""The pipeline schedule's closed forms, each written once: micro-batches per pipeline, the
pipeline's time and the micro-batches a rank holds in flight.

The schedule is 1F1B (PipeDream-flush), interleaved with ``v`` model chunks per rank
(Narayanan et al. SC21 §2.2; Megatron-LM ``megatron/core/pipeline_parallel/schedules.py``),
or DeepSeek's DualPipe (DeepSeek-V3 report, arXiv:2412.19437 §3.2.1 and Table 2;
deepseek-ai/DualPipe ``dualpipe/dualpipe.py``): rank ``r`` of ``p`` (even) holds stages
``r`` and ``p - 1 - r``, half the micro-batches enter at each end, and in the steady state a
forward chunk of one direction runs beside a backward chunk of the other. Its bubble is
``(p/2 - 1)(F&B + B - 3W)`` (:func:`dualpipe_bubble_s`) and a rank holds ``p + 1``
micro-batches of activations (:func:`dualpipe_in_flight`).
Every function takes numbers or numpy arrays (they broadcast), so the DP's vectorised rounds,
its lower bounds and the pricing of one placement read the same formula.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "micro_batches_per_pipeline",
    "pipeline_s",
    "bubble_s",
    "in_flight",
    "dualpipe_bubble_s",
    "dualpipe_in_flight",
]


def micro_batches_per_pipeline(micro_batches, d):
    """Micro-batches each of ``d`` data-parallel pipelines runs: ``ceil(m / d)``.

    Megatron-LM requires ``d * micro_batch`` to divide the global batch
    (``megatron/core/num_microbatches_calculator.py``), so where it can run ``d`` divides ``m``
    and this is ``m / d`` exactly; the Piper / Phaze-reference format allows any ``d`` and
    runs the last pipeline's share rounded up.

    >>> micro_batches_per_pipeline(12, 4), micro_batches_per_pipeline(12, 5)
    (3, 3)
    """
    return -(-micro_batches // d)


def bubble_s(load_s, p, v=1):
    """The pipeline bubble: ``L (p - 1) / v`` (SC21 eq. 2 with interleaving)."""
    return load_s * (p - 1) / v


def pipeline_s(load_s, micro_batches, p, v=1):
    """Time from the first forward pass to the flush: ``L (m' + (p - 1) / v)``, ``L`` the
    bottleneck rank's load per micro-batch and ``m'`` the micro-batches of one pipeline."""
    return load_s * (micro_batches + (p - 1) / v)


def in_flight(p, r, v=1, micro_batches=None):
    """Micro-batches of activations pipeline rank ``r`` of ``p`` holds at its peak.

    1F1B: ``p - r``, the warm-up forward passes and the one in progress. Interleaved (``v >=
    2``): ``min(2 (p - r - 1) + (v - 1) p + 1, m' v)`` chunk activations (Megatron-LM's
    warm-up count), each ``1/v`` of the rank's stash on average, so ``/ v`` micro-batches.
    """
    if v == 1:
        return p - r
    chunks = 2 * (p - r - 1) + (v - 1) * p + 1
    if micro_batches is not None:
        chunks = _min(chunks, micro_batches * v)
    return chunks / v


def _min(a, b):
    return np.minimum(a, b) if isinstance(a, np.ndarray) or isinstance(b, np.ndarray) else min(a, b)


def dualpipe_bubble_s(load_s, bwd_s, p):
    """DualPipe's bubble, ``(p/2 - 1)(F&B + B - 3W)`` (DeepSeek-V3 report Table 2).

    ``F&B``, a forward and a backward chunk run as one overlapped pair, is the rank's load
    per micro-batch ``load_s`` (its compute with what the overlap leaves exposed); ``B`` the
    full backward chunk ``bwd_s``; ``W`` its weight-gradient part, ``B / 2`` (each GEMM's
    backward is an input-gradient and a weight-gradient GEMM of equal FLOPs, as Zero Bubble
    PP takes it, Qi et al. arXiv:2401.10241 §2): ``(p/2 - 1)(load_s - bwd_s / 2)``.

    >>> float(dualpipe_bubble_s(3.0, 2.0, 8))  # F&B = 3, B = 2, W = 1: 3 (3 + 2 - 3)
    6.0
    """
    return (p / 2 - 1) * np.maximum(load_s - bwd_s / 2, 0.0)


def dualpipe_in_flight(p, r):
    """Micro-batches of activations DualPipe's rank ``r`` of ``p`` holds at its peak: ``p - r``
    of stage ``r`` (the forward direction's warm-up) and ``r + 1`` of its mirror stage
    ``p - 1 - r`` (the reverse direction's), ``p + 1`` in all (Table 2)."""
    return p - r, r + 1
