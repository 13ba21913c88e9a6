"""The pipeline schedule's closed forms, each written once: micro-batches per pipeline, the
pipeline's time and the micro-batches a rank holds in flight.

The schedule is 1F1B (PipeDream-flush), interleaved with ``v`` model chunks per rank
(Narayanan et al. SC21 §2.2; Megatron-LM ``megatron/core/pipeline_parallel/schedules.py``).
Every function takes numbers or numpy arrays (they broadcast), so the DP's vectorised rounds,
its lower bounds and the pricing of one placement read the same formula.
"""

from __future__ import annotations

import numpy as np

__all__ = ["micro_batches_per_pipeline", "pipeline_s", "bubble_s", "in_flight"]


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
