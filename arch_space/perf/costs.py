"""Latency and energy of every op of an op graph on one accelerator (docs/models.md).

Each op runs on one or more kinds of the accelerator's compute units
(:attr:`~arch_space.accelerator.Accelerator.units`): the op model maps a ``TC`` op to the
tensor cores, a ``VC`` op to the vector cores, a GEMM with a fused epilogue (``TCandVC``) to
one of each, and an op kind a further unit runs to that unit. Each op gets two estimates: on
one unit of each of its kinds, and split over all units of its kinds. Both are computed for
the whole graph at once with numpy, over the graph's distinct ops only, and cached by
content: the key is the ops' cost-relevant fields (never their names or positions) plus the
accelerator, cluster, technology and settings.

Every kind is costed the same way: the op model gives each op's operations on each kind (MACs
on the tensor cores, lane operations on the vector cores, all of both on a further unit that
runs the op), which take ``operations / (units x ops per cycle per unit x clock x sustained
share)`` (the share is the device's measured one on the tensor cores, else 1) and
``operations x pJ per operation``; the op's compute time is the slowest of its kinds.

Per op kind:

* GEMM (plain, batched, or fused with a vector epilogue): :mod:`arch_space.perf.gemm` gives
  compute time (a floor under the tensor cores' rate), buffer time and HBM traffic; the
  epilogue's FLOPs run on the vector cores as the outputs stream out (overlapped, so the
  slower of the two counts).
* Fused attention (FlashAttention forward or backward): its matmuls are tiled like a GEMM
  of its shape on the tensor cores, its softmax work runs on the vector cores beside them
  (the slower counts), its HBM traffic is the compulsory bytes it reads and writes (no
  ``s x s`` tensor leaves the chip) and its buffer writes are its fills and its outputs; a
  preset's measured attention rate (:mod:`arch_space.perf.device`) caps its matmul rate.
* Vector ops: FLOPs over ``lanes x cores`` one-FLOP-per-cycle lanes, against the compulsory
  HBM bytes and the buffer bytes of their passes (softmax and norms re-read their rows from
  the global buffer; rows always fit).
* Collectives on the tensor-parallel group: ring algorithms with one latency term per
  collective, over the group's slowest link (:mod:`arch_space.perf.ring`).
* ``COMM_SHARE`` ops (the compute an asynchronous collective holds while it runs) take the
  device's collective compute share of their collective's time on all cores (the same
  tensor-core-seconds on one core).
* Empty ``NOP`` ops cost nothing.

The global buffer's bandwidth grows with its capacity (``glb_bytes_per_cycle_per_mib`` of
``arch_space/data/perf.toml``, from the A100's L2), and the whole chip's HBM bandwidth is
available to an op on one core as well as on all, at the sustainable share
``hbm_efficiency`` of its peak. A preset's sustained rates (:mod:`arch_space.perf.device`)
cap GEMMs at its measured share of the tensor-core peak and scale the cores' clock. Latency
is ``max(compute, HBM, buffer) + issue overhead`` (plus the op's ``launch_s``, an eagerly
launched kernel's wait) for core ops (double-buffered overlap) and the ring time for
collectives. Energy is
``(1 + uncore) x (MACs x pJ/MAC + lane ops x pJ/op + buffer bytes x pJ/byte) + HBM bytes x
pJ/byte + link bits x pJ/bit + static power x latency`` (all cores of the chip leak while any
op runs; a further unit's operations count at its own pJ/op beside the MACs and lane ops).
A MAC's energy (:func:`arch_space.area.mac_pj`) is its arithmetic, its control and clocking, and
the delivery of its operands into the array (register files, local buffers, wires: ``rows +
cols`` elements per cycle of a ``rows x cols`` array); ``uncore`` is the node's
``overhead_fraction``, the share of on-die power spent in clock tree, control and network
that :func:`arch_space.area.peak_power_w` counts too (:func:`arch_space.area.with_uncore`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Final

import numpy as np

from arch_space.accelerator import TENSOR, VECTOR, Accelerator, Cluster
from arch_space.area import format_mac_pj, static_power_w, unit_pj_per_op, with_uncore
from arch_space.formats import BASE_FORMAT, format_options
from arch_space.perf.cost_table import BOUNDS, OpCost, OpCostTable
from arch_space.perf.device import DeviceProfile, device_profile
from arch_space.perf.gemm import GemmShape, gemm_hbm_bytes, gemm_terms
from arch_space.perf.ring import ring_terms
from arch_space.perf.settings import PerfSettings, default_settings
from arch_space.power_limit import capped_dynamic_scale
from arch_space.tech import TechNode, tech_node
from workloads.ops import FORMATS, CollectiveKind, CoreType, Op, OpGraph, OpKind

__all__ = [
    "BOUNDS",
    "OpCost",
    "OpCostTable",
    "OpTerms",
    "op_costs",
    "evaluate_ops",
    "op_key",
    "resolve_energy_inputs",
]

_NONE: Final = BOUNDS.index("none")
_PJ: Final = 1e-12
_CACHE_SIZE: Final = 1024


@dataclass(frozen=True, slots=True)
class OpTerms:
    """Per-op arrays of one estimate (one unit of each kind, or all units)."""

    latency_s: np.ndarray
    energy_j: np.ndarray
    compute_s: np.ndarray
    hbm_s: np.ndarray
    buffer_s: np.ndarray
    network_s: np.ndarray
    hbm_bytes: np.ndarray
    bound_code: np.ndarray
    parts_j: np.ndarray  # (ops, 3): dynamic compute, memory, network energy


_KINDS: Final = tuple(OpKind)
_CORES: Final = tuple(CoreType)
_COLLECTIVES: Final = (None, *CollectiveKind)
_GEMM_CODES: Final = (_KINDS.index(OpKind.MATMUL), _KINDS.index(OpKind.BATCHED_MATMUL))
_ATTENTION_FORWARD: Final = _KINDS.index(OpKind.ATTENTION_FORWARD)
_ATTENTION_CODES: Final = (_ATTENTION_FORWARD, _KINDS.index(OpKind.ATTENTION_BACKWARD))
_VECTOR_CODES: Final = tuple(
    _KINDS.index(k) for k in (OpKind.ELEMENTWISE, OpKind.SOFTMAX, OpKind.NORM)
)
# The op model's kinds of compute unit per core type (a further unit that runs an op's kind
# takes it over, see _op_units).
_CORE_UNITS: Final = {
    _CORES.index(CoreType.TC): (TENSOR,),
    _CORES.index(CoreType.VC): (VECTOR,),
    _CORES.index(CoreType.TC_AND_VC): (TENSOR, VECTOR),
    _CORES.index(CoreType.NOP): (),
}


_KEY_WIDTH: Final = 18  # entries of an op_key


def op_key(op: Op) -> tuple[float, ...]:
    """The fields that decide an op's cost, as numbers (its name does not count).

    Enums become their index in declaration order, so a graph's keys convert to one numpy
    array in a single call.
    """
    return (
        _KINDS.index(op.kind),
        _CORES.index(op.core),
        _COLLECTIVES.index(op.collective),
        op.flops,
        op.bytes_read,
        op.bytes_written,
        op.batch,
        op.m,
        op.k,
        op.n,
        op.elements,
        op.epilogue_flops,
        op.collective_bytes,
        op.group,
        FORMATS.index(op.fmt),
        op.input_element_bytes,
        op.weight_element_bytes,
        op.launch_s,
    )


def _scatter(n: int, index: np.ndarray, values: np.ndarray) -> np.ndarray:
    out = np.zeros(n)
    out[index] = values
    return out


@dataclass(frozen=True, slots=True)
class _Work:
    """What an op moves and computes, independent of how many units run it.

    ``work[kind]`` is each op's operations on that kind of unit (MACs on the tensor cores,
    lane operations on the vector cores, both on a further unit that runs the op);
    ``taken`` marks the ops a further unit runs (None when there is none).
    """

    is_gemm: np.ndarray
    is_attention: np.ndarray
    is_attention_forward: np.ndarray
    is_core_op: np.ndarray
    is_coll: np.ndarray
    is_share: np.ndarray
    gemm_index: np.ndarray
    gemm: GemmShape
    gemm_hbm: tuple[np.ndarray, np.ndarray]
    gemm_operand_bytes: tuple[np.ndarray, np.ndarray]  # (input, weight) bytes per element
    work: dict[str, np.ndarray]
    taken: np.ndarray | None
    fmt: np.ndarray
    vector_buffer_read: np.ndarray
    vector_buffer_write: np.ndarray
    hbm_bytes: np.ndarray
    network_s: np.ndarray
    network_pj: np.ndarray
    launch_s: np.ndarray


def _operand_bytes(
    fmt: np.ndarray, stated_input: np.ndarray, stated_weight: np.ndarray, acc: Accelerator
) -> tuple[np.ndarray, np.ndarray]:
    """(input, weight) bytes per element of GEMMs in formats ``fmt`` (indices of
    :data:`~workloads.ops.FORMATS`): a low-precision GEMM reads its operands at its format's
    element size, a bf16 one at the accelerator's, unless the op states the bytes of its
    input and weights (scales included)."""
    element = np.array([format_options()[f].element_bytes for f in FORMATS])
    low = fmt != FORMATS.index(BASE_FORMAT)
    operand = np.where(low, element[fmt.astype(np.intp)], float(acc.bytes_per_element))
    return (
        np.where(stated_input > 0, stated_input, operand),
        np.where(stated_weight > 0, stated_weight, operand),
    )


def _unit_work(
    kind: np.ndarray, macs: np.ndarray, lane_ops: np.ndarray, acc: Accelerator
) -> tuple[dict[str, np.ndarray], np.ndarray | None]:
    """Each op's operations per kind of unit and the ops a further unit runs (None when the
    accelerator has none): MACs on the tensor cores, lane operations on the vector cores,
    both on a further unit that runs the op's kind instead."""
    work = {TENSOR: macs, VECTOR: lane_ops}
    taken = None
    for unit in acc.extra_units:
        runs = np.isin(kind, [_KINDS.index(OpKind(k)) for k in unit.runs])
        work[unit.kind] = np.where(runs, macs + lane_ops, 0.0)
        taken = runs if taken is None else taken | runs
    if taken is not None:
        work[TENSOR] = np.where(taken, 0.0, macs)
        work[VECTOR] = np.where(taken, 0.0, lane_ops)
    return work, taken


