"""The scheduling problem in canonical, hashable form (the solver's input and cache key).

:func:`build_problem` validates a networkx op graph once, at the boundary, and turns it into
a :class:`Problem`: ops indexed in a deterministic topological order, zero-duration ops
contracted away (their predecessors joined to their successors), each op's modes with their
duration and core demand. Node names, energies and everything else that does not change the
optimal schedule stay out of the key, so identical layers share one solve.

Resource model (DESIGN.md §5): a single-core op holds one core of its type (a fused
``TCandVC`` op one tensor and one vector core); an intra-op parallel op holds all cores of its
type and, with ``parallel_blocks_all`` (the default), every other core too. ``Nop`` ops hold no
core (network collectives, joins) but take their latency.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Final

import networkx as nx

from phaze.errors import ConfigError

__all__ = [
    "CORE_TYPES",
    "SINGLE",
    "PARALLEL",
    "Problem",
    "Contracted",
    "build_problem",
    "demand",
    "uses",
]

CORE_TYPES: Final = ("TC", "VC", "TCandVC", "Nop")
SINGLE: Final = 0  # mode index: the op runs on one core of its type
PARALLEL: Final = 1  # mode index: the op runs split over all cores of its type (intra-op)


@dataclass(frozen=True, slots=True)
class Problem:
    """One scheduling instance, by content.

    ``core[i]`` is op i's core type; ``single_s[i]``/``parallel_s[i]`` its durations in the two
    modes (equal for ``Nop``); ``can_parallel[i]`` is False when the parallel mode is dominated
    (no faster, and it holds a superset of the cores) or does not exist. ``edges`` are (i, j)
    with i < j (ops are in topological order), after contraction.
    """

    num_tc: int
    num_vc: int
    parallel_blocks_all: bool
    core: tuple[str, ...]
    single_s: tuple[float, ...]
    parallel_s: tuple[float, ...]
    can_parallel: tuple[bool, ...]
    edges: tuple[tuple[int, int], ...]

    @property
    def n(self) -> int:
        return len(self.core)

    def duration(self, i: int, mode: int) -> float:
        return self.parallel_s[i] if mode == PARALLEL else self.single_s[i]

    def min_duration(self, i: int) -> float:
        return (
            min(self.single_s[i], self.parallel_s[i]) if self.can_parallel[i] else self.single_s[i]
        )


def uses(core: str) -> tuple[bool, bool]:
    """(holds a tensor core, holds a vector core) for a single-core op of this core type."""
    return core in ("TC", "TCandVC"), core in ("VC", "TCandVC")


def demand(problem: Problem, i: int, mode: int) -> tuple[int, int]:
    """(tensor cores, vector cores) op ``i`` holds in ``mode``."""
    core = problem.core[i]
    tc, vc = uses(core)
    if mode == SINGLE:
        return int(tc), int(vc)
    if problem.parallel_blocks_all or core == "TCandVC":
        return problem.num_tc, problem.num_vc
    return (problem.num_tc, 0) if tc else (0, problem.num_vc)


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


def _check_node(node: Hashable, attrs: Mapping[str, object]) -> list[str]:
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
    return problems


def _check_cores(num_tc: object, num_vc: object) -> list[str]:
    problems = []
    for name, v in (("num_tc", num_tc), ("num_vc", num_vc)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            problems.append(f"solve_schedule: {name} = {v!r} must be an integer >= 1")
    return problems


def build_problem(
    graph: nx.DiGraph, num_tc: int, num_vc: int, *, parallel_blocks_all: bool = True
) -> Contracted:
    """Validate ``graph`` and build its canonical :class:`Problem`.

    Raises
    ------
    ConfigError
        Listing every bad node attribute, bad core count, or a cycle, at once.
    """
    problems = _check_cores(num_tc, num_vc)
    if not isinstance(graph, nx.DiGraph):
        raise ConfigError(
            f"solve_schedule: graph must be a networkx DiGraph (got {type(graph).__name__})"
        )
    for node, attrs in graph.nodes(data=True):
        problems.extend(_check_node(node, attrs))
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
            # Zero time and no core held: contracting it changes no other op's start.
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
    problem = Problem(
        num_tc=num_tc,
        num_vc=num_vc,
        parallel_blocks_all=bool(parallel_blocks_all),
        core=tuple(attrs[v]["core"] for v in kept),
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
