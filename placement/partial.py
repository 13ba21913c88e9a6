"""A partial strategy: what the user fixed is kept, the rest is searched.

Fields left out of a strategy take what the search would pick: sequence parallelism (on
or off, from the problem's graph variants, when ``t > 1``; the caller may fix it), the ZeRO
stage, the expert-parallel degree (from the problem's ``ep_degrees`` dividing the experts
and ``d``), the context-parallel degree (from its ``cp_degrees``), and any of ``t``, ``p``,
``d`` not given are chosen by trying each completion under Megatron-LM's layout
(:func:`placement.fixed.evaluate_fixed`) and keeping the fastest that fits. ``d`` always
divides the micro-batches of the global batch; micro-batch size and recompute mode come from
the graph variants of the problem. Interleaving left open is searched as the full search
does (:func:`placement.interleave.best_interleaved`, dense models at ``cp = 1``: ``p * v``
divides the blocks, each pipeline's micro-batches a multiple of ``p``), and an interleaved
layout replaces the best ``v = 1`` completion only when it is faster.
"""

from __future__ import annotations

from dataclasses import replace
from math import inf

from phaze_common.errors import ConfigError, Infeasible
from placement.dp import candidate_degrees
from placement.fixed import Strategy, evaluate_fixed
from placement.interleave import best_interleaved
from placement.types import ZERO_STAGES, Placement, PlacementProblem, StageGraph

__all__ = ["completions", "evaluate_partial", "describe_defaults"]

# strategy field -> the key the strategy language spells it with
_KEY = {
    "tp": "t",
    "pp": "p",
    "dp": "d",
    "micro_batch": "mbs",
    "virtual_stages": "v",
    "recompute": "recompute",
    "sequence_parallel": "sp",
    "zero": "zero",
    "ep": "ep",
    "cp": "cp",
}


def _check_devices(problem: PlacementProblem, s: Strategy) -> None:
    given = [(k, getattr(s, k)) for k in ("tp", "pp", "dp", "cp") if k not in s.unset]
    product = 1
    for _, value in given:
        product *= value
    if product > problem.cluster.devices:
        spelled = "*".join(f"{_KEY[k]}" for k, _ in given)
        raise ConfigError(
            f"strategy: {spelled} = {product} devices, the cluster has {problem.cluster.devices} "
            f"(allowed: a product of at most {problem.cluster.devices})"
        )


def _knobs(g: StageGraph) -> dict[str, object]:
    return {
        "tp": g.tp,
        "micro_batch": g.micro_batch,
        "recompute": g.recompute,
        "sequence_parallel": g.sequence_parallel,
    }


def _matching(
    problem: PlacementProblem, s: Strategy, sequence_parallel: bool | None
) -> list[StageGraph]:
    """The graphs of ``problem`` that keep the knobs ``s`` fixed; with sequence parallelism
    left open, those with it on when ``t > 1`` (``sequence_parallel`` True), off (False) or
    either (None, searched)."""
    out = []
    for g in problem.graphs:
        if any(k not in s.unset and getattr(s, k) != v for k, v in _knobs(g).items()):
            continue
        open_sp = "sequence_parallel" in s.unset and sequence_parallel is not None
        if open_sp and g.sequence_parallel != (sequence_parallel and g.tp > 1):
            continue
        out.append(g)
    return out