def _work(
    keys: Sequence[tuple[float, ...]],
    acc: Accelerator,
    cluster: Cluster,
    settings: PerfSettings,
    device: DeviceProfile,
) -> _Work:
    """Tiling, traffic and network terms of every op (one row per :func:`op_key`)."""
    a = np.array(keys, dtype=np.float64).reshape(len(keys), _KEY_WIDTH)
    kind, core, coll = a[:, 0], a[:, 1], a[:, 2]
    (
        flops,
        reads,
        writes,
        batch,
        m,
        k,
        n,
        _,
        epilogue,
        coll_bytes,
        group,
        fmt,
        stated_in,
        stated_w,
        launch_s,
    ) = a[:, 3:].T
    is_gemm = np.isin(kind, _GEMM_CODES)
    is_vector = np.isin(kind, _VECTOR_CODES)
    # the compute an asynchronous collective holds while it runs (workloads.framework)
    is_share = kind == _KINDS.index(OpKind.COMM_SHARE)
    is_coll = (
        ((kind == _KINDS.index(OpKind.COLLECTIVE)) | is_share) & (group > 1) & (coll_bytes > 0)
    )
    is_share &= is_coll

    is_attention = np.isin(kind, _ATTENTION_CODES)
    gi = np.flatnonzero(is_gemm | is_attention)
    shape = GemmShape(*(np.maximum(x[gi], 1.0) for x in (batch, m, k, n)))
    operand_bytes = _operand_bytes(fmt[gi], stated_in[gi], stated_w[gi], acc)
    hbm_read, hbm_write = _gemm_traffic(
        shape, operand_bytes, is_attention[gi], reads[gi], writes[gi], acc, settings
    )

    # Vector ops: compulsory HBM bytes; extra passes re-read their rows from the buffer.
    passes = np.select(
        [kind == _KINDS.index(OpKind.SOFTMAX), kind == _KINDS.index(OpKind.NORM)],
        [settings.softmax_passes, settings.norm_passes],
        settings.elementwise_passes,
    )
    vector_reads = np.where(is_vector, reads, 0.0)
    vector_writes = np.where(is_vector, writes, 0.0)

    # Collectives: rings over the group's slowest link (arch_space.perf.ring).
    all_reduce = coll == _COLLECTIVES.index(CollectiveKind.ALL_REDUCE)
    ring = ring_terms(coll_bytes, group, all_reduce, is_coll, is_share, cluster, settings, device)
    # Each ring step reads the outgoing chunk from device memory and writes the incoming one.
    hbm = (
        vector_reads
        + vector_writes
        + 2 * ring.sent_bytes
        + _scatter(len(a), gi, hbm_read + hbm_write)
    )
    macs = _scatter(len(a), gi, shape.batch * shape.m * shape.k * shape.n)
    lane_ops = np.where(is_vector, flops, 0.0) + np.where(
        (is_gemm | is_attention) & (core == _CORES.index(CoreType.TC_AND_VC)), epilogue, 0.0
    )
    work, taken = _unit_work(kind, macs, lane_ops, acc)
    return _Work(
        is_gemm=is_gemm | is_attention,
        is_attention=is_attention,
        is_attention_forward=kind == _ATTENTION_FORWARD,
        is_core_op=is_gemm | is_attention | is_vector,
        is_coll=is_coll,
        is_share=is_share,
        gemm_index=gi,
        gemm=shape,
        gemm_hbm=(hbm_read, hbm_write),
        gemm_operand_bytes=operand_bytes,
        work=work,
        taken=taken,
        fmt=fmt.astype(np.intp),
        vector_buffer_read=passes * vector_reads + vector_writes,
        vector_buffer_write=vector_reads + vector_writes,
        hbm_bytes=hbm,
        network_s=ring.network_s,
        network_pj=ring.network_pj,
        launch_s=launch_s,
    )


