"""The serving engine in steady state: time to first token, time per output token and
throughput of a serving layout, from the times of its passes (docs/serving.md).

The model is a steady state at a fixed concurrency: each decode replica keeps ``batch``
sequences in flight, a finished sequence's slot going at once to a waiting request (a
closed loop, as benchmarks with a fixed concurrency or MLPerf's offline scenario run an
engine; queueing for a free slot is not modelled, so TTFT counts from the moment a request
is admitted). Requests have ``I`` input and ``O`` output tokens (``O >= 2``): the prefill
makes the first token, ``O - 1`` decode steps the rest. Engines:

* **continuous batching, whole prompts** (Orca, Yu et al., OSDI 2022; vLLM without chunked
  prefill, Kwon et al., SOSP 2023): each engine step decodes one token of every running
  sequence, and the prompts that arrived meanwhile are prefilled in a step of their own
  ahead of the next decode step. Per round (every sequence one token), ``B / (O - 1)``
  requests finish and as many prompts are prefilled, ``k = round(B / (O - 1))`` (at least 1)
  at a time: ``round = p D + B / ((O - 1) k) P_k``; TPOT is the round, TTFT half a step
  (the one running when the prompt arrives) plus its prefill.
* **chunked prefill** (Sarathi-Serve, Agrawal et al., OSDI 2024; vLLM V1): each step has a
  token budget ``C``; the decodes come first and a chunk of a waiting prompt fills the rest.
  In steady state a step carries ``b I / (O - 1)`` prompt tokens on average (as many as the
  finished sequences free), so ``C >= b (1 + I / (O - 1))``; one step runs the matmuls of
  both parts' tokens together, reading the weights once, and the decodes' attention over
  their KV cache (:func:`mixed`). A prompt's chunks take the budget the decodes leave, one per
  step: TTFT is ``ceil(I / (C - b))`` such steps.
* **static batching** (TensorRT-LLM's ``gptSessionBenchmark`` before in-flight batching): a
  batch of ``B`` prompts is prefilled together, then decoded to its end; TTFT is the
  prefill, TPOT a decode step.
* **disaggregated** (DistServe, Zhong et al., OSDI 2024; Splitwise, Patel et al., ISCA
  2024): a prefill pool prefills prompts (``k`` at a time, the fewest that keep up with the
  decode pool), sends each request's KV cache to a decode pool over the cluster's links, and
  the decode pool runs decode steps only. The slower of the two pools (and of the links)
  sets the rate; the other idles the rest of the time. The transfer delays the second token,
  so it adds ``transfer / (O - 1)`` to the mean TPOT.

Pipeline parallelism over ``p`` stages runs ``p`` micro-batches of ``B / p`` sequences
(vLLM's virtual engines): the busiest stage is busy all the time, so a round takes ``p``
times its share, and a token is never faster than the pipeline's latency.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from phaze_common.errors import ConfigError, Infeasible
from phaze_common.units import fmt_noun

__all__ = [
    "PassCost",
    "PoolLoad",
    "EngineResult",
    "Lengths",
    "mixed",
    "prefill_first",
    "chunked",
    "check_chunk_budget",
    "static",
    "disaggregated",
    "prefill_batch",
    "prefill_batches",
]

#: Prefill batch sizes a disaggregated prefill pool chooses from (prompts per pass).
PREFILL_BATCHES: Final = (1, 2, 4, 8, 16, 32, 64)


@dataclass(frozen=True, slots=True)
class Lengths:
    """Mean input and output tokens of the requests (``output_tokens >= 2``)."""

    input_tokens: float
    output_tokens: float

    def __post_init__(self) -> None:
        if not (self.input_tokens >= 1 and self.output_tokens >= 2):
            raise ConfigError(
                f"requests: output_tokens = {self.output_tokens!r} must be at least 2 and "
                f"input_tokens = {self.input_tokens!r} at least 1 (TPOT needs a decode step)"
            )

    @property
    def steps(self) -> float:
        """Decode steps per request: ``O - 1``."""
        return self.output_tokens - 1


@dataclass(frozen=True, slots=True)
class PassCost:
    """One pass of a replica of ``p`` stages of ``t`` devices: ``stage_s`` the busiest
    stage's time, ``latency_s`` through every stage and the sends between them,
    ``busy_device_s`` the device-seconds the stages compute, the dynamic energy of all the
    replica's devices by cause (J)."""

    stage_s: float
    latency_s: float
    busy_device_s: float
    compute_j: float
    memory_j: float
    network_j: float

    @property
    def dynamic_j(self) -> float:
        return self.compute_j + self.memory_j + self.network_j

    def scaled(self, n: float) -> tuple[float, float, float, float]:
        """(busy device-seconds, compute, memory, network J) of ``n`` such passes."""
        return (
            n * self.busy_device_s,
            n * self.compute_j,
            n * self.memory_j,
            n * self.network_j,
        )


