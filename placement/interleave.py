"""Interleaved pipelines (Megatron-LM's virtual stages ``v >= 2``) beside the DP's best.

The DP of :mod:`placement.search` is exact over every placement with ``v = 1``. Interleaving
splits the blocks into ``p * v`` chunks, chunk ``c`` on pipeline rank ``c mod p``, and cuts
the bubble to ``(p - 1) / v`` micro-batches (Narayanan et al. SC21 §2.2). The candidates are
the layouts Megatron accepts: Megatron-LM's even split (:func:`placement.fixed.megatron_chunks`)
where ``p * v`` divides the blocks, else the uneven splits whose first and last chunks carry
fewer blocks (:func:`uneven_sizes`, written as Megatron-Core's pipeline layout); each
pipeline's micro-batches a multiple of ``p``, ``d`` dividing the micro-batches (so
``d * mbs`` divides the global batch), on every graph variant and ZeRO stage of the problem. Only problems without expert
or context parallelism to search (``ep_degrees`` and ``cp_degrees`` both ``(1,)``) get
interleaved layouts, so that they never compete with a search narrower than the DP's.

Each candidate's rank loads and first-rank parameters come from prefix sums, which price it
as :func:`placement.fixed.evaluate_fixed` does without its memory test; candidates are
evaluated in order of that price and only while it can beat the best so far, so the cost is
one evaluation per layout that would win on time, whatever the grid's size.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterator
from functools import lru_cache
from typing import Any

import numpy as np

from phaze_common.errors import Infeasible
from placement import network as net
from placement.chunks import chunk_split
from placement.dp import candidate_degrees
from placement.dp_comm import embedding_allreduce_s, shard_unit, tail_fn
from placement.fixed import evaluate_fixed
from placement.iteration import stage_memory
from placement.layout import Layout
from placement.pipelining import in_flight, pipeline_s
from placement.pipelining import micro_batches_per_pipeline as per
from placement.types import Placement, PlacementProblem, StageGraph

__all__ = ["best_interleaved", "interleaved_floor", "uneven_sizes"]

# (time, t, p, d, v, ZeRO stage, first chunk's blocks of an uneven split or -1)
_Key = tuple[float, int, int, int, int, int, int]


def _divisors(n: int) -> list[int]:
    small = [k for k in range(1, math.isqrt(n) + 1) if n % k == 0]
    return sorted(set(small + [n // k for k in small]))


def best_interleaved(
    problem: PlacementProblem, incumbent_s: float, *, pp: int | None = None, dp: int | None = None
) -> Placement | None:
    """The fastest interleaved layout that fits and beats ``incumbent_s`` seconds per batch
    (None when none does); ``pp`` and ``dp``, when given, fix its pipeline and data-parallel
    degrees (a partial strategy's, :mod:`placement.partial`).

    Best first: each (graph, p, v) has a bound (its compute alone, at its most replicas), and
    is priced only when that bound is below both the incumbent and every layout priced so
    far; the cheapest priced layout is evaluated once no unpriced one can undercut it, so the
    first that fits is the answer. Ties go to the layout priced first, then the smaller t,
    p, d, v and ZeRO stage. None when the framework has no interleaved schedule
    (``problem.interleaving``)."""
    for key, gi in _cheapest(problem, incumbent_s, pp, dp):
        try:  # its price is its time, below every layout left: it wins if it fits
            pl = evaluate_fixed(problem, _layout(problem.graphs[gi], key))
        except Infeasible:
            continue
        return pl if pl.breakdown.iteration_s < incumbent_s else None
    return None


def interleaved_floor(problem: PlacementProblem, limit_s: float) -> tuple[float, int] | None:
    """(time, graph index) of the cheapest interleaved layout under ``limit_s`` whose memory
    floor fits, with no full evaluation: a lower bound on :func:`best_interleaved`'s time
    (None when no layout is under ``limit_s``)."""
    for key, gi in _cheapest(problem, limit_s, None, None):
        return key[0], gi
    return None


def _cheapest(
    problem: PlacementProblem, limit_s: float, pp: int | None, dp: int | None
) -> Iterator[tuple[tuple, int]]:
    """(price key, graph index) of the layouts under ``limit_s`` whose memory floor fits,
    cheapest first (:func:`best_interleaved`). A split's memory floors are asked before it
    is priced (they do not depend on its time): a split none of whose degrees and ZeRO
    stages fits is not priced, and only the layouts that fit enter the queue, which leaves
    the order of those that fit as it was."""
    groups = _groups(problem, limit_s, pp, dp)
    heap: list[tuple[tuple, int]] = []
    k = 0
    while True:
        bound = groups[k][0] if k < len(groups) else math.inf
        if heap and heap[0][0][0] <= bound:
            key, gi = heapq.heappop(heap)
            if key[0] >= limit_s:
                return
            yield key, gi
            continue
        if bound >= limit_s:
            return
        _, gi, sums, p, v, first, ds = groups[k]
        k += 1
        g = problem.graphs[gi]
        fits = {
            (d, z)
            for z in problem.zero_stages
            for d, ok in zip(
                ds.tolist(),
                (
                    _memory_floors(problem, g, sums, (p, v, first), ds, z) <= problem.hbm_bytes
                ).tolist(),
                strict=True,
            )
            if ok
        }
        if not fits:
            continue
        m = problem.global_batch // g.micro_batch
        for key in _priced(problem, g, sums, (p, v, first), m, ds, limit_s):
            if key[0] < limit_s and (key[3], key[5]) in fits:
                heapq.heappush(heap, (key, gi))


def _layout(g: StageGraph, key: _Key) -> Layout:
    _, _, p, d, v, z, first = key  # the key's t is g's width
    split = None
    if first >= 0:
        lo, hi = _Sums(g).chunks(p * v, first)
        split = chunk_split(g, tuple(tuple(range(a, b)) for a, b in zip(lo, hi, strict=True)), v)
    return g.layout.completed(p=p, d=d, v=v, zero=z, split=split)


def _memory_floors(
    problem: PlacementProblem,
    g: StageGraph,
    sums: _Sums,
    shape: tuple[int, int, int],
    ds: np.ndarray,
    zero: int,
) -> np.ndarray:
    """Per degree of ``ds``, a lower bound on the memory per device
    :func:`placement.fixed.evaluate_fixed` finds for the split ``shape`` = (p, v, first)
    under ZeRO stage ``zero``: each rank's parameters, stash and experts summed over its
    chunks (:func:`placement.iteration.stage_memory` is linear in them, and a rank's chunks
    share its in-flight count), without the workspace and ZeRO-3's gathered layer. Worked
    out once per split, degrees, stage and state bytes (:meth:`_Sums.memo`): problems that
    differ in HBM alone compare the same floors with their capacity."""
    key = (
        "floors",
        shape,
        ds.tobytes(),
        zero,
        problem.global_batch,
        problem.state_bytes_per_parameter,
        problem.optimizer_bytes_per_parameter,
    )
    return sums.memo(key, lambda: _floors(problem, g, sums, shape, ds, zero))


def _floors(
    problem: PlacementProblem,
    g: StageGraph,
    sums: _Sums,
    shape: tuple[int, int, int],
    ds: np.ndarray,
    zero: int,
) -> np.ndarray:
    """:func:`_memory_floors` worked out."""
    p, v, first = shape
    per_pipeline = per(problem.global_batch // g.micro_batch, ds)[:, None]
    lo, hi = sums.chunks(p * v, first)
    params = (sums.held[hi] - sums.held[lo]).reshape(v, p).sum(axis=0)
    stash = (sums.stash[hi] - sums.stash[lo]).reshape(v, p).sum(axis=0)
    experts = (sums.experts[hi] - sums.experts[lo]).reshape(v, p).sum(axis=0)
    flight = in_flight(p, np.arange(p), v, per_pipeline)
    mem = stage_memory(
        problem,
        parameters=params,
        stash_bytes=stash,
        in_flight=flight,
        workspace_bytes=0.0,
        d=ds[:, None],
        zero=zero,
        expert_parameters=experts,
        ep=g.ep,
        cp=g.cp,
    )
    floors = np.max(np.broadcast_to(mem.total_bytes, (ds.size, p)), axis=1)
    floors.flags.writeable = False
    return floors


def _groups(
    problem: PlacementProblem, limit_s: float, pp: int | None, dp: int | None
) -> list[tuple]:
    """(bound, graph index, prefix sums, p, v, first, degrees) of every (graph, p, v, split)
    Megatron accepts (at ``pp`` and ``dp`` when given) whose bound is under ``limit_s``,
    lowest bound first; the bound is the time of its slowest rank's compute alone at its
    most replicas (no messages, no tail). ``first`` is -1 for Megatron-LM's even split, else
    the first chunk's blocks of an uneven split (:func:`uneven_sizes`)."""
    if (problem.ep_degrees, problem.cp_degrees) != ((1,), (1,)) or not problem.interleaving:
        # its layouts would leave out the expert and context parallelism searched, or the
        # framework has no interleaved schedule
        return []
    out = []
    devices = problem.cluster.devices
    for gi, g in enumerate(problem.graphs):
        if not g.is_chain or problem.global_batch % g.micro_batch or (g.ep, g.cp) != (1, 1):
            continue
        sums, shapes = _shapes(g, problem.global_batch, devices, pp, dp)
        for quick, p, v, first, ds in shapes:
            if quick >= limit_s:
                continue
            bound = sums.bound(p, v, first, problem.global_batch // g.micro_batch, ds[-1])
            if bound < limit_s:
                out.append((bound, gi, sums, p, v, first, ds))
    out.sort(key=lambda x: x[:2] + x[3:6])
    return out


@lru_cache(maxsize=256)
def _shapes(
    g: StageGraph, global_batch: int, devices: int, pp: int | None, dp: int | None
) -> tuple[_Sums, tuple[tuple, ...]]:
    """Graph ``g``'s prefix sums and, for each of its interleaved splits (:func:`_splits`)
    Megatron accepts on ``devices`` (at ``pp`` and ``dp`` when given), (its compute over
    ``p`` at its most replicas, p, v, first, degrees): what :func:`_groups` compares with a
    limit. Cached: the searches of one design's widths, and of its HBM siblings, ask the
    same graphs again."""
    m = global_batch // g.micro_batch
    sums = _Sums(g)
    every = candidate_degrees(m, 1, devices // g.tp)
    out = []
    for p, v, first in _splits(sums):
        if g.tp * p > devices or pp not in (None, p):
            continue
        ds = every[(every * g.tp * p <= devices) & ((m // every) % p == 0)]
        if dp is not None:
            ds = ds[ds == dp]
        if ds.size == 0:
            continue
        ds.flags.writeable = False
        out.append((pipeline_s(sums.total / p, per(m, ds[-1]), p, v), p, v, first, ds))
    return sums, tuple(out)


def _splits(sums: _Sums) -> Iterator[tuple[int, int, int]]:
    """(p, v, first) of each interleaved split (``p, v >= 2``): Megatron-LM's even one
    (``first`` -1) where ``p * v`` divides the blocks, else each uneven one whose first and
    last chunks carry fewer blocks (:meth:`_Sums.firsts`)."""
    blocks = sums.blocks.size
    for chunks in _divisors(blocks) if blocks else []:
        for p in _divisors(chunks):
            if p >= 2 and chunks // p >= 2:
                yield p, chunks // p, -1
    for p in range(2, sums.n // 2 + 1):
        for v in range(2, sums.n // p + 1):
            for first in sums.firsts(p * v):
                yield p, v, first


class _Sums:
    """Prefix sums of a chain graph's layers: work, parameters, stash, expert parameters,
    tensor-parallel layers, and the bytes of the edge into each layer; and the graph's
    sharded unit (:func:`placement.dp_comm.shard_unit`, asked once per graph, not per
    layout priced)."""

    def __init__(self, g: StageGraph) -> None:
        self.work = np.cumsum([0.0, *(x.fwd_s + x.bwd_s + x.recompute_s for x in g.layers)])
        self.held = np.cumsum([0.0, *(float(x.parameters) for x in g.layers)])
        self.stash = np.cumsum([0.0, *(float(x.stash_bytes) for x in g.layers)])
        self.experts = np.cumsum([0.0, *(float(x.expert_parameters) for x in g.layers)])
        self.tied = np.cumsum([0.0, *(float(x.tied_parameters) for x in g.layers)])
        self.tp = np.cumsum([0, *(x.tensor_parallel for x in g.layers)])
        self.into = np.zeros(len(g.layers))
        for e in g.edges:
            self.into[e.dst] = e.bytes
        self.total = float(self.work[-1])
        self.blocks = np.array([i for i, x in enumerate(g.layers) if x.kind == "block"])
        self.n = len(g.layers)
        self.unit = shard_unit(g)
        self._chunks: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
        self._memo: dict[tuple, Any] = {}

    def bound(self, p: int, v: int, first: int, m: int, d: int) -> float:
        """The time of the slowest rank's compute alone of the split (p, v, first) over
        ``m`` micro-batches at ``d`` replicas (:func:`_groups`); computed once each."""

        def bound() -> float:
            lo, hi = self.chunks(p * v, first)
            slowest = (self.work[hi] - self.work[lo]).reshape(v, p).sum(axis=0).max()
            return float(pipeline_s(slowest, per(m, d), p, v))

        return self.memo(("bound", p, v, first, m, d), bound)

    def memo(self, key: tuple, compute: Callable[[], Any]) -> Any:
        """``compute()``, worked out once per ``key`` for this graph (which it must
        name in full besides the graph: the figures asked of the graph's splits)."""
        found = self._memo.get(key)
        if found is None:
            found = self._memo[key] = compute()
        return found

    def chunks(self, count: int, first: int = -1) -> tuple[np.ndarray, np.ndarray]:
        """First and past-the-end layer of each of ``count`` chunks: Megatron-LM's even split
        (:func:`placement.fixed.megatron_chunks`) when ``first`` is -1, else the uneven split
        whose first chunk holds ``first`` blocks (:func:`uneven_sizes`); computed once per
        (count, first), read-only."""
        found = self._chunks.get((count, first))
        if found is None:
            found = self._chunks[(count, first)] = self._split(count, first)
        return found

    def _split(self, count: int, first: int) -> tuple[np.ndarray, np.ndarray]:
        nb = self.blocks.size
        if first < 0:
            sizes = np.full(count, nb // count)
            sizes[: nb % count] += 1
        else:
            sizes = np.array(uneven_sizes(nb, count, first))
        cuts = np.concatenate(([0], np.cumsum(sizes)))
        ends = np.append(self.blocks, self.blocks[-1] + 1)  # a chunk may end past the blocks
        lo = ends[cuts[:-1]]
        lo[0] = 0
        hi = np.empty(count, dtype=np.int64)
        hi[:-1] = lo[1:]
        hi[-1] = self.n
        lo.flags.writeable = False
        hi.flags.writeable = False
        return lo, hi

    def firsts(self, count: int) -> list[int]:
        """The first-chunk block counts of the uneven splits of ``count`` chunks
        (:func:`uneven_sizes`) whose chunks all hold a layer: none when the blocks divide
        evenly (Megatron-LM's split serves them)."""
        nb = self.blocks.size
        if nb == 0 or count < 3 or nb % count == 0:
            return []
        k = -(-nb // count)
        rest = nb - (count - 2) * k  # blocks of the first and last chunks together
        lone_first = self.blocks[0] > 0  # a layer (the embedding) before the first block
        lone_last = self.blocks[-1] < self.n - 1  # a layer (the head) after the last block
        return [
            f
            for f in range(max(0, rest - k), min(k, rest) + 1)
            if (f or lone_first) and (rest - f or lone_last)
        ]


def uneven_sizes(blocks: int, count: int, first: int) -> list[int]:
    """Blocks per chunk of the uneven split of ``blocks`` into ``count`` chunks whose first
    chunk holds ``first``: the middle chunks ``ceil(blocks / count)`` each, the last the
    rest, so the first and last chunks (the embedding's and the loss's) carry fewer blocks,
    none when the embedding or the loss stands alone (Megatron-Core's
    ``--decoder-first-pipeline-num-layers`` / ``--account-for-embedding-in-pipeline-split``,
    written as ``--pipeline-model-parallel-layout``)."""
    k = -(-blocks // count)
    return [first, *[k] * (count - 2), blocks - first - (count - 2) * k]


def _priced(
    problem: PlacementProblem,
    g: StageGraph,
    sums: _Sums,
    shape: tuple[int, int, int],
    m: int,
    ds: np.ndarray,
    limit_s: float,
) -> list[_Key]:
    """(time before the memory test, t, p, d, v, zero, split) of graph ``g`` with ``p``
    ranks of ``v`` chunks split as ``shape`` = (p, v, first) says (:meth:`_Sums.chunks`) at
    each degree of ``ds`` and each ZeRO stage, as :func:`placement.fixed.evaluate_fixed`
    prices them."""
    t = g.tp
    p, v, split = shape
    lo, hi = sums.chunks(p * v, split)
    compute = sums.work[hi] - sums.work[lo]
    slowest = compute.reshape(v, p).sum(axis=0).max()
    if pipeline_s(slowest, per(m, ds[-1]), p, v) >= limit_s:  # no degree can win
        return []
    first = np.full(ds.size, float((sums.held[hi] - sums.held[lo])[0::p].sum()))
    fns = {z: tail_fn(problem, t, z, m, unit=sums.unit) for z in problem.zero_stages}
    # compute alone (no boundary messages) already too slow at these degrees
    least = np.min([fn(ds, first, slowest) for fn in fns.values()], axis=0)
    keep = pipeline_s(slowest, per(m, ds), p, v) + least < limit_s
    if not keep.any():
        return []
    ds, first = ds[keep], first[keep]
    tp_chunks = int(np.where(sums.tp[hi] > sums.tp[lo], t, 1).sum())
    cut = sums.into[lo[1:]]  # bytes crossing from chunk c to c + 1
    links = [
        net.boundary_link(
            problem.cluster,
            d * tp_chunks // v,
            t,
            g.sequence_parallel,
            sends=problem.p2p_sends,
            gathers=problem.p2p_gathers,
        )
        for d in ds.tolist()
    ]
    bw = np.array([b for b, _ in links])[:, None]
    lat = np.array([x for _, x in links])[:, None]
    sends = lat + cut[None, :] / bw  # (degrees, chunks - 1), as placement.network.p2p_s
    p2p = np.zeros((ds.size, p * v))
    p2p[:, :-1] += sends
    p2p[:, 1:] += sends
    load = np.maximum(compute, p2p) if problem.overlaps_p2p(v) else compute + p2p
    bottleneck = load.reshape(ds.size, v, p).sum(axis=1).max(axis=1)
    pipeline = pipeline_s(bottleneck, per(m, ds), p, v)
    # the tied weights the chunks after the first copy, all-reduced once per iteration
    copies = float(sums.tied[-1] - (sums.tied[hi[0]] - sums.tied[lo[0]]))
    used = ds * tp_chunks // v
    embedding = embedding_allreduce_s(problem, problem.cluster.spans_nodes(used), copies)
    out = []
    for z, fn in fns.items():
        time = pipeline + embedding + fn(ds, first, bottleneck)
        out += [(x, t, p, d, v, z, split) for x, d in zip(time.tolist(), ds.tolist(), strict=True)]
    return out
