"""A serving layout under arriving requests: latency percentiles, throughput, queueing, KV
use, goodput and energy from a discrete-event simulation of its engines (docs/serving.md,
"Serving under load").

:func:`simulate_load` takes a priced serving point (:func:`phaze.model.serving.evaluate_layout`,
or the layout :func:`phaze.api.serve` chose) and requests as they arrive
(:mod:`phaze.model.serving_arrivals`), routes them to the replicas in turn, and runs each
replica's scheduler (:func:`placement.serving_sim.simulate_engine`) with its steps priced by
the op model (:class:`phaze.model.serving_load_price.PoolPricer`) and its KV cache the pages the
steady-state model gives a device. With separate pools, a request's prompt is prefilled in
the prefill pool, its KV cache sent over the links (the steady state's transfer time), and
its decodes run in the decode pool; TTFT is the prefill pool's first token.

Answers are in the field's units: TTFT, TPOT (per request, its decode time over its ``O - 1``
tokens) and end-to-end latency percentiles, completed requests per second, the mean number
of requests in the system, the queue that arriving requests find, the KV cache's mean use,
and with latency limits the share of requests meeting both (SLO attainment) and the rate of
those that do (goodput, as DistServe defines it). When requests come faster than the layout
serves them the queue grows without bound: the run is reported unstable, with the steady
state's capacity, not as latencies.
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

import numpy as np

from arch_space import Accelerator, static_power_w
from arch_space.accelerator import host_share
from phaze.model.serving import ServeContext, ServingPoint, layout_context, pool_kv_capacity
from phaze.model.serving_arrivals import Arrivals
from phaze.model.serving_engines import engine_profile
from phaze.model.serving_load_price import PoolPricer
from phaze.model.serving_policies import kv_admission_policy
from phaze_common.errors import ConfigError
from placement.layout import Layout
from placement.serving_engine import prefill_batches
from placement.serving_sim import EngineRun, EngineSpec, simulate_engine
from workloads import Model
from workloads.serving import RequestBatch

__all__ = [
    "LoadSettings",
    "load_settings",
    "LoadResult",
    "simulate_load",
    "PoolTimes",
    "pool_times",
]


@dataclass(frozen=True, slots=True)
class LoadSettings:
    """``phaze/data/serving_load.toml``: requests simulated by default, the share of the
    second half's arrivals that may be left incomplete before a run counts as unstable, and
    capacity planning's target attainment, layouts simulated per device count and default
    largest count."""

    requests: int
    stable_tolerance: float
    capacity_attainment: float
    capacity_candidates: int
    capacity_max_devices: int


@lru_cache(maxsize=1)
def load_settings() -> LoadSettings:
    """The shipped settings (a damaged file is one ConfigError)."""
    text = resources.files("phaze").joinpath("data", "serving_load.toml").read_text("utf-8")
    try:
        doc = tomllib.loads(text)
        return LoadSettings(
            int(doc["requests"]),
            float(doc["stable_tolerance"]),
            float(doc["capacity_attainment"]),
            int(doc["capacity_candidates"]),
            int(doc["capacity_max_devices"]),
        )
    except (tomllib.TOMLDecodeError, KeyError, TypeError, ValueError) as e:
        raise ConfigError(f"serving_load.toml: unreadable ({type(e).__name__}: {e})") from None


@dataclass(frozen=True, slots=True)
class LoadResult:
    """A serving layout under load (SI units; see the module docstring). ``stable`` False
    means the queue grew over the run and the latencies describe only its length;
    ``explanation`` says why. ``capacity_requests_per_s`` is the steady state's rate;
    ``engine_busy`` the share of the time the decode engines ran steps.
    ``slo_attainment`` and ``goodput_requests_per_s`` are None without latency limits;
    ``input_tokens_mean`` and ``output_tokens_mean`` are the requests' mean lengths."""

    requests: int
    rate_per_s: float
    stable: bool
    explanation: str
    capacity_requests_per_s: float
    ttft_s: tuple[float, float, float]
    tpot_s: tuple[float, float, float]
    e2e_s: tuple[float, float]
    e2e_mean_s: float
    requests_per_s: float
    mean_in_flight: float
    queue_p99: float
    kv_use_mean: float
    preemptions: int
    energy_per_token_j: float
    engine_busy: float
    slo_attainment: float | None
    goodput_requests_per_s: float | None
    input_tokens_mean: float
    output_tokens_mean: float

    def document(self) -> dict[str, Any]:
        """The figures as ``phaze serve --rate --json`` prints them; latencies null when
        the run is unstable."""
        ok = self.stable

        def v(x: float) -> float | None:
            return x if ok else None

        return {
            "requests": self.requests,
            "rate_per_s": self.rate_per_s,
            "input_tokens_mean": self.input_tokens_mean,
            "output_tokens_mean": self.output_tokens_mean,
            "stable": self.stable,
            "explanation": self.explanation,
            "capacity_requests_per_s": self.capacity_requests_per_s,
            "ttft_p50_s": v(self.ttft_s[0]),
            "ttft_p90_s": v(self.ttft_s[1]),
            "ttft_p99_s": v(self.ttft_s[2]),
            "tpot_p50_s": v(self.tpot_s[0]),
            "tpot_p90_s": v(self.tpot_s[1]),
            "tpot_p99_s": v(self.tpot_s[2]),
            "e2e_p50_s": v(self.e2e_s[0]),
            "e2e_p99_s": v(self.e2e_s[1]),
            "e2e_mean_s": v(self.e2e_mean_s),
            "requests_per_s": self.requests_per_s,
            "mean_in_flight": v(self.mean_in_flight),
            "queue_p99": v(self.queue_p99),
            "kv_use_mean": self.kv_use_mean,
            "preemptions": self.preemptions,
            "engine_busy": self.engine_busy,
            "energy_per_token_j": self.energy_per_token_j,
            "slo_attainment": None if self.slo_attainment is None else v(self.slo_attainment),
            "goodput_requests_per_s": (
                None if self.goodput_requests_per_s is None else v(self.goodput_requests_per_s)
            ),
        }


