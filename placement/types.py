"""The values the placement reads and returns (docs/placement.md).

Placement depends on nothing of ours but :mod:`phaze_common.errors` and the
:class:`arch_space.Cluster` it places on: the caller (``phaze``) maps its layer timings and
:class:`workloads.LayerGraph` onto these plain frozen values. One :class:`StageGraph`
describes the model at one tensor-parallel width ``tp``, one micro-batch size and one
recompute mode; a :class:`PlacementProblem` holds every variant the search may choose from,
the cluster and the memory budget.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Final

from arch_space.accelerator import Cluster
from arch_space.perf.device import CollectiveCurve
from phaze_common.errors import ConfigError
from placement.layout import LAYER_SYMBOLS, PLACED_FIELDS, ZERO_STAGES, Layout, RecomputeMode

if TYPE_CHECKING:
    from placement.iteration import DeviceMemory, IterationTime

__all__ = [
    "RecomputeMode",
    "ZERO_STAGES",
    "zero_problems",
    "STATE_BYTES_PER_PARAMETER",
    "OPTIMIZER_STEP_BYTES_PER_PARAMETER",
    "StageLayer",
    "StageEdge",
    "StageGraph",
    "VARIANT_FIELDS",
    "PlacementProblem",
    "Stage",
    "Placement",
]


# Bytes of weights + gradients + optimizer state per parameter in mixed-precision training.
# source: Rajbhandari et al., "ZeRO", SC20, §3.1 (Adam: 2 fp16 weights + 2 fp16 gradients +
# 12 fp32 master weights, momentum, variance = 16 B; with fp32 gradients as in Megatron-LM's
# main_grad, 18 B, docs/models.md). SGD with momentum: 2 + 4 + 4 (master) + 4 (momentum).
STATE_BYTES_PER_PARAMETER: Final = MappingProxyType({"adam": 18.0, "sgd": 14.0})

# HBM bytes one optimizer step moves per parameter of the device's shard, after the last
# backward pass (Megatron-LM's Float16OptimizerWithFloat16Params, megatron/optimizer/
# optimizer.py, 2022, with fp32 main gradients): unscale and inf-check the fp32 gradients
# (read 4 + write 4); the gradient norm for clipping (read 4); the fused step (apex
# multi_tensor_adam: read fp32 weight, gradient, momentum, variance = 16, write weight,
# momentum, variance = 12; SGD with momentum: read 12, write 8); copy the fp32 weights to the
# fp16 model weights (read 4 + write 2); zero the fp32 gradient buffer (write 4). Every pass
# streams its tensors once, so the step is HBM-bound (a few FLOPs per byte).
OPTIMIZER_STEP_BYTES_PER_PARAMETER: Final = MappingProxyType({"adam": 50.0, "sgd": 42.0})


def _problems_nonneg(source: str, obj: object, names: tuple[str, ...]) -> list[str]:
    out = []
    for name in names:
        value = getattr(obj, name)
        if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
            out.append(f"{source}: {name} = {value!r} must be a finite number >= 0")
    return out


def zero_problems(source: str, stages: object) -> list[str]:
    """What is wrong with a list of ZeRO stages (empty when each is 0, 1, 2 or 3)."""
    ok = isinstance(stages, tuple) and stages and all(z in ZERO_STAGES for z in stages)
    if ok and all(isinstance(z, int) and not isinstance(z, bool) for z in stages):
        return []
    return [f"{source}: zero = {stages!r} must be ZeRO stages from 0, 1, 2, 3"]


def _raise(problems: list[str]) -> None:
    if problems:
        raise ConfigError("; ".join(problems))


@dataclass(frozen=True, slots=True)
class StageLayer:
    """One layer for one micro-batch on the ``tp`` devices of its tensor-parallel group.

    Times include the layer's tensor-parallel collectives (the caller's op model adds them);
    ``tp_comm_s`` is the part of ``fwd_s + bwd_s`` in which collectives run and no compute
    does. ``recompute_s`` is the forward work re-run before the backward pass (0 without
    recompute), its collectives included. ``parameters`` counts this device's shard; ``stash_bytes`` is what the layer
    keeps per in-flight micro-batch per device under the graph's recompute mode;
    ``workspace_bytes`` is live only while the layer runs its backward pass (e.g. the
    activations recomputed for it), counted once per stage. ``expert_parameters`` is the
    part of ``parameters`` in MoE experts on this device, ``dispatch_bytes`` what one token
    all-to-all sends from it and ``kv_bytes`` the keys and values of its sequence chunk, per
    micro-batch; ``ep_comm_s`` and ``cp_comm_s`` are the exposed all-to-alls and K/V ring
    transfers inside ``fwd_s + bwd_s`` (:mod:`placement.ep_cp`). ``tied_parameters`` are
    parameters the layer shares with the first pipeline stage, which counts them (a tied LM
    head reusing the input embedding): another stage holding the layer keeps a copy, with
    its own gradients and optimizer state, and all-reduces the copy's gradients with the
    first stage once per iteration (Megatron-LM's ``shared_embedding_or_output_weight``);
    they are gathered with the layer under ZeRO stage 3.
    """

    name: str
    fwd_s: float
    bwd_s: float
    parameters: int
    stash_bytes: float
    tensor_parallel: bool = True
    recompute_s: float = 0.0
    workspace_bytes: float = 0.0
    kind: str = "block"
    tp_comm_s: float = 0.0
    expert_parameters: float = 0.0
    dispatch_bytes: float = 0.0
    kv_bytes: float = 0.0
    ep_comm_s: float = 0.0
    cp_comm_s: float = 0.0
    tied_parameters: float = 0.0

    def __post_init__(self) -> None:
        kind = (
            []
            if self.kind in LAYER_SYMBOLS
            else [
                f"layer {self.name!r}: kind = {self.kind!r} must be one of {', '.join(LAYER_SYMBOLS)}"
            ]
        )
        _raise(
            kind
            + _problems_nonneg(
                f"layer {self.name!r}",
                self,
                (
                    "fwd_s",
                    "bwd_s",
                    "recompute_s",
                    "tp_comm_s",
                    "expert_parameters",
                    "dispatch_bytes",
                    "kv_bytes",
                    "ep_comm_s",
                    "cp_comm_s",
                    "parameters",
                    "stash_bytes",
                    "workspace_bytes",
                    "tied_parameters",
                ),
            )
        )


@dataclass(frozen=True, slots=True)
class StageEdge:
    """Producer -> consumer (layer indices), with the boundary tensor's bytes per micro-batch."""

    src: int
    dst: int
    bytes: float


@dataclass(frozen=True, slots=True)
class StageGraph:
    """The layers of a model at one tensor-parallel width, in topological order.

    Every edge goes from a lower to a higher index. ``layout`` is the training setup the
    figures describe: the width ``t``, micro-batch size, recompute mode, sequence
    parallelism, expert- and context-parallel degrees and precision recipe. Its ``p``,
    ``d``, ``v``, ``zero`` and ``split`` are a placement's to choose: they stay open, and a
    placement's layout is this one completed with them (:meth:`Layout.completed`), so every
    other field travels unchanged. At ``t = 1`` the ``tensor_parallel`` flags make no
    difference (every stage has 1 device). ``experts`` counts the model's MoE experts per
    block (1: dense); :func:`placement.ep_cp.ep_cp_graph` makes a variant at other ``ep``
    and ``cp`` from one at ``ep = cp = 1``. ``top_k`` is the experts a token is routed to;
    ``expert_groups`` and ``routed_groups`` its group-limited routing (0: none;
    :func:`placement.ep_cp.a2a_bytes`).
    """

    layers: tuple[StageLayer, ...]
    edges: tuple[StageEdge, ...]
    layout: Layout = Layout()
    experts: int = 1
    top_k: int = 1
    expert_groups: int = 0
    routed_groups: int = 0

    def __post_init__(self) -> None:
        lay = self.layout
        src = f"stage graph (tp={lay.t})" if isinstance(lay, Layout) else "stage graph"
        problems = []
        if not isinstance(lay, Layout):
            problems.append(f"{src}: layout = {lay!r} must be a Layout")
        elif lay.open != PLACED_FIELDS:
            fixed = [f"{k} = {getattr(lay, k)}" for k in _PLACED if getattr(lay, k) != _BLANK[k]]
            if fixed or lay.split is not None:
                problems.append(
                    f"{src}: layout {lay} fixes {', '.join(fixed) or 'a split'}; a placement "
                    f"chooses {', '.join(_PLACED)} and the split"
                )
            else:  # a placement's fields hold their defaults: leave them open
                object.__setattr__(self, "layout", replace(lay, open=PLACED_FIELDS))
        if not (isinstance(self.experts, int) and self.experts >= 1):
            problems.append(f"{src}: experts = {self.experts!r} must be an integer >= 1")
        elif isinstance(lay, Layout) and self.experts % lay.ep:
            problems.append(
                f"{src}: ep = {lay.ep} must divide the {self.experts} experts per block"
            )
        if not self.layers:
            problems.append(f"{src}: layers is empty; a graph needs at least one layer")
        n = len(self.layers)
        seen = set()
        for e in self.edges:
            if not (0 <= e.src < e.dst < n):
                problems.append(
                    f"{src}: edge {e.src}->{e.dst} must join layer indices 0 <= src < dst < {n}"
                )
            if (e.src, e.dst) in seen:
                problems.append(f"{src}: edge {e.src}->{e.dst} appears twice")
            seen.add((e.src, e.dst))
            if not (math.isfinite(e.bytes) and e.bytes >= 0):
                problems.append(f"{src}: edge {e.src}->{e.dst} bytes = {e.bytes!r} must be >= 0")
        _raise(problems)

    @property
    def tp(self) -> int:
        """The tensor-parallel width (the layout's ``t``)."""
        return self.layout.t

    @property
    def micro_batch(self) -> int:
        return self.layout.mbs

    @property
    def recompute(self) -> RecomputeMode:
        return self.layout.recompute

    @property
    def sequence_parallel(self) -> bool:
        return self.layout.sp

    @property
    def ep(self) -> int:
        return self.layout.ep

    @property
    def cp(self) -> int:
        return self.layout.cp

    @property
    def is_chain(self) -> bool:
        """True when the edges are exactly i -> i+1 for every consecutive pair of layers."""
        n = len(self.layers)
        return len(self.edges) == n - 1 and all(
            (e.src, e.dst) == (i, i + 1) for i, e in enumerate(sorted(self.edges, key=_key))
        )


#: the layout fields that tell a problem's graphs apart (a graph varies over ``ep`` and ``cp``
#: itself, :mod:`placement.ep_cp`); a layout is placed on the graph matching it on all of them
VARIANT_FIELDS: Final = ("t", "mbs", "recompute", "sp", "precision")
_PLACED: Final = sorted(PLACED_FIELDS)
_BLANK: Final = {k: getattr(Layout(), k) for k in _PLACED}


def _key(e: StageEdge) -> tuple[int, int]:
    return (e.src, e.dst)


@dataclass(frozen=True, slots=True)
class PlacementProblem:
    """Everything the placement search needs.

    ``graphs`` are the variants to choose from (one per tensor-parallel width, micro-batch
    size and recompute mode). ``global_batch`` is in samples (sequences); each variant runs
    ``global_batch / micro_batch`` micro-batches per iteration.
    ``state_bytes_per_parameter`` covers weights, gradients and optimizer state
    (:data:`STATE_BYTES_PER_PARAMETER`); ``gradient_bytes_per_parameter`` is what the
    data-parallel all-reduce moves per parameter (2: fp16 gradients, Narayanan et al. SC21),
    ``weight_bytes_per_parameter`` what its all-gather of the updated weights moves (the
    weights' format: 2 for fp16/bf16 weights).
    ``optimizer_s_per_parameter`` is the optimizer step's time per parameter of a device's
    shard (:data:`OPTIMIZER_STEP_BYTES_PER_PARAMETER` over the device's HBM bandwidth; 0
    leaves the step out). ``weight_refresh_s_per_parameter`` is the time per parameter a
    device holds of casting its cached low-precision weight copies once per iteration (a
    precision recipe that caches them, :attr:`workloads.precision.Recipe.weight_refresh_bytes_per_parameter`
    over the HBM bandwidth; 0: none), priced beside the optimizer step. ``zero_stages`` are the ZeRO stages the search may choose from
    (0: every replica holds all its state; 1, 2, 3: the optimizer state, the gradients, the
    weights sharded over the ``d`` replicas): the one place ``d`` enters memory, see
    :func:`placement.iteration.stage_memory`. ``optimizer_bytes_per_parameter`` is the part
    of the state that is the optimizer's own (Adam: 12 B of fp32 master weights and moments;
    SGD with momentum: 8 B), sharded from ZeRO stage 1 on. ``max_stages`` optionally caps the
    pipeline depth. ``p2p_overlap`` lets a stage's boundary transfers run beside its compute
    (the framework's profile, :mod:`workloads.framework`): only what exceeds the compute is
    exposed; with ``p2p_overlap_interleaved_only`` only the interleaved schedule's
    (``v >= 2``) do (:meth:`overlaps_p2p`). ``p2p_sends`` and ``p2p_gathers`` count what a
    stage runs in turn per boundary it touches per micro-batch: sends of the boundary tensor
    (or of its ``1/t`` slice) and tensor-parallel all-gathers of it (1 and 1: Megatron's
    1F1B pairs each send with a receive in one batched call and gathers each slice once;
    a stack that sends and receives one blocking call at a time has more;
    :func:`placement.network.boundary_link`). ``dp_overlap`` reduces the gradients beside the
    backward pass, all but the last bucket
    (:func:`placement.dp_comm.exposed_reduction_parameters`); ``param_gather_overlap``
    all-gathers the updated weights beside the next forward pass, all but the first bucket;
    ``sharded_prefetch`` runs ZeRO-2/3's per-micro-batch collectives unit by unit behind the
    compute (:func:`placement.dp_comm.dp_terms`); ``regather_per_micro_batch`` gathers
    ZeRO-2's weights before every micro-batch (:func:`placement.dp_comm.dp_collectives`).
    ``interleaving`` allows virtual stages
    (the framework runs Megatron's interleaved schedule). ``ep_degrees`` and
    ``cp_degrees`` are the expert- and context-parallel degrees the search may choose from
    (an ``ep`` must divide a graph's experts and ``d``; :mod:`placement.ep_cp`).
    ``collectives`` is the device's measured collective curve inside a node (None: the
    cluster's links alone), which prices the data-parallel collectives and the pipeline's
    sends (:func:`placement.network.measured_link`). ``collective_compute_share`` is the
    share of the device's compute a data-parallel collective holds while it runs hidden
    behind compute (:func:`placement.dp_comm.dp_terms`; 0: none). ``ep_overlap`` runs the
    token all-to-alls of expert parallelism beside another micro-batch's compute, which
    keeps ``1 - comm_sm_share`` of the SMs (:func:`placement.ep_cp.scaled_columns`).
    ``dualpipe`` prices complete layouts under DeepSeek's DualPipe schedule
    (:mod:`placement.pipelining`) instead of 1F1B.
    """

    graphs: tuple[StageGraph, ...]
    cluster: Cluster
    hbm_bytes: float
    global_batch: int
    state_bytes_per_parameter: float = STATE_BYTES_PER_PARAMETER["adam"]
    gradient_bytes_per_parameter: float = 2.0
    weight_bytes_per_parameter: float = 2.0
    optimizer_s_per_parameter: float = 0.0
    weight_refresh_s_per_parameter: float = 0.0
    max_stages: int | None = None
    zero_stages: tuple[int, ...] = (0,)
    optimizer_bytes_per_parameter: float = 12.0
    p2p_overlap: bool = False
    dp_overlap: bool = False
    p2p_overlap_interleaved_only: bool = False
    param_gather_overlap: bool = False
    sharded_prefetch: bool = False
    regather_per_micro_batch: bool = False
    interleaving: bool = True
    ep_degrees: tuple[int, ...] = (1,)
    cp_degrees: tuple[int, ...] = (1,)
    collectives: CollectiveCurve | None = None
    collective_compute_share: float = 0.0
    p2p_sends: float = 1.0
    p2p_gathers: float = 1.0
    ep_overlap: bool = False
    comm_sm_share: float = 0.0
    dualpipe: bool = False

    def __post_init__(self) -> None:
        problems = []
        share = self.comm_sm_share
        if not (isinstance(share, int | float) and 0.0 <= share < 1.0):
            problems.append(f"placement problem: comm_sm_share = {share!r} must be in [0, 1)")
        for name in ("ep_degrees", "cp_degrees"):
            value = getattr(self, name)
            if not (
                isinstance(value, tuple)
                and value
                and all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in value)
            ):
                problems.append(
                    f"placement problem: {name} = {value!r} must be a non-empty tuple of "
                    "integers >= 1"
                )
        if not self.graphs:
            problems.append("placement problem: graphs is empty; give at least one variant")
        if not (isinstance(self.global_batch, int) and self.global_batch >= 1):
            problems.append(
                f"placement problem: global_batch = {self.global_batch!r} must be an integer >= 1"
            )
        else:
            for g in self.graphs:
                if self.global_batch % g.micro_batch:
                    problems.append(
                        f"placement problem: global_batch = {self.global_batch} is not a "
                        f"multiple of micro_batch = {g.micro_batch} (tp={g.tp})"
                    )
        if not (math.isfinite(self.hbm_bytes) and self.hbm_bytes > 0):
            problems.append(f"placement problem: hbm_bytes = {self.hbm_bytes!r} must be > 0")
        problems += _problems_nonneg(
            "placement problem",
            self,
            (
                "state_bytes_per_parameter",
                "gradient_bytes_per_parameter",
                "weight_bytes_per_parameter",
                "optimizer_s_per_parameter",
                "weight_refresh_s_per_parameter",
                "optimizer_bytes_per_parameter",
                "p2p_gathers",
            ),
        )
        sends = self.p2p_sends
        if not (isinstance(sends, int | float) and math.isfinite(sends) and sends >= 1):
            problems.append(f"placement problem: p2p_sends = {self.p2p_sends!r} must be >= 1")
        problems += zero_problems("placement problem", self.zero_stages)
        if self.max_stages is not None and not (
            isinstance(self.max_stages, int) and self.max_stages >= 1
        ):
            problems.append(
                f"placement problem: max_stages = {self.max_stages!r} must be None or >= 1"
            )
        _raise(problems)

    @property
    def a2a_overlap(self) -> float | None:
        """The SM share the overlapped all-to-alls take from compute (None: not overlapped)."""
        return float(self.comm_sm_share) if self.ep_overlap else None

    def overlaps_p2p(self, v: int) -> bool:
        """Do the pipeline's sends run beside compute with ``v`` virtual stages per rank?"""
        return self.p2p_overlap and (v >= 2 or not self.p2p_overlap_interleaved_only)


