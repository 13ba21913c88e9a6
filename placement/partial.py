"""A partial strategy: what the user fixed is kept, the rest is searched.

Fields left out of a strategy take what the search would pick: sequence parallelism (on
or off, from the problem's graph variants, when ``t > 1``; the caller may fix it), the ZeRO
stage, the expert-parallel degree (from the problem's ``ep_degrees`` dividing the experts
and ``d``; a given ``ep`` also ``t`` times a divisor of ``d`` at ``cp = 1``, folded over
tensor x data ranks), the context-parallel degree (from its ``cp_degrees``), and any of ``t``, ``p``,
``d`` not given are chosen by trying each completion under Megatron-LM's layout
(:func:`placement.fixed.evaluate_fixed`) and keeping the fastest that fits. ``d`` always
divides the micro-batches of the global batch; micro-batch size and recompute mode come from
the graph variants of the problem. Interleaving left open is searched as the full search
does (:func:`placement.interleave.best_interleaved`, dense models at ``cp = 1``: the blocks
split evenly over ``p * v`` or with fewer on the first and last chunks, each pipeline's
micro-batches a multiple of ``p``; the ``ep`` and ``cp`` degrees no completion can take are
dropped first), and an interleaved layout replaces the best ``v = 1`` completion only when it
is faster.
"""

from __future__ import annotations

from dataclasses import replace
from math import inf

from phaze_common.errors import ConfigError, Infeasible
from phaze_common.units import fmt_noun
from placement.dp import candidate_degrees
from placement.fixed import evaluate_fixed
from placement.interleave import best_interleaved
from placement.layout import ZERO_STAGES, Layout, ep_fits
from placement.types import VARIANT_FIELDS, Placement, PlacementProblem, StageGraph

__all__ = ["completions", "evaluate_partial", "describe_defaults"]


def _check_devices(problem: PlacementProblem, lay: Layout) -> None:
    given = [(k, getattr(lay, k)) for k in ("t", "p", "d", "cp") if lay.given(k)]
    product = 1
    for _, value in given:
        product *= value
    if product > problem.cluster.devices:
        spelled = "*".join(k for k, _ in given)
        raise ConfigError(
            f"strategy: {spelled} = {fmt_noun(product, 'device')}, "
            f"the cluster has {problem.cluster.devices} "
            f"(allowed: a product of at most {problem.cluster.devices})"
        )


def _knobs(g: StageGraph) -> dict[str, object]:
    return {k: getattr(g.layout, k) for k in VARIANT_FIELDS}


def _matching(
    problem: PlacementProblem, lay: Layout, sequence_parallel: bool | None
) -> list[StageGraph]:
    """The graphs of ``problem`` that keep the knobs ``lay`` fixes; with sequence
    parallelism left open, those with it on when ``t > 1`` (``sequence_parallel`` True), off
    (False) or either (None, searched)."""
    out = []
    for g in problem.graphs:
        if any(lay.given(k) and getattr(lay, k) != v for k, v in _knobs(g).items()):
            continue
        open_sp = not lay.given("sp") and sequence_parallel is not None
        if open_sp and g.sequence_parallel != (sequence_parallel and g.tp > 1):
            continue
        out.append(g)
    return out