def mixed(step: PassCost, kv_stage_s: float, kv_j: float, stages: int, devices: int) -> PassCost:
    """One engine step of decodes and a prefill chunk together (Sarathi-Serve): ``step`` is
    a prefill pass over the chunk's and the decodes' tokens, whose matmuls read the weights
    once for both; the decodes also read their sequences' KV cache, ``kv_stage_s`` on the
    busiest stage at the sustained HBM bandwidth and ``kv_j`` on all the replica's
    ``devices``, after the chunk's attention."""
    return PassCost(
        stage_s=step.stage_s + kv_stage_s,
        latency_s=step.latency_s + stages * kv_stage_s,
        busy_device_s=step.busy_device_s + devices * kv_stage_s,
        compute_j=step.compute_j,
        memory_j=step.memory_j + kv_j,
        network_j=step.network_j,
    )


@dataclass(frozen=True, slots=True)
class PoolLoad:
    """One device pool in steady state: its ``replicas`` of ``replica_devices`` devices,
    the share of their time they compute (``busy``; the rest they wait), and the dynamic
    power of the whole pool by cause (W)."""

    name: str
    replicas: int
    replica_devices: int
    busy: float
    compute_w: float
    memory_w: float
    network_w: float

    @property
    def devices(self) -> int:
        return self.replicas * self.replica_devices


@dataclass(frozen=True, slots=True)
class EngineResult:
    """A serving layout in steady state: TTFT and TPOT (means, s), the whole system's
    requests and output tokens per second, each pool's load, what bounds the rate
    (``decode``, ``prefill``, ``transfer``, ``engine``: one pool's mixed steps), and the KV
    transfer per request (s and bytes over the links, and their power, W)."""

    ttft_s: float
    tpot_s: float
    requests_per_s: float
    output_tokens_per_s: float
    pools: tuple[PoolLoad, ...]
    bound: str
    transfer_s: float = 0.0
    transfer_w: float = 0.0


def _load(
    name: str, replicas: int, devices: int, period_s: float, work: tuple[float, ...]
) -> PoolLoad:
    """A pool whose replicas each do ``work`` (busy device-s, compute, memory, network J)
    every ``period_s``."""
    busy, c, m, n = work
    return PoolLoad(
        name,
        replicas,
        devices,
        min(1.0, busy / (devices * period_s)),
        replicas * c / period_s,
        replicas * m / period_s,
        replicas * n / period_s,
    )


def _sum(*works: tuple[float, ...]) -> tuple[float, ...]:
    return tuple(map(sum, zip(*works, strict=True)))


def prefill_batch(batch: int, lengths: Lengths) -> int:
    """Prompts prefilled together under continuous batching without chunks: those that
    arrive during one round, ``round(B / (O - 1))``, at least 1 and at most ``B``."""
    return max(1, min(batch, round(batch / lengths.steps)))


def prefill_first(
    decode: PassCost,
    prefill: PassCost,
    *,
    batch: int,
    prefill_prompts: int,
    stages: int,
    replicas: int,
    replica_devices: int,
    lengths: Lengths,
) -> EngineResult:
    """Continuous batching with whole prompts prefilled ahead of the decodes (see the
    module docstring); ``decode`` is a pass of one micro-batch of ``batch / stages``
    sequences, ``prefill`` one of ``prefill_prompts`` prompts."""
    finished = batch / lengths.steps  # requests per round
    prefills = finished / prefill_prompts  # prefill passes per round
    round_s = stages * decode.stage_s + prefills * prefill.stage_s
    tpot = max(round_s, decode.latency_s + prefills * prefill.stage_s)
    ttft = 0.5 * decode.stage_s + prefill.latency_s
    work = _sum(decode.scaled(stages), prefill.scaled(prefills))
    pool = _load("replica", replicas, replica_devices, round_s, work)
    rate = replicas * finished / round_s
    return EngineResult(ttft, tpot, rate, rate * lengths.output_tokens, (pool,), "engine")


def check_chunk_budget(chunk_tokens: int, batch: int, stages: int, lengths: Lengths) -> None:
    """Raise Infeasible when a budget of ``chunk_tokens`` per step cannot hold a micro-batch's
    decodes and the prompt tokens that keep ``batch`` sequences in flight (:func:`chunked`;
    no pass cost needed, so a search asks it before pricing any pass)."""
    b = batch / stages
    need = b * (1 + lengths.input_tokens / lengths.steps)
    if chunk_tokens < need:
        raise Infeasible(
            f"chunk = {chunk_tokens} tokens cannot hold a step's {b:g} decodes and the "
            f"{need - b:.0f} prompt tokens that keep {fmt_noun(batch, 'sequence')} in flight "
            "(needs "
            f"chunk >= {math.ceil(need)})"
        )


