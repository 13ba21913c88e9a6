"""The plan of a sweep: a config resolved into the designs to evaluate and the read-only
context every worker shares."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from arch_space import Accelerator, Cluster, load_space, preset
from phaze.config import SweepConfig
from phaze.model.pipeline import Context, training_setup
from phaze.model.serving import ServeContext
from phaze.model.serving_load import load_settings
from phaze.sweep.records import point_key
from phaze.sweep.serve_tasks import AtRate, serve_point_key
from phaze_common.errors import ConfigError
from placement import Layout
from results.pareto import parse_objectives
from workloads import Model, check_setup, resolve_model
from workloads.precision import recipe
from workloads.serving import RequestBatch, ServingPass, serving_settings
from workloads.serving_ops import check_serving

__all__ = ["Shared", "plan", "design_knobs", "objective_signs", "duplicate_problems"]


@dataclass(frozen=True, slots=True)
class Shared:
    """Read-only context sent once to every worker. A serving sweep has ``serve`` (what
    every serving evaluation shares) and its ``batches``, and no training knobs."""

    workloads: tuple[tuple[str, Model], ...]
    knobs: tuple[Layout, ...]  # each fixes a micro-batch, a recompute mode and a precision
    ctx: Context
    signs: tuple[tuple[str, float], ...] = ()  # (objective, sign): sign * value is minimised
    serve: ServeContext | None = None
    batches: tuple[int, ...] = ()
    format_sets: tuple[tuple[str, ...], ...] = (("bf16",),)  # the space's
    weight_formats: tuple[str, ...] = ("bf16",)  # a serving sweep's
    at_rate: AtRate | None = None  # a serving sweep's load, when simulated at a rate

    def point_keys(self, workload: str, design_id: str, acc: Accelerator) -> tuple[str, ...]:
        """The keys of every point of design ``acc`` on one workload: its knob settings'
        (:func:`design_knobs`), or a serving sweep's batches at its weight formats
        (:func:`serve_formats`)."""
        if self.serve is not None:
            return tuple(
                serve_point_key(workload, design_id, b, self.serve, fmt, self.at_rate)
                for fmt in serve_formats(self, acc)
                for b in self.batches
            )
        return tuple(point_key(workload, design_id, k) for k in design_knobs(self, acc))


def serve_formats(shared: Shared, acc: Accelerator) -> tuple[str, ...]:
    """The weight formats of a serving sweep ``acc`` serves at: those whose GEMM format its
    tensor cores run (``workloads/data/serving.toml`` [weights])."""
    return tuple(
        f
        for f in shared.weight_formats
        if recipe(serving_settings().weight_recipes[f]).gemm_format in acc.format_names
    )


def design_knobs(shared: Shared, acc: Accelerator) -> tuple[Layout, ...]:
    """The knob settings ``acc`` is evaluated at: those whose precision's GEMM format its
    tensor cores run. A searched design whose formats the precision leaves partly unused is
    left out where the space has the same design without those lanes: that twin runs as
    fast on less area, so it dominates on every objective (exact pruning)."""
    names = acc.format_names
    out = []
    for k in shared.knobs:
        fmt = recipe(k.precision).gemm_format
        if fmt not in names:
            continue
        used = tuple(f for f in names if f in ("bf16", fmt))
        if not acc.name and used != names and used in shared.format_sets:
            continue
        out.append(k)
    return tuple(out)


def _sweep_context(cfg: SweepConfig) -> Context:
    """What every evaluation of ``cfg`` shares: its cluster, batch, solver and scoring
    settings, and the degrees and ZeRO stages it lets the search choose from."""
    cluster = Cluster(
        devices=cfg.devices,
        devices_per_node=cfg.devices_per_node,
        intra_node_bandwidth_bytes_per_s=cfg.intra_node_bandwidth_bytes_per_s,
        inter_node_bandwidth_bytes_per_s=cfg.inter_node_bandwidth_bytes_per_s,
        intra_node_latency_s=cfg.intra_node_latency_s,
        inter_node_latency_s=cfg.inter_node_latency_s,
    )
    ctx = Context(
        cluster=cluster,
        seq_len=cfg.training.seq_len,
        global_batch=cfg.training.global_batch,
        sequence_parallel=cfg.training.sequence_parallel,
        tokens_to_train=cfg.training.tokens_to_train,
        optimizer_state=cfg.training.optimizer_state,
        allow_context_extension=cfg.training.allow_context_extension,
        solver=cfg.solver,
        scoring=cfg.scoring,
        framework=cfg.training.framework,
        ep_degrees=cfg.training.ep or None,
        cp_degrees=cfg.training.cp or None,
    )
    if cfg.training.zero:  # the stages listed, and no others
        ctx = dataclasses.replace(
            ctx, zero_stages=tuple(sorted(set(cfg.training.zero))), zero_fallback=()
        )
    return ctx


def plan(cfg: SweepConfig) -> tuple[Shared, tuple[Accelerator, ...]]:
    """Resolve a config into the shared context and the designs to evaluate (validated)."""
    problems = duplicate_problems(cfg)
    train, serving = cfg.training, cfg.serving
    workloads = []
    for w in cfg.workloads:
        try:
            workloads.append((w, resolve_model(w)))
        except ConfigError as e:
            problems.append(str(e))
    ctx = _sweep_context(cfg)
    cluster = ctx.cluster
    serve = None
    if cfg.mode == "serve":
        knobs: tuple[Layout, ...] = ()
        try:
            serve = _serve_context(cfg, cluster)
        except ConfigError as e:
            problems.append(str(e))
        problems += [p for _, model in workloads for p in _serve_problems(model, cfg)]
        if serving.rate is None:
            problems += [
                f"{k} = {cfg.value(k)!r} needs rate (requests/s) in [sweep] or --rate"
                for k in ("requests", "seed", "p99_ttft_limit_s", "p99_tpot_limit_s")
                if cfg.value(k) is not None
            ]
            if serving.pairs:
                problems.append("pairs = true needs rate (requests/s) in [sweep] or --rate")
        if serving.pairs and not serving.disaggregate:
            problems.append(
                "pairs = true needs disaggregate = true (a pair is a prefill pool and a "
                "decode pool); drop one or the other"
            )
    else:
        problems += _train_problems(cfg)
        knobs = tuple(
            Layout.searching(mbs=mb, recompute=rc, precision=pr)
            for mb in train.micro_batches
            for rc in train.recompute
            for pr in train.precision
        )
        for name, model in workloads:
            if model.tokens_to_train is None and train.tokens_to_train is None:
                problems.append(
                    f"workload {name!r} has no published token budget; set tokens_to_train in "
                    "[sweep] (or phaze sweep --tokens, phaze.search(tokens_to_train=...))"
                )
            problems += _setup_problems(model, ctx, knobs)
    for step in (
        lambda: parse_objectives(cfg.objectives),
        lambda: [preset(name) for name in cfg.presets],
    ):
        try:
            step()
        except ConfigError as e:
            problems.append(str(e))
    try:
        space = load_space(cfg.space)
        space.check_not_empty()
    except ConfigError as e:
        problems.append(str(e))
    if problems:
        raise ConfigError("sweep: " + "; ".join(dict.fromkeys(problems)))
    designs = tuple(space.enumerate())
    if cfg.hbm_bytes:
        designs = tuple(dataclasses.replace(a, hbm_bytes=h) for a in designs for h in cfg.hbm_bytes)
    if cfg.hbm_tbps:  # space designs derive their stacks from the bandwidth (hbm_stacks = 0)
        designs = tuple(
            dataclasses.replace(a, hbm_bandwidth_bytes_per_s=tb * 1e12)
            for a in designs
            for tb in cfg.hbm_tbps
        )
    designs = tuple(preset(name) for name in cfg.presets) + designs
    shared = Shared(
        tuple(workloads),
        knobs,
        ctx,
        tuple(objective_signs(cfg.objectives)),
        serve=serve,
        batches=serving.batches if serve else (),
        format_sets=space.format_sets,
        weight_formats=serving.weight_formats,
        at_rate=_at_rate(cfg) if serve else None,
    )
    # a design runs the precisions, or serves at the weight formats, its tensor cores have
    # the format for (one with none is left out)
    if serve is not None:
        runs, what = (lambda a: serve_formats(shared, a)), "serves weight format"
        asked = serving.weight_formats
    else:
        runs, what, asked = (lambda a: design_knobs(shared, a)), "runs precision", train.precision
    designs = tuple(a for a in designs if runs(a))
    if not designs:
        raise ConfigError(
            f"sweep: no design of space {cfg.space!r} or preset {what} {', '.join(asked)} "
            f"(the space's formats: {'; '.join('+'.join(fs) for fs in space.format_sets)})"
        )
    return shared, designs


def _train_problems(cfg: SweepConfig) -> list[str]:
    """A training sweep's knobs that do not divide what they must."""
    train = cfg.training
    problems = [
        f"micro_batches: {mb} does not divide global_batch = {train.global_batch}"
        for mb in train.micro_batches
        if train.global_batch % mb
    ]
    return problems + [
        f"cp: {c} must divide seq_len = {train.seq_len} (the context-parallel ranks split it)"
        for c in train.cp
        if train.seq_len % c
    ]


