"""Interchangeable ops and branches of a problem, for symmetry-breaking constraints.

Layer graphs repeat structure: attention head groups, MoE experts, the gate and up GEMMs of
a SwiGLU. Swapping two such parts is an automorphism of the DAG that keeps every op's
resource demands and durations, so it maps any schedule to one with the same makespan. The
MIP may therefore demand, without losing optimality:

* twins (same demands, durations, predecessors and successors) start in index order;
* interchangeable branches start (at a chosen op of each) in index order, where a branch is
  a connected set of ops whose colour (Weisfeiler-Leman refinement of demands, durations
  and neighbours) is shared with other ops, not counting hubs (ops with two neighbours of one
  colour on one side, which fan out to several branches), and two branches are
  interchangeable when the colour-preserving map between them keeps every edge inside and
  every neighbour outside.

Both hold at once: sort twins first (inside each branch), then permute whole branches with
maps that send the i-th twin to the i-th twin (Margot, "Symmetry in integer linear
programming", 50 Years of Integer Programming, 2010, for the general technique).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ilp.listsched import structure
from ilp.problem import PARALLEL, SINGLE, Problem

__all__ = ["Symmetry", "symmetry", "canonical"]


@dataclass(frozen=True, slots=True)
class Symmetry:
    """``twins``: classes of twin ops (index order). ``branches``: groups of aligned branches
    (position p of every branch in a group corresponds), with the position of the op whose
    starts are ordered."""

    twins: tuple[tuple[int, ...], ...]
    branches: tuple[tuple[tuple[tuple[int, ...], ...], int], ...]

    def orderings(self) -> list[tuple[int, int]]:
        """Pairs (a, b): some optimal schedule starts op a no later than op b."""
        out = [(c[k], c[k + 1]) for c in self.twins for k in range(len(c) - 1)]
        for group, rep in self.branches:
            out.extend((group[k][rep], group[k + 1][rep]) for k in range(len(group) - 1))
        return out


def _colours(problem: Problem) -> list[int]:
    """Colour refinement: equal colours for ops that no local structure tells apart."""
    st = structure(problem)
    n = problem.n
    ids: dict[tuple, int] = {}
    colour = [
        ids.setdefault(
            (
                problem.need[SINGLE][i],
                problem.need[PARALLEL][i],
                problem.single_s[i],
                problem.parallel_s[i],
                problem.can_parallel[i],
            ),
            len(ids),
        )
        for i in range(n)
    ]
    for _ in range(n):
        ids = {}
        new = [
            ids.setdefault(
                (
                    colour[i],
                    tuple(sorted(colour[p] for p in st.preds[i])),
                    tuple(sorted(colour[s] for s in st.succs[i])),
                ),
                len(ids),
            )
            for i in range(n)
        ]
        stable = len(ids) == len(set(colour))
        colour = new
        if stable:
            break
    return colour


@lru_cache(maxsize=4096)
def symmetry(problem: Problem) -> Symmetry:
    st = structure(problem)
    n = problem.n
    colour = _colours(problem)

    twin_classes: dict[tuple, list[int]] = {}
    for i in range(n):
        twin_classes.setdefault((colour[i], st.preds[i], st.succs[i]), []).append(i)
    twins = tuple(tuple(c) for c in twin_classes.values() if len(c) > 1)
    twin_rank = {v: k for c in twins for k, v in enumerate(c)}

    size: dict[int, int] = {}
    for c in colour:
        size[c] = size.get(c, 0) + 1
    # A hub (an op with two neighbours of one colour, not twins, on one side, like a GEMM
    # feeding every head group) is shared by the branches it fans out to: it is in none.
    twin_of = {v: c[0] for c in twins for v in c}
    hub = [
        any(
            len({(colour[w], twin_of.get(w, w)) for w in nbrs}) != len({colour[w] for w in nbrs})
            for nbrs in (st.preds[i], st.succs[i])
        )
        for i in range(n)
    ]
    shared = [size[colour[i]] > 1 and not hub[i] for i in range(n)]
    comp = [-1] * n
    comps: list[list[int]] = []
    for i in range(n):
        if not shared[i] or comp[i] >= 0:
            continue
        comp[i] = len(comps)
        stack, members = [i], []
        while stack:
            u = stack.pop()
            members.append(u)
            for w in (*st.preds[u], *st.succs[u]):
                if shared[w] and comp[w] < 0:
                    comp[w] = comp[i]
                    stack.append(w)
        comps.append(sorted(members))

    def key(u: int) -> tuple[int, int]:
        return colour[u], twin_rank.get(u, 0)

    groups: dict[tuple, list[tuple[int, ...]]] = {}
    for members in comps:
        aligned = tuple(sorted(members, key=key))
        keys = tuple(key(u) for u in aligned)
        if len(set(keys)) == len(keys):
            groups.setdefault(keys, []).append(aligned)
    branches = []
    for keys, group in groups.items():
        if len(group) < 2:
            continue
        counts: dict[int, int] = {}
        for c, _ in keys:
            counts[c] = counts.get(c, 0) + 1
        rep = next((p for p, (c, _) in enumerate(keys) if counts[c] == 1), None)
        if rep is None:
            continue
        first = group[0]
        same = [g for g in group if _interchangeable(st, first, g)]
        if len(same) > 1:
            same.sort(key=lambda g: g[rep])
            branches.append((tuple(same), rep))
    return Symmetry(twins=twins, branches=tuple(branches))


def _interchangeable(st, a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """Does mapping a[p] -> b[p] keep edges inside and neighbours outside the branches?"""
    if a == b:
        return True
    pos_a = {u: p for p, u in enumerate(a)}
    pos_b = {u: p for p, u in enumerate(b)}
    for u, v in zip(a, b, strict=True):
        for nbrs in (st.preds, st.succs):
            inside_a = sorted(pos_a[w] for w in nbrs[u] if w in pos_a)
            inside_b = sorted(pos_b[w] for w in nbrs[v] if w in pos_b)
            outside_a = sorted(w for w in nbrs[u] if w not in pos_a)
            outside_b = sorted(w for w in nbrs[v] if w not in pos_b)
            if inside_a != inside_b or outside_a != outside_b:
                return False
    return True


def canonical(
    sym: Symmetry, modes: tuple[int, ...], start: tuple[float, ...]
) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """Apply the automorphisms so a schedule meets :meth:`Symmetry.orderings`."""
    m, s = list(modes), list(start)
    for c in sym.twins:
        vals = sorted((s[v], m[v]) for v in c)
        for v, (sv, mv) in zip(c, vals, strict=True):
            s[v], m[v] = sv, mv
    for group, rep in sym.branches:
        order = sorted(range(len(group)), key=lambda k: (s[group[k][rep]], k))
        old_s, old_m = s[:], m[:]
        for k, src in enumerate(order):
            for u, w in zip(group[k], group[src], strict=True):
                s[u], m[u] = old_s[w], old_m[w]
    return tuple(m), tuple(s)
