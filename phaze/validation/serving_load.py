"""The simulation under load against published latency percentiles at a request rate
(``phaze validate serve``, its section "under load"; docs/validation.md).

Each ``[[run]]`` of ``phaze/data/serving_load_points.toml`` is a published serving run with
every setting the simulation of ``phaze serve --rate`` needs: model, GPUs, tensor and
pipeline parallelism, replicas, the engine's batch and step token budget, formats, KV
admission, the dataset's length distribution, Poisson arrivals at the published rate. The
run's layout is priced by :func:`phaze.model.serving.evaluate_layout` and its engines simulated by
:func:`phaze.model.serving_load.simulate_load`; each published percentile (TTFT, TPOT, end to end;
p50 and p99) is one point, compared with the simulated one. No parameter is fitted to these
points, and the summary keeps the p50 and p99 points apart.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from importlib import resources
from typing import Any, Final

from arch_space import Cluster
from arch_space.perf.device import device_profile
from phaze.model.serving import ServeContext, evaluate_layout
from phaze.model.serving_arrivals import Arrivals, generate
from phaze.model.serving_engines import engine_names
from phaze.model.serving_lengths import length_distributions, sample_lengths
from phaze.model.serving_load import LoadResult, simulate_load
from phaze.validation.serving import FORMATS_MODELLED, chip_device
from phaze_common.errors import ConfigError, Infeasible
from placement import parse_serving
from workloads import get_model
from workloads.serving import RequestBatch

__all__ = [
    "MEASURES",
    "TARGETS_PCT",
    "LoadRun",
    "LoadPoint",
    "LoadPointResult",
    "parse_runs",
    "load_runs",
    "load_points",
    "simulate_run",
    "evaluate_points",
    "group",
    "summarize",
]

#: The published percentiles a run may give: its key, the latency and the percentile.
MEASURES: Final = {f"{m}_p{q}_s": (m, q) for m in ("ttft", "tpot", "e2e") for q in (50, 99)}
#: The targets of the held-out mean |error| of the p50 and of the p99 points, in %.
TARGETS_PCT: Final = {"p50": 15.0, "p99": 25.0}
_KV_FORMATS = ("bf16", "fp16", "fp8")
_ADMISSIONS = ("on-demand", "whole-request")
_ARRIVALS = ("poisson",)
_FILE = "serving_load_points.toml"


@dataclass(frozen=True, slots=True)
class LoadRun:
    """One published run under load: what ran, how requests came, its published percentiles
    (``measured``: ``(key, seconds)`` pairs, keys of :data:`MEASURES`) and the engine profile
    its steps are priced under (:mod:`phaze.model.serving_engines`; None: the generic engine)."""

    case: str
    source: str
    citation: str
    file: str
    chip: str
    preset: str
    engine: str
    model: str
    gpus: int
    tp: int
    pp: int
    replicas: int
    max_batch: int
    chunk_tokens: int | None
    weight_format: str
    kv_format: str
    kv_admission: str
    lengths: str
    arrivals: str
    rate_per_s: float
    published_requests: int
    simulated_requests: int
    seed: int
    measured: tuple[tuple[str, float], ...]
    engine_profile: str | None = None

    @property
    def strategy(self) -> str:
        """The run's serving layout as a strategy string."""
        chunk = "off" if self.chunk_tokens is None else self.chunk_tokens
        return (
            f"t={self.tp},p={self.pp},d={self.replicas},ep=1,batch={self.max_batch},"
            f"chunk={chunk},batching=continuous"
        )


@dataclass(frozen=True, slots=True)
class LoadPoint:
    """One published percentile of a run: ``metric`` (ttft, tpot, e2e) at ``percentile``."""

    run: LoadRun
    key: str
    measured_s: float

    @property
    def metric(self) -> str:
        return MEASURES[self.key][0]

    @property
    def percentile(self) -> int:
        return MEASURES[self.key][1]


def _positive_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1


