"""Exact branch and bound over start-ordered list schedules, with a node budget.

The search builds the op list one op at a time and places each op, in a chosen mode, at the
earliest time at or after both its predecessors' finish and the previous op's start where
the resources it holds are free. Every schedule that cannot be shifted left (semi-active) is
produced by the list of its ops sorted by start time (such an op could not start earlier
beside the ops placed before it, or it could start earlier in the schedule too), so the
search is complete; and starts never go back in time, which keeps a node's state small:
every placed op started at or before the last start ``L``, so the units in use after ``L``
only ever fall as placed ops finish, and an op fits at time c exactly when it fits at the
instant c. Resources are the problem's data: kinds, capacities, and units per op and mode.

Pruning, each exact:

* bounds: the longest remaining path from each unplaced op's earliest start, which is no
  earlier than the running ops leave the units it holds free (split, every unit of its kinds,
  or every core of the chip when parallel ops block everything: an op that must split waits
  for every running op that holds a core); per resource kind, the least unit-seconds of the
  ops that can start no earlier than each of their earliest starts, plus that start and the
  shortest tail among them; and, weighting the shares of two kinds by a and 1 - a, the least occupancy left
  after ``L`` (a parallel op fills every core's share when parallel ops block everything);
  and, when they do, the collapsed time of :mod:`ilp.lpbound` per node: after the running
  split ops, the time left is at least the forced ops' split time plus, for any distribution
  mu over paths of the other core-holding ops, the sum of min(split, mu(i) * single) over
  them (each op either splits, beside no core holder, or runs whole on every path through
  it in the time no split op takes). With mu even over one path in each of k interchangeable branches
  (attention heads, experts) it sees what one path misses: k chains of ops cheaper split
  than single run one after another;
* dominance (the cutset rule of Demeulemeester and Herroelen, "A branch-and-bound procedure
  for the multiple resource-constrained project scheduling problem", Management Science
  38(12), 1992): a node whose placed ops equal those of a node already searched, with a
  last start and every still-running op's finish no earlier (in the same mode), has no
  completion the earlier node lacks: fed the same remaining list, the earlier node places
  every op no later (nodes the bound pruned count as searched: the incumbent only improves,
  so what they dominate is pruned too). A child is tested before the costlier
  semi-activity test and is never visited when dominated, nor counted as a node;
* semi-activity: an op that would fit before ``L`` beside the placed ops is not placed
  after it (its schedule is not semi-active, and the list that starts it earlier is searched);
* split sinks last: where split ops hold the whole chip, a split op with no successors
  can move to the end of any schedule without changing it otherwise (see
  :func:`ilp.search_tables.split_sinks`), so such ops are only ever split at the end: once
  every op left is one, the node is also completed by splitting all of them there, one
  after another;
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

from ilp.listsched import Incumbent, Structure
from ilp.problem import PARALLEL, SINGLE, Problem
from ilp.search_tables import SearchTables

__all__ = ["SearchResult", "branch_and_bound"]

# A running op at a node: (finish, op, packed units, units per kind).
_Active = tuple[float, int, int, tuple[int, ...]]


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
    incumbent: Incumbent,
    close: float,
    max_nodes: int,
    deadline: float | None = None,
    floor_s: float = 0.0,
) -> SearchResult:
    """Improve ``incumbent`` (modes, starts, makespan) until no schedule shorter than
    ``makespan / (1 + close)`` remains or the makespan is within ``close`` of ``floor_s`` (a
    lower bound known to the caller), ``max_nodes`` nodes were searched, or the clock
    (:func:`time.perf_counter`) passes ``deadline``."""
    tables = SearchTables(problem, st)
    return _Search(tables, incumbent, close, max_nodes, deadline, floor_s).run()


class _Search:
    """One search: the fixed :class:`~ilp.search_tables.SearchTables`, the incumbent, the
    partial schedule of the current node (``mode``, ``start``, ``finish`` of placed ops,
    ``placed_ops`` in list order), the nodes already searched by placed set (for
    dominance) and the node count."""

    def __init__(
        self,
        tables: SearchTables,
        incumbent: Incumbent,
        close: float,
        max_nodes: int,
        deadline: float | None,
        floor_s: float,
    ) -> None:
        self.t = tables
        n = tables.n
        self.close, self.max_nodes, self.deadline, self.floor_s = (
            close,
            max_nodes,
            deadline,
            floor_s,
        )
        modes, start, span = incumbent
        self.best: list = [tuple(modes), tuple(start), span]
        self.mode = [SINGLE] * n
        self.start = [0.0] * n
        self.finish = [0.0] * n
        self.placed_ops: list[int] = []
        self.seen: dict[int, list[tuple[float, tuple[tuple[int, int, float], ...]]]] = {}
        self.count = 0
        # The bound's scratch: each unplaced op's earliest finish in any mode, whether the
        # bound forces it to split, and the heaviest branch path ending at it.
        self.done = [0.0] * n
        self.is_forced = [False] * n
        self.heaviest_to = [0.0] * n

    def run(self) -> SearchResult:
        proven = True
        try:
            self.visit(0, 0.0, [], tuple(map(sum, zip(*self.t.occ_free, strict=True))))
        except _Met:
            pass
        except _Budget:
            proven = False
        b = self.best
        return SearchResult(b[0], b[1], b[2], proven, self.count)

    def visit(self, placed: int, last: float, active: list[_Active], left: tuple) -> None:
        """Search the node with ``placed`` ops, the last started at ``last``, ``active``
        still running after it, and ``left`` the unplaced ops' least occupancy per weight."""
        t, mode, start, finish, best = self.t, self.mode, self.start, self.finish, self.best
        self.count += 1
        if self.count > self.max_nodes:
            raise _Budget
        if self.deadline is not None and not self.count % 256:
            if time.perf_counter() > self.deadline:
                raise _Budget
        rest = t.full & ~placed
        if not rest & ~t.tail_ops:
            self.complete_with_split_sinks(rest)
            if not rest:
                return
        target = best[2] / (1 + self.close)
        self.seen.setdefault(placed, []).append(
            (last, tuple((op, mode[op], f) for f, op, _, _ in active))
        )
        wait = self.free_from(last, active)
        if self.bound(placed, last, active, target, left, wait) >= target:
            return
        children = []
        for i in range(t.n):
            if (placed >> i) & 1 or t.pred_mask[i] & ~placed or t.before[i] & ~placed:
                continue
            if i in t.in_branch and self.mirrors_earlier_branch(placed, last, *t.in_branch[i]):
                continue
            ready = 0.0
            for p in t.preds[i]:
                if finish[p] > ready:
                    ready = finish[p]
            for m in t.modes_of[i]:
                if m == PARALLEL and (t.tail_ops >> i) & 1:
                    continue  # split only at the end, by complete_with_split_sinks
                c = wait[t.split_need[i] if m == PARALLEL else t.single_need[i]]
                if ready > c:
                    c = ready
                end = c + t.duration[m][i]
                if end + t.tail[i] < target:
                    children.append((end + t.tail[i], -t.tail[i], i, m, c, end, ready))
        children.sort()
        for _, _, i, m, c, end, ready in children:
            if end + t.tail[i] >= best[2] / (1 + self.close):
                break
            mode[i], start[i], finish[i] = m, c, end
            if self.dominated(placed | (1 << i), c):
                continue
            load = t.load[m][i]
            if ready < last and self.fits_before(ready, last, t.duration[m][i], m, i):
                continue  # it could start earlier: not semi-active
            nxt = [a for a in active if a[0] > c]
            if end > c:
                nxt.append((end, i, load, t.need[m][i]))
            self.placed_ops.append(i)
            self.visit(
                placed | (1 << i),
                c,
                nxt,
                tuple(a - b for a, b in zip(left, t.occ_free[i], strict=True)),
            )
            self.placed_ops.pop()

    def complete_with_split_sinks(self, rest: int) -> None:
        """Every op left is a split sink: complete by splitting them all at the end."""
        t, mode, start, finish, best = self.t, self.mode, self.start, self.finish, self.best
        end = max((finish[j] for j in self.placed_ops), default=0.0)
        for i in range(t.n):
            if (rest >> i) & 1:
                mode[i], start[i], finish[i] = PARALLEL, end, end + t.duration[PARALLEL][i]
                end = finish[i]
        if end < best[2]:
            best[0], best[1], best[2] = tuple(mode), tuple(start), end
            if end <= self.floor_s * (1 + self.close):
                raise _Met

    def bound(
        self,
        placed: int,
        last: float,
        active: list[_Active],
        target: float,
        left: tuple[float, ...],
        wait: list[float],
    ) -> float:
        """A lower bound on every completion below ``target``; fills ``done`` of unplaced
        ops. ``wait`` is :meth:`free_from` of the node.

        An op whose single-core path from its earliest start reaches ``target`` must run
        split (the destructive reasoning of :mod:`ilp.bounds`, per node), and split ops that
        hold every core run one at a time beside nothing that holds a core (a collective
        holding only its channel may run beside them: it adds nothing to a path).
        """
        t, finish, done, is_forced = self.t, self.finish, self.done, self.is_forced
        n, preds, head, tail, holds, can = t.n, t.preds, t.head, t.tail, t.holds_core, t.can
        single, split_s, blocks_all, least = t.single, t.split_s, t.blocks_all, t.least
        single_need, split_need = t.single_need, t.split_need
        work_free, work_split, occ_split = t.work_free, t.work_split, t.occ_split
        lb = max((f for f, _, _, _ in active), default=last)
        heads: list[list[tuple[float, float, float]]] = [[] for _ in t.kinds]
        occ = list(left)
        forced_s = 0.0
        path = [0.0] * n  # core-holding time on a path of non-forced ops, after `last`
        longest = 0.0
        for f, op, _, _ in active:
            if holds[op] and f - last > longest:
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
            ti = tail[i]
            # Earliest start and finish, single and split, behind the running ops.
            if wait[single_need[i]] > e:
                e = wait[single_need[i]]
            end = e + single[i]
            forced = blocks_all and can[i] and end + ti >= target
            if can[i]:
                # Split, it waits for the units it holds to be free, and for its
                # predecessors.
                split_at = wait[split_need[i]]
                if split_at < e:
                    split_at = e
                if forced:
                    e, end = split_at, split_at + split_s[i]
                elif split_at + split_s[i] < end:
                    end = split_at + split_s[i]
            done[i] = end
            if end + ti > lb:
                lb = end + ti
            is_forced[i] = forced
            if forced:
                forced_s += least[i]
            elif holds[i]:
                p_len += least[i]
            path[i] = p_len
            if p_len > longest:
                longest = p_len
            for k, u in enumerate(work_split[i] if forced else work_free[i]):
                if u > 0:
                    heads[k].append((e, u, ti))
            if forced:
                for w, extra in enumerate(occ_split[i]):
                    occ[w] += extra
        if last + forced_s + longest > lb:
            lb = last + forced_s + longest
        if lb >= target:
            return lb  # pruned already: spare the sorts below
        if t.branch_paths:
            lb = max(lb, self.collapsed(placed, last, active, forced_s))
            if lb >= target:
                return lb
        return self.resource_bound(lb, heads, occ, active, last)

    def resource_bound(
        self,
        lb: float,
        heads: list[list[tuple[float, float, float]]],
        occ: list[float],
        active: list[_Active],
        last: float,
    ) -> float:
        """``lb`` raised by the capacity of each kind of unit: the unplaced ops' work on it
        (``heads``: earliest start, units x seconds, tail), latest heads first, and each
        weighted capacity row's occupancy ``occ`` plus what the running ops still hold."""
        t = self.t
        for k, ops in enumerate(heads):
            if not ops:
                continue
            ops.sort(reverse=True)
            w_sum, t_min = 0.0, float("inf")
            for e, u, ti in ops:  # latest heads first: suffix sums
                w_sum += u
                if ti < t_min:
                    t_min = ti
                v = e + w_sum / t.caps[k] + t_min
                if v > lb:
                    lb = v
        held = [0.0 for _ in t.kinds]
        for f, _, _, units in active:
            for k in t.kinds:
                held[k] += (f - last) * units[k]
        for w, wv in enumerate(t.weights):
            v = last + occ[w]
            for k in t.kinds:
                v += wv[k] * held[k] / t.caps[k]
            if v > lb:
                lb = v
        return lb

    def collapsed(self, placed: int, last: float, active: list[_Active], forced_s: float):
        """Collapsed time over k interchangeable branches: each non-forced op left adds its
        split time or 1/k of its single-core time on its branch's heaviest path."""
        is_forced, heaviest_to, mode = self.is_forced, self.heaviest_to, self.mode
        after = last  # nothing holding a resource starts before a running split op ends
        for f, op, _, _ in active:
            if mode[op] == PARALLEL and f > after:
                after = f
        lb = 0.0
        for branches in self.t.branch_paths:
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
        return lb

    def free_from(self, last: float, active: list[_Active]) -> list[float]:
        """Per distinct room (``rooms``), the first instant from ``last`` on at which the
        running ops leave the units an op needs free. They all started by ``last``, so the
        units they hold only fall, finish by finish: such an op fits at any later instant."""
        rooms, guard = self.t.rooms, self.t.guard
        wait = [last] * len(rooms)
        if active:
            ordered = sorted(active)
            held = sum(a[2] for a in active)
            for k, room in enumerate(rooms):
                at, use = last, held
                for f, _, load, _ in ordered:
                    if (room - use) & guard == guard:
                        break
                    at, use = f, use - load
                wait[k] = at
        return wait

    def dominated(self, placed: int, last: float) -> bool:
        mode, finish = self.mode, self.finish
        for s_last, s_active in self.seen.get(placed, ()):
            if s_last <= last and all(
                f <= last or (mode[i] == m and f <= finish[i]) for i, m, f in s_active
            ):
                return True
        return False

    def fits_before(self, ready: float, last: float, d: float, m: int, i: int) -> bool:
        """Could op i in mode m, for d, start in [ready, last) beside the placed ops?
        Candidate starts: ``ready`` and every breakpoint of their usage in between (the
        earliest fit is at ``ready`` or where usage falls, at a finish)."""
        t, mode, start, finish = self.t, self.mode, self.start, self.finish
        # The units the placed ops use over [ready, last + d), the only window that matters,
        # as a step function, packed: use[k] on [times[k], times[k + 1]).
        horizon = last + d
        events = []
        for j in self.placed_ops:
            if finish[j] > ready and start[j] < horizon:
                load = t.load[mode[j]][j]
                events.append((start[j], load))
                events.append((finish[j], -load))
        events.sort()
        times: list[float] = []
        use: list[int] = []
        now = 0
        for x, load in events:
            now += load
            if times and times[-1] == x:
                use[-1] = now
            else:
                times.append(x)
                use.append(now)
        room, guard = self.t.st.room[m][i], t.guard
        for tau in (ready, *(x for x in times if ready < x < last)):
            k = bisect_right(times, tau) - 1  # the segment holding tau (-1: before any op)
            if k < 0 or (room - use[k]) & guard == guard:
                end = tau + d
                k += 1
                while k < len(times) and times[k] < end:
                    if (room - use[k]) & guard != guard:
                        break
                    k += 1
                else:
                    return True
        return False

    def mirrors_earlier_branch(self, placed: int, last: float, group, k: int) -> bool:
        """Is an earlier branch of the group in the same state for what is left (each
        position unplaced in both, finished by ``last`` in both, or running in the same mode
        to the same finish)? Then the remaining problem is symmetric under swapping the two,
        and the earlier branch moves first."""
        mode, finish = self.mode, self.finish
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