@dataclass(frozen=True, slots=True)
class Stage:
    """One pipeline stage: its layers (indices), devices, and figures per micro-batch.

    With interleaving, a device holds ``v`` stages (chunks); ``device`` says which pipeline
    rank runs this one. ``compute_s`` includes ``recompute_s`` and ``tp_comm_s`` (the layers'
    exposed tensor-parallel collectives); ``load_s = compute_s + p2p_s``. The memory parts (``parameters`` of one device's shard, ``stash_bytes`` per
    micro-batch in flight, ``in_flight`` micro-batches, ``workspace_bytes`` counted for this
    stage, ``largest_layer_parameters`` gathered whole under ZeRO stage 3,
    ``expert_parameters`` the experts' part of ``parameters``) give ``memory_bytes`` through
    :func:`placement.iteration.stage_memory`. ``ep_comm_s`` and ``cp_comm_s`` are the
    exposed token all-to-alls and K/V ring transfers inside ``compute_s``.
    ``tied_parameters`` is the part of ``parameters`` that copies the first stage's tied
    weights (:class:`StageLayer`). ``bwd_s`` is the backward passes' part of ``compute_s``
    (DualPipe's bubble reads it, :func:`placement.pipelining.dualpipe_bubble_s`).
    """

    layers: tuple[int, ...]
    devices: int
    load_s: float
    compute_s: float
    p2p_s: float
    memory_bytes: float
    device: int = 0
    recompute_s: float = 0.0
    parameters: float = 0.0
    stash_bytes: float = 0.0
    in_flight: float = 0.0
    workspace_bytes: float = 0.0
    tp_comm_s: float = 0.0
    largest_layer_parameters: float = 0.0
    expert_parameters: float = 0.0
    ep_comm_s: float = 0.0
    cp_comm_s: float = 0.0
    tied_parameters: float = 0.0
    bwd_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Placement:
    """A parallel placement and its predicted iteration (one global batch).

    ``layout`` is the parallel layout (its ``split`` the stages' layers, as a strategy string
    gives them back); ``stages`` the pipeline chunks with their figures per micro-batch,
    ``micro_batches`` those of one pipeline (``m'``) and ``load_s`` the bottleneck device's
    time per micro-batch. ``breakdown`` is the iteration's time by cause, the only one: its
    terms sum to ``breakdown.iteration_s`` (:func:`placement.iteration.assemble`);
    ``memory_breakdown`` the fullest device's memory by kind. ``dp_comm_unoverlapped_s``
    is every data-parallel collective's time end to end, ``dp_comm_overlapped_s`` the part
    of it run beside compute (:class:`placement.dp_comm.DpTime`); not terms of the iteration.
    """

    layout: Layout
    stages: tuple[Stage, ...]
    micro_batches: int
    load_s: float
    breakdown: IterationTime
    memory_breakdown: DeviceMemory
    dp_comm_overlapped_s: float = 0.0
    dp_comm_unoverlapped_s: float = 0.0

    @property
    def devices_used(self) -> int:
        """Devices of the job: every replica's stages (a stage without tensor-parallel
        layers takes one device), each rank counted once."""
        lay = self.layout
        return lay.d * lay.cp * sum(st.devices for st in self.stages) // (lay.v * self._copies)

    @property
    def _copies(self) -> int:
        """Stages per chunk: 2 under DualPipe (each chunk on two ranks), else 1."""
        return max(len(self.stages) // (self.layout.p * self.layout.v), 1)

    @property
    def bubble_fraction(self) -> float:
        """SC21's bubble time over ideal time, ``(p - 1) / (v m')`` (DualPipe: its bubble over
        ``m'`` loads)."""
        lay = self.layout
        if self._copies == 2:
            return self.breakdown.bubble_s / (self.micro_batches * self.load_s)
        return (lay.p - 1) / (lay.v * self.micro_batches)