def _spec(
    model: Model, acc: Accelerator, pool: Layout, workspace: int, ctx: ServeContext, **kw: Any
) -> EngineSpec:
    """The scheduler of a replica of ``pool``: its KV pages as the steady state sizes them,
    the host time per scheduled step and the steps per scheduling of ``ctx``'s engine."""
    cap = pool_kv_capacity(model, acc, pool, workspace, ctx)
    engine = None if ctx.engine is None else engine_profile(ctx.engine)
    return EngineSpec(
        kv_pages=max(1, cap.pages),
        page_tokens=cap.page_tokens,
        prefill_tokens=ctx.token_budget,
        whole_request=kv_admission_policy(ctx.kv_admission).whole_request,
        step_cpu_s=0.0 if engine is None else engine.step_cpu_s,
        scheduler_steps=1 if engine is None else engine.scheduler_steps,
        **kw,
    )


@lru_cache(maxsize=16)
def _pricer(model: Model, acc: Accelerator, pool: Layout, ctx: ServeContext) -> PoolPricer:
    """The step prices of ``pool``'s replicas, shared by the runs of the same model, design,
    pool and context (a step's price depends on nothing else), so that runs at other rates
    or seeds of one layout price each grid point once."""
    return PoolPricer(model, acc, pool, ctx)


def _run_pool(
    arr: Arrivals, osl: np.ndarray, replicas: int, spec: EngineSpec, pricer, prefilled: bool
) -> tuple[list[EngineRun], list[np.ndarray]]:
    """Each replica's run over the requests routed to it in turn (round robin)."""
    runs, routes = [], []
    for r in range(replicas):
        idx = np.arange(r, len(arr), replicas)
        routes.append(idx)
        runs.append(
            simulate_engine(
                arr.arrival_s[idx],
                arr.input_tokens[idx],
                osl[idx],
                spec,
                pricer,
                prefilled=prefilled,
            )
        )
    return runs, routes


def _gather(runs: list[EngineRun], routes: list[np.ndarray], name: str) -> np.ndarray:
    """Each request's ``name`` (an array of :class:`EngineRun`) in the order of arrival."""
    out = np.empty(sum(len(idx) for idx in routes))
    for run, idx in zip(runs, routes, strict=True):
        out[idx] = getattr(run, name)
    return out


def _mean_count(starts: np.ndarray, ends: np.ndarray, t0: float, t1: float) -> float:
    """The time-average over [t0, t1] of how many intervals [start, end) are open."""
    times = np.concatenate([starts, ends])
    steps = np.concatenate([np.ones(len(starts)), -np.ones(len(ends))])
    order = np.argsort(times, kind="stable")
    times, count = times[order], np.cumsum(steps[order])
    spans = np.diff(np.append(times, t1))
    return float(np.sum(count * spans) / (t1 - t0))


def _mean_requests(arrivals: Arrivals, ctx: ServeContext) -> RequestBatch:
    """The requests' mean lengths in ``ctx``'s formats (a chunked step's prompt shape)."""
    isl = round(float(np.mean(arrivals.input_tokens)))
    osl = max(2, round(float(np.mean(arrivals.output_tokens))))
    r = ctx.requests
    return RequestBatch(
        ((isl, osl, 1.0),),
        kv_format=r.kv_format,
        precision_bytes=r.precision_bytes,
        weight_format=r.weight_format,
    )


