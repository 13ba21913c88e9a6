"""The Python API: :func:`search` (a sweep), :func:`evaluate` (one design),
:func:`serve` (one design serving a model) and :func:`serve_capacity` (the fewest devices
serving requests at a rate).

Examples
--------
>>> import phaze
>>> from arch_space import Cluster, preset
>>> ev = phaze.evaluate("gpt3-1.3b", preset("a100"), Cluster(devices=8), global_batch=64)
>>> ev.feasible, ev.placement.layout.devices <= 8
(True, True)
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final

from arch_space import Accelerator, Cluster
from arch_space.formats import check_precision
from arch_space.perf.device import DeviceProfile
from phaze.config import (
    DEFAULT_SEQUENCE_PARALLEL,
    MICRO_BATCHES,
    SolverSettings,
    SweepConfig,
    sweep_config_from_mapping,
)
from phaze.model.knob_search import RECOMPUTES, evaluate_best_knobs
from phaze.model.pipeline import Context, Evaluation
from phaze.model.pipeline import evaluate as _evaluate
from phaze.model.scoring import ScoringParams
from phaze.model.serving import ServingPoint
from phaze.settings import SETTINGS
from phaze.sweep import run_sweep
from phaze_common.errors import ConfigError
from phaze_common.limits import MAX_DEVICES, MAX_GLOBAL_BATCH, MAX_SEQ_LEN, over_limit
from placement import Layout, parse_strategy
from placement.serving_layout import ServingLayout, parse_serving
from results.store import load
from workloads import resolve_model
from workloads.framework import DEFAULT_FRAMEWORK

if TYPE_CHECKING:
    from phaze.model.serving import ServeContext
    from phaze.model.serving_arrivals import Arrivals
    from phaze.model.serving_capacity import CapacityPlan

__all__ = ["search", "evaluate", "serve", "serve_capacity"]

_GIB = 1 << 30
_TRAIN_OBJECTIVES = ("tokens_per_s", "tco_usd", "total_kgco2e", "tcdp")


def search(
    workloads: Sequence[str],
    space: str = "tiny",
    cluster: Cluster | None = None,
    *,
    micro_batches: Sequence[int] = MICRO_BATCHES,
    hbm_sizes: Sequence[int] = (),
    recompute_modes: Sequence[str] = ("none", "full"),
    precisions: Sequence[str] = ("bf16",),
    objectives: Sequence[str] = _TRAIN_OBJECTIVES,
    executor: str = "local",
    out_dir: str | Path = "phaze-out/search",
    jobs: int | None = None,
    seq_len: int = 2048,
    global_batch: int = 512,
    sequence_parallel: bool | None = DEFAULT_SEQUENCE_PARALLEL,
    prune: bool = True,
    solver: SolverSettings | None = None,
    scoring: ScoringParams | None = None,
    progress: bool = False,
    tokens_to_train: int | str | None = None,
    framework: str = DEFAULT_FRAMEWORK,
    zero: Sequence[int] = (),
    ep: Sequence[int] = (),
    cp: Sequence[int] = (),
    presets: Sequence[str] = ("tpuv4", "a100", "h100"),
    mode: str = "train",
    input_tokens: int = 2048,
    output_tokens: int = 128,
    ttft_limit_s: float | None = None,
    tpot_limit_s: float | None = None,
    batches: Sequence[int] = (1, 4, 16, 64, 256),
    disaggregate: bool = True,
    hbm_tbps: Sequence[float] = (),
    weight_formats: Sequence[str] = ("bf16",),
    allow_context_extension: bool = False,
    rate: float | None = None,
    requests: int | None = None,
    seed: int | None = None,
    p99_ttft_limit_s: float | None = None,
    p99_tpot_limit_s: float | None = None,
    pairs: bool = False,
    optimizer_state: str | None = None,
) -> list[dict[str, Any]]:
    """Sweep ``workloads`` x the designs of ``space`` x the knobs; return every stored point.

    The options of ``phaze sweep`` (and of a sweep file's ``[sweep]`` table): ``space`` is a
    shipped space name or a TOML path; ``hbm_sizes`` (bytes) replaces each design's HBM
    capacity by each size given; ``tokens_to_train`` is every workload's token budget, a
    count or text like ``"2T"`` (default: each model's published one); ``sequence_parallel``
    None searches it (on or off at each tensor-parallel width), True or False fixes it;
    ``framework`` names the overlap profile (:func:`workloads.framework_names`); ``zero``,
    ``ep`` and ``cp`` list the ZeRO stages and expert- and context-parallel degrees the
    placement search may choose from (empty: its own); ``precisions`` the precision recipes
    (each design runs those its tensor cores have the format for); ``presets`` are real chips
    evaluated beside the space. ``mode="serve"`` sweeps inference serving instead
    (docs/serving.md): requests of ``input_tokens`` in and ``output_tokens`` out at each of
    ``batches``, the serving layout searched under the mean latency limits (seconds, None:
    none), separate prefill and decode pools too unless ``disaggregate`` is false, at each
    of ``weight_formats`` (bf16, fp8) a design's tensor cores run; ``objectives`` then default to the serving ones (:data:`phaze.config.SERVE_OBJECTIVES`).
    A serving sweep's ``rate`` (requests/s) also simulates every point's layout under
    ``requests`` Poisson arrivals drawn with ``seed`` (None: the defaults, 2000 and 0),
    each request held to ``p99_ttft_limit_s`` and ``p99_tpot_limit_s`` (None: the mean
    limits), and ranks first by the cost per million tokens that meets the SLO at the rate
    (:data:`phaze.config.SERVE_OBJECTIVES_AT_RATE`); ``pairs`` also pairs every design's
    prefill pool with every design's decode pool (read them with
    ``results.load(out_dir).pairs()``), as ``phaze sweep --rate R --pairs`` does.
    ``hbm_tbps`` replaces each space design's HBM bandwidth by each value (TB/s). Points
    already in ``out_dir`` are reused; ``allow_context_extension`` and ``optimizer_state``
    as in :func:`evaluate`.
    Each point is a flat dict with the columns of ``results.schema`` (CSV-ready).
    """
    args = dict(locals())  # the arguments, before any other name is bound
    cluster = cluster or Cluster(devices=64)
    _check_limits(cluster, seq_len, global_batch, ("micro_batches", micro_batches))
    if any(h % (1 << 20) for h in hbm_sizes):
        raise ConfigError(f"hbm_sizes = {list(hbm_sizes)!r} must be whole MiB (bytes)")
    given = {
        **{k: args[k] for k in _SEARCH_KEYS},
        **{k: list(args[k]) for k in _SEARCH_LISTS},
        **_cluster_keys(cluster),
        "precision": list(precisions),
        "hbm_gib": [h / _GIB for h in hbm_sizes],
        "recompute": list(recompute_modes),
    }
    cfg = _sweep_config(given, solver or SolverSettings(), scoring or ScoringParams())
    run_sweep(cfg, out_dir, executor=executor, jobs=jobs, progress=progress)
    with load(out_dir) as store:
        return store.points()


#: :func:`search`'s arguments that are ``[sweep]`` keys of the same name (the settings'
#: declaration, :mod:`phaze.settings`), as given ...
_SEARCH_KEYS: Final = tuple(
    s.key for s in SETTINGS.values() if s.in_file and s.api_name == s.key and not s.many
)
#: ... and as lists.
_SEARCH_LISTS: Final = tuple(
    s.key for s in SETTINGS.values() if s.in_file and s.api_name == s.key and s.many
)


def _cluster_keys(cluster: Cluster) -> dict[str, Any]:
    """The keys of a sweep file's ``[sweep]`` table that give ``cluster``."""
    return {
        "devices": cluster.devices,
        "devices_per_node": cluster.devices_per_node,
        "intra_node_bandwidth_bytes_per_s": cluster.intra_node_bandwidth_bytes_per_s,
        "inter_node_bandwidth_bytes_per_s": cluster.inter_node_bandwidth_bytes_per_s,
        "intra_node_latency_s": cluster.intra_node_latency_s,
        "inter_node_latency_s": cluster.inter_node_latency_s,
    }


def _sweep_config(
    given: dict[str, Any], solver: SolverSettings, scoring: ScoringParams
) -> SweepConfig:
    """The sweep that :func:`search`'s arguments ``given`` (a ``[sweep]`` table) describe, with
    ``solver`` and ``scoring``: a None value keeps the file's default, and a serving sweep
    left with the training objectives gets the serving ones. The table goes through the
    checks of a sweep file, each problem named once (every key is given here, both modes',
    so the other mode's keys are not refused)."""
    sweep = {k: v for k, v in given.items() if v is not None}
    if given["mode"] == "serve" and tuple(given["objectives"]) == _TRAIN_OBJECTIVES:
        del sweep["objectives"]
    return dataclasses.replace(
        sweep_config_from_mapping({"sweep": sweep}, "phaze.search", mode_keys=False),
        solver=solver,
        scoring=scoring,
    )


def evaluate(
    workload: str,
    accelerator: Accelerator,
    cluster: Cluster,
    *,
    seq_len: int = 2048,
    global_batch: int = 512,
    micro_batch: int | None = None,
    recompute: str | None = None,
    sequence_parallel: bool | None = DEFAULT_SEQUENCE_PARALLEL,
    strategy: Layout | str | None = None,
    tokens_to_train: int | None = None,
    solver: SolverSettings | None = None,
    scoring: ScoringParams | None = None,
    framework: str = DEFAULT_FRAMEWORK,
    device: DeviceProfile | None = None,
    state_bytes_per_parameter: int | None = None,
    precision: str | None = None,
    optimizer_state: str | None = None,
    allow_context_extension: bool = False,
) -> Evaluation:
    """Evaluate one design on one workload: the best placement, or the given ``strategy``
    (a :class:`placement.Layout` or text like ``"t=8,p=8,d=1,mbs=1,v=3,recompute=full"``;
    keys left out are searched, see :mod:`placement.partial`; a key it gives that
    ``micro_batch``, ``recompute`` or ``sequence_parallel`` also gives differently is a
    ConfigError naming both), under the ``framework``
    overlap profile (:func:`workloads.framework_names`); ``device`` overrides the sustained
    rates of the accelerator's preset (:mod:`arch_space.perf.device`).
    ``state_bytes_per_parameter`` overrides weights + gradients + optimizer state per
    parameter (default 18 for Adam in mixed precision; 20 for DeepSpeed's BF16 optimizer), a
    shorthand for the parts ``optimizer_state`` names (``"master=fp32,moments=bf16"``: the
    formats of the master copy, moments and gradients, :mod:`workloads.optimizer_state`).
    ``micro_batch``, ``recompute`` and ``sequence_parallel`` left None (and not set by
    ``strategy``) are searched (:mod:`phaze.model.knob_search`; sequence parallelism on or off at
    each tensor-parallel width ``t > 1``). ``precision`` names the precision recipe
    (:func:`workloads.precision.recipe_names`; bf16 unless it or ``strategy`` gives one); an
    accelerator without the recipe's GEMM format is a ConfigError naming the formats it has.
    A ``seq_len`` past the model's context is a ConfigError unless
    ``allow_context_extension`` (rotary and ALiBi models only: a learned position table
    cannot be extended).
    """
    _check_limits(
        cluster,
        seq_len,
        global_batch,
        ("micro_batch", () if micro_batch is None else (micro_batch,)),
    )
    if strategy is not None:  # the arguments fill what it leaves open; a clash is an error
        strategy = parse_strategy(
            strategy if isinstance(strategy, str) else str(strategy),
            {
                "mbs": ("micro_batch", micro_batch),
                "recompute": ("recompute", recompute),
                "sp": ("sequence_parallel", sequence_parallel),
                "precision": ("precision", precision),
            },
        )
        micro_batch = strategy.mbs if strategy.given("mbs") else None
        recompute = strategy.recompute if strategy.given("recompute") else None
        sequence_parallel = strategy.sp if strategy.given("sp") else None
    ctx = Context(
        cluster=cluster,
        seq_len=seq_len,
        global_batch=global_batch,
        sequence_parallel=sequence_parallel,
        tokens_to_train=tokens_to_train,
        solver=solver or SolverSettings(),
        scoring=scoring or ScoringParams(),
        framework=framework,
        device=device,
        state_bytes_per_parameter=state_bytes_per_parameter,
        optimizer_state=optimizer_state,
        allow_context_extension=allow_context_extension,
    )
    model = resolve_model(workload)
    if strategy is None and precision is not None:
        strategy = Layout.searching(precision=precision)
    if strategy is not None:
        check_precision(accelerator, strategy.precision)  # before any search
    if micro_batch is None or recompute is None:
        return evaluate_best_knobs(
            workload,
            model,
            accelerator,
            ctx,
            micro_batches=MICRO_BATCHES if micro_batch is None else (micro_batch,),
            recomputes=RECOMPUTES if recompute is None else (recompute,),
            strategy=strategy,
        )
    knobs = (strategy or Layout.searching()).completed(mbs=micro_batch, recompute=recompute)
    return _evaluate(workload, model, accelerator, knobs, ctx)


def serve(
    workload: str,
    accelerator: Accelerator,
    cluster: Cluster,
    *,
    input_tokens: int | None = None,
    output_tokens: int | None = None,
    lengths: Sequence[tuple[int, int, float]] | None = None,
    batch: int | None = None,
    ttft_limit_s: float | None = None,
    tpot_limit_s: float | None = None,
    strategy: ServingLayout | str | None = None,
    objective: str = "tokens_per_s_per_device",
    disaggregate: bool = True,
    kv_format: str = "bf16",
    weight_format: str | None = None,
    tokens_to_serve: float | None = None,
    solver: SolverSettings | None = None,
    scoring: ScoringParams | None = None,
    device: DeviceProfile | None = None,
    kv_admission: str | None = None,
    engine: str | None = None,
) -> ServingPoint:
    """Serve ``workload`` on ``cluster``'s devices of ``accelerator``: the serving layout
    that meets the latency limits (mean TTFT and TPOT, seconds; None: none) and maximises
    output tokens per second per device (``objective="usd_per_million_tokens"``: the
    cheapest per token), with its TTFT, TPOT, throughput, memory, energy, cost and carbon
    (docs/serving.md).

    Requests are ``input_tokens`` in and ``output_tokens`` out, or a mix of
    ``(input, output, weight)`` in ``lengths``. ``strategy`` (a
    :class:`placement.ServingLayout` or text like ``"t=8,batch=64,chunk=2048"``, or
    ``"prefill:t=4;decode:t=4,batch=64"`` for two pools) fixes what it gives and the search
    fills the rest; ``batch`` fixes the sequences in flight per replica (a different
    ``batch=`` in the strategy is a ConfigError). ``disaggregate`` lets the search try
    separate prefill and decode pools. ``weight_format`` stores the blocks' weights in bf16
    or fp8 (``workloads/data/serving.toml`` [weights]; fp8 needs fp8 tensor cores, a
    ConfigError naming the accelerator's formats otherwise), as the strategy's ``weights=``
    does (None: the strategy's, else bf16; the two differing is a ConfigError); the returned
    layout carries it when either gave it. ``kv_admission`` is how the engine's scheduler
    reserves a request's KV cache: ``"on-demand"`` (its mean length, vLLM) or
    ``"whole-request"`` (its whole prompt and output, TensorRT-LLM's GUARANTEED_NO_EVICT);
    None: the engine's, else serving.toml's default. ``engine`` names a serving engine's
    profile (:mod:`phaze.model.serving_engines`: vllm, trtllm, sglang, gpt-fast, ...): its
    scheduler's rules are the search's defaults (batch sizes, chunk budgets, KV admission,
    static batching where it runs it) and its passes carry its all-reduce, its kernel gaps
    and its measured small-batch bandwidth; None: serving.toml's generic engine. The
    returned point's ``slo`` names the limits it misses
    when no layout meets them. A strategy that contradicts the model, the devices or
    ``disaggregate`` (a prefill pool with ``disaggregate=False``) is a ConfigError naming
    every problem (:func:`phaze.model.serving_search.check_strategy`).
    """
    from phaze.model.serving_search import search as serve_search

    given = locals()  # the arguments, before any other name is bound
    layout, ctx = _serving_problem(cluster, **{k: given[k] for k in _SERVE_KEYWORDS})
    return serve_search(workload, resolve_model(workload), accelerator, layout, ctx)


def serve_capacity(
    workload: str,
    accelerator: Accelerator,
    cluster: Cluster,
    arrivals: Arrivals,
    *,
    p99_ttft_limit_s: float | None,
    p99_tpot_limit_s: float | None,
    max_devices: int,
    on_count: Callable[[int, int], None] | None = None,
    **kw: Any,
) -> CapacityPlan:
    """The fewest devices of ``accelerator`` serving ``arrivals`` (requests as they arrive,
    :mod:`phaze.model.serving_arrivals`) with their p99 TTFT and TPOT within the limits (seconds)
    for the target share of requests, and the serving layout that does
    (:func:`phaze.model.serving_capacity.plan_capacity`; docs/serving.md, "Capacity planning").
    ``cluster`` gives the nodes and links (its device count is searched, up to
    ``max_devices``); ``kw`` are :func:`serve`'s options (lengths, strategy, objective,
    formats, mean limits, scoring)."""
    from phaze.model.serving_capacity import plan_capacity

    layout, ctx = _serving_problem(cluster, **kw)
    return plan_capacity(
        workload,
        resolve_model(workload),
        accelerator,
        layout,
        ctx,
        arrivals,
        p99_limits=(p99_ttft_limit_s, p99_tpot_limit_s),
        max_devices=max_devices,
        on_count=on_count,
    )


#: :func:`serve`'s keyword arguments and their defaults: the options of a serving problem
#: (:func:`_serving_problem`), stated once in :func:`serve`'s signature.
_SERVE_KEYWORDS: Final = MappingProxyType(
    {
        name: p.default
        for name, p in inspect.signature(serve).parameters.items()
        if p.kind is p.KEYWORD_ONLY
    }
)


def _serving_problem(cluster: Cluster, **given: Any) -> tuple[ServingLayout, ServeContext]:
    """The partial layout and the context :func:`serve`'s keyword arguments ``given`` give
    (its ConfigErrors), the others at :func:`serve`'s defaults."""
    from phaze.model.serving import ServeContext
    from workloads.serving import RequestBatch

    unknown = sorted(set(given) - set(_SERVE_KEYWORDS))
    if unknown:
        raise TypeError(f"serve() got unexpected keyword arguments: {', '.join(unknown)}")
    kw = {**_SERVE_KEYWORDS, **given}
    lengths, input_tokens, output_tokens = kw["lengths"], kw["input_tokens"], kw["output_tokens"]
    if (lengths is None) == (input_tokens is None or output_tokens is None):
        raise ConfigError(
            "serve: give input_tokens and output_tokens, or lengths (a list of (input, "
            "output, weight)), not both"
        )
    mix = tuple(lengths) if lengths is not None else ((input_tokens, output_tokens, 1.0),)
    layout = _serving_layout(kw)
    requests = RequestBatch(
        mix,  # type: ignore[arg-type]
        kv_format=kw["kv_format"],
        weight_format=layout.weights or "bf16",
    )
    ctx = ServeContext(
        cluster=cluster,
        requests=requests,
        ttft_limit_s=kw["ttft_limit_s"],
        tpot_limit_s=kw["tpot_limit_s"],
        objective=kw["objective"],
        disaggregate=kw["disaggregate"],
        tokens_to_serve=kw["tokens_to_serve"],
        solver=kw["solver"] or SolverSettings(),
        scoring=kw["scoring"] or ScoringParams(),
        device=kw["device"],
        kv_admission=kw["kv_admission"],
        engine=kw["engine"],
    )
    return layout, ctx


def _serving_layout(kw: Mapping[str, Any]) -> ServingLayout:
    """The partial serving layout of :func:`serve`'s ``strategy``, with what its
    ``weight_format``, ``batch`` and ``engine`` fix (a ConfigError where they contradict
    the strategy)."""
    from phaze.model.serving_engines import engine_profile

    strategy, weight_format, batch = kw["strategy"], kw["weight_format"], kw["batch"]
    layout = strategy if isinstance(strategy, ServingLayout) else parse_serving(strategy or "")
    if weight_format is not None:
        if layout.weights is not None and layout.weights != weight_format:
            raise ConfigError(
                f"strategy weights={layout.weights} conflicts with weight_format={weight_format}"
            )
        layout = dataclasses.replace(layout, weights=weight_format)
    if batch is not None:
        if layout.given("batch") and layout.batch != batch:
            raise ConfigError(f"strategy batch={layout.batch} conflicts with batch={batch}")
        layout = dataclasses.replace(layout, batch=batch, open=layout.open - {"batch"})
    if kw["engine"] is not None and not layout.given("batching"):
        batching = engine_profile(kw["engine"]).batching  # the engine's batching, unless given
        layout = dataclasses.replace(layout, batching=batching, open=layout.open - {"batching"})
    return layout


def _check_limits(
    cluster: Cluster, seq_len: int, global_batch: int, micro: tuple[str, Sequence[int]]
) -> None:
    """The sizes of :mod:`phaze_common.limits`, as the CLI and sweep configs apply them: one
    ConfigError naming every argument above its limit (``micro``: a name and its values)."""
    name, values = micro
    checks = [
        ("devices", cluster.devices, MAX_DEVICES),
        ("devices_per_node", cluster.devices_per_node, MAX_DEVICES),
        ("seq_len", seq_len, MAX_SEQ_LEN),
        ("global_batch", global_batch, MAX_GLOBAL_BATCH),
        *((name, v, MAX_GLOBAL_BATCH) for v in values),
    ]
    problems = [p for n, v, limit in checks if (p := over_limit(n, v, limit)) is not None]
    if problems:
        raise ConfigError("; ".join(problems))
