"""The data-parallel collectives of one iteration and the part of them that is exposed.

One home for what the time model (:func:`dp_terms`, :func:`tail_fn`) and the energy model
(:func:`placement.energy.iteration_energy`) read: which collectives ZeRO stage ``zero`` runs
(:func:`dp_collectives`), how many bytes each moves, and how much of their time a framework
hides behind compute:

* a bucketed gradient reduction (``problem.dp_overlap``) exposes only its last bucket, and a
  bucketed all-gather of the updated weights (``problem.param_gather_overlap``) only its
  first (:func:`exposed_reduction_parameters`; Megatron-Core's buckets);
* sharded data parallelism with prefetch (``problem.sharded_prefetch``: FSDP, DeepSpeed
  ZeRO-3) runs its per-micro-batch collectives unit by unit, one unit per layer: the
  all-gather of unit ``i + 1`` beside unit ``i``'s compute, each reduce-scatter beside the
  next unit's backward (:func:`prefetched_exposed_s`); their bytes hide, their ring
  latency does not (:func:`dp_time`).

Collectives run on the rates :func:`placement.network.measured_link` gives at their type,
size and the NICs the group drives in each node.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from placement import network as net
from placement.pipelining import micro_batches_per_pipeline
from placement.types import PlacementProblem, StageGraph

__all__ = [
    "DpCollective",
    "DpTime",
    "dp_collectives",
    "dp_terms",
    "dp_time",
    "embedding_allreduce_s",
    "exposed_reduction_parameters",
    "prefetched_exposed_s",
    "shard_unit",
    "tail_fn",
]

_BUCKET_PARAMETERS = 40e6
_BUCKET_PARAMETERS_PER_D = 1e6


def exposed_reduction_parameters(problem: PlacementProblem | DpRates, d, params):
    """The parameters whose gradient reduction is exposed: all of rank 0's, or with an
    overlapped reduction (``problem.dp_overlap``) only its last bucket, the others having
    been reduced beside the backward pass. Megatron-LM buckets ``max(40e6, 1e6 * d)``
    parameters (megatron/core/distributed/distributed_data_parallel.py,
    ``ddp_config.bucket_size``). Never decreases with ``d`` or the parameters."""
    if not problem.dp_overlap:
        return params
    return bucket_parameters(d, params)


def bucket_parameters(d, params):
    """One bucket of Megatron-Core's gradient buffer: ``max(40e6, 1e6 * d)`` parameters, at
    most ``params``."""
    return np.minimum(params, np.maximum(_BUCKET_PARAMETERS, _BUCKET_PARAMETERS_PER_D * d))


def prefetched_exposed_s(total_s, edge_s, hidden_s):
    """Exposed seconds of collectives run unit by unit, each beside the previous unit's
    compute: ``max(edge, total - hidden)``.

    With ``n`` equal units of ``c`` seconds of collectives and ``f`` of compute each, the
    first unit's collectives wait and the others hide behind the unit before them:
    ``c + (n - 1) max(0, c - f)``, which is ``max(c, n c - (n - 1) f)``: ``edge`` the
    collectives of one unit, ``total = n c``, ``hidden = (n - 1) f`` the compute beside
    which the others run. Arrays broadcast.

    >>> float(prefetched_exposed_s(10.0, 1.0, 20.0)), float(prefetched_exposed_s(10.0, 1.0, 4.0))
    (1.0, 6.0)
    """
    return np.maximum(edge_s, total_s - hidden_s)


def shard_unit(graph: StageGraph, columns: dict | None = None) -> tuple[float, float]:
    """(parameters, compute seconds per micro-batch) of the unit sharded data parallelism
    gathers at a time: the graph's largest block (FSDP and DeepSpeed wrap each transformer
    block), else its largest layer; ``columns`` (:func:`placement.ep_cp.layer_columns`, at
    other expert- and context-parallel degrees) replace the layers' figures."""
    if columns is None:
        params = np.array([x.parameters for x in graph.layers], dtype=np.float64)
        work = np.array([x.fwd_s + x.bwd_s + x.recompute_s for x in graph.layers])
    else:
        params = columns["parameters"]
        work = columns["fwd_s"] + columns["bwd_s"] + columns["recompute_s"]
    blocks = np.array([x.kind == "block" for x in graph.layers])
    pick = np.where(blocks, params, -1.0) if blocks.any() else params
    i = int(np.argmax(pick))
    return float(params[i]), float(work[i])


