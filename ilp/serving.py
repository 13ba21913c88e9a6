"""Times of serving passes: each layer's op graph scheduled by the layer scheduler
(docs/serving.md).

:func:`serving_pass_time` builds a pass's layer graph (:mod:`workloads.serving_ops`) and
schedules each distinct layer with :func:`ilp.timing.layer_timing`, as a training
micro-batch's forward pass is scheduled; a layer's energy is its schedule's, and the pass on
one device group holding the whole model (one pipeline stage) is the sum over its layers.
A layer's time is its schedule's makespan, but never less than the bytes its ops move
through device memory at the sustained HBM bandwidth: the scheduler prices each op as if it
had the memory to itself, so a decode step of many small independent memory-bound ops (an
MoE block's experts) could otherwise overlap them beyond the bandwidth. :func:`serving_pass_times` gives a request batch's
prefill passes and its mean decode step. :func:`decode_hbm_bound_s` is the closed-form floor
of a pass on HBM bandwidth: the weights and KV cache it must read, over the peak bandwidth.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Unpack

from arch_space.accelerator import Accelerator, Cluster
from arch_space.perf import default_settings, op_costs
from arch_space.perf.device import DeviceProfile, device_profile
from ilp.timing import PassTiming, SolveSettings, layer_timing
from phaze_common.errors import unknown_name
from workloads.build import BLOCK_CLASS, DENSE_BLOCK_CLASS, EMBEDDING_CLASS, HEAD_CLASS
from workloads.model import Model
from workloads.serving import RequestBatch, ServingPass, kv_cache_bytes_per_token, serving_settings
from workloads.serving_costs import pass_kv_read_bytes, pass_weight_read_bytes, stage_block_counts
from workloads.serving_ops import serving_layer_graph

__all__ = [
    "LayerPassTime",
    "ServingPassTime",
    "ServingPassTimes",
    "serving_pass_time",
    "serving_pass_times",
    "serving_device_profile",
    "decode_hbm_bound_s",
]


@dataclass(frozen=True, slots=True)
class LayerPassTime:
    """One distinct layer's part of a pass on one device: ``count`` layers of class
    ``class_id`` each take ``latency_s`` (the longer of the schedule's makespan and
    ``hbm_floor_s``, ``hbm_bytes`` over the sustained HBM bandwidth) and ``energy_j`` (its
    schedule, ``timing``), and run ``flops`` in ``kernels`` ops each."""

    class_id: str
    count: int
    latency_s: float
    hbm_floor_s: float
    energy_j: float
    hbm_bytes: int
    flops: int
    timing: PassTiming
    kernels: int = 0


@dataclass(frozen=True, slots=True)
class ServingPassTime:
    """A pass of the whole model on one tensor-parallel group (one pipeline stage), per
    device: the sum of its layers' times and energies, the bytes its ops move through device
    memory, its FLOPs, and the workload's weight and KV-cache bytes it reads and writes."""

    serving_pass: ServingPass
    tp: int
    layers: tuple[LayerPassTime, ...]
    latency_s: float
    energy_j: float
    hbm_bytes: int
    flops: int
    weight_read_bytes: int
    kv_read_bytes: int
    kv_written_bytes: int
    ep: int = 1

    def layer(self, class_id: str) -> LayerPassTime:
        """The part of the layers of class ``class_id``."""
        for x in self.layers:
            if x.class_id == class_id:
                return x
        raise unknown_name("layer class", class_id, [x.class_id for x in self.layers])

    @property
    def dynamic_j(self) -> tuple[float, float, float]:
        """The dynamic energy of the pass on one device by cause (compute, memory, network
        joules; :class:`~ilp.timing.PassTiming`), without static power, which a caller charges
        over the wall-clock time (a layer the HBM floor extends runs longer than its schedule)."""
        parts = [0.0, 0.0, 0.0]
        for x in self.layers:
            t = x.timing
            for i, j in enumerate((t.compute_j, t.memory_j, t.network_j)):
                parts[i] += x.count * j
        return parts[0], parts[1], parts[2]

    def stage_latencies_s(self, model: Model, pp: int) -> tuple[float, ...]:
        """The time of each of ``pp`` pipeline stages (:func:`~workloads.serving_costs.stage_block_counts`):
        its blocks, the embedding on the first stage, the head on the last."""
        return self._per_stage(model, pp, {x.class_id: x.latency_s for x in self.layers})

    def stage_kernels(self, model: Model, pp: int) -> tuple[float, ...]:
        """The ops (kernels) each of ``pp`` pipeline stages runs, as :meth:`stage_latencies_s`."""
        return self._per_stage(model, pp, {x.class_id: float(x.kernels) for x in self.layers})

    @staticmethod
    def _per_stage(model: Model, pp: int, by_class: dict[str, float]) -> tuple[float, ...]:
        dense = model.dense_layers
        out, first = [], 1
        for i, n in enumerate(stage_block_counts(model, pp)):
            blocks = range(first, first + n)
            first += n
            dense_n = sum(1 for b in blocks if b <= dense)
            t = dense_n * by_class.get(DENSE_BLOCK_CLASS, 0.0)
            t += (n - dense_n) * by_class[BLOCK_CLASS]
            t += by_class[EMBEDDING_CLASS] if i == 0 else 0.0
            t += by_class[HEAD_CLASS] if i == pp - 1 else 0.0
            out.append(t)
        return tuple(out)


