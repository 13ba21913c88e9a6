"""Exact branch and bound over start-ordered list schedules, with a node budget.

The search builds the op list one op at a time and places each op, in a chosen mode, at the
earliest time at or after both its predecessors' finish and the previous op's start where
its cores are free. Every schedule that cannot be shifted left (semi-active) is produced by
the list of its ops sorted by start time (such an op could not start earlier beside the ops
placed before it, or it could start earlier in the schedule too), so the search is complete;
and starts never go back in time, which keeps a node's state small: every placed op started
at or before the last start ``L``, so the cores in use after ``L`` only ever fall as placed
ops finish, and an op fits at time c exactly when it fits at the instant c.

Pruning, each exact:

* bounds: the longest remaining path from each unplaced op's earliest start, which is no
  earlier than the running ops leave the cores it holds free (split, every core of its type,
  or of the chip when parallel ops block every core: an op that must split waits for every
  running op); per core type, the least core-seconds of the ops that can start no earlier
  than each of their earliest starts, plus that start and the shortest tail among them; and,
  weighting tensor and vector shares by a and 1 - a, the least chip occupancy left after ``L`` (a parallel op fills the
  chip in both shares when parallel ops block every core); and, when they do, the collapsed
  time of :mod:`ilp.lpbound` per node: after the running split ops, the time left is at
  least the forced ops' split time plus, for any distribution mu over paths of the other
  ops, the sum of min(split, mu(i) * single) over them (each op either splits, beside
  nothing, or runs whole on every path through it in the time no split op takes). With mu
  even over one path in each of k interchangeable branches (attention heads, experts) it
  sees what one path misses: k chains of ops cheaper split than single run one after
  another (on the forward parts of ``benchmarks/bench_ilp.py``, 24 % fewer nodes);
* dominance (the cutset rule of Demeulemeester and Herroelen, "A branch-and-bound procedure
  for the multiple resource-constrained project scheduling problem", Management Science
  38(12), 1992): a node whose placed ops equal those of a node already searched, with a
  last start and every still-running op's finish no earlier (in the same mode), has no
  completion the earlier node lacks: fed the same remaining list, the earlier node places
  every op no later (nodes the bound pruned count as searched: the incumbent only improves,
  so what they dominate is pruned too). A child is tested before the costlier
  semi-activity test and is never visited when dominated, nor counted as a node (on the
  forward parts of ``benchmarks/bench_ilp.py``, half the children were);
* semi-activity: an op that would fit before ``L`` beside the placed ops is not placed
  after it (its schedule is not semi-active, and the list that starts it earlier is searched);
* split sinks last: where split ops hold the whole chip, a split op with no successors
  can move to the end of any schedule without changing it otherwise (see :func:`_tail_ops`),
  so such ops are only ever split at the end: once every op left is one, the node is also
  completed by splitting all of them there, one after another;
* symmetry: twin ops (:mod:`ilp.symmetry`) enter the list in index order, which some optimal
  schedule sorted by start meets; of two interchangeable branches (attention heads, experts)
  whose ops are in the same state (unplaced, finished, or running in the same mode to the
  same finish), the earlier one moves first, since swapping them maps every completion of
  the one onto a completion of the other.

The search ends early where its schedule meets a lower bound the caller knows. A node budget
ends an unfinished search, so results are deterministic; a wall-clock deadline can end it
sooner where the caller allows that.
"""

from __future__ import annotations

import time
from bisect import bisect_right
from dataclasses import dataclass
from typing import Final

from ilp.bounds import makespan_lower_bound
from ilp.listsched import Structure
from ilp.problem import PARALLEL, SINGLE, Problem
from ilp.symmetry import symmetry

__all__ = ["SearchResult", "branch_and_bound"]

# Weights a of the tensor share in the chip-occupancy bound (0 and 1 are the per-type ones).
_WEIGHTS: Final = (0.0, 0.25, 0.5, 0.75, 1.0)


@dataclass(frozen=True, slots=True)
class SearchResult:
    """The best schedule found, whether the search proved it within the tolerance, and the
    number of nodes it took."""

    modes: tuple[int, ...]
    start: tuple[float, ...]
    makespan_s: float
    proven: bool
    nodes: int


class _Budget(Exception):
    """The node budget or the time ran out."""


class _Met(Exception):
    """The best schedule met the caller's lower bound: proven optimal."""