def _at_rate(cfg: SweepConfig) -> AtRate | None:
    """The serving sweep's load (None without a rate); ``requests`` by default the
    simulation's (``phaze/data/serving_load.toml``); the p99 limits when given."""
    if cfg.serving.rate is None:
        return None
    return AtRate(
        cfg.serving.rate,
        cfg.serving.requests or load_settings().requests,
        cfg.serving.seed or 0,
        cfg.serving.p99_ttft_limit_s,
        cfg.serving.p99_tpot_limit_s,
    )


def _serve_context(cfg: SweepConfig, cluster: Cluster) -> ServeContext:
    return ServeContext(
        cluster=cluster,
        requests=RequestBatch.of(cfg.serving.input_tokens, cfg.serving.output_tokens),
        ttft_limit_s=cfg.serving.ttft_limit_s,
        tpot_limit_s=cfg.serving.tpot_limit_s,
        disaggregate=cfg.serving.disaggregate,
        solver=cfg.solver,
        scoring=cfg.scoring,
    )


def _serve_problems(model: Model, cfg: SweepConfig) -> list[str]:
    """What would keep ``model`` from serving the sweep's requests (an encoder, a context
    beyond its positions), checked before any worker starts."""
    context = cfg.serving.input_tokens + cfg.serving.output_tokens - 1
    try:
        check_serving(model, ServingPass.decode(1, context), 1)
    except ConfigError as e:
        return [
            f"workload {model.name!r} cannot serve ISL {cfg.serving.input_tokens} + OSL {cfg.serving.output_tokens}: {e}"
        ]
    return []


