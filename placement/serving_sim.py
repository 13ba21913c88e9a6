"""One serving engine under arriving requests: a discrete-event simulation of its scheduler
(docs/serving.md, "Serving under load").

Where :mod:`placement.serving_engine` gives the mean latencies of a steady state at a fixed
concurrency, this module runs the scheduler step by step over requests that arrive at given
times, so latencies have a distribution and a queue forms when requests come faster than the
engine serves them. One replica is simulated; the caller routes requests to replicas.

The scheduler, as vLLM's runs an engine:

* **continuous batching** (Orca, Yu et al., OSDI 2022; vLLM, Kwon et al., SOSP 2023): at
  every step the running sequences each decode one token, finished ones leave at once and
  waiting requests are admitted, first come first served, while fewer than ``batch``
  sequences run and the KV cache has room;
* **chunked prefill** (Sarathi-Serve, Agrawal et al., OSDI 2024; vLLM V1): a step carries at
  most ``chunk`` tokens, the decodes first, then chunks of the prompts being prefilled, oldest
  first; without a chunk budget (``chunk`` None) waiting prompts are prefilled whole, up to
  ``prefill_tokens`` tokens, in a step of their own ahead of the decodes (vLLM V0);
* **KV admission**: a request holds whole pages of ``page_tokens`` tokens. Under
  ``whole-request`` admission its prompt and whole output are reserved when it is admitted
  (TensorRT-LLM's GUARANTEED_NO_EVICT); ``on-demand``, pages come as its tokens do (vLLM's
  paging), and when a decode step finds no free page the newest running request is preempted:
  its pages freed and the request sent back to the head of the queue, to prefill its prompt
  and the tokens it had generated again (vLLM's recompute preemption);
* **the host's share of a step**: a scheduler that does not overlap its CPU work (batch
  scheduling, input preparation, sampling's output handling) with the GPU adds
  ``step_cpu_s`` to every step it schedules;
* **multi-step scheduling** (vLLM 0.6's ``--num-scheduler-steps k``): the scheduler runs and
  admits waiting prompts once every ``scheduler_steps`` decode steps; between those the
  running sequences decode with no scheduling, so its CPU time is spent once per ``k`` steps
  and a prompt arriving during the ``k`` steps waits for their end.

A step's time comes from a :class:`StepPricer` (the op model's passes, priced by the caller).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from phaze_common.errors import ConfigError, Infeasible

__all__ = ["EngineSpec", "Step", "StepPricer", "EngineRun", "simulate_engine"]


@dataclass(frozen=True, slots=True)
class EngineSpec:
    """One replica's scheduler: ``batch`` sequences at most, ``chunk`` tokens per step (None:
    whole prompts in steps of their own, up to ``prefill_tokens`` prompt tokens), ``kv_pages``
    pages of ``page_tokens`` tokens, and whether a request's whole cache is reserved when it
    is admitted (``whole_request``); the host time a scheduled step adds (``step_cpu_s``)
    and the decode steps run per scheduling (``scheduler_steps``)."""

    batch: int
    chunk: int | None
    prefill_tokens: int
    kv_pages: int
    page_tokens: int
    whole_request: bool
    step_cpu_s: float = 0.0
    scheduler_steps: int = 1

    def __post_init__(self) -> None:
        if self.batch < 1 or self.kv_pages < 1 or self.page_tokens < 1:
            raise ConfigError(f"engine: {self} needs a batch, pages and page size of at least 1")
        if self.scheduler_steps < 1 or not self.step_cpu_s >= 0:
            raise ConfigError(
                f"engine: {self} needs scheduler_steps of at least 1 and step_cpu_s of at least 0"
            )


@dataclass(frozen=True, slots=True)
class Step:
    """One engine step: how long it holds the engine (``duration_s``; its decodes' tokens
    are out then), how long until the tokens of the prompts it completes are out
    (``latency_s``, at least the duration: on a pipeline, a prompt's micro-batch may still
    be on its way when the next step starts) and its dynamic energy (J)."""

    duration_s: float
    latency_s: float
    energy_j: float


class StepPricer(Protocol):
    """The price of an engine step (the op model's passes, see :mod:`phaze.model.serving_load`)."""

    def decode(self, seqs: int, context: float) -> Step:
        """``seqs`` decodes at a mean context of ``context`` tokens."""
        ...

    def prefill(self, prompts: int, tokens: float) -> Step:
        """``prompts`` whole prompts of ``tokens`` tokens on average."""
        ...

    def mixed(self, decodes: int, context: float, tokens: int, prompts: int) -> Step:
        """``decodes`` decodes at a mean context of ``context`` and ``tokens`` tokens of
        ``prompts`` prompts (one chunked-prefill step)."""
        ...


@dataclass(frozen=True, slots=True)
class EngineRun:
    """What one replica did: per request (in the order given) when it was first admitted,
    when its first token came out and when it finished (s); how long the engine computed,
    its dynamic energy (J), the integral of the pages held over time (page-seconds), the
    preemptions and the steps run."""

    admitted_s: np.ndarray
    first_token_s: np.ndarray
    finished_s: np.ndarray
    busy_s: float
    energy_j: float
    page_s: float
    preemptions: int
    steps: int


@dataclass(slots=True)
class _State:
    """The scheduler's mutable state during one run (local to :func:`simulate_engine`)."""

    isl: np.ndarray  # prompt tokens
    prompt: np.ndarray  # tokens to prefill (the prompt, plus generated tokens after a preemption)
    done: np.ndarray  # of them, prefilled
    gen: np.ndarray  # tokens generated
    pages: np.ndarray  # pages held
    ready: np.ndarray  # when its last token is out (its next decode cannot start before)
    now: float
    free: int
    waiting: deque
    running: list


def _decoding(s: _State) -> list[int]:
    """The running requests whose prompt is prefilled and last token out: they decode."""
    if not s.running:
        return []
    r = np.array(s.running, np.int64)
    return r[(s.done[r] >= s.prompt[r]) & (s.ready[r] <= s.now)].tolist()


def _pages(tokens: float, page: int) -> int:
    return math.ceil(tokens / page)


def _admit_pages(s: _State, spec: EngineSpec, osl: np.ndarray, i: int, tokens: int) -> int:
    """Pages request ``i`` must be given before ``tokens`` more of its prompt are prefilled."""
    if spec.whole_request:
        need = _pages(s.prompt[i] + osl[i] - s.gen[i], spec.page_tokens)
    else:
        need = _pages(s.done[i] + tokens, spec.page_tokens)
    return max(0, need - int(s.pages[i]))


def _preempt(s: _State) -> None:
    """Preempt the newest running request: free its pages, requeue it at the head, to
    prefill its prompt and generated tokens again."""
    i = s.running.pop()
    s.free += int(s.pages[i])
    s.pages[i] = 0
    s.prompt[i] = s.isl[i] + s.gen[i]
    s.done[i] = 0
    s.waiting.appendleft(i)


def _grow_decodes(s: _State, spec: EngineSpec, osl: np.ndarray) -> int:
    """Give each decoding request the page its next token needs (on-demand), preempting the
    newest while the free pages do not suffice; the preemptions made."""
    if spec.whole_request:
        return 0
    preempted = 0
    while True:
        dec = np.array(_decoding(s), np.int64)
        need = -(-(s.isl[dec] + s.gen[dec]) // spec.page_tokens) - s.pages[dec]
        short = need > 0
        if int(np.sum(need[short])) <= s.free or len(s.running) <= 1:
            for i, n in zip(dec[short].tolist(), need[short].tolist(), strict=True):
                if s.free >= n:
                    s.pages[i] += n
                    s.free -= n
            return preempted
        _preempt(s)
        preempted += 1


def _plan(s: _State, spec: EngineSpec, osl: np.ndarray) -> tuple[list, dict]:
    """The next step: the decoding requests and the prompt tokens of each prefilling one,
    admitting waiting requests where the budget, the batch and the pages allow."""
    dec = _decoding(s)
    chunks: dict[int, int] = {}
    if spec.chunk is None:
        if not s.waiting or len(s.running) >= spec.batch:
            return dec, chunks
        budget, dec = spec.prefill_tokens, []
    else:
        budget = max(0, spec.chunk - len(dec))
        running = np.array(s.running, np.int64)
        lefts = s.prompt[running] - s.done[running]
        for i, left in zip(running[lefts > 0].tolist(), lefts[lefts > 0].tolist(), strict=True):
            if budget <= 0:
                break
            take = min(left, budget)
            extra = _admit_pages(s, spec, osl, i, take)
            if extra > s.free:
                break
            s.pages[i] += extra
            s.free -= extra
            chunks[i] = take
            budget -= take
    while s.waiting and len(s.running) < spec.batch:
        i = s.waiting[0]
        if s.done[i] >= s.prompt[i]:  # prefilled elsewhere: admitted to decode
            extra = _admit_pages(s, spec, osl, i, 1)
            if extra > s.free:
                break
            s.waiting.popleft()
            s.pages[i] += extra
            s.free -= extra
            s.running.append(i)
            dec.append(i)
            continue
        if budget <= 0:
            break
        whole = spec.chunk is None
        take = int(s.prompt[i]) if whole else min(int(s.prompt[i]), budget)
        if whole and chunks and take > budget:
            break
        extra = _admit_pages(s, spec, osl, i, take)
        if extra > s.free:
            break
        s.waiting.popleft()
        s.pages[i] += extra
        s.free -= extra
        s.running.append(i)
        chunks[i] = take
        budget -= take
    if spec.chunk is None and not chunks:  # nothing admitted: the running requests decode
        dec = _decoding(s)
    return dec, chunks


def _next_step(
    s: _State, spec: EngineSpec, osl: np.ndarray, burst: int
) -> tuple[list, dict, float, int]:
    """The next step's decodes and prompt tokens, the host time it adds and the decode steps
    still to run without scheduling after it. Inside a multi-step burst the running
    sequences decode with nothing admitted and no host time; at a scheduling point the
    scheduler plans (:func:`_plan`) and, when it plans decodes only, starts a burst of
    ``scheduler_steps`` steps."""
    if burst > 0:
        dec = _decoding(s)
        if dec:
            return dec, {}, 0.0, burst - 1
    dec, chunks = _plan(s, spec, osl)
    burst = spec.scheduler_steps - 1 if dec and not chunks else 0
    return dec, chunks, spec.step_cpu_s if (dec or chunks) else 0.0, burst


def _price(s: _State, dec: list, chunks: dict, price: StepPricer) -> Step:
    if dec:
        d = np.array(dec, np.int64)
        context = float(np.mean(s.isl[d] + s.gen[d]))
    if not chunks:
        return price.decode(len(dec), context)
    tokens = sum(chunks.values())
    if not dec and all(s.done[i] == 0 and chunks[i] == s.prompt[i] for i in chunks):
        return price.prefill(len(chunks), tokens / len(chunks))
    return price.mixed(len(dec), context if dec else 0.0, tokens, len(chunks))


def _tokens_out(
    s: _State,
    idx: np.ndarray,
    out_s: np.ndarray,
    osl: np.ndarray,
    first: np.ndarray,
    finished: np.ndarray,
) -> int:
    """Requests ``idx`` each put out a token at ``out_s``: the first token's time where it
    is one, the finished ones out of the running set with their pages freed; how many
    finished."""
    s.ready[idx] = out_s
    s.gen[idx] += 1
    fresh = np.isnan(first[idx])
    first[idx[fresh]] = out_s[fresh]
    done = s.gen[idx] >= osl[idx]
    if not done.any():
        return 0
    gone = idx[done]
    finished[gone] = out_s[done]
    leaving = set(gone.tolist())
    s.running = [i for i in s.running if i not in leaving]
    s.free += int(np.sum(s.pages[gone]))
    s.pages[gone] = 0
    return len(gone)


def simulate_engine(
    arrival_s: np.ndarray,
    input_tokens: np.ndarray,
    output_tokens: np.ndarray,
    spec: EngineSpec,
    price: StepPricer,
    *,
    prefilled: bool = False,
) -> EngineRun:
    """Run one replica's scheduler over requests arriving at ``arrival_s`` (ascending) with
    the given prompt and output lengths. A request finishes when its ``output_tokens``-th
    token is out; ``output_tokens`` of 1 makes a prefill-only engine (a disaggregated
    prefill pool). ``prefilled``: the requests arrive with their prompt cached and first
    token made (a disaggregated decode pool).

    Raises
    ------
    Infeasible
        A request needs more pages than the replica holds.
    """
    n = len(arrival_s)
    osl = np.asarray(output_tokens, dtype=np.int64)
    isl = np.asarray(input_tokens, dtype=np.int64)
    biggest = int(np.max(isl + osl - (0 if spec.whole_request else 1))) if n else 0
    if n and _pages(biggest, spec.page_tokens) > spec.kv_pages:
        raise Infeasible(
            f"KV cache: a request of {biggest} tokens needs {_pages(biggest, spec.page_tokens)} "
            f"pages of {spec.page_tokens} tokens, a replica holds {spec.kv_pages}"
        )
    s = _State(
        isl=isl,
        prompt=isl.copy(),
        done=isl.copy() if prefilled else np.zeros(n, np.int64),
        gen=np.ones(n, np.int64) if prefilled else np.zeros(n, np.int64),
        pages=np.zeros(n, np.int64),
        ready=np.array(arrival_s, dtype=float) if prefilled else np.zeros(n),
        now=0.0,
        free=spec.kv_pages,
        waiting=deque(),
        running=[],
    )
    admitted = np.full(n, np.nan)
    first = np.array(arrival_s, dtype=float) if prefilled else np.full(n, np.nan)
    finished = np.full(n, np.nan)
    t = busy = energy = page_s = 0.0
    nxt = finished_count = preemptions = steps = burst = 0
    while finished_count < n:
        while nxt < n and arrival_s[nxt] <= t:
            s.waiting.append(nxt)
            nxt += 1
        if not s.running and not s.waiting:
            t = float(arrival_s[nxt])
            continue
        s.now = t
        preemptions += _grow_decodes(s, spec, osl)
        dec, chunks, host_s, burst = _next_step(s, spec, osl, burst)
        if not dec and not chunks:  # wait for a token on its way or the next arrival
            later = [s.ready[i] for i in s.running if s.ready[i] > t]
            later += [float(arrival_s[nxt])] if nxt < n else []
            if not later:
                raise Infeasible("engine: requests wait with no step able to run them")
            t = min(later)
            continue
        stepped = np.array([*dec, *chunks], np.int64)
        admitted[stepped[np.isnan(admitted[stepped])]] = t
        step = _price(s, dec, chunks, price)
        held = step.duration_s + host_s
        busy += held
        energy += step.energy_j
        page_s += (spec.kv_pages - s.free) * held
        outs, out_s = list(dec), [t + held] * len(dec)
        for i in chunks:
            s.done[i] += chunks[i]
            if s.done[i] >= s.prompt[i]:
                outs.append(i)
                out_s.append(t + step.latency_s + host_s)
        t += held
        steps += 1
        finished_count += _tokens_out(
            s, np.array(outs, np.int64), np.array(out_s), osl, first, finished
        )
    return EngineRun(admitted, first, finished, busy, energy, page_s, preemptions, steps)