@dataclass(frozen=True, slots=True)
class DpTime:
    """The data-parallel collectives of one iteration (arrays over the degrees asked):
    ``exposed_s`` the iteration waits for (with the compute the hidden ones hold),
    ``overlapped_s`` of their time run beside compute, ``unoverlapped_s`` all of their time
    end to end (``overlapped_s`` plus the part exposed), ``step_s`` the optimizer step."""

    exposed_s: np.ndarray
    overlapped_s: np.ndarray
    unoverlapped_s: np.ndarray
    step_s: np.ndarray


def dp_terms(
    problem: PlacementProblem,
    t: int,
    zero: int,
    d: np.ndarray,
    params: np.ndarray,
    m: int,
    **kw,
) -> tuple[np.ndarray, np.ndarray]:
    """(exposed data-parallel communication, optimizer step) seconds of :func:`dp_time`."""
    parts = dp_time(problem, t, zero, d, params, m, report=False, **kw)
    return parts.exposed_s, parts.step_s


def _ring_share(n, ep: int, expert_params, params):
    """(rank 0's expert parameters, bytes each of the ``n`` ranks sends per byte of rank 0's
    parameters per pass): the expert part runs on its own ring of ``n / ep`` ranks."""
    if not np.asarray(expert_params).any():  # every parameter on the dense ring
        return 0.0, (n - 1) / n
    n_expert = np.maximum(n // ep, 1)
    expert = np.minimum(expert_params, params)
    part = np.where(params > 0, expert / np.maximum(params, 1e-300), 0.0)
    return expert, (1.0 - part) * (n - 1) / n + part * (n_expert - 1) / n_expert


def _step_s(problem: PlacementProblem, zero: int, params, expert, ep: int, n):
    """The optimizer step's seconds: it updates the shard a device owns (all of rank 0's
    ``params`` below ZeRO stage 1); the cached low-precision weight copies are cast afresh
    from the weights it holds (all of them below ZeRO stage 3)."""
    sharded = sharded_parameters(params, expert, ep) / n
    held = sharded if zero >= 1 else params
    weights = sharded if zero == 3 else params
    return (
        held * problem.optimizer_s_per_parameter + weights * problem.weight_refresh_s_per_parameter
    )


def _ring_s(
    problem: PlacementProblem | DpRates, c: DpCollective, nbytes, passes, inter, n, per_node
):
    """(latency, seconds moving bytes) of one collective ``c`` of ``nbytes`` in ``passes``
    over the ``n`` data-parallel ranks, ``per_node`` of them in a node."""
    bw, lat = net.measured_link(
        problem.cluster, problem.collectives, inter, nbytes, c.link_kind, passes, per_node
    )
    if c.link_kind == "ring" and np.any(inter):
        lat = np.where(inter, net.ring_latency_s(n, per_node), lat)
    return lat, passes * nbytes / bw


def dp_time(
    problem: PlacementProblem,
    t: int,
    zero: int,
    d: np.ndarray,
    params: np.ndarray,
    m: int,
    *,
    cp: int = 1,
    ep: int = 1,
    expert_params: float | np.ndarray = 0.0,
    load_s: float | np.ndarray = 0.0,
    unit: tuple[float, float] = (0.0, 0.0),
    report: bool = True,
) -> DpTime:
    """The data-parallel collectives' time (:class:`DpTime`) for arrays of degrees ``d``
    (each dividing the ``m`` micro-batches) and rank 0's ``params``; without ``report``
    (the search's inner loop) the hidden buckets are priced only where they hold compute,
    so ``overlapped_s`` and ``unoverlapped_s`` may leave them out.

    The collectives are :func:`dp_collectives`'. Where the framework overlaps the gradient
    reduction with the backward pass (``problem.dp_overlap``), each once-per-iteration
    reduction exposes only its last bucket, and with ``problem.param_gather_overlap`` the
    all-gather of the updated weights only its first (:func:`bucket_parameters`). With
    ``problem.sharded_prefetch`` the per-micro-batch collectives of ZeRO-2/3 run per
    ``unit`` (its parameters and compute seconds, :func:`shard_unit`), hidden behind the
    bottleneck's ``load_s`` per micro-batch but one unit's compute
    (:func:`prefetched_exposed_s`); otherwise they are exposed whole. Prefetch hides a
    unit's bytes, not its ring latency: a collective over ``n`` ranks ends only after the
    ``n - 1`` handshakes of its ring (:func:`placement.network.ring_latency_s`), which start
    when the last rank reaches it, so each unit's latency is exposed (this is what grows
    with the data-parallel degree at a fixed recipe). With the optimizer
    state sharded (stage >= 1) each replica steps its shard. Neither term decreases with
    ``params``; the communication falls by at most ``m / d`` times a rise of ``load_s``.

    The rings run over the ``d * cp`` ranks holding the same weights (context-parallel ranks
    compute on different tokens, so their gradients are summed too), ``t`` ranks apart; the
    ``expert_params`` among ``params`` (``1/ep`` of the experts) over the ``d * cp / ep``
    ranks holding the same experts. The search's DP gives no ``expert_params`` (it does not
    track them per stage): it prices all of rank 0's parameters on the longer ring, never
    less.
    """
    rates = DpRates.of(problem)
    exposed, overlapped, unoverlapped = _collectives_s(
        rates, t, zero, d, params, m, cp, ep, expert_params, load_s, unit, report
    )
    n = d * cp
    expert, _ = _ring_share(n, ep, expert_params, params)
    return DpTime(
        exposed_s=exposed,
        overlapped_s=overlapped,
        unoverlapped_s=unoverlapped,
        step_s=_step_s(problem, zero, params, expert, ep, n),
    )


@dataclass(frozen=True, slots=True)
class DpRates:
    """What the data-parallel collectives' time reads of a :class:`PlacementProblem`: its
    cluster, collective curve and framework's overlap settings (not the HBM, not the
    optimizer step), so problems that differ only there share :func:`tail_fn`'s cache."""

    cluster: object
    collectives: object
    dp_overlap: bool
    param_gather_overlap: bool
    sharded_prefetch: bool
    regather_per_micro_batch: bool
    gradient_bytes_per_parameter: float
    weight_bytes_per_parameter: float
    collective_compute_share: float

    @classmethod
    def of(cls, problem: PlacementProblem) -> DpRates:
        return cls(
            problem.cluster,
            problem.collectives,
            problem.dp_overlap,
            problem.param_gather_overlap,
            problem.sharded_prefetch,
            problem.regather_per_micro_batch,
            problem.gradient_bytes_per_parameter,
            problem.weight_bytes_per_parameter,
            problem.collective_compute_share,
        )


def _collectives_s(
    rates: DpRates,
    t: int,
    zero: int,
    d: np.ndarray,
    params: np.ndarray,
    m: int,
    cp: int,
    ep: int,
    expert_params: float | np.ndarray,
    load_s: float | np.ndarray,
    unit: tuple[float, float],
    report: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(exposed, overlapped, unoverlapped) seconds of :func:`dp_time`'s collectives."""
    cl = rates.cluster
    inter = cl.spans_nodes(t * cp * d)
    n = d * cp
    _, share = _ring_share(n, ep, expert_params, params)
    per_node = net.members_per_node(cl, t, n)

    def ring(c: DpCollective, what):
        return _ring_s(rates, c, what * c.bytes_per_parameter, c.passes * share, inter, n, per_node)

    per_mb = micro_batches_per_pipeline(m, d)
    unit_params, unit_s = unit
    prefetch = rates.sharded_prefetch and unit_params > 0
    comm, total, edge, overlapped = 0.0, 0.0, 0.0, 0.0
    for c in dp_collectives(
        zero,
        per_mb,
        rates.gradient_bytes_per_parameter,
        rates.weight_bytes_per_parameter,
        rates.regather_per_micro_batch,
    ):
        if prefetch and c.per_micro_batch:
            size = np.minimum(unit_params, params)
            lat, moving = ring(c, size)
            units = params / np.maximum(size, 1e-300)
            comm = comm + c.count * lat * units  # each unit's ring latency waits
            total = total + c.count * moving * units
            edge = edge + per_mb * moving  # the first gather, the last reduce-scatter
            continue
        if c.what == "weights":
            what = bucket_parameters(n, params) if rates.param_gather_overlap else params
        else:
            what = exposed_reduction_parameters(rates, n, params)
        exposed = c.count * sum(ring(c, what))
        comm = comm + exposed
        if report or rates.collective_compute_share:  # the buckets beside the compute
            overlapped = overlapped + np.maximum(c.count * sum(ring(c, params)) - exposed, 0.0)
    if prefetch:
        hidden = per_mb * np.maximum(np.asarray(load_s) - unit_s, 0.0)
        exposed = prefetched_exposed_s(total, edge, hidden)
        comm = comm + exposed
        overlapped = overlapped + np.maximum(total - exposed, 0.0)
    unoverlapped = comm + overlapped
    # a collective hidden behind compute still holds its share of the chip while it runs
    comm = comm + rates.collective_compute_share * overlapped
    alone = n <= 1
    return (
        np.where(alone, 0.0, comm),
        np.where(alone, 0.0, overlapped),
        np.where(alone, 0.0, unoverlapped),
    )


def sharded_parameters(parameters, expert_parameters, ep: int):
    """What a device's ``parameters`` count as when sharded over its ``d * cp``
    data-parallel ranks: its expert parameters, ``1/ep`` of the experts replicated over only
    ``d * cp / ep`` ranks, count ``ep`` times."""
    return parameters + expert_parameters * (ep - 1)


@dataclass(frozen=True, slots=True)
class DpCollective:
    """``count`` ring collectives of one iteration over the data-parallel group: an
    ``all_reduce`` (two passes of the ring), a ``reduce_scatter`` or an ``all_gather`` (one
    pass each) of the ``gradients`` or the ``weights``, at ``bytes_per_parameter``;
    ``per_micro_batch`` when they run with every micro-batch (ZeRO-2/3). The time model
    prices these per rank; the iteration's ledger records them over the whole job
    (:func:`placement.ledger.dp_ledger`)."""

    kind: str
    what: str
    count: object
    bytes_per_parameter: float
    per_micro_batch: bool = False

    @property
    def passes(self) -> float:
        return 2.0 if self.kind == "all_reduce" else 1.0

    @property
    def link_kind(self) -> str:
        """The transfer kind :func:`placement.network.measured_link` prices it as."""
        return "all_reduce" if self.kind == "all_reduce" else "ring"


def dp_collectives(
    zero: int,
    micro_batches,
    gradient_bytes_per_parameter: float,
    weight_bytes_per_parameter: float,
    regather_per_micro_batch: bool = False,
):
    """The data-parallel collectives of one iteration of a pipeline running
    ``micro_batches`` under ZeRO stage ``zero``; what both its time (:func:`dp_terms`) and
    its energy (:func:`placement.energy.iteration_energy`) read.

    Stage 0 all-reduces the gradients once; stage 1 reduce-scatters them and all-gathers the
    updated weights; stage 2 keeps only its shard of the gradients, so it reduce-scatters
    after each micro-batch; stage 3 also all-gathers the weights before each forward and
    each backward pass (Rajbhandari et al., SC20, §5 and §7; Zhao et al., VLDB 2023, §3).
    With ``regather_per_micro_batch`` stage 2 frees the gathered weights after each
    backward pass and gathers them again before each micro-batch's forward pass, as
    PyTorch FSDP's ``SHARD_GRAD_OP`` does while gradients synchronise
    (``_should_free_in_backward`` in torch/distributed/fsdp/_runtime_utils.py; FSDP2's
    ``reshard_after_backward``), where DeepSpeed's ZeRO-2 gathers once per step.
    The gradients move at ``gradient_bytes_per_parameter``, the weights at the weights'
    format, ``weight_bytes_per_parameter``.

    >>> [(c.kind, c.count) for c in dp_collectives(2, 4, 2.0, 2.0)]
    [('reduce_scatter', 4), ('all_gather', 1)]
    >>> [(c.kind, c.count) for c in dp_collectives(2, 4, 2.0, 2.0, True)]
    [('reduce_scatter', 4), ('all_gather', 4)]
    """
    grads = gradient_bytes_per_parameter
    if zero == 0:
        return (DpCollective("all_reduce", "gradients", 1, grads),)
    reductions = 1 if zero == 1 else micro_batches
    regather = zero == 2 and regather_per_micro_batch
    gathers = 2 * micro_batches if zero == 3 else micro_batches if regather else 1
    per_mb_gather = zero == 3 or regather
    return (
        DpCollective("reduce_scatter", "gradients", reductions, grads, zero >= 2),
        DpCollective("all_gather", "weights", gathers, weight_bytes_per_parameter, per_mb_gather),
    )


def embedding_allreduce_s(problem: PlacementProblem, inter_node, tied_parameters):
    """Seconds of the all-reduce of the gradients of ``tied_parameters`` copied on another
    stage between the two stages holding them: two ranks, on the pipeline's links (across
    nodes as the stage boundaries are), at the data-parallel reduction's bytes per parameter;
    0 without a copy. Arrays broadcast."""
    nbytes = np.asarray(tied_parameters, dtype=np.float64) * problem.gradient_bytes_per_parameter
    bw, lat = net.measured_link(
        problem.cluster, problem.collectives, inter_node, nbytes, "all_reduce"
    )
    return np.where(nbytes > 0, lat + nbytes / bw, 0.0)


def tail_fn(
    problem: PlacementProblem,
    t: int,
    zero: int,
    m: int,
    *,
    cp: int = 1,
    unit: tuple[float, float] = (0.0, 0.0),
) -> Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]:
    """The exposed time after the pipeline flush for arrays of degrees ``d``, rank 0's
    parameters and the bottleneck's load per micro-batch (:func:`dp_terms`, every parameter
    on the dense ring, ``unit`` the sharded unit of :func:`shard_unit`). It never decreases
    with the parameters and falls by at most ``m / d`` times a rise of the load, so the
    pipeline's time plus it never falls when the load rises.

    The collectives' part is cached by its arguments' values (:func:`_exposed_s`): the
    placement searches of one design's graphs, and of its HBM siblings, ask the same degrees
    and parameters again and again; the load is part of the key only where it counts (with
    prefetch)."""
    rates = DpRates.of(problem)
    fixed = (rates, t, zero, m, cp, unit)

    def tail(d: np.ndarray, params: np.ndarray, load_s: np.ndarray) -> np.ndarray:
        load = _value_key(load_s) if rates.sharded_prefetch else None
        comm = _exposed_s(fixed, _value_key(d), _value_key(params), load)
        n = d * cp
        expert, _ = _ring_share(n, 1, 0.0, params)
        return comm + _step_s(problem, zero, params, expert, 1, n)

    return tail


def _value_key(x) -> tuple:
    """A hashable key holding an array's (or a number's) exact value, which
    :func:`_from_key` turns back into the same array."""
    if isinstance(x, np.ndarray):
        return (x.shape, x.dtype.str, x.tobytes())
    return ((), None, x)


def _from_key(key: tuple):
    shape, dtype, data = key
    if dtype is None:
        return data
    return np.frombuffer(data, dtype=dtype).reshape(shape)


@functools.lru_cache(maxsize=1 << 13)
def _exposed_s(fixed: tuple, d: tuple, params: tuple, load: tuple | None) -> np.ndarray:
    """The exposed collectives' seconds of :func:`tail_fn` (``fixed``: its rates, t, ZeRO
    stage, micro-batches, cp and unit); the same values as :func:`dp_terms`' first term."""
    rates, t, zero, m, cp, unit = fixed
    load_s = 0.0 if load is None else _from_key(load)
    exposed, _, _ = _collectives_s(
        rates, t, zero, _from_key(d), _from_key(params), m, cp, 1, 0.0, load_s, unit, False
    )
    exposed.flags.writeable = False
    return exposed
