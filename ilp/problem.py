"""The scheduling problem in canonical, hashable form (the solver's input and cache key).

:func:`build_problem` validates a networkx op graph once, at the boundary, and turns it into
a :class:`Problem`: ops indexed in a deterministic topological order, zero-duration ops
contracted away (their predecessors joined to their successors), each op's modes with their
duration and resource demand. Node names, energies and everything else that does not change
the optimal schedule stay out of the key, so identical layers share one solve.

Resources are data (docs/scheduling.md): a problem declares its resource kinds and the units of
each (the design's kinds of compute unit, its *cores*, and any further kinds such as a
communication channel), and every op, per mode, how many units of each kind it holds while it
runs. The solver reads only those; no kind has a meaning of its own. :func:`build_problem`
derives the demands from the graph: a node's ``units`` attribute maps the core kinds it runs
on to the units it holds of each in its single mode (usually one); in its intra-op parallel
mode it holds every unit of those kinds and, with ``parallel_blocks_all`` (the default),
every core of the chip (every unit of every core kind, never of the further kinds: a split
op runs beside a collective on its channel); a node without ``units`` holds no core (a
network collective, a join) but takes its latency; a node's ``demand`` attribute adds units
of the further kinds, held in either mode.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Final

import networkx as nx

from phaze_common.errors import ConfigError

__all__ = [
    "SINGLE",
    "PARALLEL",
    "Problem",
    "Contracted",
    "build_problem",
    "unit_demand",
    "channel_kind",
]

SINGLE: Final = 0  # mode index: the op runs on its single mode's units (one of each kind)
PARALLEL: Final = 1  # mode index: the op runs split over all units of its kinds (intra-op)

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
    mode is dominated (no faster) or does not exist. The first ``core_kinds`` kinds are the
    cores (the chip's compute units), the rest further kinds. ``parallel_blocks_all`` says
    that every parallel mode holds every unit of every core kind (not of the further kinds),
    which the bounds exploit: a split op runs beside no op that holds a core
    (:meth:`holds_core`), but may run beside one that holds only further kinds (a collective
    on its channel). ``edges`` are (i, j) with i < j (ops are in topological order), after
    contraction.
    """

    kinds: tuple[str, ...]
    capacity: Units
    core_kinds: int
    parallel_blocks_all: bool
    need: tuple[tuple[Units, ...], tuple[Units, ...]]
    single_s: tuple[float, ...]
    parallel_s: tuple[float, ...]
    can_parallel: tuple[bool, ...]
    edges: tuple[tuple[int, int], ...]
    # the hash of the fields, worked out once: the solvers' caches look a problem up many
    # times, and hashing its tuples (thousands of ops) each time cost 5 % of a large search
    # (not pickled: string hashes differ between processes)
    _hash: int | None = dataclasses.field(default=None, init=False, repr=False, compare=False)

    def _fields(self) -> tuple:
        return tuple(getattr(self, f.name) for f in dataclasses.fields(self) if f.init)

    def __hash__(self) -> int:
        if self._hash is None:
            object.__setattr__(self, "_hash", hash(self._fields()))
        return self._hash

    def __reduce__(self) -> tuple:
        return type(self), self._fields()

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
        """Does op i hold any resource (unlike a join or a collective)?"""
        return any(self.need[SINGLE][i])

    def holds_core(self, i: int) -> bool:
        """Does op i hold a core (so no op split over the chip runs beside it)?"""
        return any(self.need[SINGLE][i][: self.core_kinds])

    def demand(self, i: int, mode: int) -> dict[str, int]:
        """The units of each kind op i holds in ``mode``, by kind."""
        return dict(zip(self.kinds, self.need[mode][i], strict=True))


def unit_demand(
    single: Units, capacity: Units, cores: int, blocks_all: bool
) -> tuple[Units, Units]:
    """(single, parallel) units of each kind held by an op that holds ``single`` in its single
    mode (every kind in order: the first ``cores`` are the cores, the rest further kinds).

    In its parallel mode it holds every unit of the core kinds it works on or, with
    ``blocks_all``, of every core kind; of the further kinds the same as in its single mode.
    An op holding no core has no parallel mode (both are its single one).
    """
    if not any(single[:cores]):
        return single, single
    if blocks_all:
        return single, (*capacity[:cores], *single[cores:])
    own = tuple(c if u else 0 for u, c in zip(single[:cores], capacity[:cores], strict=True))
    return single, (*own, *single[cores:])


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