def branch_and_bound(
    problem: Problem,
    st: Structure,
    incumbent: tuple[tuple[int, ...], tuple[float, ...], float],
    close: float,
    max_nodes: int,
    deadline: float | None = None,
    floor_s: float = 0.0,
) -> SearchResult:
    """Improve ``incumbent`` (modes, starts, makespan) until no schedule shorter than
    ``makespan / (1 + close)`` remains or the makespan is within ``close`` of ``floor_s`` (a
    lower bound known to the caller), ``max_nodes`` nodes were searched, or the clock
    (:func:`time.perf_counter`) passes ``deadline``."""
    n = problem.n
    cap_tc, cap_vc = problem.num_tc, problem.num_vc
    preds = st.preds
    head, tail = _heads_and_tails(problem, st)
    duration, demand = st.duration, st.demand
    modes_of = [(SINGLE, PARALLEL) if problem.can_parallel[i] else (SINGLE,) for i in range(n)]
    least = [problem.min_duration(i) for i in range(n)]
    pred_mask = [sum(1 << p for p in preds[i]) for i in range(n)]
    sym = symmetry(problem)
    before = [0] * n
    for twins in sym.twins:
        for a, b in zip(twins, twins[1:], strict=False):
            before[b] |= 1 << a
    # Op -> the aligned branches of its group, and its branch's index there.
    in_branch: dict[int, tuple[tuple[tuple[int, ...], ...], int]] = {}
    for group, _ in sym.branches:
        for k, ops in enumerate(group):
            for i in ops:
                in_branch[i] = (group, k)

    # Per op: core-seconds on each type and weighted chip occupancy (per weight), least over
    # its modes ([0]) and in the split mode ([1], for ops the bound forces to split).
    def cost(i: int, m: int, weight: tuple[float, float]) -> float:
        return duration[m][i] * (weight[0] * demand[m][i][0] + weight[1] * demand[m][i][1])

    def table(weight: tuple[float, float]) -> tuple[list[float], list[float]]:
        free = [min(cost(i, m, weight) for m in modes_of[i]) for i in range(n)]
        split = [cost(i, PARALLEL, weight) if can[i] else free[i] for i in range(n)]
        return free, split

    can = problem.can_parallel
    tc_free, tc_split = table((1.0, 0.0))  # per op: tensor and vector core-seconds
    vc_free, vc_split = table((0.0, 1.0))
    work_free = list(zip(tc_free, vc_free, strict=True))
    work_split = list(zip(tc_split, vc_split, strict=True))
    occupancy = list(zip(*(table((a / cap_tc, (1 - a) / cap_vc)) for a in _WEIGHTS), strict=True))
    # Per op: its least occupancy per weight, and what running split adds to it; the sum over
    # unplaced ops is carried down the search rather than summed at every node.
    occ_free = [tuple(occupancy[0][w][i] for w in range(len(_WEIGHTS))) for i in range(n)]
    occ_split = [
        tuple(occupancy[1][w][i] - occupancy[0][w][i] for w in range(len(_WEIGHTS)))
        for i in range(n)
    ]
    holds = [problem.core[i] != "Nop" for i in range(n)]
    single, split_s = problem.single_s, problem.parallel_s
    # The distinct core demands, single-core and split, and each op's index among them.
    needs = sorted({*demand[SINGLE], *demand[PARALLEL]})
    single_need = [needs.index(demand[SINGLE][i]) for i in range(n)]
    split_need = [needs.index(demand[PARALLEL][i]) for i in range(n)]
    blocks_all = problem.parallel_blocks_all
    tail_ops = _tail_ops(problem, st)
    caps = (cap_tc, cap_vc)
    full = (1 << n) - 1

    best_modes, best_start, best_span = incumbent
    best = [tuple(best_modes), tuple(best_start), best_span]
    mode = [SINGLE] * n
    start = [0.0] * n
    finish = [0.0] * n
    seen: dict[int, list[tuple[float, tuple[tuple[int, int, float], ...]]]] = {}
    count = [0]

    def bound(
        placed: int,
        last: float,
        active: list[tuple[float, int, int, int]],
        target: float,
        left: tuple[float, ...],
        wait: list[float],
    ) -> float:
        """A lower bound on every completion below ``target``; fills ``done`` of unplaced
        ops. ``wait`` is :func:`free_from` of the node.

        An op whose single-core path from its earliest start reaches ``target`` must run
        split (the destructive reasoning of :mod:`ilp.bounds`, per node), and split ops that
        block every core run one at a time beside nothing that holds a core.
        """
        lb = max((f for f, _, _, _ in active), default=last)
        heads_tc: list[tuple[float, float, float]] = []
        heads_vc: list[tuple[float, float, float]] = []
        occ = list(left)
        forced_s = 0.0
        path = [0.0] * n  # core-holding time on a path of non-forced ops, after `last`
        longest = 0.0
        for f, _, dt, dv in active:
            if (dt or dv) and f - last > longest:
                longest = f - last
        for i in range(n):
            if (placed >> i) & 1:
                continue
            e = last if last > head[i] else head[i]
            p_len = 0.0
            for p in preds[i]:
                if (placed >> p) & 1:
                    f = finish[p]
                    if holds[p] and f - last > p_len:
                        p_len = f - last
                else:
                    f = done[p]
                    if path[p] > p_len:
                        p_len = path[p]
                if f > e:
                    e = f
            t = tail[i]
            # Earliest start and finish, single-core and split, behind the running ops.
            if wait[single_need[i]] > e:
                e = wait[single_need[i]]
            end = e + single[i]
            forced = blocks_all and can[i] and end + t >= target
            if can[i]:
                # Split, it waits for every core of its type (or of the chip) to be free,
                # and for its predecessors.
                split_at = wait[split_need[i]]
                if split_at < e:
                    split_at = e
                if forced:
                    e, end = split_at, split_at + split_s[i]
                elif split_at + split_s[i] < end:
                    end = split_at + split_s[i]
            done[i] = end
            if end + t > lb:
                lb = end + t
            is_forced[i] = forced
            if forced:
                forced_s += least[i]
            elif holds[i]:
                p_len += least[i]
            path[i] = p_len
            if p_len > longest:
                longest = p_len
            u_tc, u_vc = work_split[i] if forced else work_free[i]
            if u_tc > 0:
                heads_tc.append((e, u_tc, t))
            if u_vc > 0:
                heads_vc.append((e, u_vc, t))
            if forced:
                for w, extra in enumerate(occ_split[i]):
                    occ[w] += extra
        if last + forced_s + longest > lb:
            lb = last + forced_s + longest
        if lb >= target:
            return lb  # pruned already: spare the sorts below
        if branch_paths:
            # Collapsed time over k interchangeable branches: each non-forced op left adds its
            # split time or 1/k of its single-core time on its branch's heaviest path.
            after = last  # nothing holding a core starts before a running split op ends
            for f, op, _, _ in active:
                if mode[op] == PARALLEL and f > after:
                    after = f
            for branches in branch_paths:
                total = 0.0
                for path_ops in branches:
                    heaviest = 0.0
                    for i, share, inner in path_ops:
                        v = 0.0
                        for q in inner:
                            if heaviest_to[q] > v:
                                v = heaviest_to[q]
                        if not ((placed >> i) & 1 or is_forced[i]):
                            v += share
                        heaviest_to[i] = v
                        if v > heaviest:
                            heaviest = v
                    total += heaviest
                if after + forced_s + total > lb:
                    lb = after + forced_s + total
            if lb >= target:
                return lb
        for r, ops in enumerate((heads_tc, heads_vc)):
            if not ops:
                continue
            ops.sort(reverse=True)
            w_sum, t_min = 0.0, float("inf")
            for e, u, t in ops:  # latest heads first: suffix sums
                w_sum += u
                if t < t_min:
                    t_min = t
                v = e + w_sum / caps[r] + t_min
                if v > lb:
                    lb = v
        left_tc = left_vc = 0.0
        for f, _, dt, dv in active:
            left_tc += (f - last) * dt
            left_vc += (f - last) * dv
        for w, a in enumerate(_WEIGHTS):
            v = last + occ[w] + a * left_tc / cap_tc + (1 - a) * left_vc / cap_vc
            if v > lb:
                lb = v
        return lb

    def free_from(last: float, active: list[tuple[float, int, int, int]]) -> list[float]:
        """Per distinct demand (``needs``), the first instant from ``last`` on at which the
        running ops leave its cores free. They all started by ``last``, so the cores they
        hold only fall, finish by finish: an op of that demand fits at any later instant."""
        wait = [last] * len(needs)
        if active:
            ordered = sorted(active)
            held_t = sum(a[2] for a in active)
            held_v = sum(a[3] for a in active)
            for k, (need_t, need_v) in enumerate(needs):
                at, use_t, use_v = last, held_t, held_v
                for f, _, dt, dv in ordered:
                    if use_t + need_t <= cap_tc and use_v + need_v <= cap_vc:
                        break
                    at, use_t, use_v = f, use_t - dt, use_v - dv
                wait[k] = at
        return wait

    # Per group of k interchangeable branches, per branch in index (topological) order: each
    # op, its share min(split, single / k) of the collapsed-time bound, and its predecessors
    # in the branch (see the module docstring).
    branch_paths = [
        [
            [
                (
                    i,
                    min(split_s[i] if can[i] else float("inf"), single[i] / len(group))
                    if holds[i]
                    else 0.0,
                    tuple(q for q in preds[i] if q in ops),
                )
                for i in sorted(ops)
            ]
            for ops in group
        ]
        for group, _ in sym.branches
        if blocks_all
    ]
    is_forced = [False] * n  # bound's scratch: the unplaced ops it forces to split
    heaviest_to = [0.0] * n  # and the heaviest branch path ending at each op
    done = [0.0] * n  # bound's scratch: each unplaced op's earliest finish in any mode

    def dominated(placed: int, last: float) -> bool:
        for s_last, s_active in seen.get(placed, ()):
            if s_last <= last and all(
                f <= last or (mode[i] == m and f <= finish[i]) for i, m, f in s_active
            ):
                return True
        return False

    def _fits_before(ready: float, last: float, d: float, dt: int, dv: int) -> bool:
        """Could an op holding (dt, dv) cores for d start in [ready, last) beside the placed
        ops? Candidate starts: ``ready`` and every breakpoint of their core usage in between
        (the earliest fit is at ``ready`` or where usage falls, at a finish)."""
        # The cores the placed ops use over [ready, last + d), the only window that matters,
        # as a step function: use_t/use_v on [times[k], times[k + 1]).
        horizon = last + d
        events = []
        for j in placed_ops:
            if finish[j] > ready and start[j] < horizon:
                a_dt, a_dv = demand[mode[j]][j]
                events.append((start[j], a_dt, a_dv))
                events.append((finish[j], -a_dt, -a_dv))
        events.sort()
        times: list[float] = []
        use_t: list[int] = []
        use_v: list[int] = []
        now_t = now_v = 0
        for x, a_dt, a_dv in events:
            now_t += a_dt
            now_v += a_dv
            if times and times[-1] == x:
                use_t[-1], use_v[-1] = now_t, now_v
            else:
                times.append(x)
                use_t.append(now_t)
                use_v.append(now_v)
        free_t, free_v = cap_tc - dt, cap_vc - dv
        for tau in (ready, *(x for x in times if ready < x < last)):
            k = bisect_right(times, tau) - 1  # the segment holding tau (-1: before any op)
            if k < 0 or (use_t[k] <= free_t and use_v[k] <= free_v):
                end = tau + d
                k += 1
                while k < len(times) and times[k] < end:
                    if use_t[k] > free_t or use_v[k] > free_v:
                        break
                    k += 1
                else:
                    return True
        return False

    placed_ops: list[int] = []

    def _mirrors_earlier_branch(placed: int, last: float, group, k: int) -> bool:
        """Is an earlier branch of the group in the same state for what is left (each
        position unplaced in both, finished by ``last`` in both, or running in the same mode
        to the same finish)? Then the remaining problem is symmetric under swapping the two,
        and the earlier branch moves first."""
        mine = group[k]
        for other in group[:k]:
            for a, b in zip(mine, other, strict=True):
                pa, pb = (placed >> a) & 1, (placed >> b) & 1
                if pa != pb:
                    break
                if pa and (finish[a] > last or finish[b] > last):
                    if mode[a] != mode[b] or finish[a] != finish[b]:
                        break
            else:
                return True
        return False

    def visit(
        placed: int,
        last: float,
        active: list[tuple[float, int, int, int]],
        left: tuple[float, ...],
    ) -> None:
        count[0] += 1
        if count[0] > max_nodes:
            raise _Budget
        if deadline is not None and not count[0] % 256 and time.perf_counter() > deadline:
            raise _Budget
        rest = full & ~placed
        if not rest & ~tail_ops:
            # Every op left is a split sink: complete by splitting them all at the end.
            end = max((finish[j] for j in placed_ops), default=0.0)
            for i in range(n):
                if (rest >> i) & 1:
                    mode[i], start[i], finish[i] = PARALLEL, end, end + duration[PARALLEL][i]
                    end = finish[i]
            if end < best[2]:
                best[0], best[1], best[2] = tuple(mode), tuple(start), end
                if end <= floor_s * (1 + close):
                    raise _Met
            if not rest:
                return
        target = best[2] / (1 + close)
        seen.setdefault(placed, []).append(
            (last, tuple((op, mode[op], f) for f, op, _, _ in active))
        )
        wait = free_from(last, active)
        if bound(placed, last, active, target, left, wait) >= target:
            return
        children = []
        for i in range(n):
            if (placed >> i) & 1 or pred_mask[i] & ~placed or before[i] & ~placed:
                continue
            if i in in_branch and _mirrors_earlier_branch(placed, last, *in_branch[i]):
                continue
            ready = 0.0
            for p in preds[i]:
                if finish[p] > ready:
                    ready = finish[p]
            for m in modes_of[i]:
                if m == PARALLEL and (tail_ops >> i) & 1:
                    continue  # split only at the end, above
                dt, dv = demand[m][i]
                c = wait[split_need[i] if m == PARALLEL else single_need[i]]
                if ready > c:
                    c = ready
                end = c + duration[m][i]
                if end + tail[i] < target:
                    children.append((end + tail[i], -tail[i], i, m, c, end, dt, dv, ready))
        children.sort()
        for _, _, i, m, c, end, dt, dv, ready in children:
            if end + tail[i] >= best[2] / (1 + close):
                break
            mode[i], start[i], finish[i] = m, c, end
            if dominated(placed | (1 << i), c):
                continue
            if ready < last and _fits_before(ready, last, duration[m][i], dt, dv):
                continue  # it could start earlier: not semi-active
            nxt = [a for a in active if a[0] > c]
            if end > c:
                nxt.append((end, i, dt, dv))
            placed_ops.append(i)
            visit(
                placed | (1 << i),
                c,
                nxt,
                tuple(a - b for a, b in zip(left, occ_free[i], strict=True)),
            )
            placed_ops.pop()

    proven = True
    try:
        visit(0, 0.0, [], tuple(map(sum, zip(*occ_free, strict=True))))
    except _Met:
        pass
    except _Budget:
        proven = False
    return SearchResult(best[0], best[1], best[2], proven, count[0])