def completions(
    problem: PlacementProblem, strategy: Strategy, *, sequence_parallel: bool | None = True
) -> list[Strategy]:
    """Every full strategy at ``v = 1`` (or the ``v`` given) that keeps what ``strategy``
    fixed, on ``problem``'s graphs (``sequence_parallel`` as in :func:`evaluate_partial`).

    Raises ConfigError when the fixed parts need more devices than the cluster has.
    """
    s, unset = strategy, strategy.unset
    _check_devices(problem, s)
    devices = problem.cluster.devices
    out = []
    for g in _matching(problem, s, sequence_parallel):
        knobs = _knobs(g)
        m = problem.global_batch // g.micro_batch
        blocks = sum(x.kind == "block" for x in g.layers)
        v = 1 if "virtual_stages" in unset else s.virtual_stages
        pps = range(1 if v == 1 else 2, blocks // v + 1) if "pp" in unset else (s.pp,)
        eps = [e for e in problem.ep_degrees if g.experts % e == 0] if "ep" in unset else [s.ep]
        cps = problem.cp_degrees if "cp" in unset else (s.cp,)
        zeros = ZERO_STAGES if "zero" in unset else (s.zero,)
        for cp in cps:
            for p in pps:
                if g.tp * p * cp > devices:
                    break
                top = devices // (g.tp * p * cp)
                if "dp" in unset:
                    dps = candidate_degrees(m, 1, top).tolist()
                else:  # a fixed degree leaves room for fewer stages
                    dps = [s.dp] if s.dp <= top else []
                out += [
                    replace(s, **knobs, pp=p, dp=d, virtual_stages=v, zero=z, ep=e, cp=cp)
                    for d in dps
                    for e in eps
                    if d % e == 0 or ("dp" not in unset and "ep" not in unset)
                    for z in zeros
                ]
    return out


def evaluate_partial(
    problem: PlacementProblem, strategy: Strategy, *, sequence_parallel: bool | None = True
) -> tuple[Placement, Strategy]:
    """The fastest placement of the completions of ``strategy`` that fits, and that
    completion. Sequence parallelism left open is on when ``t > 1`` (``sequence_parallel``
    True), off (False), or either, whichever is faster (None: the problem has graphs of
    both). Raises Infeasible (the reason of the completion needing the least memory) when
    none fits, ConfigError when the fixed parts contradict the problem."""
    candidates = completions(problem, strategy, sequence_parallel=sequence_parallel)
    free_ep = replace(strategy, unset=strategy.unset | {"ep"})
    if (
        not candidates
        and "ep" not in strategy.unset
        and "dp" in strategy.unset
        and completions(problem, free_ep, sequence_parallel=sequence_parallel)
    ):
        raise ConfigError(
            f"strategy: ep = {strategy.ep} must divide d, and no such d fits "
            f"{problem.cluster.devices} devices with {describe_defaults(strategy, given=True)} "
            "(allowed: an ep dividing a data-parallel degree d that fits)"
        )
    if not candidates:
        raise ConfigError(
            f"strategy: no graph variant matches {describe_defaults(strategy, given=True)}"
        )
    best: tuple[tuple, Placement, Strategy] | None = None
    closest: tuple[float, str] | None = None
    for c in candidates:
        try:
            pl = evaluate_fixed(problem, c)
        except Infeasible as e:
            need = evaluate_fixed(problem, c, check_memory=False).memory_per_device_bytes
            if closest is None or need < closest[0]:
                closest = (need, e.reason)
            continue
        key = (pl.time_per_batch_s, c.tp, c.pp, c.dp, c.zero, c.cp, c.ep, not c.sequence_parallel)
        if best is None or key < best[0]:
            best = (key, pl, c)
    if "virtual_stages" in strategy.unset:
        woven = _interleaved(problem, strategy, sequence_parallel, best[0][0] if best else inf)
        if woven is not None:
            return woven, _chosen(strategy, woven)
    if best is None:
        assert closest is not None
        raise Infeasible(closest[1])
    return best[1], best[2]


def _interleaved(
    problem: PlacementProblem, s: Strategy, sequence_parallel: bool | None, incumbent_s: float
) -> Placement | None:
    """The fastest interleaved layout (``v >= 2``) keeping what ``s`` fixed that fits and
    beats ``incumbent_s``, under the full search's rules; None when none does."""
    narrowed = replace(
        problem,
        graphs=tuple(_matching(problem, s, sequence_parallel)),
        zero_stages=ZERO_STAGES if "zero" in s.unset else (s.zero,),
        ep_degrees=problem.ep_degrees if "ep" in s.unset else (s.ep,),
        cp_degrees=problem.cp_degrees if "cp" in s.unset else (s.cp,),
    )
    if not narrowed.graphs:
        return None
    return best_interleaved(
        narrowed,
        incumbent_s,
        pp=None if "pp" in s.unset else s.pp,
        dp=None if "dp" in s.unset else s.dp,
    )


def _chosen(s: Strategy, pl: Placement) -> Strategy:
    """``s`` completed by the placement ``pl`` (what it left open stays named unset)."""
    return replace(
        s,
        tp=pl.tp,
        pp=pl.pp,
        dp=pl.dp,
        micro_batch=pl.micro_batch,
        virtual_stages=pl.virtual_stages,
        recompute=pl.recompute,
        sequence_parallel=pl.sequence_parallel,
        zero=pl.zero,
        ep=pl.ep,
        cp=pl.cp,
    )


def describe_defaults(strategy: Strategy, *, given: bool = False) -> str:
    """``"sp=on, zero=1"``: the fields of ``strategy`` left unset (or, with ``given``, those
    set), in the strategy language."""
    names = [k for k in _KEY if (k in strategy.unset) != given]
    parts = []
    for k in names:
        value = getattr(strategy, k)
        if k == "sequence_parallel":
            value = "on" if value else "off"
        parts.append(f"{_KEY[k]}={value}")
    return ", ".join(parts)
