"""Figures of every candidate stage, as arrays over (outer, inner) downset pairs.

Two geometries share each objective's formulas:

* **chain** (every LLM here): downsets are suffixes, so a stage is an interval ``[a, b)`` of
  layers; sums come from prefix sums and the candidates form a dense
  ``(n+1) x (n+1)`` grid, state ``k`` being the suffix of the last ``k`` layers;
* **DAG**: the stages of :func:`placement.downsets.downset_pairs`, with per-pair sums as
  matrix products and stage timing simulated layer by layer, vectorised over all pairs.

Two objectives:

* :func:`phaze_costs` - our model: per micro-batch a stage computes forward + backward +
  recompute and receives one message per boundary edge (the activation in the forward pass,
  its gradient in the backward pass); memory under 1F1B is
  ``weights/grads/optimizer + in_flight * stash + workspace``, with ``in_flight`` the number of
  stages from this one to the end (Narayanan et al. SC21 §2.2; PipeDream-flush) and the
  workspace less the stash its later layers freed first (:func:`_chain_workspace`); a stage
  other than the first keeps a copy of the tied weights of its layers, and a first stage
  adds the all-reduce of the tied weights it does not hold to the iteration.
* :func:`reference_costs` - the objective of the Phaze reference / Piper instance format
  (msr-fiddle/phaze ``Solver/device_placement``), see :mod:`placement.reference`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from placement.downsets import downset_pairs
from placement.dp import SegmentCosts
from placement.iteration import zero_state

__all__ = [
    "LayerArrays",
    "MemoryLimit",
    "StageFigures",
    "phaze_costs",
    "reference_costs",
    "max_stages_fitting",
    "stage_layers",
]


@dataclass(frozen=True, slots=True)
class LayerArrays:
    """Per-layer figures of one graph as arrays, layers in topological order.

    ``params`` is in the unit the all-reduce and memory formulas expect (bytes for the
    reference format, parameter counts for ours). Edges are ``(src, dst, bytes)`` rows.
    ``sharded_params`` is what the parameters count as when ZeRO shards them over ``d``
    (:func:`placement.iteration.sharded_parameters` over ``cp``; None: ``params``).
    ``tied`` are the parameters each layer shares with the first stage
    (:class:`placement.types.StageLayer`), ``sharded_tied`` what they count as sharded
    (None: no tied parameters).
    """

    fwd: np.ndarray
    bwd: np.ndarray
    rec: np.ndarray
    params: np.ndarray
    stash: np.ndarray
    workspace: np.ndarray
    tp: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    nbytes: np.ndarray
    is_chain: bool
    sharded_params: np.ndarray | None = None
    tied: np.ndarray | None = None
    sharded_tied: np.ndarray | None = None

    @property
    def n(self) -> int:
        return int(self.fwd.size)


@dataclass(frozen=True, slots=True)
class StageFigures:
    """Report-only figures per pair: compute and receive time, memory base (without sharded
    state) and per-stash, recompute time, workspace, the largest layer's parameters (tied
    ones included) and the copy of tied weights (part of the pair's parameters)."""

    compute: np.ndarray
    p2p: np.ndarray
    mem_base: np.ndarray
    mem_stash: np.ndarray
    in_stage: np.ndarray | None
    recompute: np.ndarray
    workspace: np.ndarray
    largest: np.ndarray
    tied: np.ndarray


def max_stages_fitting(base: np.ndarray, stash: np.ndarray, limit: float, cap: int) -> np.ndarray:
    """Largest ``s <= cap`` with ``base + (s - 1) * stash <= limit`` (0 if even s = 1 fails)."""
    positive = stash > 0
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        ratio = np.where(positive, (limit - base) / stash, cap)
    s = np.clip(np.floor(ratio), -1.0, cap - 1.0).astype(np.int64) + 1
    # floor() of a quotient can be off by one in floating point; settle on the exact test.
    s -= base + (s - 1) * stash > limit
    s += (s < cap) & (base + s * stash <= limit)
    return np.where(base <= limit, np.maximum(s, 1), 0)


# --- geometry -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Chain:
    """Dense grid of candidate intervals: row = outer state k, column = inner state k'.

    The stage of (k, k') is layers ``[n - k, n - k')``; it is valid when k' < k.
    """

    n: int
    valid: np.ndarray
    cin: np.ndarray  # (n+1, 1): bytes of the edge entering the stage (0 if none)
    cout: np.ndarray  # (1, n+1): bytes of the edge leaving it (0 if none)
    has_in: np.ndarray
    has_out: np.ndarray


def _chain(la: LayerArrays) -> _Chain:
    n = la.n
    into = np.zeros(n + 1)  # into[i]: bytes of edge i-1 -> i (0 for i = 0 and i = n)
    into[la.dst] = la.nbytes
    by_state = into[::-1]  # state k starts (or, as inner state, ends) the stage at n - k
    k = np.arange(n + 1)
    return _Chain(
        n=n,
        valid=k[None, :] < k[:, None],
        cin=by_state[:, None],
        cout=by_state[None, :],
        has_in=(k < n)[:, None],
        has_out=(k > 0)[None, :],
    )


def _span(prefix: np.ndarray) -> np.ndarray:
    """sum(x[n-k : n-k']) on the grid, from ``prefix`` = [0, cumsum(x)]."""
    pr = prefix[::-1]
    return pr[None, :] - pr[:, None]


def _prefix(x: np.ndarray) -> np.ndarray:
    return np.concatenate(([0.0], np.cumsum(x, dtype=np.float64)))


def _chain_max(x: np.ndarray, ch: _Chain) -> np.ndarray:
    """max(x[n-k : n-k']) on the grid (0 for empty), via a running maximum per start."""
    n = ch.n
    if not x.any():
        return np.zeros((n + 1, n + 1))
    grid = np.where(np.arange(n)[None, :] >= np.arange(n + 1)[:, None], x[None, :], 0.0)
    run = np.maximum.accumulate(grid, axis=1)  # run[a, j] = max(x[a..j])
    run = np.concatenate((np.zeros((n + 1, 1)), run), axis=1)  # run[a, b] = max(x[a..b-1])
    return np.where(ch.valid, run[::-1, ::-1], 0.0)


def _chain_workspace(la: LayerArrays, ch: _Chain) -> np.ndarray:
    """Each interval's backward workspace above its stash on the grid: a layer's workspace
    less the stash of the interval's later layers, at its largest
    (:func:`placement.iteration.backward_workspace`), as
    ``max(workspace_i + P[i+1]) - P[b]`` over ``[a, b)`` with ``P`` the stash's prefix sums."""
    if not la.workspace.any():
        return np.zeros((ch.n + 1, ch.n + 1))
    prefix = _prefix(la.stash)
    ahead = _chain_max(la.workspace + prefix[1:], ch) - prefix[::-1][None, :]
    return np.where(ch.valid, np.maximum(ahead, 0.0), 0.0)


def _stage_workspace(in_stage: np.ndarray, la: LayerArrays) -> np.ndarray:
    """Each stage's backward workspace above its stash, its layers in index order (the
    order they run forward; :func:`placement.iteration.backward_workspace`): a layer's
    workspace less the stash of the stage's later layers, at its largest, never below 0."""
    if not la.workspace.any():
        return np.zeros(len(in_stage))
    held = np.where(in_stage, la.stash[None, :], 0.0)
    later = np.cumsum(held[:, ::-1], axis=1)[:, ::-1] - held
    live = np.where(in_stage, la.workspace[None, :] - later, 0.0)
    return np.maximum(live.max(axis=1, initial=0.0), 0.0)


def _layout(max_s: np.ndarray, ch: _Chain | None) -> np.ndarray:
    """``max_s`` in the layout of :class:`SegmentCosts` (invalid grid cells 0)."""
    return np.where(ch.valid, max_s, 0).ravel() if ch is not None else max_s


def _segments(
    la: LayerArrays,
    ch: _Chain | None,
    pairs,
    load_last: np.ndarray,
    load_mid: np.ndarray,
    max_s: np.ndarray,
    one: np.ndarray,
    params: np.ndarray,
    tied_s: np.ndarray | None = None,
) -> SegmentCosts:
    n_one = int((~la.tp).sum())
    if ch is not None:
        size = ch.n + 1
        outer, inner = _grid_states(size)
        return SegmentCosts(
            n_states=size,
            full=ch.n,
            outer=outer,
            inner=inner,
            dense=True,
            load_last=np.where(ch.valid, load_last, np.inf).ravel(),
            load_mid=np.where(ch.valid, load_mid, np.inf).ravel(),
            max_s=max_s,
            one=one.ravel(),
            params=params.ravel(),
            n_one_layers=n_one,
            tied_s=None if tied_s is None else tied_s.ravel(),
        )
    return SegmentCosts(
        n_states=pairs.members.shape[0],
        full=pairs.full,
        outer=pairs.outer,
        inner=pairs.inner,
        dense=False,
        load_last=load_last,
        load_mid=load_mid,
        max_s=max_s,
        one=one,
        params=params,
        n_one_layers=n_one,
        tied_s=tied_s,
    )


@functools.lru_cache(maxsize=16)
def _grid_states(size: int) -> tuple[np.ndarray, np.ndarray]:
    """Outer and inner state of each cell of a row-major ``size x size`` grid (read-only)."""
    q = np.arange(size * size)
    outer, inner = q // size, q % size
    outer.setflags(write=False)
    inner.setflags(write=False)
    return outer, inner


def _geometry(la: LayerArrays, chain: bool):
    if chain:
        return _chain(la), None
    edges = tuple(zip(la.src.tolist(), la.dst.tolist(), strict=True))
    return None, downset_pairs(la.n, edges)


def stage_layers(costs: SegmentCosts, figures: StageFigures, q: int) -> tuple[int, ...]:
    """The layer indices of candidate stage ``q``."""
    if costs.dense:
        n = costs.n_states - 1
        k, kk = divmod(int(q), costs.n_states)
        return tuple(range(n - k, n - kk))
    assert figures.in_stage is not None
    return tuple(int(v) for v in np.flatnonzero(figures.in_stage[q]))


# --- our objective --------------------------------------------------------------------------


def phaze_costs(
    la: LayerArrays,
    *,
    chain: bool,
    p2p_bandwidth: float,
    p2p_latency_s: float,
    hbm_bytes: float,
    state_bytes_per_parameter: float,
    max_stages: int,
    zero_stages: tuple[int, ...] = (0,),
    optimizer_bytes_per_parameter: float = 12.0,
    weight_bytes_per_parameter: float = 2.0,
    p2p_overlap: bool = False,
    tied_comm: Callable[[np.ndarray], np.ndarray] | None = None,
) -> tuple[SegmentCosts, StageFigures, tuple[MemoryLimit, ...]]:
    """Stage figures under Phaze's model (see the module docstring), and per ZeRO stage of
    ``zero_stages`` the stages' memory limits (``costs.max_s`` is that of the first, or all
    zeros when it depends on ``d``). With ``p2p_overlap`` a stage's boundary transfers run
    beside its compute and only what exceeds it is exposed. ``tied_comm`` gives the seconds
    of the all-reduce of the gradients of that many tied parameters (None: 0).

    A pair that is not a first stage holds a copy of its layers' tied parameters, counted in
    its parameters (so ZeRO shards its state like the rest) and in ``figures.tied``; a first
    stage holds none, so its data-parallel tail is unchanged, and its ``costs.tied_s`` is the
    all-reduce of the tied parameters outside it.

    Memory at position ``s`` with ``d`` replicas is
    ``base + sharded / d + (s - 1) * stash`` (:func:`placement.iteration.stage_memory`), the
    base holding the replicated state and, under ZeRO stage 3, the largest layer gathered.
    """
    ch, pairs = _geometry(la, chain)
    tied_each = np.zeros(la.n) if la.tied is None else la.tied
    sums = _stage_sums(la, ch, pairs, tied_each, (p2p_bandwidth, p2p_latency_s))
    compute, stash, workspace, in_stage = sums.compute, sums.stash, sums.workspace, sums.in_stage
    p2p = np.maximum(sums.p2p - compute, 0.0) if p2p_overlap else sums.p2p  # the exposed part
    load = compute + p2p
    copy = np.where(sums.later, sums.tied, 0.0)
    params = sums.params + copy
    sharded = sums.sharded + np.where(sums.later, sums.sharded_tied, 0.0)
    tied_s = None
    if tied_comm is not None and tied_each.any():
        outside = np.maximum(float(tied_each.sum()) - sums.tied, 0.0)
        if ch is not None:  # first stages are the last row (the whole chain as outer state)
            tied_s = np.zeros_like(sums.tied)
            tied_s[-1] = tied_comm(outside[-1])
        else:
            tied_s = np.where(sums.later, 0.0, tied_comm(np.where(sums.later, 0.0, outside)))
    gathered = la.params + tied_each
    largest = _chain_max(gathered, ch) if ch is not None else _largest(gathered, in_stage)
    held = stash + workspace
    state = (state_bytes_per_parameter, optimizer_bytes_per_parameter, weight_bytes_per_parameter)
    limits = tuple(
        _limit(params, sharded, stash, held, largest, ch, hbm_bytes, max_stages, state, z)
        for z in zero_stages
    )
    one = sums.tp_count == 0
    first = limits[0].max_s
    costs = _segments(
        la,
        ch,
        pairs,
        load,
        load,
        first if first is not None else _layout(np.zeros_like(load, dtype=np.int64), ch),
        one,
        params,
        tied_s,
    )
    base = params * state_bytes_per_parameter + held
    figures = StageFigures(
        compute=_flat(compute, ch),
        p2p=_flat(p2p, ch),
        mem_base=_flat(base, ch),
        mem_stash=_flat(stash, ch),
        in_stage=in_stage,
        recompute=_flat(sums.recompute, ch),
        workspace=_flat(workspace, ch),
        largest=_flat(largest, ch),
        tied=_flat(np.broadcast_to(copy, load.shape), ch),
    )
    return costs, figures, limits


@dataclass(frozen=True, slots=True)
class _Sums:
    """Per candidate stage (see :func:`_stage_sums`)."""

    tied: np.ndarray
    sharded_tied: np.ndarray
    sharded: np.ndarray
    compute: np.ndarray
    recompute: np.ndarray
    params: np.ndarray
    stash: np.ndarray
    tp_count: np.ndarray
    later: np.ndarray
    workspace: np.ndarray
    p2p: np.ndarray
    in_stage: np.ndarray | None


def _stage_sums(la: LayerArrays, ch: _Chain | None, pairs, tied_each: np.ndarray, link) -> _Sums:
    """Per candidate stage: its layers' sums (work, recompute, parameters, sharded
    parameters, stash, tied and sharded tied parameters, tensor-parallel layers), largest
    workspace and boundary messages (``link``: bandwidth, latency), whether a layer precedes
    it (``later``) and, for a DAG, its layers (``in_stage``)."""
    bandwidth, latency = link
    work = la.fwd + la.bwd + la.rec
    sharded_each = la.params if la.sharded_params is None else la.sharded_params
    sharded_tied_each = tied_each if la.sharded_tied is None else la.sharded_tied
    columns = {
        "tied": tied_each,
        "sharded_tied": sharded_tied_each,
        "sharded": sharded_each,
        "compute": work,
        "recompute": la.rec,
        "params": la.params,
        "stash": la.stash,
        "tp_count": la.tp.astype(np.float64),
    }
    if ch is not None:
        out = {k: _span(_prefix(x)) for k, x in columns.items()}
        out["later"] = ch.has_in  # every stage but a first one has a layer before it
        out["workspace"] = _chain_workspace(la, ch)
        out["p2p"] = np.where(ch.has_in, latency + ch.cin / bandwidth, 0.0) + np.where(
            ch.has_out, latency + ch.cout / bandwidth, 0.0
        )
        out["in_stage"] = None
        return _Sums(**out)
    in_stage = pairs.in_stage
    m = in_stage.astype(np.float64)
    out = {k: m @ x for k, x in columns.items()}
    out["later"] = pairs.outer != pairs.full
    out["workspace"] = _stage_workspace(in_stage, la)
    crossing = in_stage[:, la.src] != in_stage[:, la.dst]
    out["p2p"] = crossing.astype(np.float64) @ (latency + la.nbytes / bandwidth)
    out["in_stage"] = in_stage
    return _Sums(**out)


@dataclass(frozen=True, slots=True)
class MemoryLimit:
    """One ZeRO stage's memory limits: ``max_s`` per pair when memory does not depend on the
    data-parallel degree ``d``, else ``max_s_at(d)`` (and ``max_s`` None)."""

    zero: int
    max_s: np.ndarray | None
    max_s_at: Callable[[int], np.ndarray] | None


def _limit(params, shards, stash, held, largest, ch, hbm_bytes, max_stages, state, zero):
    """``held`` is what a stage holds besides its parameters' state (stash and workspace)."""
    replicated, sharded_bytes, gathered = zero_state(state[0], zero, state[1], state[2])
    base = params * replicated + held
    if gathered:
        base += largest * gathered
    if not (sharded_bytes and shards.any()):
        return MemoryLimit(
            zero, _layout(max_stages_fitting(base, stash, hbm_bytes, max_stages), ch), None
        )
    sharded = shards * sharded_bytes

    def max_s_at(d: int) -> np.ndarray:  # where d enters the DP's memory test
        return _layout(max_stages_fitting(base + sharded / d, stash, hbm_bytes, max_stages), ch)

    return MemoryLimit(zero, None, max_s_at)


def _largest(params: np.ndarray, in_stage: np.ndarray) -> np.ndarray:
    """The most parameters of one layer in each pair's stage."""
    return np.where(in_stage, params[None, :], 0.0).max(axis=1, initial=0.0)


def _flat(x: np.ndarray, ch: _Chain | None) -> np.ndarray:
    return x.ravel() if ch is not None else x


# --- the reference objective ----------------------------------------------------------------


def reference_costs(
    la: LayerArrays,
    *,
    chain: bool,
    bandwidth: float,
    max_memory: float,
    adam: bool,
    recompute: bool,
    max_stages: int,
) -> tuple[SegmentCosts, StageFigures]:
    """Stage figures under the reference instance format's own objective.

    Forward: layers in topological order, each starting when its inputs are ready (from
    inside the stage when the producer finishes, from outside at ``bytes / bandwidth``) and
    after the previous layer of the stage; backward likewise in reverse over outgoing edges.
    With recomputation, stages before the last run forward + a combined pass (forward with
    outside inputs ready at 0, then backward). Memory ``2P (+P for Adam) + sum(act)
    + (s - 1) * stash``, stash being all activations, or with recomputation the bytes of
    the edges entering the stage.
    """
    ch, pairs = _geometry(la, chain)
    if ch is not None:
        f = _span(_prefix(la.fwd))
        bk = _span(_prefix(la.bwd))
        fw = ch.cin / bandwidth + f
        bw = ch.cout / bandwidth + bk
        combined = np.maximum(f, ch.cout / bandwidth) + bk
        params = _span(_prefix(la.params))
        act = _span(_prefix(la.stash))
        tp_count = _span(_prefix(la.tp.astype(np.float64)))
        entering = ch.cin
        in_stage = None
    else:
        in_stage = pairs.in_stage
        fw, bw, combined = _simulate(la, in_stage, bandwidth)
        m = in_stage.astype(np.float64)
        params = m @ la.params
        act = m @ la.stash
        tp_count = m @ la.tp.astype(np.float64)
        enters = in_stage[:, la.dst] & ~in_stage[:, la.src]
        entering = enters.astype(np.float64) @ la.nbytes
    base = 2 * params + (params if adam else 0.0) + act
    stash = entering if recompute else act
    max_s = max_stages_fitting(base, stash, max_memory, max_stages)
    load_last = fw + bw
    load_mid = fw + combined if recompute else load_last
    one = tp_count == 0
    costs = _segments(la, ch, pairs, load_last, load_mid, _layout(max_s, ch), one, params)
    figures = StageFigures(
        compute=_flat(load_last, ch),
        p2p=_flat(np.zeros_like(load_last), ch),
        mem_base=_flat(base, ch),
        mem_stash=_flat(stash, ch),
        in_stage=in_stage,
        recompute=_flat(np.zeros_like(load_last), ch),
        workspace=_flat(np.zeros_like(load_last), ch),
        largest=_flat(np.zeros_like(load_last), ch),
        tied=_flat(np.zeros_like(load_last), ch),
    )
    return costs, figures


def _simulate(
    la: LayerArrays, in_stage: np.ndarray, bandwidth: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Forward, backward and combined (recompute) pass times of every pair's stage."""
    q, n = in_stage.shape
    ins: list[list[tuple[int, float]]] = [[] for _ in range(n)]
    outs: list[list[tuple[int, float]]] = [[] for _ in range(n)]
    for u, v, c in zip(la.src.tolist(), la.dst.tolist(), la.nbytes.tolist(), strict=True):
        ins[v].append((u, c / bandwidth))
        outs[u].append((v, c / bandwidth))

    def forward(outside: bool) -> np.ndarray:
        finish = np.zeros((q, n))
        prev = np.zeros(q)
        for v in range(n):
            start = prev.copy()
            for u, arrive in ins[v]:
                ext = arrive if outside else 0.0
                start = np.maximum(start, np.where(in_stage[:, u], finish[:, u], ext))
            finish[:, v] = start + la.fwd[v]
            prev = np.where(in_stage[:, v], finish[:, v], prev)
        return prev

    def backward(begin: np.ndarray) -> np.ndarray:
        finish = np.zeros((q, n))
        prev = begin.copy()
        for v in range(n - 1, -1, -1):
            start = prev.copy()
            for w, arrive in outs[v]:
                start = np.maximum(start, np.where(in_stage[:, w], finish[:, w], arrive))
            finish[:, v] = start + la.bwd[v]
            prev = np.where(in_stage[:, v], finish[:, v], prev)
        return prev

    fw = forward(outside=True)
    bw = backward(np.zeros(q))
    fw_part = forward(outside=False)
    combined = backward(fw_part)
    return fw, bw, combined