def chunked(
    step: PassCost,
    first_chunk: PassCost,
    *,
    batch: int,
    chunk_tokens: int,
    stages: int,
    replicas: int,
    replica_devices: int,
    lengths: Lengths,
) -> EngineResult:
    """Chunked prefill under a budget of ``chunk_tokens`` per step (see the module
    docstring): ``step`` is the mean mixed step of a micro-batch (:func:`mixed`, its decodes
    and ``b I / (O - 1)`` prompt tokens), ``first_chunk`` a step while a prompt takes the
    budget the decodes leave (``chunk_tokens - b`` tokens).

    Raises
    ------
    Infeasible
        The budget cannot hold the decodes and the prompt tokens that keep ``batch``
        sequences in flight.
    """
    check_chunk_budget(chunk_tokens, batch, stages, lengths)
    b = batch / stages
    round_s = stages * step.stage_s
    chunks = math.ceil(lengths.input_tokens / max(1.0, chunk_tokens - b))
    ttft = 0.5 * step.stage_s + (chunks - 1) * stages * first_chunk.stage_s
    ttft += first_chunk.latency_s
    pool = _load("replica", replicas, replica_devices, round_s, step.scaled(stages))
    rate = replicas * batch / lengths.steps / round_s
    tpot = max(round_s, step.latency_s)
    return EngineResult(ttft, tpot, rate, rate * lengths.output_tokens, (pool,), "engine")


def static(
    decode: PassCost,
    prefill: PassCost,
    *,
    batch: int,
    replicas: int,
    replica_devices: int,
    lengths: Lengths,
) -> EngineResult:
    """Static batching on one pipeline stage: ``prefill`` of the batch's ``batch`` prompts,
    then ``O - 1`` steps of ``decode`` (the step at the mean context)."""
    cycle = prefill.stage_s + lengths.steps * decode.stage_s
    work = _sum(prefill.scaled(1), decode.scaled(lengths.steps))
    pool = _load("replica", replicas, replica_devices, cycle, work)
    rate = replicas * batch / cycle
    return EngineResult(
        prefill.latency_s, decode.latency_s, rate, rate * lengths.output_tokens, (pool,), "engine"
    )


def prefill_batches(max_prompts: int) -> tuple[int, ...]:
    """The prompt counts a prefill pool may batch, up to ``max_prompts``."""
    return tuple(k for k in PREFILL_BATCHES if k <= max(1, max_prompts))


def disaggregated(
    decode: PassCost,
    prefills: dict[int, PassCost],
    *,
    batch: int,
    decode_stages: int,
    decode_replicas: int,
    decode_devices: int,
    prefill_stages: int,
    prefill_replicas: int,
    prefill_devices: int,
    transfer_s: float,
    transfer_j: float,
    lengths: Lengths,
) -> EngineResult:
    """Disaggregated pools (see the module docstring): ``prefills`` maps a prompt count to
    the prefill pass of that many prompts; the pool uses the fewest prompts per pass that
    keep up with the decode pool (all of the largest when none does). ``transfer_s`` and
    ``transfer_j`` are one request's KV-cache transfer time (each prefill device sends its
    shard at once) and link energy."""
    round_s = decode_stages * decode.stage_s
    decode_rate = decode_replicas * batch / lengths.steps / round_s

    def prefill_rate(k: int) -> float:
        return prefill_replicas * k / prefills[k].stage_s

    link_rate = prefill_replicas / transfer_s if transfer_s > 0 else math.inf
    ks = sorted(prefills)
    k = next((k for k in ks if prefill_rate(k) >= decode_rate), ks[-1])
    rates = {"decode": decode_rate, "prefill": prefill_rate(k), "transfer": link_rate}
    bound = min(rates, key=lambda n: (rates[n], n))
    rate = rates[bound]
    p = prefills[k]
    # each pool works at its share of the rate it could sustain
    d_load = _load(
        "decode",
        decode_replicas,
        decode_devices,
        round_s / (rate / decode_rate),
        decode.scaled(decode_stages),
    )
    p_period = k / (rate / prefill_replicas)  # seconds between one replica's prefill passes
    p_load = _load("prefill", prefill_replicas, prefill_devices, p_period, p.scaled(1))
    tpot = max(round_s, decode.latency_s) + transfer_s / lengths.steps
    ttft = 0.5 * p.stage_s + p.latency_s
    return EngineResult(
        ttft,
        tpot,
        rate,
        rate * lengths.output_tokens,
        (p_load, d_load),
        bound,
        transfer_s,
        rate * transfer_j,
    )