def completions(
    problem: PlacementProblem, layout: Layout, *, sequence_parallel: bool | None = True
) -> list[Layout]:
    """Every complete layout at ``v = 1`` (or the ``v`` given) that keeps what ``layout``
    fixes, on ``problem``'s graphs (``sequence_parallel`` as in :func:`evaluate_partial`).

    Raises ConfigError when the fixed parts need more devices than the cluster has.
    """
    lay = layout
    _check_devices(problem, lay)
    devices = problem.cluster.devices
    out = []
    for g in _matching(problem, lay, sequence_parallel):
        m = problem.global_batch // g.micro_batch
        blocks = sum(x.kind == "block" for x in g.layers)
        v = lay.v if lay.given("v") else 1
        pps = (lay.p,) if lay.given("p") else range(1 if v == 1 else 2, blocks // v + 1)
        eps = (
            (lay.ep,) if lay.given("ep") else [e for e in problem.ep_degrees if g.experts % e == 0]
        )
        cps = (lay.cp,) if lay.given("cp") else problem.cp_degrees
        zeros = (lay.zero,) if lay.given("zero") else ZERO_STAGES
        split = lay.split
        for cp in cps:
            for p in pps:
                if g.tp * p * cp > devices:
                    break
                if split is not None and len(split) != p * v:
                    continue
                top = devices // (g.tp * p * cp)
                if lay.given("d"):  # a fixed degree leaves room for fewer stages
                    dps = [lay.d] if lay.d <= top else []
                else:
                    dps = candidate_degrees(m, 1, top).tolist()
                out += [
                    g.layout.completed(p=p, d=d, v=v, zero=z, ep=e, cp=cp, split=split)
                    for d in dps
                    for e in eps
                    if _ep_kept(lay, e, g.tp, d, cp)
                    for z in zeros
                ]
    return out


def _ep_kept(lay: Layout, ep: int, t: int, d: int, cp: int) -> bool:
    """Is ``ep`` a completion's degree at ``t``, ``d``, ``cp``: dividing ``d``, or given and
    folded over tensor x data ranks, or given with a given ``d`` it fits at no ``cp`` (kept
    so that :func:`placement.fixed.evaluate_fixed` says why)?"""
    if d % ep == 0:
        return True
    if not lay.given("ep"):
        return False
    return ep_fits(ep, t, d, cp) or (lay.given("d") and not ep_fits(ep, t, d, 1))


def evaluate_partial(
    problem: PlacementProblem, layout: Layout, *, sequence_parallel: bool | None = True
) -> Placement:
    """The fastest placement of the completions of ``layout`` that fits (its
    ``placement.layout`` is the completion). Sequence parallelism left open is on when
    ``t > 1`` (``sequence_parallel`` True), off (False), or either, whichever is faster
    (None: the problem has graphs of both). Raises Infeasible (the reason of the completion
    needing the least memory) when none fits, ConfigError when the fixed parts contradict
    the problem."""
    candidates = completions(problem, layout, sequence_parallel=sequence_parallel)
    free_ep = replace(layout, open=layout.open | {"ep"})
    if (
        not candidates
        and layout.given("ep")
        and not layout.given("d")
        and completions(problem, free_ep, sequence_parallel=sequence_parallel)
    ):
        raise ConfigError(
            f"strategy: ep = {layout.ep} must divide d (or at cp = 1 be t times a divisor of "
            f"d), and no such d fits {fmt_noun(problem.cluster.devices, 'device')} with "
            f"{layout} (allowed: an ep dividing a data-parallel degree d that fits)"
        )
    if not candidates:
        raise ConfigError(f"strategy: no graph variant matches {layout}")
    best: tuple[tuple, Placement] | None = None
    closest: tuple[float, str] | None = None
    for c in candidates:
        try:
            pl = evaluate_fixed(problem, c)
        except Infeasible as e:
            need = evaluate_fixed(problem, c, check_memory=False).memory_breakdown.total_bytes
            if closest is None or need < closest[0]:
                closest = (need, e.reason)
            continue
        key = (pl.breakdown.iteration_s, c.t, c.p, c.d, c.zero, c.cp, c.ep, not c.sp)
        if best is None or key < best[0]:
            best = (key, pl)
    if not layout.given("v"):
        woven = _interleaved(problem, layout, sequence_parallel, best[0][0] if best else inf)
        if woven is not None:
            return woven
    if best is None:
        assert closest is not None
        raise Infeasible(closest[1])
    return best[1]


def _interleaved(
    problem: PlacementProblem, lay: Layout, sequence_parallel: bool | None, incumbent_s: float
) -> Placement | None:
    """The fastest interleaved layout (``v >= 2``) keeping what ``lay`` fixes that fits and
    beats ``incumbent_s``, under the full search's rules; None when none does (or the
    layout fixes its split)."""
    graphs = tuple(_matching(problem, lay, sequence_parallel))
    narrowed = replace(
        problem,
        graphs=graphs,
        zero_stages=(lay.zero,) if lay.given("zero") else ZERO_STAGES,
        ep_degrees=_ep_degrees(problem, lay, graphs),
        cp_degrees=_cp_degrees(problem, lay),
    )
    if not narrowed.graphs or lay.split is not None:
        return None
    return best_interleaved(
        narrowed,
        incumbent_s,
        pp=lay.p if lay.given("p") else None,
        dp=lay.d if lay.given("d") else None,
    )


def _ep_degrees(
    problem: PlacementProblem, lay: Layout, graphs: tuple[StageGraph, ...]
) -> tuple[int, ...]:
    """The expert-parallel degrees a completion of ``lay`` can take: the one it gives, else
    those of the problem dividing every graph's experts and the ``d`` it gives."""
    if lay.given("ep"):
        return (lay.ep,)
    d = lay.d if lay.given("d") else 0
    kept = tuple(
        e for e in problem.ep_degrees if all(g.experts % e == 0 for g in graphs) and d % e == 0
    )
    return kept or problem.ep_degrees


def _cp_degrees(problem: PlacementProblem, lay: Layout) -> tuple[int, ...]:
    """The context-parallel degrees a completion of ``lay`` can take: the one it gives, else
    those of the problem that fit the cluster beside the ``t``, ``p`` and ``d`` it gives."""
    if lay.given("cp"):
        return (lay.cp,)
    fixed = 1
    for name in ("t", "p", "d"):
        fixed *= getattr(lay, name) if lay.given(name) else 1
    kept = tuple(c for c in problem.cp_degrees if fixed * c <= problem.cluster.devices)
    return kept or problem.cp_degrees


def describe_defaults(asked: Layout, chosen: Layout) -> str:
    """``"sp=on,zero=1"``: the values ``chosen`` gives the fields ``asked`` left open."""
    return chosen.spelled(asked.open)