@dataclass(frozen=True, slots=True)
class ServingPassTimes:
    """A request batch's prefill passes (in order; their sum is the prompt's time to its
    first token) and its decode step at the mean context (None when nothing decodes)."""

    prefill: tuple[ServingPassTime, ...]
    decode: ServingPassTime | None

    @property
    def prefill_s(self) -> float:
        return sum(p.latency_s for p in self.prefill)


def serving_device_profile(acc: Accelerator) -> DeviceProfile:
    """``acc``'s sustained rates under the serving engine: its measured rates at the clock of
    a device running one kernel at a time (:meth:`DeviceProfile.alone`), and its all-reduce
    kernel where the engine uses its own and the preset has it measured
    (:meth:`DeviceProfile.for_serving`).

    A preset's fitted ``sustained_clock_fraction`` is fitted to training runs, where
    collectives and memory traffic run beside compute and the fit absorbs what the op model
    leaves out of a training step; an engine's pass runs its collectives synchronously on the
    compute stream, one kernel at a time, the condition the sustained GEMM, attention and HBM
    rates were measured under (with the board's power throttling in them), so no fitted
    parameter enters a serving pass."""
    profile = device_profile(acc).alone()
    return profile.for_serving() if serving_settings().custom_all_reduce else profile


def serving_pass_time(
    model: Model,
    acc: Accelerator,
    cluster: Cluster,
    serving_pass: ServingPass,
    tp: int,
    *,
    ep: int = 1,
    device: DeviceProfile | None = None,
    **settings: Unpack[SolveSettings],
) -> ServingPassTime:
    """One pass of ``model`` at tensor-parallel width ``tp`` on ``acc`` devices of
    ``cluster``, each distinct layer scheduled by :func:`ilp.timing.layer_timing`
    (``settings`` as there; ``device`` defaults to :func:`serving_device_profile`); with
    ``ep`` expert-parallel ranks, one rank's share of the routed experts
    (:func:`workloads.serving_ops.serving_layer_graph`; the token all-to-alls are the
    caller's).

    Raises
    ------
    ConfigError
        The model cannot serve the pass at that width
        (:func:`workloads.serving_ops.check_serving`), or bad solver settings.
    """
    graph = serving_layer_graph(model, serving_pass, tp, ep)
    device = device or serving_device_profile(acc)
    timings = layer_timing(graph, acc, cluster, device=device, **settings)
    counts: dict[str, int] = {}
    for layer in graph.layers:
        counts[layer.class_id] = counts.get(layer.class_id, 0) + 1
    sustained_bytes_per_s = acc.hbm_bandwidth_bytes_per_s * default_settings().hbm_efficiency
    parts = []
    for class_id, count in counts.items():
        op_graph = graph.op_graphs[class_id].forward
        hbm_bytes = int(op_costs(op_graph, acc, cluster, device=device).hbm_bytes.sum())
        floor_s = hbm_bytes / sustained_bytes_per_s
        forward = timings[class_id].forward
        parts.append(
            LayerPassTime(
                class_id,
                count,
                max(forward.makespan_s, floor_s),
                floor_s,
                forward.energy_j,
                hbm_bytes,
                op_graph.flops,
                forward,
                len(op_graph.ops),
            )
        )
    kv_written = serving_pass.tokens * kv_cache_bytes_per_token(model, tp, serving_pass.kv_format)
    return ServingPassTime(
        serving_pass=serving_pass,
        tp=tp,
        layers=tuple(parts),
        latency_s=sum(x.count * x.latency_s for x in parts),
        energy_j=sum(x.count * x.energy_j for x in parts),
        hbm_bytes=sum(x.count * x.hbm_bytes for x in parts),
        flops=sum(x.count * x.flops for x in parts),
        weight_read_bytes=pass_weight_read_bytes(model, tp, serving_pass, ep),
        kv_read_bytes=pass_kv_read_bytes(model, tp, serving_pass),
        kv_written_bytes=kv_written,
        ep=ep,
    )


def serving_pass_times(
    model: Model,
    acc: Accelerator,
    cluster: Cluster,
    requests: RequestBatch,
    tp: int,
    *,
    chunk_tokens: int | None = None,
    device: DeviceProfile | None = None,
    **settings: Unpack[SolveSettings],
) -> ServingPassTimes:
    """The prefill passes (``chunk_tokens`` per chunk; None: whole prompts) and the mean
    decode step of ``requests`` (:meth:`~workloads.serving.RequestBatch.decode_pass`)."""

    def timed(p: ServingPass) -> ServingPassTime:
        return serving_pass_time(model, acc, cluster, p, tp, device=device, **settings)

    decode = requests.decode_pass()
    return ServingPassTimes(
        prefill=tuple(timed(p) for p in requests.prefill_passes(chunk_tokens)),
        decode=None if decode is None else timed(decode),
    )


def decode_hbm_bound_s(model: Model, acc: Accelerator, serving_pass: ServingPass, tp: int) -> float:
    """The least time a pass can take on one device of a tensor-parallel group of ``tp``
    holding the whole model: the weight bytes it must read
    (:func:`~workloads.serving_costs.pass_weight_read_bytes`) and the KV cache it reads
    (:func:`~workloads.serving_costs.pass_kv_read_bytes`) over the peak HBM bandwidth. A decode
    step reads nothing else of note, so its time sits a little above this."""
    read = pass_weight_read_bytes(model, tp, serving_pass) + pass_kv_read_bytes(
        model, tp, serving_pass
    )
    return read / acc.hbm_bandwidth_bytes_per_s
