"""What the branch and bound (:mod:`ilp.branch`) reads at every node and never changes.

Per op: its modes, durations and resources (packed as in :class:`ilp.listsched.Structure`),
its work per resource kind and weighted occupancy, lower bounds on the time before and
after it (:func:`heads_and_tails`), and the problem's symmetries; and the ops that split
last in some optimal schedule (:func:`split_sinks`).
"""

from __future__ import annotations

from typing import Final

from ilp.bounds import occupancy_weights, resource_lower_bound
from ilp.listsched import Structure
from ilp.problem import PARALLEL, SINGLE, Problem
from ilp.symmetry import symmetry

__all__ = ["SearchTables", "heads_and_tails", "split_sinks"]

# Weights a of one resource kind against another in the occupancy bound (0 and 1 are the
# per-kind ones).
_WEIGHTS: Final = (0.0, 0.25, 0.5, 0.75, 1.0)


class SearchTables:
    """What the search reads at every node and never changes: per op, its modes, durations,
    resources (packed as in :class:`ilp.listsched.Structure`), work per kind and weighted
    occupancy, heads and tails, and the problem's symmetries."""

    def __init__(self, problem: Problem, st: Structure) -> None:
        n = self.n = problem.n
        self.problem, self.st = problem, st
        self.caps = problem.capacity
        self.kinds = range(len(self.caps))
        self.preds = st.preds
        self.head, self.tail = heads_and_tails(problem, st)
        self.duration, self.load, self.guard = st.duration, st.load, st.guard
        self.need = problem.need
        can = self.can = problem.can_parallel
        self.modes_of = [(SINGLE, PARALLEL) if can[i] else (SINGLE,) for i in range(n)]
        self.least = [problem.min_duration(i) for i in range(n)]
        self.pred_mask = [sum(1 << p for p in self.preds[i]) for i in range(n)]
        sym = symmetry(problem)
        self.before = [0] * n  # twins enter the list in index order
        for twins in sym.twins:
            for a, b in zip(twins, twins[1:], strict=False):
                self.before[b] |= 1 << a
        # Op -> the aligned branches of its group, and its branch's index there.
        self.in_branch: dict[int, tuple[tuple[tuple[int, ...], ...], int]] = {}
        for group, _ in sym.branches:
            for k, ops in enumerate(group):
                for i in ops:
                    self.in_branch[i] = (group, k)
        # Per op: units-seconds of each kind, least over its modes and split (for ops the
        # bound forces to split); and weighted occupancy per set of weights.
        units = [tuple(1.0 if j == k else 0.0 for j in self.kinds) for k in self.kinds]
        work = [self._table(w) for w in units]
        self.work_free = list(zip(*(free for free, _ in work), strict=True))
        self.work_split = list(zip(*(split for _, split in work), strict=True))
        self.weights = occupancy_weights(len(self.caps), _WEIGHTS)
        occupancy = [
            self._table(tuple(w / c for w, c in zip(wv, self.caps, strict=True)))
            for wv in self.weights
        ]
        # Per op: its least occupancy per weight, and what running split adds to it; the sum
        # over unplaced ops is carried down the search rather than summed at every node.
        self.occ_free = [tuple(free[i] for free, _ in occupancy) for i in range(n)]
        self.occ_split = [tuple(split[i] - free[i] for free, split in occupancy) for i in range(n)]
        self.holds_core = [problem.holds_core(i) for i in range(n)]
        self.single, self.split_s = problem.single_s, problem.parallel_s
        # The distinct rooms beside an op, single and split, and each op's index among them.
        self.rooms = sorted({*st.room[SINGLE], *st.room[PARALLEL]})
        self.single_need = [self.rooms.index(st.room[SINGLE][i]) for i in range(n)]
        self.split_need = [self.rooms.index(st.room[PARALLEL][i]) for i in range(n)]
        self.blocks_all = problem.parallel_blocks_all
        self.tail_ops = split_sinks(problem, st)
        self.full = (1 << n) - 1
        # Per group of k interchangeable branches, per branch in index (topological) order:
        # each op, its share min(split, single / k) of the collapsed-time bound, and its
        # predecessors in the branch (see the module docstring).
        self.branch_paths = [
            [
                [
                    (
                        i,
                        min(
                            self.split_s[i] if can[i] else float("inf"), self.single[i] / len(group)
                        )
                        if self.holds_core[i]
                        else 0.0,
                        tuple(q for q in self.preds[i] if q in ops),
                    )
                    for i in sorted(ops)
                ]
                for ops in group
            ]
            for group, _ in sym.branches
            if self.blocks_all
        ]

    def _table(self, weight: tuple[float, ...]) -> tuple[list[float], list[float]]:
        """Per op: its weighted units times duration, least over its modes and split."""

        def cost(i: int, m: int) -> float:
            return self.duration[m][i] * sum(
                w * u for w, u in zip(weight, self.need[m][i], strict=True)
            )

        free = [min(cost(i, m) for m in self.modes_of[i]) for i in range(self.n)]
        split = [cost(i, PARALLEL) if self.can[i] else free[i] for i in range(self.n)]
        return free, split


def heads_and_tails(problem: Problem, st: Structure) -> tuple[list[float], list[float]]:
    """Per op, lower bounds on the time before its start and after its finish: the makespan
    bound (:mod:`ilp.bounds`, its path and per-kind terms) of its ancestors and of its
    descendants, each on their own. Unlike path lengths they see that parallel ops run one at
    a time."""
    n = problem.n

    def bound(mask: int) -> float:
        ops = [i for i in range(n) if (mask >> i) & 1]
        if len(ops) <= 1:
            return sum(problem.min_duration(i) for i in ops)
        pos = {v: k for k, v in enumerate(ops)}
        return resource_lower_bound(
            [problem.single_s[i] for i in ops],
            [problem.parallel_s[i] for i in ops],
            [problem.can_parallel[i] for i in ops],
            tuple([problem.need[m][i] for i in ops] for m in (SINGLE, PARALLEL)),
            [[pos[p] for p in st.preds[i] if p in pos] for i in ops],
            problem.capacity,
            cores=problem.core_kinds,
            parallel_blocks_all=problem.parallel_blocks_all,
            # The destructive bound raises few heads and tails here, for much more time.
            destructive=False,
        )

    memo: dict[int, float] = {}  # ops often share their ancestors or descendants
    for mask in (*st.anc, *st.desc):
        if mask not in memo:
            memo[mask] = bound(mask)
    head = [max(st.head[i], memo[st.anc[i]]) for i in range(n)]
    tail = [max(st.tail[i], memo[st.desc[i]]) for i in range(n)]
    return head, tail


def split_sinks(problem: Problem, st: Structure) -> int:
    """The ops that, when split, some optimal schedule runs last (a bitset).

    Where split ops hold every core, a split op with no successors runs beside nothing
    that holds a core; cutting its interval out of the time axis and appending it at the end
    keeps every other op's precedence and units and the makespan. The cut would split an
    op that holds no core (a join, or a collective holding only its channel) running
    beside it, so only an op every such op precedes qualifies.
    """
    if not problem.parallel_blocks_all:
        return 0
    nops = [i for i in range(problem.n) if not problem.holds_core(i)]
    mask = 0
    for i in range(problem.n):
        if problem.can_parallel[i] and not st.succs[i] and all((st.anc[i] >> j) & 1 for j in nops):
            mask |= 1 << i
    return mask