def _setup_problems(model: Model, ctx: Context, knobs: tuple[Layout, ...]) -> list[str]:
    """What a worker would refuse in the training setup of each knob setting of ``model``
    (checked here, before any worker starts), each problem once."""
    problems = []
    for k in knobs:
        if ctx.global_batch % k.mbs:
            continue  # reported once for the micro-batch list
        try:
            check_setup(model, training_setup(model, ctx, k, sequence_parallel=False))
        except ConfigError as e:
            problems.append(
                f"workload {model.name!r}: {str(e).removeprefix(f'model {model.name!r}: ')}"
            )
    return problems


def duplicate_problems(cfg: SweepConfig) -> list[str]:
    """A problem for each list of the config that names a value twice (the sweep would do
    its work twice, and count the value twice in the all-workload rows)."""
    problems = []
    for name in _LISTS:
        counts = Counter(cfg.value(name))
        problems += [
            f"{name} lists {v!r} {n} times: give each value once"
            for v, n in counts.items()
            if n > 1
        ]
    return problems


#: The config's lists, where a repeated value is refused.
_LISTS: Final = (
    "workloads",
    "micro_batches",
    "hbm_gib",
    "hbm_tbps",
    "batches",
    "recompute",
    "precision",
    "ep",
    "cp",
    "zero",
    "objectives",
    "presets",
)


def objective_signs(objectives: Sequence[str]) -> list[tuple[str, float]]:
    """(metric, sign) so that sign * value is minimised."""
    return [(o.metric, -1.0 if o.sense == "max" else 1.0) for o in parse_objectives(objectives)]