def _prefill_pool(
    model: Model, point: ServingPoint, ctx: ServeContext, arrivals: Arrivals
) -> tuple[list[EngineRun], np.ndarray, np.ndarray]:
    """A disaggregated prefill pool's runs, and each request's admission and first token:
    whole prompts, as many per pass as the steady state's largest prompt batch."""
    pre, acc = point.layout.prefill, point.design
    budget = ctx.token_budget
    prompts = max(prefill_batches(budget // int(np.max(arrivals.input_tokens))))
    workspace = point.memory[1].workspace_bytes
    spec = _spec(model, acc, pre, workspace, ctx, batch=prompts, chunk=None)
    pricer = _pricer(model, acc, pre, ctx)
    ones = np.ones(len(arrivals), np.int64)
    runs, routes = _run_pool(arrivals, ones, pre.d, spec, pricer, False)
    return runs, _gather(runs, routes, "admitted_s"), _gather(runs, routes, "first_token_s")


def simulate_load(
    model: Model,
    point: ServingPoint,
    ctx: ServeContext,
    arrivals: Arrivals,
    *,
    ttft_limit_s: float | None = None,
    tpot_limit_s: float | None = None,
) -> LoadResult:
    """Serve ``arrivals`` on ``point``'s layout (see the module docstring).

    Raises
    ------
    ConfigError
        The layout runs static batching (the simulation runs continuous batching).
    Infeasible
        A request needs more KV cache than a replica holds.
    """
    lay, acc = point.layout, point.design
    if lay.batching == "static":
        raise ConfigError(
            "serve --rate: the layout runs static batching; the simulation runs continuous "
            "batching (give --strategy batching=continuous)"
        )
    ctx = layout_context(lay, dataclasses.replace(ctx, requests=_mean_requests(arrivals, ctx)))
    dec = lay.decode
    decode_spec = _spec(
        model,
        acc,
        dec,
        point.memory[0].workspace_bytes,
        ctx,
        batch=lay.batch,
        chunk=lay.chunk if lay.prefill is None else None,
    )
    decode_pricer = _pricer(model, acc, dec, ctx)
    if lay.prefill is None:
        runs, routes = _run_pool(
            arrivals, arrivals.output_tokens, dec.d, decode_spec, decode_pricer, False
        )
        admitted, first = (_gather(runs, routes, k) for k in ("admitted_s", "first_token_s"))
        pools = [(runs, dec)]
    else:
        pre_runs, admitted, first = _prefill_pool(model, point, ctx, arrivals)
        ready = first + point.engine.transfer_s
        order = np.argsort(ready, kind="stable")
        moved = Arrivals(ready[order], arrivals.input_tokens[order], arrivals.output_tokens[order])
        runs, routes = _run_pool(
            moved, moved.output_tokens, dec.d, decode_spec, decode_pricer, True
        )
        routes = [order[idx] for idx in routes]
        pools = [(pre_runs, lay.prefill), (runs, dec)]
    finished = _gather(runs, routes, "finished_s")
    return _answers(
        arrivals,
        (admitted, first, finished),
        pools,
        decode_spec,
        point,
        ctx,
        (ttft_limit_s, tpot_limit_s),
    )


@dataclass(frozen=True, slots=True)
class PoolTimes:
    """One pool of a disaggregated layout run alone on the arrivals: each request's time
    out of the pool (the prefill pool's first token, the decode pool's last token, its KV
    cache there on arrival), and whether the pool kept up with the arrivals."""

    done_s: np.ndarray
    stable: bool


def pool_times(
    model: Model, point: ServingPoint, ctx: ServeContext, arrivals: Arrivals, pool: str
) -> PoolTimes:
    """Run ``point``'s ``pool`` (``"prefill"`` or ``"decode"``; the layout disaggregated)
    alone on ``arrivals``, as :func:`simulate_load` runs it, so that a prefill pool of one
    design can be paired with a decode pool of another (:mod:`phaze.sweep.pairs`)."""
    lay, acc = point.layout, point.design
    ctx = layout_context(lay, dataclasses.replace(ctx, requests=_mean_requests(arrivals, ctx)))
    if pool == "prefill":
        _, _, done = _prefill_pool(model, point, ctx, arrivals)
    else:
        dec = lay.decode
        workspace = point.memory[0].workspace_bytes
        spec = _spec(model, acc, dec, workspace, ctx, batch=lay.batch, chunk=None)
        pricer = _pricer(model, acc, dec, ctx)
        runs, routes = _run_pool(arrivals, arrivals.output_tokens, dec.d, spec, pricer, True)
        done = _gather(runs, routes, "finished_s")
    a = arrivals.arrival_s
    rates = (arrivals.rate_per_s, len(a) / float(np.max(done) - a[0]), 0.0)
    stable, _ = _stability(a, done, rates, load_settings().stable_tolerance)
    return PoolTimes(done, stable)


def _stability(
    a: np.ndarray, finished: np.ndarray, rates: tuple[float, float, float], tolerance: float
) -> tuple[bool, str]:
    """Whether the requests of the second half of the arrivals completed as fast as they
    came (within ``tolerance``), and the sentence that says so: completions are counted
    over the second half's span a typical latency later (the first half's median
    end-to-end), so that a burst arriving at its end, served a latency later, is not taken
    for a growing queue. ``rates``: the arrivals', the completions' over the run (an
    overloaded engine's capacity) and the steady state's capacity (requests/s)."""
    rate, served, capacity = rates
    mid = len(a) // 2
    t_mid, t_end = float(a[mid]), float(a[-1])
    lag = float(np.median(finished[:mid] - a[:mid])) if mid else 0.0
    arrived = len(a) - mid
    done = int(np.sum((finished >= t_mid + lag) & (finished <= t_end + lag)))
    if t_end <= t_mid or done >= (1 - tolerance) * arrived:
        return True, (
            f"stable: over the second half of the arrivals {done} requests completed as "
            f"{arrived} arrived"
        )
    return False, (
        f"unstable: the rate {rate:.3g} requests/s exceeds the layout's capacity of about "
        f"{served:.3g} requests/s (over the second half of the arrivals {done} requests "
        f"completed as {arrived} arrived, so the queue grows without bound; the steady "
        f"state's capacity is {capacity:.3g} requests/s)"
    )


def _energy_per_token(
    arr: Arrivals, pools: list, span: float, point: ServingPoint, ctx: ServeContext
) -> float:
    """IT energy per output token at this load: the steps' dynamic energy, every device's
    static power over the whole run (its idle power while it waits: the steady state's
    ``static`` and ``idle`` terms, one power) and the hosts' share."""
    acc, cluster = point.design, ctx.cluster
    params = ctx.scoring.for_accelerator(acc.profile_name)
    devices = sum(pool.devices for _, pool in pools)
    joules = sum(run.energy_j for runs, _ in pools for run in runs)
    joules += devices * static_power_w(acc) * span
    joules += host_share(devices, cluster.devices_per_node) * params.host_w_per_node * span
    return joules / float(np.sum(arr.output_tokens))


def _answers(
    arr: Arrivals,
    times: tuple[np.ndarray, np.ndarray, np.ndarray],
    pools: list,
    spec: EngineSpec,
    point: ServingPoint,
    ctx: ServeContext,
    limits: tuple[float | None, float | None],
) -> LoadResult:
    """The figures of a run: ``times`` are each request's admission, first token and finish."""
    admitted, first, finished = times
    a, n = arr.arrival_s, len(arr)
    t0, t1 = float(a[0]), float(np.max(finished))
    span = t1 - t0
    ttft, e2e = first - a, finished - a
    tpot = (finished - first) / (arr.output_tokens - 1)
    queue = np.arange(n) - np.searchsorted(np.sort(admitted), a, side="right")
    capacity = point.engine.requests_per_s
    tolerance = load_settings().stable_tolerance
    stable, why = _stability(a, finished, (arr.rate_per_s, n / span, capacity), tolerance)
    runs = pools[-1][0]
    meets = np.ones(n, bool)
    for limit, x in zip(limits, (ttft, tpot), strict=True):
        if limit is not None:
            meets &= x <= limit
    given = any(x is not None for x in limits)
    return LoadResult(
        requests=n,
        rate_per_s=arr.rate_per_s,
        stable=stable,
        explanation=why,
        capacity_requests_per_s=capacity,
        ttft_s=tuple(float(np.percentile(ttft, q)) for q in (50, 90, 99)),
        tpot_s=tuple(float(np.percentile(tpot, q)) for q in (50, 90, 99)),
        e2e_s=tuple(float(np.percentile(e2e, q)) for q in (50, 99)),
        e2e_mean_s=float(np.mean(e2e)),
        requests_per_s=n / span,
        mean_in_flight=_mean_count(a, finished, t0, t1),
        queue_p99=float(np.percentile(np.maximum(queue, 0), 99)),
        kv_use_mean=sum(r.page_s for r in runs) / (spec.kv_pages * len(runs) * span),
        preemptions=sum(r.preemptions for rs, _ in pools for r in rs),
        energy_per_token_j=_energy_per_token(arr, pools, span, point, ctx),
        engine_busy=sum(r.busy_s for r in runs) / (len(runs) * span),
        slo_attainment=float(np.mean(meets)) if given else None,
        goodput_requests_per_s=float(np.sum(meets)) / span if given else None,
        input_tokens_mean=float(np.mean(arr.input_tokens)),
        output_tokens_mean=float(np.mean(arr.output_tokens)),
    )
