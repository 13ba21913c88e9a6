"""Evaluate a given parallel strategy (t, p, d, micro-batch, recompute, v, sp, zero, ep, cp)
with the same model.

This is how Phaze compares itself with published systems (Megatron-LM) and baselines. The
stages follow Megatron-LM: the transformer blocks are split evenly into ``p * v`` model
chunks, the layers before the first block join chunk 0 and those after the last block join
the last chunk; chunk ``c`` runs on pipeline rank ``c mod p`` (interleaved schedule,
Narayanan et al. SC21 §2.2). Per micro-batch a rank runs all its chunks, so its load is their
sum (including v times the boundary messages, priced by
:func:`placement.network.boundary_link`), and the iteration is priced by
:func:`placement.iteration.assemble`:

    time per batch = load * (m' + (p - 1) / v) + allreduce(d, rank 0's parameters)
                     + optimizer step(rank 0's parameters),

``m'`` the micro-batches per pipeline (the interleaved-1F1B bubble is ``(p - 1) / v`` of a
micro-batch's time, SC21 eq. 2). Memory on rank ``r`` holds its chunks' weights, gradients
and optimizer state, the largest workspace, and the activations of the micro-batches in
flight: ``p - r`` under 1F1B, and under interleaving
``min(2 (p - r - 1) + (v - 1) p + 1, m' v)`` chunk activations (Megatron-LM's warm-up count,
``megatron/core/pipeline_parallel/schedules.py``), each ``1/v`` of the rank's stash on average.
Expert (``ep``) and context (``cp``) parallelism change the layers
(:func:`placement.ep_cp.ep_cp_graph`); the job uses ``t * p * d * cp`` devices.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from phaze_common.errors import ConfigError, Infeasible
from placement import network as net
from placement.ep_cp import ep_cp_graph
from placement.iteration import assemble, embedding_allreduce_s, stage_memory
from placement.search import gib
from placement.types import (
    ZERO_STAGES,
    Placement,
    PlacementProblem,
    RecomputeMode,
    Stage,
    StageGraph,
)

__all__ = ["Strategy", "parse_strategy", "megatron_chunks", "evaluate_fixed"]


@dataclass(frozen=True, slots=True)
class Strategy:
    """A fixed parallel strategy; ``virtual_stages`` is Megatron's interleaving ``v``.

    ``unset`` names the fields the user left open (:func:`parse_strategy`); they hold
    placeholders until :func:`placement.partial.evaluate_partial` chooses them.
    """

    tp: int
    pp: int
    dp: int
    micro_batch: int = 1
    virtual_stages: int = 1
    recompute: RecomputeMode = "none"
    sequence_parallel: bool = False
    zero: int = 0
    ep: int = 1
    cp: int = 1
    unset: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        problems = [
            f"strategy: {k} = {getattr(self, k)!r} must be an integer >= 1"
            for k in ("tp", "pp", "dp", "micro_batch", "virtual_stages", "ep", "cp")
            if not (isinstance(getattr(self, k), int) and getattr(self, k) >= 1)
        ]
        if self.recompute not in ("none", "selective", "full"):
            problems.append(
                f"strategy: recompute = {self.recompute!r} must be one of none, selective, full"
            )
        if self.zero not in ZERO_STAGES or isinstance(self.zero, bool):
            problems.append(f"strategy: zero = {self.zero!r} must be 0, 1, 2 or 3")
        if not self.unset <= _FIELDS:
            problems.append(f"strategy: unset = {sorted(self.unset)} must name its fields")
        if problems:
            raise ConfigError("; ".join(problems))


_KEYS = {
    "t": "tp",
    "tp": "tp",
    "p": "pp",
    "pp": "pp",
    "d": "dp",
    "dp": "dp",
    "mbs": "micro_batch",
    "v": "virtual_stages",
    "recompute": "recompute",
    "sp": "sequence_parallel",
    "zero": "zero",
    "ep": "ep",
    "cp": "cp",
}
_FIELDS = frozenset(_KEYS.values())


def parse_strategy(text: str) -> Strategy:
    """Parse ``"t=8,p=8,d=1,mbs=1,v=3,recompute=full,sp=on,zero=1,ep=1,cp=1"``; any key may
    be left out (``Strategy.unset`` names those; ``evaluate_partial`` chooses them).

    Examples
    --------
    >>> parse_strategy("t=8,p=8,d=1,v=3,recompute=full,sp=on").virtual_stages
    3
    """
    import difflib

    fields: dict[str, object] = {}
    problems = []
    for part in filter(None, (x.strip() for x in text.split(","))):
        m = re.fullmatch(r"([a-z]+)=([A-Za-z0-9]+)", part)
        if not m:
            problems.append(f"strategy: {part!r} must look like key=value")
            continue
        key, value = m.groups()
        if key not in _KEYS:
            close = difflib.get_close_matches(key, list(_KEYS), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            problems.append(f"strategy: unknown key {key!r}{hint} (known: {', '.join(_KEYS)})")
            continue
        name = _KEYS[key]
        if name == "sequence_parallel":
            if value not in ("on", "off", "true", "false", "1", "0"):
                problems.append(f"strategy: sp = {value!r} must be on or off")
            fields[name] = value in ("on", "true", "1")
        elif name == "recompute":
            fields[name] = value
        elif value.isdigit():
            fields[name] = int(value)
        else:
            problems.append(f"strategy: {key} = {value!r} must be a positive integer")
    if problems:
        raise ConfigError("; ".join(problems))
    return Strategy(**{"tp": 1, "pp": 1, "dp": 1, **fields}, unset=_FIELDS - set(fields))


def megatron_chunks(graph: StageGraph, chunks: int) -> tuple[tuple[int, ...], ...]:
    """Megatron-LM's split of ``graph`` (a chain) into ``chunks`` contiguous model chunks.

    Blocks (``kind == "block"``) are split as evenly as possible, earlier chunks taking the
    remainder; layers before the first block go to chunk 0, after the last block to the last.
    """
    blocks = [i for i, layer in enumerate(graph.layers) if layer.kind == "block"]
    if not graph.is_chain:
        raise ConfigError(f"strategy: tp={graph.tp} graph is not a chain; give the stages")
    if len(blocks) < chunks:
        raise ConfigError(
            f"strategy: p * v = {chunks} model chunks but the model has {len(blocks)} blocks; "
            "each chunk needs at least one"
        )
    sizes = [len(a) for a in np.array_split(np.arange(len(blocks)), chunks)]
    cuts = np.cumsum([0, *sizes])
    n = len(graph.layers)
    out = []
    for c in range(chunks):
        lo = 0 if c == 0 else blocks[cuts[c]]
        hi = n if c == chunks - 1 else blocks[cuts[c + 1]]
        out.append(tuple(range(lo, hi)))
    return tuple(out)


def _variant(problem: PlacementProblem, s: Strategy) -> StageGraph:
    for g in problem.graphs:
        if (g.tp, g.micro_batch, g.recompute, g.sequence_parallel) == (
            s.tp,
            s.micro_batch,
            s.recompute,
            s.sequence_parallel,
        ):
            return _ep_cp(problem, g, s)
    have = ", ".join(
        f"(t={g.tp}, mbs={g.micro_batch}, recompute={g.recompute}, sp={g.sequence_parallel})"
        for g in problem.graphs
    )
    raise ConfigError(
        f"strategy: no graph for t={s.tp}, mbs={s.micro_batch}, recompute={s.recompute}, "
        f"sp={s.sequence_parallel} (have {have})"
    )


def _ep_cp(problem: PlacementProblem, g: StageGraph, s: Strategy) -> StageGraph:
    """``g`` at the strategy's ``ep`` and ``cp``; ConfigError when ``ep`` does not fit."""
    if g.experts == 1 and s.ep > 1:
        raise ConfigError(
            f"strategy: ep = {s.ep} needs a mixture-of-experts model; this one is dense "
            "(allowed: ep = 1)"
        )
    if g.experts % s.ep or s.dp % s.ep:
        allowed = [e for e in range(1, g.experts + 1) if g.experts % e == 0 and s.dp % e == 0]
        raise ConfigError(
            f"strategy: ep = {s.ep} must divide the {g.experts} experts and d = {s.dp} "
            f"(allowed: {', '.join(map(str, allowed))})"
        )
    if (g.ep, g.cp) != (1, 1):
        if (g.ep, g.cp) != (s.ep, s.cp):
            raise ConfigError(f"strategy: the graph is at ep={g.ep}, cp={g.cp}")
        return g
    return ep_cp_graph(g, s.ep, s.cp, problem.cluster)