def _check_units(
    node: Hashable, attr: str, value: object, kinds: Mapping[str, int], what: str
) -> list[str]:
    """The problems of a node's ``units`` or ``demand`` mapping over ``kinds``."""
    if not isinstance(value, Mapping):
        return [f"graph node {node!r}: {attr} = {value!r} must map {what} kinds to units"]
    problems = []
    for kind, units in value.items():
        if kind not in kinds:
            problems.append(
                f"graph node {node!r}: {attr} names {kind!r}; the declared {what} kinds are: "
                f"{', '.join(map(repr, kinds)) or 'none'}"
            )
        elif isinstance(units, bool) or not isinstance(units, int) or not 0 <= units:
            problems.append(
                f"graph node {node!r}: {attr}[{kind!r}] = {units!r} must be an integer >= 0"
            )
        elif isinstance(kinds[kind], int) and units > kinds[kind]:
            problems.append(
                f"graph node {node!r}: {attr}[{kind!r}] = {units} exceeds the "
                f"{kinds[kind]} units of {kind!r}"
            )
    return problems


def _check_node(
    node: Hashable, attrs: Mapping[str, object], cores: Mapping[str, int], further: Mapping
) -> list[str]:
    units = attrs.get("units", {})
    problems = _check_units(node, "units", units, cores, "core")
    held = isinstance(units, Mapping) and any(units.values())
    required = ("latency_s", "parallel_latency_s") if held else ()
    optional = ("energy_j", "parallel_energy_j") if held else ("latency_s", "energy_j")
    for field in required:
        if field not in attrs:
            problems.append(f"graph node {node!r}: missing attribute {field!r} (seconds, >= 0)")
    for field in (*required, *optional):
        if field in attrs and _number(attrs[field]) is None:
            problems.append(
                f"graph node {node!r}: {field} = {attrs[field]!r} must be a finite number >= 0"
            )
    return problems + _check_units(node, "demand", attrs.get("demand", {}), further, "further")


def _kinds_problems(name: str, kinds: object, taken: Mapping[str, int]) -> list[str]:
    """The problems of ``units`` or ``resources`` (kind -> units >= 1; no kind in ``taken``)."""
    if not isinstance(kinds, Mapping):
        return [f"solve_schedule: {name} = {kinds!r} must map kinds to units"]
    problems = []
    for kind, v in kinds.items():
        if not isinstance(kind, str) or kind in taken:
            problems.append(
                f"solve_schedule: {name} kind {kind!r} must be a name"
                + (f" other than the cores' ({', '.join(map(repr, taken))})" if taken else "")
            )
        elif isinstance(v, bool) or not isinstance(v, int) or v < 1:
            problems.append(f"solve_schedule: {name}[{kind!r}] = {v!r} must be an integer >= 1")
    return problems


def build_problem(
    graph: nx.DiGraph,
    units: Mapping[str, int],
    *,
    parallel_blocks_all: bool = True,
    resources: Mapping[str, int] | None = None,
) -> Contracted:
    """Validate ``graph`` and build its canonical :class:`Problem` on the cores ``units``
    (kind -> units, in that order: the chip's kinds of compute unit) and the further
    ``resources`` (kind -> units), which the nodes' ``units`` and ``demand`` attributes
    draw on.

    Raises
    ------
    ConfigError
        Listing every bad node attribute, bad capacity, or a cycle, at once.
    """
    resources = {} if resources is None else resources
    problems = _kinds_problems("units", units, {})
    cores = dict(units) if isinstance(units, Mapping) else {}
    problems += _kinds_problems("resources", resources, cores)
    further = dict(resources) if isinstance(resources, Mapping) else {}
    if not isinstance(graph, nx.DiGraph):
        raise ConfigError(
            f"solve_schedule: graph must be a networkx DiGraph (got {type(graph).__name__})"
        )
    for node, attrs in graph.nodes(data=True):
        problems.extend(_check_node(node, attrs, cores, further))
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
        if not any(a.get("units", {}).values()):
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
    capacity = {**cores, **further}
    caps = tuple(capacity.values())
    needs = []
    for v in kept:
        held = {**attrs[v].get("units", {}), **attrs[v].get("demand", {})}
        single = tuple(held.get(k, 0) for k in capacity)
        needs.append(unit_demand(single, caps, len(cores), bool(parallel_blocks_all)))
    problem = Problem(
        kinds=tuple(capacity),
        capacity=caps,
        core_kinds=len(cores),
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