def _gemm_traffic(shape, operand_bytes, fused, reads, writes, acc, settings):
    """HBM bytes read and written by each GEMM tile by tile (:func:`gemm_hbm_bytes`); a fused
    attention op is tiled like its GEMM shape, but only its compulsory bytes touch HBM."""
    hbm_read, hbm_write = gemm_hbm_bytes(
        shape,
        acc.tc_rows,
        acc.tc_cols,
        acc.glb_bytes,
        acc.bytes_per_element,
        settings.accumulator_bytes,
        *operand_bytes,
    )
    return np.where(fused, reads, hbm_read), np.where(fused, writes, hbm_write)


def _format_rates(
    w: _Work, acc: Accelerator, tech: TechNode, device: DeviceProfile
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each op's tensor rate (a multiple of the accelerator's base one), sustained share of
    the tensor cores and pJ per MAC, all set by its format; a GEMM of a preset with measured
    shapes in its format runs at the measured rate of its shape (the tiling moves each
    operand at its stored width)."""
    gi = w.gemm_index
    used = np.unique(w.fmt)
    rate_of, share_of, pj_of = (np.ones(len(FORMATS)) for _ in range(3))
    share_of *= device.sustained_tensor_fraction
    pj_of *= unit_pj_per_op(acc, acc.units[0], tech)
    for code in used.tolist():
        if code:
            name = FORMATS[code]
            rate_of[code] = acc.format_rate(name)
            share_of[code] = device.format_fraction(name)
            pj_of[code] = format_mac_pj(acc, tech, name)
    rate, tensor_pj = rate_of[w.fmt], pj_of[w.fmt]
    share_t = share_of[w.fmt]
    for code in used.tolist():
        table = device.shapes_of(FORMATS[code])
        if table is None:
            continue
        shaped = ~w.is_attention[gi] & (w.fmt[gi] == code)
        if shaped.any():
            factor = table.factor(w.gemm.m[shaped], w.gemm.n[shaped], w.gemm.k[shaped])
            share_t = share_t.copy()
            share_t[gi[shaped]] *= factor
    return rate, share_t, tensor_pj


def _estimate(
    w: _Work,
    acc: Accelerator,
    tech: TechNode,
    static_w: float,
    settings: PerfSettings,
    device: DeviceProfile,
    *,
    counts: Mapping[str, int],
) -> OpTerms:
    """Latency, energy and bound of every op on ``counts[kind]`` units of each kind; the
    device's board power limit caps each op's energy at ``limit x latency``."""
    size = len(w.is_gemm)
    clock = acc.clock_hz * device.sustained_clock_fraction
    glb_bytes_per_s = settings.glb_bytes_per_cycle_per_mib * acc.glb_bytes / 2**20 * clock
    tcs = counts[TENSOR]
    g = gemm_terms(
        w.gemm,
        w.gemm_hbm,
        rows=acc.tc_rows,
        cols=acc.tc_cols,
        cores=tcs,
        clock_hz=clock,
        glb_bytes_per_s=glb_bytes_per_s,
        bytes_per_element=acc.bytes_per_element,
        accumulator_bytes=settings.accumulator_bytes,
        operand_bytes=w.gemm_operand_bytes[0],
        weight_operand_bytes=w.gemm_operand_bytes[1],
    )
    gi = w.gemm_index
    buf_read = w.vector_buffer_read + _scatter(size, gi, g.buffer_read_bytes)
    # a fused attention kernel writes its fills and its outputs to the buffer, never scores
    tiled_write = np.where(w.is_attention[gi], w.hbm_bytes[gi], g.buffer_write_bytes)
    buf_write = w.vector_buffer_write + _scatter(size, gi, tiled_write)
    # On the tensor cores no GEMM beats the sustained share of their peak, no fused attention
    # kernel its measured share, and none the arrays' tiling.
    fraction = np.select(
        [w.is_attention_forward, w.is_attention],
        [device.attention_forward_fraction, device.attention_backward_fraction],
        1.0,
    )
    rate, share_t, tensor_pj = _format_rates(w, acc, tech, device)
    share = {TENSOR: np.minimum(fraction, share_t)}
    tiled_s = _scatter(size, gi, g.compute_s) / rate
    floor = {TENSOR: tiled_s if w.taken is None else np.where(w.taken, 0.0, tiled_s)}
    # Every kind the same way: its operations at its units' rate; the slowest kind counts.
    compute_s = np.zeros(size)
    on_die_pj = np.zeros(size)
    for unit in acc.units:
        ops = w.work[unit.kind]
        unit_rate = counts[unit.kind] * unit.rows * unit.cols * clock
        if unit.kind == TENSOR:
            busy_s = ops / (unit_rate * rate * share[TENSOR])
            pj = tensor_pj
        else:
            busy_s = ops / (unit_rate * share.get(unit.kind, 1.0))
            pj = unit_pj_per_op(acc, unit, tech)
        if unit.kind in floor:
            busy_s = np.maximum(floor[unit.kind], busy_s)
        compute_s = np.maximum(compute_s, busy_s)
        on_die_pj = on_die_pj + ops * pj
    buffer_s = (buf_read + buf_write) / glb_bytes_per_s
    hbm_bytes_per_s = acc.hbm_bandwidth_bytes_per_s * settings.hbm_efficiency
    hbm_s = np.where(w.is_core_op, w.hbm_bytes / hbm_bytes_per_s, 0.0)

    stack = np.stack([compute_s, hbm_s, buffer_s, w.network_s])
    # a collective's compute share: that share of every core for the collective's time, or
    # the same tensor-core-seconds on one core
    share_s = w.network_s * device.collective_compute_share * acc.num_tc / tcs
    comm_s = np.where(w.is_share, share_s, w.network_s)
    issue_s = settings.issue_overhead_s + w.launch_s
    latency = np.where(w.is_core_op, stack.max(axis=0) + issue_s, comm_s)
    bound = np.where(w.is_core_op | w.is_coll, stack.argmax(axis=0), _NONE)
    # On-die work pays its uncore share (clock tree, control, on-chip network) on top, the
    # fraction the TDP-like power counts; HBM energy is off-die.
    compute_pj = with_uncore(tech, on_die_pj)
    memory_pj = (
        with_uncore(
            tech, buf_read * tech.sram_read_pj_per_byte + buf_write * tech.sram_write_pj_per_byte
        )
        + w.hbm_bytes * tech.hbm_energy_pj_per_byte
    )
    parts_j = np.stack([compute_pj, memory_pj, w.network_pj], axis=1) * _PJ
    cap = capped_dynamic_scale(parts_j.sum(axis=1), static_w, latency, device.board_limit_w)
    parts_j *= cap[:, None]
    return OpTerms(
        latency_s=latency,
        energy_j=parts_j.sum(axis=1) + static_w * latency,
        parts_j=parts_j,
        compute_s=compute_s,
        hbm_s=hbm_s,
        buffer_s=buffer_s,
        network_s=w.network_s,
        hbm_bytes=w.hbm_bytes,
        bound_code=bound.astype(np.int8),
    )


def evaluate_ops(
    keys: Sequence[tuple[float, ...]],
    acc: Accelerator,
    cluster: Cluster,
    tech: TechNode,
    static_w: float,
    settings: PerfSettings,
    device: DeviceProfile | None = None,
) -> tuple[OpTerms, OpTerms]:
    """(one unit of each kind, all units) cost terms of ops given by their :func:`op_key`,
    vectorised.

    The work (tiling, HBM traffic, network time) is shared by both estimates; only the
    split over units differs. ``device`` defaults to :func:`device_profile` of ``acc``.
    """
    device = device or device_profile(acc)
    w = _work(keys, acc, cluster, settings, device)
    one = {u.kind: 1 for u in acc.units}
    return (
        _estimate(w, acc, tech, static_w, settings, device, counts=one),
        _estimate(w, acc, tech, static_w, settings, device, counts=acc.capacity),
    )


def _op_units(keys: Sequence[tuple[float, ...]], acc: Accelerator) -> tuple[tuple[str, ...], ...]:
    """The kinds of compute unit each op (by :func:`op_key`) runs on: its core type's, or
    the one further unit that runs its op kind."""
    taken = {_KINDS.index(OpKind(k)): (u.kind,) for u in acc.extra_units for k in u.runs}
    return tuple(taken.get(key[0]) or _CORE_UNITS[key[1]] for key in keys)


def resolve_energy_inputs(
    acc: Accelerator, tech: TechNode | None, static_w: float | None
) -> tuple[TechNode, float]:
    """The technology node and chip static power (W): the given ones, else the accelerator's
    (``tech_node(acc.node_nm)`` and ``static_power_w(acc, tech)``)."""
    tech = tech or tech_node(acc.node_nm)
    if static_w is None:
        static_w = static_power_w(acc, tech)
    return tech, float(static_w)


def _readonly(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    a.flags.writeable = False
    return a


@lru_cache(maxsize=_CACHE_SIZE)
def _cached(
    keys: tuple[tuple, ...],
    acc: Accelerator,
    cluster: Cluster,
    tech: TechNode,
    static_w: float,
    settings: PerfSettings,
    device: DeviceProfile,
) -> tuple[tuple[tuple[str, ...], ...], tuple[np.ndarray, ...]]:
    one, par = evaluate_ops(keys, acc, cluster, tech, static_w, settings, device)
    arrays = (
        one.latency_s,
        one.energy_j,
        par.latency_s,
        par.energy_j,
        par.hbm_bytes,
        par.bound_code,
        one.parts_j,
        par.parts_j,
    )
    return _op_units(keys, acc), tuple(_readonly(a) for a in arrays)


def op_costs(
    graph: OpGraph,
    acc: Accelerator,
    cluster: Cluster,
    *,
    tech: TechNode | None = None,
    static_w: float | None = None,
    settings: PerfSettings | None = None,
    device: DeviceProfile | None = None,
) -> OpCostTable:
    """Single-core and all-core latency and energy of every op of ``graph`` on ``acc``.

    ``tech`` defaults to ``tech_node(acc.node_nm)``, ``static_w`` (chip static power, W) to
    ``static_power_w(acc)``, ``settings`` to the packaged :func:`default_settings` and
    ``device`` (sustained rates) to :func:`~arch_space.perf.device.device_profile` of ``acc``.
    Results are cached by content (distinct op fields + hardware), so repeated layers and
    repeated designs cost one evaluation.

    Notes
    -----
    O(distinct ops x candidate splits) numpy work; no Python loop over ops except building
    the content keys.
    """
    tech, static_w = resolve_energy_inputs(acc, tech, static_w)
    settings = settings or default_settings()
    keys = [op_key(op) for op in graph.ops]
    position = {}
    inverse = np.fromiter(
        (position.setdefault(k, len(position)) for k in keys), dtype=np.intp, count=len(keys)
    )
    device = device or device_profile(acc)
    design = dataclasses.replace(acc, name="")
    units, arrays = _cached(tuple(position), design, cluster, tech, static_w, settings, device)
    return OpCostTable(
        tuple(op.name for op in graph.ops),
        tuple(units[i] for i in inverse.tolist()),
        *(_readonly(a[inverse]) for a in arrays),
    )