def evaluate_fixed(
    problem: PlacementProblem,
    strategy: Strategy,
    *,
    chunks: tuple[tuple[int, ...], ...] | None = None,
    check_memory: bool = True,
) -> Placement:
    """Time per batch, memory and the rest of a fixed strategy.

    ``chunks`` overrides Megatron's split (``p * v`` contiguous layer groups in pipeline
    order). Raises ConfigError when the strategy does not match the problem and Infeasible
    when it does not fit the memory (unless ``check_memory`` is False).
    """
    s = strategy
    graph = _variant(problem, s)
    p, v, d, t, cp = s.pp, s.virtual_stages, s.dp, s.tp, s.cp
    if t * p * d * cp > problem.cluster.devices:
        raise ConfigError(
            f"strategy: t*p*d*cp = {t}*{p}*{d}*{cp} = {t * p * d * cp} devices, the cluster "
            f"has {problem.cluster.devices}"
        )
    if v > 1 and p < 2:
        raise ConfigError(
            f"strategy: v = {v} interleaved chunks need p >= 2 pipeline stages (got p = {p})"
        )
    parts = chunks if chunks is not None else megatron_chunks(graph, p * v)
    if len(parts) != p * v or sorted(i for c in parts for i in c) != list(range(len(graph.layers))):
        raise ConfigError(
            f"strategy: chunks must be {p * v} groups covering every layer once "
            f"(got {len(parts)} groups)"
        )
    m = problem.global_batch // s.micro_batch
    if m % d:
        raise ConfigError(
            f"strategy: d * mbs = {d} * {s.micro_batch} must divide the global batch of "
            f"{problem.global_batch} sequences (every replica runs whole micro-batches)"
        )
    per_pipeline = m // d
    if v > 1 and per_pipeline % p:
        # Megatron-LM's interleaved 1F1B schedule refuses this (schedules.py,
        # forward_backward_pipelining_with_interleaving)
        raise ConfigError(
            f"strategy: with v = {v} interleaved chunks each pipeline's {per_pipeline} "
            f"micro-batches must be a multiple of p = {p} (Megatron-LM's interleaved schedule)"
        )
    used = (
        d * cp * sum(t if any(graph.layers[i].tensor_parallel for i in c) else 1 for c in parts)
    ) // v
    bw, lat = net.boundary_link(
        problem.cluster,
        used,
        t,
        graph.sequence_parallel,
        problem.collectives,
        max((e.bytes for e in graph.edges), default=0.0),
    )
    pos = {}
    for c, layers in enumerate(parts):
        for i in layers:
            pos[i] = c
    crossing = [e for e in graph.edges if pos[e.src] != pos[e.dst]]
    stages = []
    for r in range(p):
        mine = [c for c in range(p * v) if c % p == r]
        if v == 1:
            in_flight = float(p - r)
        else:
            in_flight = min(2 * (p - r - 1) + (v - 1) * p + 1, per_pipeline * v) / v
        ws = [max((graph.layers[i].workspace_bytes for i in parts[c]), default=0.0) for c in mine]
        top = int(np.argmax(ws))
        # one gathered layer at a time (ZeRO-3): the rank's largest, counted on one chunk
        big = [
            max(
                (graph.layers[i].parameters + graph.layers[i].tied_parameters for i in parts[c]),
                default=0,
            )
            for c in mine
        ]
        widest = int(np.argmax(big))
        for j, c in enumerate(mine):
            layers = [graph.layers[i] for i in parts[c]]
            compute = sum(x.fwd_s + x.bwd_s + x.recompute_s for x in layers)
            p2p = sum(
                net.p2p_s(e.bytes, (bw, lat)) for e in crossing if c in (pos[e.src], pos[e.dst])
            )
            if problem.p2p_overlap:
                p2p = max(p2p - compute, 0.0)  # the exposed part
            # a chunk after the first keeps a copy of the tied weights of its layers
            tied = float(sum(x.tied_parameters for x in layers)) if c else 0.0
            memory = {
                "parameters": float(sum(x.parameters for x in layers)) + tied,
                "stash_bytes": float(sum(x.stash_bytes for x in layers)),
                "in_flight": float(in_flight),
                "workspace_bytes": float(ws[j] if j == top else 0.0),
                "largest_layer_parameters": float(big[j] if j == widest else 0.0),
                "expert_parameters": float(sum(x.expert_parameters for x in layers)),
            }
            devices = t if any(x.tensor_parallel for x in layers) else 1
            stages.append(
                Stage(
                    layers=parts[c],
                    devices=devices,
                    load_s=compute + p2p,
                    compute_s=compute,
                    p2p_s=p2p,
                    memory_bytes=stage_memory(
                        problem, d=d, zero=s.zero, ep=s.ep, cp=cp, **memory
                    ).total_bytes,
                    device=r,
                    recompute_s=sum(x.recompute_s for x in layers),
                    tp_comm_s=sum(x.tp_comm_s for x in layers),
                    ep_comm_s=sum(x.ep_comm_s for x in layers),
                    cp_comm_s=sum(x.cp_comm_s for x in layers),
                    tied_parameters=tied,
                    **memory,
                )
            )
    stages.sort(key=lambda st: min(st.layers) if st.layers else 0)
    firsts = [graph.layers[i] for c in range(0, p * v, p) for i in parts[c]]
    first_params = sum(x.parameters for x in firsts)
    placement = assemble(
        problem,
        graph,
        tuple(stages),
        d=d,
        v=v,
        micro_batches=per_pipeline,
        first_stage_params=float(first_params),
        zero=s.zero,
        first_stage_expert_params=float(sum(x.expert_parameters for x in firsts)),
        embedding_comm_s=float(
            embedding_allreduce_s(
                problem,
                used > problem.cluster.devices_per_node,
                sum(st.tied_parameters for st in stages),
            )
        ),
    )
    if check_memory and placement.memory_per_device_bytes > problem.hbm_bytes:
        raise Infeasible(
            f"needs {gib(placement.memory_per_device_bytes)} per device, has "
            f"{gib(problem.hbm_bytes)} (t={t}, p={p}, d={d}, mbs={s.micro_batch}, v={v}, "
            f"recompute={s.recompute}, zero={s.zero}, ep={s.ep}, cp={cp})"
        )
    return placement
