"""The accelerator and cluster descriptions (docs/models.md), validated on construction.

An accelerator's compute units are data: :attr:`Accelerator.units` is a tuple of
:class:`ComputeUnit` (a resource kind, how many units of it, and each unit's rate), which the
op cost model and the layer scheduler read kind by kind. Its tensor cores (kind
:data:`TENSOR`) and vector cores (kind :data:`VECTOR`) are given by the five fields the
design space sweeps and the area and power models read; any further kind (a DMA or
transpose engine) is a :class:`ComputeUnit` of ``extra_units`` with its own area, energy and
the op kinds it runs.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass, fields
from types import MappingProxyType
from typing import Any, Final

from arch_space.formats import BASE_FORMAT, format_problem
from arch_space.tech import known_nodes, unknown_node_problem
from phaze_common.errors import ConfigError
from workloads.ops import OpKind

__all__ = [
    "ACCELERATOR_FIELDS",
    "TENSOR",
    "VECTOR",
    "UNIT_OP_KINDS",
    "Accelerator",
    "Cluster",
    "ComputeUnit",
    "accelerator_problems",
    "cluster_problems",
    "host_share",
    "node_count",
]

TENSOR: Final = "TC"  # the resource kind of the tensor cores (systolic MAC arrays)
VECTOR: Final = "VC"  # the resource kind of the vector cores (SIMD lanes)
#: The op kinds a further unit may run (ops that compute on the chip).
UNIT_OP_KINDS: Final = tuple(
    str(k) for k in OpKind if k not in (OpKind.COLLECTIVE, OpKind.COMM_SHARE, OpKind.NOP)
)


def _is_int(v: Any) -> bool:
    # ``type(...) is int`` first: the ABC check is slow and designs are built by the ten thousand
    return type(v) is int or (isinstance(v, numbers.Integral) and not isinstance(v, bool))


def _is_real(v: Any) -> bool:
    return type(v) in (int, float) or (isinstance(v, numbers.Real) and not isinstance(v, bool))


@dataclass(frozen=True, slots=True)
class ComputeUnit:
    """``count`` identical compute units of resource kind ``kind``, each a ``rows x cols``
    array doing that many operations per cycle at the design's clock and element format (a
    weight-stationary systolic array: ``rows x cols`` MACs; a SIMD unit: ``1 x lanes`` lane
    operations). The rate lives with the unit: ``formats`` gives, per number format the unit
    runs, its operations per cycle relative to ``rows x cols`` (the tensor cores: bf16 at 1,
    fp8 at 2 on an H100; empty for a unit without format choices).

    The tensor and vector cores take their area and energy from the node's technology data;
    a further kind carries its own: ``area_mm2`` per unit, ``pj_per_op`` per operation, and
    ``runs``, the op kinds (:data:`UNIT_OP_KINDS`) it takes over from the cores, doing all
    their MACs and lane operations at its rate.
    """

    kind: str
    count: int
    rows: int = 1
    cols: int = 1
    runs: tuple[str, ...] = ()
    pj_per_op: float = 0.0
    area_mm2: float = 0.0
    formats: tuple[tuple[str, float], ...] = ()

    @property
    def ops_per_cycle(self) -> int:
        """Operations one unit does per cycle."""
        return self.rows * self.cols


def _unit_problems(units: Any, dies: Any, owner: str) -> list[str]:
    """The rules the further units in ``units`` break (see :class:`ComputeUnit`)."""
    where = f"{owner}: extra_units"
    if not isinstance(units, tuple) or not all(isinstance(u, ComputeUnit) for u in units):
        return [f"{where} = {units!r} must be a tuple of ComputeUnit"]
    problems = []
    seen: set[str] = {TENSOR, VECTOR}
    ran: dict[str, str] = {}
    for u in units:
        name = f"{where} {u.kind!r}"
        if not isinstance(u.kind, str) or not u.kind or u.kind in seen:
            problems.append(
                f"{where}: kind = {u.kind!r} must be a new name (taken: {', '.join(sorted(seen))})"
            )
        seen.add(u.kind)
        for f in ("count", "rows", "cols"):
            v = getattr(u, f)
            if not _is_int(v) or v <= 0:
                problems.append(f"{name}: {f} = {v!r} must be a positive integer")
        for f in ("pj_per_op", "area_mm2"):
            v = getattr(u, f)
            if not _is_real(v) or not 0 < v < math.inf:
                problems.append(f"{name}: {f} = {v!r} must be a positive number")
        if not isinstance(u.runs, tuple) or not u.runs:
            problems.append(f"{name}: runs = {u.runs!r} must name op kinds it runs")
            continue
        for k in u.runs:
            if k not in UNIT_OP_KINDS:
                problems.append(
                    f"{name}: runs {k!r}, which is not one of {', '.join(UNIT_OP_KINDS)}"
                )
            elif k in ran:
                problems.append(f"{name}: runs {k!r}, which {ran[k]!r} runs already")
            else:
                ran[k] = u.kind
        if _is_int(dies) and dies > 0 and _is_int(u.count) and u.count % dies:
            problems.append(f"{name}: dies = {dies!r} must divide count = {u.count!r}")
    return problems


def accelerator_problems(values: Mapping[str, Any], owner: str) -> list[str]:
    """Every rule the accelerator fields in ``values`` break, each message naming ``owner``,
    the field, the value and what is allowed. Used on construction and by file loaders."""
    problems = []
    for f in _POSITIVE_INTS:
        v = values[f]
        if not _is_int(v) or v <= 0:
            problems.append(f"{owner}: {f} = {v!r} must be a positive integer")
    for f in _POSITIVE_REALS:
        v = values[f]
        if not _is_real(v) or not 0 < v < math.inf:
            problems.append(f"{owner}: {f} = {v!r} must be a positive number")
    stacks = values["hbm_stacks"]
    if not _is_int(stacks) or stacks < 0:
        problems.append(f"{owner}: hbm_stacks = {stacks!r} must be an integer >= 0 (0 = derived)")
    dies, tcs, vcs = values["dies"], values["num_tc"], values["num_vc"]
    if _is_int(dies) and dies > 0 and all(_is_int(c) and c > 0 for c in (tcs, vcs)):
        if tcs % dies or vcs % dies:
            problems.append(
                f"{owner}: dies = {dies!r} must divide num_tc = {tcs!r} and num_vc = {vcs!r} "
                "(every die carries the same cores)"
            )
    if values["extra_units"]:
        problems += _unit_problems(values["extra_units"], dies, owner)
    node = values["node_nm"]
    if _is_int(node) and node > 0 and node not in known_nodes():
        problems.append(unknown_node_problem(owner, f"{node}"))
    p = format_problem(owner, values["formats"])
    if p:
        problems.append(p)
    for f in ("name", "measured_as"):
        if not isinstance(values[f], str):
            problems.append(f"{owner}: {f} = {values[f]!r} must be a string")
    return problems


@dataclass(frozen=True, slots=True)
class Accelerator:
    """One accelerator chip: tensor cores (R x C weight-stationary systolic arrays of bf16
    MACs), vector cores (SIMD lanes), a global buffer shared by all cores, and HBM.

    All sizes in SI units: bytes, bytes/s, Hz. ``node_nm`` names the process node whose
    technology data (``arch_space/data/tech.toml``) gives area, energy and cost.
    ``hbm_stacks`` is the number of HBM stacks (PHYs on the die, stacks in the package);
    0 derives it from the node's HBM generation (:func:`arch_space.area.hbm_stacks`).
    ``dies`` is the number of identical logic dies in the package (B200: 2): the counts and
    sizes above are the package's totals, split evenly over the dies for die area, yield,
    cost and carbon (:func:`arch_space.area.die_area_mm2`); the die-to-die link is not timed.
    ``extra_units`` are further kinds of compute unit (see :class:`ComputeUnit`).
    ``formats`` are the number formats the tensor cores run, each with its MACs per cycle
    relative to bf16 (:mod:`arch_space.formats`); bf16 alone by default.
    ``measured_as`` names the preset whose measured data stands for this chip's (the tables of
    its chip file: sustained rates, harvesting, host server, board power limit and price): ""
    for none but its own name's (:attr:`profile_name`).
    """

    num_tc: int
    tc_rows: int
    tc_cols: int
    num_vc: int
    vc_lanes: int
    glb_bytes: int
    hbm_bytes: int
    hbm_bandwidth_bytes_per_s: float
    clock_hz: float
    node_nm: int = 7
    bytes_per_element: int = 2
    name: str = ""
    hbm_stacks: int = 0
    dies: int = 1
    extra_units: tuple[ComputeUnit, ...] = ()
    formats: tuple[tuple[str, float], ...] = ((BASE_FORMAT, 1.0),)
    measured_as: str = ""

    def __post_init__(self) -> None:
        values = {f: getattr(self, f) for f in ACCELERATOR_FIELDS}
        problems = accelerator_problems(values, f"accelerator {self.name or '(unnamed)'}")
        if problems:
            raise ConfigError("; ".join(problems))
        # One representation per value, so equal designs compare, hash and print equal.
        for f in _POSITIVE_INTS + ("hbm_stacks",):
            if type(values[f]) is not int:
                object.__setattr__(self, f, int(values[f]))
        for f in _POSITIVE_REALS:
            if type(values[f]) is not float:
                object.__setattr__(self, f, float(values[f]))

    @property
    def profile_name(self) -> str:
        """The name the shipped per-chip data is keyed by: ``measured_as``, else ``name``; ""
        for an unnamed copy (the timing copies drop the name, and with it that data, but
        keep ``measured_as`` for the sustained rates, :func:`~arch_space.perf.device_profile`).
        """
        return (self.measured_as or self.name) if self.name else ""

    @property
    def macs_per_cycle(self) -> int:
        return self.num_tc * self.tc_rows * self.tc_cols

    @property
    def units(self) -> tuple[ComputeUnit, ...]:
        """Every kind of compute unit: the tensor cores, the vector cores (``1 x vc_lanes``),
        then the further kinds."""
        return (
            ComputeUnit(TENSOR, self.num_tc, self.tc_rows, self.tc_cols, formats=self.formats),
            ComputeUnit(VECTOR, self.num_vc, 1, self.vc_lanes),
            *self.extra_units,
        )

    @property
    def capacity(self) -> Mapping[str, int]:
        """The units of each kind, in :attr:`units` order: what the layer scheduler shares
        among ops."""
        return MappingProxyType({u.kind: u.count for u in self.units})

    @property
    def format_names(self) -> tuple[str, ...]:
        """The number formats the tensor cores run, bf16 first."""
        return tuple(f for f, _ in self.formats)

    def format_rate(self, fmt: str) -> float:
        """The tensor cores' MACs per cycle in ``fmt`` relative to bf16 (a ConfigError naming
        the formats they run if they have none for it)."""
        for f, rate in self.formats:
            if f == fmt:
                return rate
        raise ConfigError(
            f"accelerator {self.name or '(unnamed)'} has no {fmt} tensor-core format "
            f"(it runs {', '.join(self.format_names)})"
        )

    @property
    def peak_flops(self) -> float:
        """Peak dense FLOP/s of the tensor cores (one MAC = 2 FLOPs)."""
        return 2.0 * self.macs_per_cycle * self.clock_hz


#: The Accelerator's field names, in declaration order.
ACCELERATOR_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Accelerator))
# The sizes and counts (all int fields but the optional ``hbm_stacks``) and the rates.
_POSITIVE_INTS = tuple(
    f.name for f in fields(Accelerator) if f.type == "int" and f.name != "hbm_stacks"
)
_POSITIVE_REALS = tuple(f.name for f in fields(Accelerator) if f.type == "float")


_CLUSTER_FIELDS: tuple[str, ...] = (
    "devices",
    "devices_per_node",
    "intra_node_bandwidth_bytes_per_s",
    "inter_node_bandwidth_bytes_per_s",
    "intra_node_latency_s",
    "inter_node_latency_s",
)


def cluster_problems(values: Mapping[str, Any], owner: str) -> list[str]:
    """Every rule the cluster fields in ``values`` break (see :func:`accelerator_problems`)."""
    problems = []
    for f in _CLUSTER_FIELDS[:2]:
        if not _is_int(values[f]) or values[f] <= 0:
            problems.append(f"{owner}: {f} = {values[f]!r} must be a positive integer")
    for f in _CLUSTER_FIELDS[2:4]:
        if not _is_real(values[f]) or not 0 < values[f] < math.inf:
            problems.append(f"{owner}: {f} = {values[f]!r} must be a positive number")
    for f in _CLUSTER_FIELDS[4:]:
        if not _is_real(values[f]) or not 0 <= values[f] < math.inf:
            problems.append(f"{owner}: {f} = {values[f]!r} must be a number >= 0")
    devices, per_node = values["devices"], values["devices_per_node"]
    if not problems and devices % per_node and devices > per_node:
        problems.append(
            f"{owner}: devices = {devices} must be a multiple of "
            f"devices_per_node = {per_node} (or at most one node)"
        )
    return problems


@dataclass(frozen=True, slots=True)
class Cluster:
    """Devices and the network between them; the one cluster type of the API, the sweep and
    the placement.

    Bandwidths are per device and per direction, in bytes/s; latencies are per message hop.
    Devices in one node talk over ``intra_node_*`` links (NVLink-like), across nodes over
    ``inter_node_*`` links (InfiniBand-like).
    """

    devices: int
    devices_per_node: int = 8  # an HGX/DGX node: 8 GPUs
    # NVLink 3 on A100: 600 GB/s total per GPU = 300 GB/s per direction (A100 whitepaper)
    intra_node_bandwidth_bytes_per_s: float = 300e9
    # one 200 Gb/s HDR InfiniBand NIC per GPU = 25 GB/s per direction (DGX A100 user guide)
    inter_node_bandwidth_bytes_per_s: float = 25e9
    intra_node_latency_s: float = 2e-6  # approx. NVLink/NCCL per-hop latency
    inter_node_latency_s: float = 5e-6  # approx. InfiniBand + NCCL per-hop latency

    def __post_init__(self) -> None:
        values = {f: getattr(self, f) for f in _CLUSTER_FIELDS}
        problems = cluster_problems(values, "cluster")
        if problems:
            raise ConfigError("; ".join(problems))
        for f in ("devices", "devices_per_node"):
            object.__setattr__(self, f, int(values[f]))
        for f in _CLUSTER_FIELDS[2:]:
            object.__setattr__(self, f, float(values[f]))

    @property
    def nodes(self) -> int:
        """Nodes the devices fill (:func:`node_count`)."""
        return node_count(self.devices, self.devices_per_node)

    @property
    def host_share(self) -> float:
        """The nodes' worth of host servers the devices are charged (:func:`host_share`)."""
        return host_share(self.devices, self.devices_per_node)

    def spans_nodes(self, group):
        """Does a group of ``group`` consecutive devices cross a node boundary (then its
        slowest link is an inter-node one)? The one test of it; arrays broadcast."""
        return group > self.devices_per_node

    def group_link(self, group: int) -> tuple[float, float]:
        """(bandwidth bytes/s, latency s) of the slowest link a ring over ``group``
        consecutive devices crosses: intra-node if the group fits in a node."""
        if not self.spans_nodes(group):
            return self.intra_node_bandwidth_bytes_per_s, self.intra_node_latency_s
        return self.inter_node_bandwidth_bytes_per_s, self.inter_node_latency_s


def node_count(devices: int, devices_per_node: int) -> int:
    """Nodes that hold ``devices``: a partly filled node counts whole."""
    return -(-devices // devices_per_node)


def host_share(devices: int, devices_per_node: int) -> float:
    """The nodes' worth of host servers a job on ``devices`` is charged: each device pays
    ``1 / devices_per_node`` of its node's host, so a job on k of a node's n devices pays k/n
    of one host (the rest serves other jobs) and full nodes pay whole hosts.

    Examples
    --------
    >>> host_share(1, 8), host_share(64, 8)
    (0.125, 8.0)
    """
    return devices / devices_per_node
