"""The DP's final round: price every first stage with every data-parallel degree.

The last DP step leaves, per stage count ``s``, one-device stage count ``c`` and candidate
first stage, the largest stage load; the iteration then costs
``load * (m/d + s - 1) + tail(d, P_first, load) + tied_s`` (:class:`placement.dp.DpTask`), with
``tied_s`` the first stage's all-reduce of the tied weights other stages copy
(:attr:`placement.dp.SegmentCosts.tied_s`). As the tail never decreases with the first
stage's parameters, a first stage can only win if its load beats every first stage with as
much ``tied_s`` and fewer parameters: :func:`record_lows` keeps those alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from placement.pipelining import micro_batches_per_pipeline, pipeline_s

if TYPE_CHECKING:
    from placement.dp import DpTask

__all__ = ["record_lows", "final_round"]

_BLOCK = 1 << 18  # (candidate, degree) pairs priced at once


def record_lows(
    vals: np.ndarray, params: np.ndarray, extra: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(order, keep) of the candidates of ``vals[s, j, c]`` (first stage ``j``): ``order``
    sorts them by ``extra`` (None: all equal), then ``params``, stably; ``keep[s, i, c]``
    marks the ``order[i]`` whose finite load beats every earlier one of equal ``extra``."""
    if extra is None:
        order = np.argsort(params, kind="stable")
        cuts = [0, params.size]
    else:
        order = np.lexsort((params, extra))
        e = extra[order]
        cuts = [*np.flatnonzero(np.r_[True, e[1:] != e[:-1]]).tolist(), e.size]
    vals = vals[:, order, :]
    keep = np.empty_like(vals, dtype=bool)
    for a, b in zip(cuts[:-1], cuts[1:], strict=True):
        part = vals[:, a:b, :]
        run = np.minimum.accumulate(part, axis=1)
        keep[:, a, :] = np.isfinite(part[:, 0, :])
        keep[:, a + 1 : b, :] = part[:, 1:, :] < run[:, :-1, :]
    return order, keep


def final_round(
    task: DpTask, vals: np.ndarray, rows: np.ndarray, ds: np.ndarray
) -> tuple[float, float, int, int, int, int] | None:
    """Price every (stages s, one-device count c, first stage, d in ``ds``), keep the best:
    (time, load, d, s, c, first pair), or None when nothing fits.

    ``vals[s-1, j, c]`` is the largest stage load with ``s`` stages when the first stage is
    pair ``rows[j]``. Candidates are priced in blocks of at most ``_BLOCK`` (candidate, d)
    pairs, so memory stays bounded whatever the batch and device counts. Ties go to the
    smaller ``d``, then fewer stages.
    """
    costs, t, max_devices, m = task.costs, task.t, task.max_devices, task.micro_batches
    s_count, _, c1 = vals.shape
    extra = None if costs.tied_s is None else costs.tied_s[rows]
    order, better = record_lows(vals, costs.params[rows], extra)
    vals = vals[:, order, :]
    s_idx = np.arange(1, s_count + 1)[:, None]
    devices = t * s_idx - (t - 1) * np.arange(c1)[None, :]
    d_max = np.where(devices <= max_devices, max_devices // np.maximum(devices, 1), 0)
    n_ds = np.searchsorted(ds, d_max, side="right")  # how many of ds each (s, c) may use
    si, ki, ci = np.nonzero(better & (n_ds[:, None, :] >= 1))
    if si.size == 0:
        return None
    counts = n_ds[si, ci]
    loads = vals[si, ki, ci]
    stages = s_idx[si, 0]
    firsts = rows[order[ki]]
    ends = np.cumsum(counts)
    best: tuple[tuple[float, int, int], tuple[float, float, int, int, int, int]] | None = None
    lo = 0
    while lo < si.size:
        before = int(ends[lo] - counts[lo])
        hi = max(lo + 1, int(np.searchsorted(ends, before + _BLOCK, side="right")))
        c = counts[lo:hi]
        cand = np.repeat(np.arange(lo, hi), c)
        d = ds[np.arange(cand.size) - np.repeat(np.cumsum(c) - c, c)]
        load, s, q = loads[cand], stages[cand], firsts[cand]
        time = pipeline_s(load, micro_batches_per_pipeline(m, d), s) + task.tail(
            d, costs.params[q], load
        )
        if costs.tied_s is not None:
            time = time + costs.tied_s[q]
        pick = np.lexsort((s, d, time))[0]
        key = (float(time[pick]), int(d[pick]), int(s[pick]))
        if best is None or key < best[0]:
            found = (key[0], float(load[pick]), key[1], key[2], int(ci[cand[pick]]), int(q[pick]))
            best = (key, found)
        lo = hi
    return best[1] if best is not None else None
