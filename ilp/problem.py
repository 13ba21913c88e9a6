"""The scheduling problem in canonical, hashable form (the solver's input and cache key).

:func:`build_problem` validates a networkx op graph once, at the boundary, and turns it into
a :class:`Problem`: ops indexed in a deterministic topological order, zero-duration ops
contracted away (their predecessors joined to their successors), each op's modes with their
duration and resource demand. Node names, energies and everything else that does not change
the optimal schedule stay out of the key, so identical layers share one solve.

Resources are data (docs/scheduling.md): a problem declares its resource kinds and the units of
each (the design's tensor and vector cores, and any further kinds such as a communication
channel), and every op, per mode, how many units of each kind it holds while it runs. The
solver reads only those. :func:`build_problem` derives the demands from the graph: a
single-core op holds one core of its type (a fused ``TCandVC`` op one tensor and one vector
core); an intra-op parallel op holds all cores of its type and, with
``parallel_blocks_all`` (the default), every core of the chip (every unit of the core kinds,
never of the further kinds: a split GEMM runs beside a collective on its channel); ``Nop``
ops hold no core (network collectives, joins) but take their latency; a node's ``demand``
attribute adds units of the further kinds, held in either mode.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

import networkx as nx

from phaze_common.errors import ConfigError

__all__ = [
    "CORE_KINDS",
    "CORE_TYPES",
    "SINGLE",
    "PARALLEL",
    "Problem",
    "Contracted",
    "build_problem",
    "core_demand",
    "channel_kind",
]

CORE_TYPES: Final = ("TC", "VC", "TCandVC", "Nop")
CORE_KINDS: Final = ("TC", "VC")  # the resource kinds of every design: its cores
SINGLE: Final = 0  # mode index: the op runs on one core of its type
PARALLEL: Final = 1  # mode index: the op runs split over all cores of its type (intra-op)

Units = tuple[int, ...]  # units held of each resource kind, in the problem's kind order


def channel_kind(group: str) -> str:
    """The resource kind of the communication channel of parallel group ``group`` (one
    unit: the group's collectives run one at a time)."""
    return f"channel:{group}"


@dataclass(frozen=True, slots=True)
class Problem:
    """One scheduling instance, by content.

    ``kinds[k]`` is a resource kind with ``capacity[k]`` units. ``need[m][i][k]`` is how many
    units of kind k op i holds in mode m (the parallel mode's equals the single mode's where
    that mode does not exist). ``single_s[i]``/``parallel_s[i]`` are its durations in the two
    modes (equal for ops that cannot split); ``can_parallel[i]`` is False when the parallel
    mode is dominated (no faster) or does not exist. The kinds start with the cores
    (:data:`CORE_KINDS`). ``parallel_blocks_all`` says that every parallel mode holds every
    unit of every core kind (not of the further kinds), which the bounds exploit: a split op
    runs beside no op that holds a core (:meth:`holds_core`), but may run beside one that
    holds only further kinds (a collective on its channel). ``edges`` are (i, j) with i < j
    (ops are in topological order), after contraction.
    """

    kinds: tuple[str, ...]
    capacity: Units
    parallel_blocks_all: bool
    need: tuple[tuple[Units, ...], tuple[Units, ...]]
    single_s: tuple[float, ...]
    parallel_s: tuple[float, ...]
    can_parallel: tuple[bool, ...]
    edges: tuple[tuple[int, int], ...]

    @property
    def n(self) -> int:
        return len(self.single_s)

    def duration(self, i: int, mode: int) -> float:
        return self.parallel_s[i] if mode == PARALLEL else self.single_s[i]

    def min_duration(self, i: int) -> float:
        return (
            min(self.single_s[i], self.parallel_s[i]) if self.can_parallel[i] else self.single_s[i]
        )

    def holds(self, i: int) -> bool:
        """Does op i hold any resource (unlike a ``Nop`` join or collective)?"""
        return any(self.need[SINGLE][i])

    def holds_core(self, i: int) -> bool:
        """Does op i hold a core (so no op split over the chip runs beside it)?"""
        return any(self.need[SINGLE][i][: len(CORE_KINDS)])

    def demand(self, i: int, mode: int) -> dict[str, int]:
        """The units of each kind op i holds in ``mode``, by kind."""
        return dict(zip(self.kinds, self.need[mode][i], strict=True))


def core_demand(
    core: str, capacity: Sequence[int], blocks_all: bool, extra: Sequence[int] | None = None
) -> tuple[Units, Units]:
    """(single, parallel) units of each kind held by an op of this core type.

    ``capacity`` starts with the tensor and vector cores (:data:`CORE_KINDS`); ``extra`` are
    the units of every kind the op holds besides its cores, in either mode. With
    ``blocks_all`` the split mode holds every core, and of the further kinds only ``extra``.
    """
    extra = tuple(extra) if extra is not None else (0,) * len(capacity)
    tc, vc = core in ("TC", "TCandVC"), core in ("VC", "TCandVC")
    single = (int(tc) + extra[0], int(vc) + extra[1], *extra[2:])
    if core == "Nop":
        return single, single
    if blocks_all:
        return single, (*capacity[: len(CORE_KINDS)], *extra[len(CORE_KINDS) :])
    own = (capacity[0] if tc else extra[0], capacity[1] if vc else extra[1])
    return single, (*own, *extra[2:])


@dataclass(frozen=True, slots=True)
class Contracted:
    """How the original graph maps onto a :class:`Problem`.

    ``nodes[i]`` is the original node of op i. ``zero`` lists the contracted zero-duration
    nodes in topological order with their mode and original predecessors, so their start
    (the latest finish of their predecessors) can be restored after solving.
    """

    problem: Problem
    nodes: tuple[Hashable, ...]
    zero: tuple[tuple[Hashable, int, tuple[Hashable, ...]], ...]


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    v = float(value)
    return v if math.isfinite(v) and v >= 0 else None


def _check_node(node: Hashable, attrs: Mapping[str, object], capacity: Mapping[str, int]):
    problems = []
    core = attrs.get("core")
    if core not in CORE_TYPES:
        problems.append(
            f"graph node {node!r}: core = {core!r} must be one of {', '.join(CORE_TYPES)}"
        )
    required = ("latency_s",) if core == "Nop" else ("latency_s", "parallel_latency_s")
    optional = ("energy_j",) if core == "Nop" else ("energy_j", "parallel_energy_j")
    for field in required:
        if core == "Nop" and field not in attrs:
            continue  # a Nop without latency is a zero-time join
        if field not in attrs:
            problems.append(f"graph node {node!r}: missing attribute {field!r} (seconds, >= 0)")
        elif _number(attrs[field]) is None:
            problems.append(
                f"graph node {node!r}: {field} = {attrs[field]!r} must be a finite number >= 0"
            )
    for field in optional:
        if field in attrs and _number(attrs[field]) is None:
            problems.append(
                f"graph node {node!r}: {field} = {attrs[field]!r} must be a finite number >= 0"
            )
    extra = attrs.get("demand", {})
    further = [k for k in capacity if k not in CORE_KINDS]
    if not isinstance(extra, Mapping):
        problems.append(f"graph node {node!r}: demand = {extra!r} must map resource kinds to units")
        return problems
    for kind, units in extra.items():
        if kind not in further:
            problems.append(
                f"graph node {node!r}: demand names resource {kind!r}; the declared further "
                f"resources are: {', '.join(map(repr, further)) or 'none'}"
            )
        elif isinstance(units, bool) or not isinstance(units, int) or not 0 <= units:
            problems.append(
                f"graph node {node!r}: demand[{kind!r}] = {units!r} must be an integer >= 0"
            )
        elif isinstance(capacity[kind], int) and units > capacity[kind]:
            problems.append(
                f"graph node {node!r}: demand[{kind!r}] = {units} exceeds the "
                f"{capacity[kind]} units of {kind!r}"
            )
    return problems


def _check_capacity(num_tc: object, num_vc: object, resources: object) -> list[str]:
    problems = []
    for name, v in (("num_tc", num_tc), ("num_vc", num_vc)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            problems.append(f"solve_schedule: {name} = {v!r} must be an integer >= 1")
    if not isinstance(resources, Mapping):
        return [*problems, f"solve_schedule: resources = {resources!r} must map kinds to units"]
    for kind, v in resources.items():
        if not isinstance(kind, str) or kind in CORE_KINDS:
            problems.append(
                f"solve_schedule: resource kind {kind!r} must be a name other than "
                f"{' and '.join(CORE_KINDS)} (the cores are num_tc and num_vc)"
            )
        elif isinstance(v, bool) or not isinstance(v, int) or v < 1:
            problems.append(f"solve_schedule: resources[{kind!r}] = {v!r} must be an integer >= 1")
    return problems


def build_problem(
    graph: nx.DiGraph,
    num_tc: int,
    num_vc: int,
    *,
    parallel_blocks_all: bool = True,
    resources: Mapping[str, int] | None = None,
) -> Contracted:
    """Validate ``graph`` and build its canonical :class:`Problem` on ``num_tc`` tensor and
    ``num_vc`` vector cores and the further ``resources`` (kind -> units), which the nodes'
    ``demand`` attributes draw on.

    Raises
    ------
    ConfigError
        Listing every bad node attribute, bad capacity, or a cycle, at once.
    """
    resources = {} if resources is None else resources
    problems = _check_capacity(num_tc, num_vc, resources)
    capacity = {"TC": num_tc, "VC": num_vc}
    if isinstance(resources, Mapping):
        capacity.update(resources)
    if not isinstance(graph, nx.DiGraph):
        raise ConfigError(
            f"solve_schedule: graph must be a networkx DiGraph (got {type(graph).__name__})"
        )
    for node, attrs in graph.nodes(data=True):
        problems.extend(_check_node(node, attrs, capacity))
    if not nx.is_directed_acyclic_graph(graph):
        cycle = nx.find_cycle(graph)
        problems.append(f"solve_schedule: graph has a cycle through {[u for u, _ in cycle]!r}")
    if problems:
        raise ConfigError("; ".join(problems))

    position = {node: k for k, node in enumerate(graph.nodes)}
    order = list(nx.lexicographical_topological_sort(graph, key=position.__getitem__))
    attrs = graph.nodes
    kept: list[Hashable] = []
    zero: list[tuple[Hashable, int, tuple[Hashable, ...]]] = []
    mode_of: dict[Hashable, tuple[float, float, bool]] = {}
    for node in order:
        a = attrs[node]
        single = float(a.get("latency_s", 0.0))
        if a["core"] == "Nop":
            parallel, can = single, False
        else:
            parallel = float(a["parallel_latency_s"])
            can = parallel < single
        if min(single, parallel) == 0.0:
            # Zero time holds nothing: contracting it changes no other op's start.
            zero_mode = SINGLE if single == 0.0 else PARALLEL
            zero.append((node, zero_mode, tuple(graph.predecessors(node))))
        else:
            kept.append(node)
            mode_of[node] = (single, parallel, can)

    index = {node: k for k, node in enumerate(kept)}
    edges: set[tuple[int, int]] = set()
    # Each kept op's nearest kept ancestors, looking through contracted ones.
    kept_preds: dict[Hashable, frozenset[int]] = {}
    for node in order:
        acc: set[int] = set()
        for p in graph.predecessors(node):
            if p in index:
                acc.add(index[p])
            else:
                acc |= kept_preds[p]
        kept_preds[node] = frozenset(acc)
        if node in index:
            edges.update((p, index[node]) for p in acc)
    caps = tuple(capacity.values())
    needs = [
        core_demand(
            attrs[v]["core"],
            caps,
            bool(parallel_blocks_all),
            tuple(attrs[v].get("demand", {}).get(k, 0) for k in capacity) if resources else None,
        )
        for v in kept
    ]
    problem = Problem(
        kinds=tuple(capacity),
        capacity=caps,
        parallel_blocks_all=bool(parallel_blocks_all),
        need=(tuple(d[SINGLE] for d in needs), tuple(d[PARALLEL] for d in needs)),
        single_s=tuple(mode_of[v][0] for v in kept),
        parallel_s=tuple(mode_of[v][1] for v in kept),
        can_parallel=tuple(mode_of[v][2] for v in kept),
        edges=tuple(sorted(_transitive_reduction(len(kept), edges))),
    )
    return Contracted(problem=problem, nodes=tuple(kept), zero=tuple(zero))


def _transitive_reduction(n: int, edges: set[tuple[int, int]]) -> set[tuple[int, int]]:
    """Drop edges implied by longer paths (they constrain nothing more)."""
    succ: list[list[int]] = [[] for _ in range(n)]
    for i, j in edges:
        succ[i].append(j)
    reach = [0] * n  # bitset of strict descendants
    for i in range(n - 1, -1, -1):
        r = 0
        for j in succ[i]:
            r |= (1 << j) | reach[j]
        reach[i] = r
    keep = set()
    for i, j in edges:
        if not any(k != j and (reach[k] >> j) & 1 for k in succ[i]):
            keep.add((i, j))
    return keep