def _heads_and_tails(problem: Problem, st: Structure) -> tuple[list[float], list[float]]:
    """Per op, lower bounds on the time before its start and after its finish: the makespan
    bound (:mod:`ilp.bounds`, its path and per-core-type terms) of its ancestors and of its
    descendants, each on their own. Unlike path lengths they see that parallel ops run one at
    a time."""
    n = problem.n

    def bound(mask: int) -> float:
        ops = [i for i in range(n) if (mask >> i) & 1]
        if len(ops) <= 1:
            return sum(problem.min_duration(i) for i in ops)
        pos = {v: k for k, v in enumerate(ops)}
        return makespan_lower_bound(
            [problem.core[i] for i in ops],
            [problem.single_s[i] for i in ops],
            [problem.parallel_s[i] for i in ops],
            [[pos[p] for p in st.preds[i] if p in pos] for i in ops],
            problem.num_tc,
            problem.num_vc,
            parallel_blocks_all=problem.parallel_blocks_all,
            # On bench_ilp's forward parts the destructive bound raised a few heads and
            # tails, sparing 1 % of the nodes for 7 % more time.
            destructive=False,
        )

    memo: dict[int, float] = {}  # ops often share their ancestors or descendants
    for mask in (*st.anc, *st.desc):
        if mask not in memo:
            memo[mask] = bound(mask)
    head = [max(st.head[i], memo[st.anc[i]]) for i in range(n)]
    tail = [max(st.tail[i], memo[st.desc[i]]) for i in range(n)]
    return head, tail


def _tail_ops(problem: Problem, st: Structure) -> int:
    """The ops that, when split, some optimal schedule runs last (a bitset).

    Where split ops hold the whole chip, a split op with no successors runs beside nothing
    that holds a core; cutting its interval out of the time axis and appending it at the end
    keeps every other op's precedence and cores and the makespan. The cut would shorten a
    ``Nop`` op running beside it, so only an op every ``Nop`` op precedes qualifies.
    """
    if not problem.parallel_blocks_all:
        return 0
    nops = [i for i in range(problem.n) if problem.core[i] == "Nop"]
    mask = 0
    for i in range(problem.n):
        if problem.can_parallel[i] and not st.succs[i] and all((st.anc[i] >> j) & 1 for j in nops):
            mask |= 1 << i
    return mask