def _positive(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and 0 < v < math.inf


def _problems(r: Mapping[str, Any], sources: Mapping[str, str]) -> list[str]:
    """What is wrong with one ``[[run]]`` table (each as ``key = value: what is allowed``)."""
    out = []
    for key in ("case", "file", "chip", "preset", "engine", "model"):
        if not (isinstance(r.get(key), str) and r[key].strip()):
            out.append(f"{key} = {r.get(key)!r}: a non-empty string is needed")
    checks: list[tuple[str, Callable[[Any], bool], str]] = [
        ("source", lambda v: v in sources, f"one of the [sources] keys {sorted(sources)}"),
        ("weight_format", lambda v: v in FORMATS_MODELLED, f"one of {list(FORMATS_MODELLED)}"),
        ("kv_cache_format", lambda v: v in _KV_FORMATS, f"one of {list(_KV_FORMATS)}"),
        ("kv_admission", lambda v: v in _ADMISSIONS, f"one of {list(_ADMISSIONS)}"),
        ("arrivals", lambda v: v in _ARRIVALS, f"one of {list(_ARRIVALS)}"),
        ("lengths", lambda v: v in length_distributions(), "a serving_lengths.toml name"),
        ("rate_per_s", _positive, "a positive number of requests per second"),
        ("chunk_tokens", lambda v: v == "off" or _positive_int(v), 'a positive integer or "off"'),
    ]
    checks += [
        (k, _positive_int, "a positive integer")
        for k in ("gpus", "tp", "pp", "replicas", "max_batch", "published_requests")
    ]
    checks += [
        ("simulated_requests", lambda v: _positive_int(v) and v >= 2, "an integer >= 2"),
        (
            "seed",
            lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
            "an integer >= 0",
        ),
    ]
    out += [f"{k} = {r.get(k)!r}: {allowed}" for k, check, allowed in checks if not check(r.get(k))]
    sizes = [r.get(k) for k in ("tp", "pp", "replicas", "gpus")]
    if all(_positive_int(v) for v in sizes) and sizes[0] * sizes[1] * sizes[2] != sizes[3]:
        out.append(
            f"gpus = {r['gpus']}: must be tp x pp x replicas = {r['tp'] * r['pp'] * r['replicas']}"
        )
    profile = r.get("engine_profile")
    if profile is not None and profile not in engine_names():
        out.append(f"engine_profile = {profile!r}: one of {list(engine_names())}")
    given = [k for k in MEASURES if k in r]
    if not given:
        out.append(f"no published percentile: give one of {list(MEASURES)}")
    out += [f"{k} = {r[k]!r}: a positive number of seconds" for k in given if not _positive(r[k])]
    return out


def _run(r: Mapping[str, Any], sources: Mapping[str, str]) -> LoadRun:
    chunk = r["chunk_tokens"]
    return LoadRun(
        case=r["case"],
        source=r["source"],
        citation=sources[r["source"]],
        file=r["file"],
        chip=r["chip"],
        preset=r["preset"],
        engine=r["engine"],
        model=r["model"],
        gpus=r["gpus"],
        tp=r["tp"],
        pp=r["pp"],
        replicas=r["replicas"],
        max_batch=r["max_batch"],
        chunk_tokens=None if chunk == "off" else chunk,
        weight_format=r["weight_format"],
        kv_format=r["kv_cache_format"],
        kv_admission=r["kv_admission"],
        lengths=r["lengths"],
        arrivals=r["arrivals"],
        rate_per_s=float(r["rate_per_s"]),
        published_requests=r["published_requests"],
        simulated_requests=r["simulated_requests"],
        seed=r["seed"],
        measured=tuple((k, float(r[k])) for k in MEASURES if k in r),
        engine_profile=r.get("engine_profile"),
    )


def parse_runs(text: str) -> tuple[LoadRun, ...]:
    """The runs of a ``serving_load_points.toml`` text; one ConfigError naming every bad run
    by its case (or position), the key, its value and what is allowed."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{_FILE}: unreadable ({e})") from None
    sources, runs = doc.get("sources", {}), doc.get("run", [])
    if not isinstance(sources, dict) or not isinstance(runs, list) or not runs:
        raise ConfigError(f"{_FILE}: needs a [sources] table and at least one [[run]]")
    problems, cases = [], set()
    for i, r in enumerate(runs, start=1):
        name = f"run {i} ({r.get('case')!r})" if isinstance(r, dict) else f"run {i}"
        found = _problems(r, sources) if isinstance(r, dict) else ["not a table"]
        if isinstance(r, dict) and r.get("case") in cases:
            found.append(f"case = {r['case']!r}: names another run too")
        cases.add(r.get("case") if isinstance(r, dict) else None)
        problems += [f"{name}: {p}" for p in found]
    if problems:
        raise ConfigError(f"{_FILE}: " + "; ".join(problems))
    return tuple(_run(r, sources) for r in runs)


@lru_cache(maxsize=1)
def load_runs() -> tuple[LoadRun, ...]:
    """The shipped runs (a damaged file is one ConfigError)."""
    return parse_runs(resources.files("phaze").joinpath("data", _FILE).read_text("utf-8"))


def load_points(runs: tuple[LoadRun, ...] | None = None) -> tuple[LoadPoint, ...]:
    """Every published percentile of ``runs`` (the shipped ones by default), one point each."""
    return tuple(
        LoadPoint(run, key, value) for run in (runs or load_runs()) for key, value in run.measured
    )


def _arrivals(run: LoadRun, context: int) -> Arrivals:
    """The run's requests: Poisson arrivals at its rate, lengths from its distribution."""
    n = run.simulated_requests
    isl, osl = sample_lengths(run.lengths, n, context, seed=run.seed)
    gaps = generate(run.rate_per_s, n, 1, 2, seed=run.seed)
    return Arrivals(gaps.arrival_s, isl, osl)


@lru_cache(maxsize=32)
def simulate_run(run: LoadRun) -> LoadResult:
    """The run's layout priced at its mean lengths and simulated under its arrivals.

    Raises
    ------
    Infeasible
        The layout does not fit the devices in the model.
    """
    model, acc = get_model(run.model), chip_device(run.chip, run.preset)
    arrivals = _arrivals(run, model.max_positions)
    cluster = Cluster(devices=run.gpus)
    curve = device_profile(acc).intra_node
    if curve is not None:  # the node's links at the line rate of its measured curve
        cluster = replace(cluster, intra_node_bandwidth_bytes_per_s=curve.line_rate_bytes_per_s)
    isl = round(float(arrivals.input_tokens.mean()))
    osl = max(2, round(float(arrivals.output_tokens.mean())))
    kv = "bf16" if run.kv_format == "fp16" else run.kv_format
    weights = FORMATS_MODELLED[run.weight_format]
    requests = RequestBatch.of(isl, osl, kv_format=kv, weight_format=weights)
    ctx = ServeContext(cluster, requests, kv_admission=run.kv_admission, engine=run.engine_profile)
    point = evaluate_layout(run.case, model, acc, parse_serving(run.strategy), ctx)
    return simulate_load(model, point, ctx, arrivals)


def _value(result: LoadResult, key: str) -> float:
    metric, q = MEASURES[key]
    if metric == "e2e":
        return result.e2e_s[0 if q == 50 else 1]
    series = result.ttft_s if metric == "ttft" else result.tpot_s
    return series[0 if q == 50 else 2]


@dataclass(frozen=True, slots=True)
class LoadPointResult:
    """A point's simulated percentile (None: infeasible or unstable in the model, ``reason``
    says why)."""

    point: LoadPoint
    predicted_s: float | None
    reason: str = ""

    @property
    def error_pct(self) -> float | None:
        if self.predicted_s is None:
            return None
        return 100.0 * (self.predicted_s - self.point.measured_s) / self.point.measured_s

    def record(self) -> dict[str, object]:
        p, run = self.point, self.point.run
        return {
            "case": run.case,
            "metric": p.metric,
            "percentile": p.percentile,
            "measured_s": p.measured_s,
            "predicted_s": self.predicted_s,
            "error_pct": self.error_pct,
            "fitted": False,
            "status": "evaluated" if self.predicted_s is not None else "not evaluated",
            "reason": self.reason,
            "rate_per_s": run.rate_per_s,
            "strategy": run.strategy,
            "lengths": run.lengths,
            "engine": run.engine,
            "engine_profile": run.engine_profile,
            "published_requests": run.published_requests,
            "simulated_requests": run.simulated_requests,
            "source": run.citation,
            "file": run.file,
        }


def evaluate_points(
    points: tuple[LoadPoint, ...], progress: Callable[[int, LoadRun], None] | None = None
) -> list[LoadPointResult]:
    """Each point's simulated percentile; every run is simulated once."""
    runs = list(dict.fromkeys(p.run for p in points))
    done: dict[LoadRun, LoadResult | str] = {}
    for i, run in enumerate(runs):
        if progress is not None:
            progress(i, run)
        try:
            result = simulate_run(run)
            done[run] = result if result.stable else f"unstable in the model: {result.explanation}"
        except Infeasible as e:
            done[run] = f"infeasible in the model: {e.reason}"
    out = []
    for p in points:
        r = done[p.run]
        out.append(
            LoadPointResult(p, None, r)
            if isinstance(r, str)
            else LoadPointResult(p, _value(r, p.key))
        )
    return out


def group(results: list[LoadPointResult]) -> dict[str, object]:
    """The points of ``results``, how many were evaluated, and their mean and largest
    |error| (%)."""
    errors = [abs(r.error_pct) for r in results if r.error_pct is not None]
    return {
        "points": len(results),
        "evaluated": len(errors),
        "mean_abs_error_pct": sum(errors) / len(errors) if errors else None,
        "max_abs_error_pct": max(errors) if errors else None,
    }


def summarize(results: list[LoadPointResult]) -> dict[str, object]:
    """The held-out points' mean and largest |error|, apart for the p50 and the p99 points
    (each against its target, :data:`TARGETS_PCT`), by latency and by source."""
    by_q = {f"p{q}": [r for r in results if r.point.percentile == q] for q in (50, 99)}
    groups = {name: group(rs) for name, rs in by_q.items()}
    metrics = dict.fromkeys(r.point.metric for r in results)
    sources = dict.fromkeys(r.point.run.source for r in results)
    met = all(
        g["mean_abs_error_pct"] is not None and g["mean_abs_error_pct"] <= TARGETS_PCT[name]
        for name, g in groups.items()
        if g["points"]
    )
    return {
        "held_out": group(results),
        **groups,
        "by_metric": {m: group([r for r in results if r.point.metric == m]) for m in metrics},
        "by_source": {k: group([r for r in results if r.point.run.source == k]) for k in sources},
        "not_evaluated": sum(1 for r in results if r.predicted_s is None),
        "target_mean_abs_error_pct": dict(TARGETS_PCT),
        "within_target": met and bool(results),
    }
