"""The pruning rounds of a sweep: which designs are evaluated, in what order, and which
are pruned, with the workers kept busy."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Final

import numpy as np

from arch_space import Accelerator
from arch_space.tco import DeviceCapex
from phaze.executors import Progress
from phaze.model.pipeline import timing_design
from phaze.sweep.optimistic import bound_columns
from phaze.sweep.planning import Shared, design_knobs
from phaze.sweep.records import pruned_record
from phaze.sweep.tasks import Task, TaskResult
from results.fronts import dominated, front_add
from results.store import Store

__all__ = ["Rounds", "round_ranges"]

_FIRST_ROUND: Final = 8
# Pruned points stored per transaction: one commit per point cost more than deciding them,
# and a round's whole batch (up to ~10^6 records) would hold too much memory.
_PRUNED_BATCH: Final = 4096


_UNDECIDED, _KEEP, _PRUNED = range(3)


class Rounds:
    """The order of evaluation of a sweep and its exact pruning, keeping the workers busy.

    The ordered designs are cut into rounds (8, 32, 128, ... designs). A design of round q
    is pruned iff, for every workload, its bound is dominated by the points of rounds < q
    (presets never are), so every decision depends on the earlier rounds' points alone: the
    same for any executor, number of workers or interruption. Two bounds are checked: the
    cheap one (:func:`~phaze.sweep.optimistic.bounds`) for all the round's designs at once,
    when round q - 1 completes; then the tight one
    (:func:`~phaze.sweep.optimistic.tight_bound`), which workers compute at the start of a
    design's task (it needs op costs). A task carries the front of points known when it was
    dispatched (a subset of the earlier rounds' points), and its worker skips the
    evaluation of a design whose tight bound that front already dominates; the parent
    decides with the tight bounds the tasks return, against the earlier rounds' points, and
    evaluates whatever a kept design still lacks (a workload skipped while another kept it).

    Meanwhile, workers left idle by the last tasks of round q - 1 start on designs of round
    q that no point so far dominates: such results are held, committed once the design is
    decided kept and dropped if it is pruned, so no round waits on its slowest task and the
    decisions stay those of strict rounds. Designs that differ only in HBM capacity and are
    dispatched together share one task, so one worker (with its caches) schedules their
    layers once.
    """

    def __init__(
        self,
        store: Store,
        shared: Shared,
        order: Sequence[Accelerator],
        capex: Sequence[DeviceCapex],
        need: Sequence[tuple[int, ...]],
        *,
        prune: bool,
        signs: Sequence[tuple[str, float]],
        bar: Progress,
    ) -> None:
        self._store = store
        self._shared = shared
        self._order = order
        self._capex = capex
        self._need = need  # workloads still to evaluate, per design (none: all stored)
        self._prune = prune
        self._signs = signs
        self._bar = bar
        n = len(order)
        self._rounds = round_ranges(n) if prune else ((range(n),) if n else ())
        self._round_of = np.repeat(np.arange(len(self._rounds)), [len(r) for r in self._rounds])
        self._state = [_UNDECIDED] * n
        self._waiting = [0] * n  # tasks of a dispatched design not yet returned
        # returned (workload, records or None when skipped, tight bound row) per design
        self._held: dict[int, list[tuple[int, Any, tuple[float, ...]]]] = {}
        self._members: dict[int, tuple[int, ...]] = {}  # task serial -> designs
        self._serial = 0
        self._queue: deque[Task] = deque()
        self._cache: dict[tuple[str, int], Any] = {}  # (what, round) -> bounds, groups
        self._stored: list[list[tuple[int, list[float]]]] = [[] for _ in self._rounds]
        self._pruned_records: list[dict[str, Any]] = []  # stored in batches (`_flush_pruned`)
        empty = np.empty((0, len(signs)))
        self._settled = [empty] * len(shared.workloads)  # front of the rounds before `_cur`
        self._live = list(self._settled)  # the same with round `_cur`'s points so far
        self._cur = -1
        self._open = 0  # designs of round `_cur` not yet pruned or committed
        self._next = 0  # position in round `_cur + 1` of the next speculative candidate
        self.evaluated = self.pruned = self.discarded = 0
        # designs after round 0 the cheap bound left open: kept, or pruned by the tight bound
        self._kept_open = self._tight_pruned = 0
        self.task_s = self.task_cpu_s = self.bounds_s = 0.0

    @property
    def finished(self) -> bool:
        return self._open == 0 and self._cur >= len(self._rounds) - 1

    @property
    def queued(self) -> int:
        return len(self._queue)

    def work_left(self) -> int | None:
        """The designs still to evaluate as the sweep so far tells: those not yet decided
        (or still running) whose cheap bound the front does not dominate, over every round
        left, times the share of such designs the tight bound has kept so far; None until
        that share is known (some design after the first round settled). Designs are
        ordered by their bound, so most of the later rounds' designs drop out as the front
        fills, and this count falls much faster than the designs left: the sweep's ETA
        comes from it (:class:`phaze.executors.Progress`)."""
        seen = self._kept_open + self._tight_pruned
        if not seen:
            return None
        left = 0
        for q in range(max(self._cur, 0), len(self._rounds)):
            idx = [
                i
                for i in self._rounds[q]
                if self._need[i]
                and (self._state[i] == _UNDECIDED or (self._state[i] == _KEEP and self._waiting[i]))
            ]
            if idx:
                left += len(idx) - int(np.count_nonzero(self._beaten(q, idx, self._live)))
        return round(left * self._kept_open / seen)

    def start(self, stored: Iterable[Mapping[str, Any]], ids: Sequence[str]) -> None:
        """Take the stored feasible points of this sweep's designs (``ids``, in order) by
        round, then decide round 0."""
        position = {did: i for i, did in enumerate(ids)}
        names = {n: w for w, (n, _) in enumerate(self._shared.workloads)}
        knobs = {(k.mbs, k.recompute, k.precision) for k in self._shared.knobs}
        for p in stored:
            i = position.get(p["design_id"])
            if i is not None and p["workload"] in names:
                if (p["micro_batch"], p["recompute"], p["precision"]) in knobs:
                    row = [s * p[n] for n, s in self._signs]
                    self._stored[self._round_of[i]].append((names[p["workload"]], row))
        self._advance()

    def tasks(self) -> Iterator[Task]:
        """Tasks to run now: the current round's, then speculative ones of the next round."""
        while True:
            if self._queue:
                yield self._queue.popleft()
            elif not self._speculate():
                return

    def on_result(self, task: Task, result: TaskResult) -> None:
        """Hold (or commit, or drop) a task's results, then decide whatever that completes."""
        self.task_s += result.wall_s
        self.task_cpu_s += result.cpu_s
        for j, i in enumerate(self._members.pop(task.serial)):
            self._waiting[i] -= 1
            if self._state[i] == _PRUNED:
                continue
            records, row = result.records[j], result.rows[j]
            if self._state[i] == _KEEP:  # an evaluation a kept design still lacked
                self._commit(i, task.workload, records)
                self._finish_if_done(i)
                continue
            self._held.setdefault(i, []).append((task.workload, records, row))
            if not self._waiting[i] and self._round_of[i] <= self._cur:
                self._settle(i)
        self._advance()

    # ------------------------------------------------------------------ internals
    def _advance(self) -> None:
        """Settle each completed round and decide the next, as far as that goes; then store
        the points of the designs pruned meanwhile not stored yet."""
        while self._open == 0 and self._cur < len(self._rounds) - 1:
            self._settled = list(self._live)
            self._cur += 1
            self._next = 0
            self._decide(self._cur)
        self._flush_pruned()

    def _flush_pruned(self) -> None:
        """Store the pruned designs' points held so far, in one transaction."""
        self._store.put_points(self._pruned_records)
        self._pruned_records.clear()

    def _decide(self, q: int) -> None:
        """Round ``q``: prune by the cheap bound; settle designs whose speculative tasks have
        all returned; dispatch the rest (with the earlier rounds' fronts)."""
        r = self._rounds[q]
        todo = [i for i in r if self._need[i]]
        beaten = self._beaten(q, r, self._settled) if self._prune and todo else None
        for w, row in self._stored[q]:
            self._live[w] = front_add(self._live[w], np.array([row]))
        fresh: dict[tuple[Accelerator, tuple[int, ...]], list[int]] = {}
        for i in todo:
            if beaten is not None and beaten[i - r.start]:
                self._prune_design(i)
                continue
            self._open += 1
            if self._waiting[i]:
                continue  # dispatched speculatively: settled when its last task returns
            if i in self._held:
                self._settle(i)
            else:
                fresh.setdefault(self._groups(q)[1][i - r.start], []).append(i)
        for members in fresh.values():
            self._dispatch(members, self._settled)
        for key in [k for k in self._cache if k[1] <= q]:
            del self._cache[key]

    def _settle(self, i: int) -> None:
        """Design ``i`` of the current round has every tight bound back: prune it (every
        workload's bound dominated by the earlier rounds) or keep it and commit."""
        held = self._held.pop(i)
        if (
            self._prune
            and not self._order[i].name
            and all(dominated(self._settled[w], np.array([row]))[0] for w, _, row in held)
        ):
            self._held[i] = held  # for the discarded-work count
            self._prune_design(i)
            self._open -= 1
            self._tight_pruned += 1
            return
        self._state[i] = _KEEP
        self._kept_open += self._round_of[i] > 0
        for w, records, _ in held:
            if records is None:  # skipped for this workload, but another keeps the design
                self._dispatch([i], None, workloads=(w,))
            else:
                self._commit(i, w, records)
        self._finish_if_done(i)

    def _finish_if_done(self, i: int) -> None:
        if not self._waiting[i]:
            self.evaluated += 1
            self._open -= 1
            self._bar.advance()

    def _speculate(self) -> bool:
        """Dispatch the next design of round ``_cur + 1`` that no point so far dominates, with
        its HBM siblings; False when there is none."""
        q = self._cur + 1
        if q >= len(self._rounds):
            return False
        r = self._rounds[q]
        while self._next < len(r):
            i = r.start + self._next
            self._next += 1
            if self._waiting[i] or not self._need[i] or self._beaten(q, [i], self._live)[0]:
                continue
            groups, key_of = self._groups(q)
            members = [
                j
                for j in groups[key_of[i - r.start]]
                if j == i
                or (
                    not self._waiting[j]
                    and j not in self._held
                    and not self._beaten(q, [j], self._live)[0]
                )
            ]
            self._dispatch(members, self._live)
            return True
        return False

    def _dispatch(
        self,
        members: Sequence[int],
        fronts: Sequence[np.ndarray] | None,
        *,
        workloads: Sequence[int] | None = None,
    ) -> None:
        """Queue the tasks of designs that share their layer schedules and workloads; with
        ``fronts`` (per workload), workers may skip designs those fronts prune."""
        designs = tuple(self._order[i] for i in members)
        need = self._need[members[0]] if workloads is None else workloads
        for i in members:
            self._waiting[i] += len(need)
        for w in need:
            self._serial += 1
            self._members[self._serial] = tuple(members)
            front = fronts[w] if fronts is not None and self._prune else None
            self._queue.append(Task(designs, w, self._serial, front))

    def _commit(self, i: int, w: int, records: Sequence[dict[str, Any]]) -> None:
        for rec in records:
            self._store.put_point(rec)
        rows = [  # a point without a value of an objective (such as a cost at a rate) is on no front
            [s * rec[n] for n, s in self._signs]
            for rec in records
            if rec["feasible"] and all(rec.get(n) is not None for n, _ in self._signs)
        ]
        if rows:
            self._live[w] = front_add(self._live[w], np.array(rows))

    def _prune_design(self, i: int) -> None:
        held = self._held.pop(i, ())
        if self._waiting[i] or any(records is not None for _, records, _ in held):
            self.discarded += 1  # evaluated speculatively, then pruned
        self._state[i] = _PRUNED
        devices = self._shared.ctx.cluster.devices
        for name, _ in self._shared.workloads:
            for k in design_knobs(self._shared, self._order[i]):
                self._pruned_records.append(pruned_record(self._order[i], name, k, devices))
        if len(self._pruned_records) >= _PRUNED_BATCH:
            self._flush_pruned()
        self.pruned += 1
        self._bar.skip(1)

    def _beaten(self, q: int, which: Iterable[int], fronts: Sequence[np.ndarray]) -> np.ndarray:
        """For designs ``which`` (positions in the order) of round ``q``: is the cheap bound
        of each dominated on every workload by ``fronts``? (Never for a preset.)"""
        r = self._rounds[q]
        idx = np.fromiter((i - r.start for i in which), dtype=np.intp)
        rows = self._bounds(q)[:, idx]
        out = np.array([not self._order[r.start + j].name for j in idx], dtype=bool)
        for w, front in enumerate(fronts):
            out &= dominated(front, rows[w])
        return out

    def _bounds(self, q: int) -> np.ndarray:
        """Minimised bound rows of round ``q``'s designs: (workloads, designs, objectives)."""
        key = ("bounds", q)
        if key not in self._cache:
            start = time.perf_counter()
            r = self._rounds[q]
            designs = [self._order[i] for i in r]
            capex = [self._capex[i] for i in r]
            ctx = self._shared.ctx
            self._cache[key] = np.array(
                [
                    np.stack(
                        [s * f for f, s in bound_columns(designs, capex, m, ctx, self._signs)],
                        axis=1,
                    )
                    for _, m in self._shared.workloads
                ]
            ).reshape(len(self._shared.workloads), len(r), len(self._signs))
            self.bounds_s += time.perf_counter() - start
        return self._cache[key]

    def _groups(self, q: int) -> tuple[dict[Any, list[int]], list[Any]]:
        """Round ``q``'s designs grouped by (layer-timing design, workloads to do), and the
        group key of each design."""
        key = ("groups", q)
        if key not in self._cache:
            r = self._rounds[q]
            keys = [(timing_design(self._order[i]), self._need[i]) for i in r]
            groups: dict[Any, list[int]] = {}
            for i, k in zip(r, keys, strict=True):
                groups.setdefault(k, []).append(i)
            self._cache[key] = (groups, keys)
        return self._cache[key]


def round_ranges(n: int) -> tuple[range, ...]:
    """The pruning rounds over ``n`` ordered designs: 8, 32, 128, ... designs each."""
    out, start, size = [], 0, _FIRST_ROUND
    while start < n:
        out.append(range(start, min(start + size, n)))
        start, size = start + size, size * 4
    return tuple(out)
