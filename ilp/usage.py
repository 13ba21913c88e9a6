"""Which units of each resource kind a schedule's ops hold, and how busy each kind is.

Both read the resources as data: a problem's kinds and capacities, and per node the units it
holds in its single mode (the kinds it works on), which a parallel op holds in full.
"""

from __future__ import annotations

from collections.abc import Hashable

from ilp.problem import PARALLEL, Problem

__all__ = ["unit_ids", "utilisation"]


def unit_ids(nodes, start, duration, mode, own, held, problem: Problem) -> dict[Hashable, str]:
    """Label each node's units of the kinds it works on (``own``, its single mode's; ``held``
    are the units it holds in its mode): a parallel op holding every unit of a kind is
    labelled with all of them, otherwise it gets the lowest free units (greedy by start
    time, which never needs more units than are busy at once)."""
    ids: dict[Hashable, str] = {}
    free_at = [[0.0] * cap for cap in problem.capacity]
    for v in sorted(nodes, key=lambda v: (start[v], duration[v] > 0)):
        if not any(own[v]) or duration[v] == 0:
            ids[v] = ""
            continue
        parts = []
        for k, r in enumerate(problem.kinds):
            if not own[v][k]:
                continue
            cap = problem.capacity[k]
            if mode[v] == PARALLEL and held[v][k] == cap:
                parts.append(f"{r}0-{cap - 1}" if cap > 1 else f"{r}0")
                continue
            taken = []
            for _ in range(held[v][k]):
                c = next(c for c, f in enumerate(free_at[k]) if f <= start[v] and c not in taken)
                free_at[k][c] = start[v] + duration[v]
                taken.append(c)
            parts.append(",".join(f"{r}{c}" for c in taken))
        ids[v] = "+".join(parts)
    return ids


def utilisation(nodes, start, duration, own, held, problem: Problem, span: float):
    """Per kind: (average, peak) share of its units doing work, counting each op on the kinds
    it works on (``own``, its single mode's) with the units it holds in its mode (``held``:
    all of its cores when it runs parallel)."""
    kinds = len(problem.kinds)
    if span <= 0:
        return (0.0,) * kinds, (0.0,) * kinds
    caps = problem.capacity
    work = [0.0] * kinds
    events: list[tuple[float, int, int, int]] = []
    for v in nodes:
        if duration[v] <= 0:
            continue
        for k in range(kinds):
            if own[v][k]:
                busy = held[v][k]
                work[k] += busy * duration[v]
                events.append((start[v], 1, k, busy))
                events.append((start[v] + duration[v], 0, k, -busy))
    peak = [0] * kinds
    now = [0] * kinds
    for _, _, k, step in sorted(events):
        now[k] += step
        peak[k] = max(peak[k], now[k])
    return (
        tuple(work[k] / (caps[k] * span) for k in range(kinds)),
        tuple(peak[k] / caps[k] for k in range(kinds)),
    )
