"""A partial strategy: what the user fixed is kept, the rest is searched.

Fields left out of a strategy take what the search would pick: sequence parallelism is on
when ``t > 1`` (unless the caller's default is off), the ZeRO stage, the expert-parallel
degree (from the problem's ``ep_degrees`` dividing the experts and ``d``), the
context-parallel degree (from its ``cp_degrees``), and any of ``t``,
``p``, ``d`` not given are chosen by trying each completion under Megatron-LM's layout
(:func:`placement.fixed.evaluate_fixed`) and keeping the fastest that fits. ``d`` always
divides the micro-batches of the global batch; interleaving stays off (``v = 1``) unless
given; micro-batch size and recompute mode come from the graph variants of the problem.
"""

from __future__ import annotations

from dataclasses import replace

from phaze.errors import ConfigError, Infeasible
from placement.dp import candidate_degrees
from placement.fixed import Strategy, evaluate_fixed
from placement.types import ZERO_STAGES, Placement, PlacementProblem

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


def completions(
    problem: PlacementProblem, strategy: Strategy, *, sequence_parallel: bool = True
) -> list[Strategy]:
    """Every full strategy that keeps what ``strategy`` fixed, on ``problem``'s graphs.

    Raises ConfigError when the fixed parts need more devices than the cluster has.
    """
    s, unset = strategy, strategy.unset
    _check_devices(problem, s)
    devices = problem.cluster.devices
    out = []
    for g in problem.graphs:
        knobs = {
            "tp": g.tp,
            "micro_batch": g.micro_batch,
            "recompute": g.recompute,
            "sequence_parallel": g.sequence_parallel,
        }
        if any(k not in unset and getattr(s, k) != v for k, v in knobs.items()):
            continue
        if "sequence_parallel" in unset and g.sequence_parallel != (sequence_parallel and g.tp > 1):
            continue
        m = problem.global_batch // g.micro_batch
        blocks = sum(x.kind == "block" for x in g.layers)
        v = 1 if "virtual_stages" in unset else s.virtual_stages
        pps = range(1, blocks // v + 1) if "pp" in unset else (s.pp,)
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
    problem: PlacementProblem, strategy: Strategy, *, sequence_parallel: bool = True
) -> tuple[Placement, Strategy]:
    """The fastest placement of the completions of ``strategy`` that fits, and that
    completion. Raises Infeasible (the reason of the completion needing the least memory)
    when none fits, ConfigError when the fixed parts contradict the problem."""
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
        key = (pl.time_per_batch_s, c.tp, c.pp, c.dp, c.zero, c.cp, c.ep)
        if best is None or key < best[0]:
            best = (key, pl, c)
    if best is None:
        assert closest is not None
        raise Infeasible(closest[1])
    return best[1], best[2]


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
