"""The price of one engine step under load, from the op model (docs/serving.md, "Serving
under load").

A simulated engine runs steps of any batch and context. Each is priced by the passes the
steady-state model prices (:mod:`phaze.model.serving`: a decode step, a prefill of whole prompts,
a chunked-prefill step with decodes riding on its matmuls plus their KV-cache reads), at
grid points of the batch, the tokens and the context (powers of two and 1.5 x powers of
two), computed once each when first needed and interpolated linearly between: a step's time
is close to affine in its batch and its context between neighbouring points, so a run of
thousands of requests needs a few hundred passes.

A replica of ``p`` pipeline stages runs a step as ``m = min(p, units)`` micro-batches of its
work (vLLM's virtual engines): the step holds the engine for the busiest stage's share of
every micro-batch or one micro-batch's latency through the stages, whichever is longer, and
costs the micro-batches' energy. A prompt stays in one micro-batch: a chunked step spreads
its decodes over the ``m`` micro-batches and its prompt tokens over as many of them as it has
prompts, and a prompt's first token is out after its micro-batch's latency.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from arch_space import Accelerator
from arch_space.perf import default_settings
from arch_space.tech import tech_node
from phaze.model.serving import ServeContext, chunk_pass, pass_cost
from placement.layout import Layout
from placement.serving_engine import PassCost, mixed
from placement.serving_sim import Step
from workloads import Model
from workloads.serving import ServingPass, kv_cache_bytes_per_token

__all__ = ["grid_bracket", "PoolPricer"]


def _grid_below(x: float) -> int:
    """The largest grid point (0, 1, 2, 3, 4, 6, 8, 12, ...) at most ``x``."""
    if x < 1:
        return 0
    k = 2 ** math.floor(math.log2(x))
    return 3 * k // 2 if k >= 2 and x >= 3 * k // 2 else k


def _grid_above(g: int) -> int:
    """The grid point after ``g``."""
    if g < 2:
        return g + 1
    k = 2 ** math.floor(math.log2(g))
    return 3 * k // 2 if g == k else 2 * k


def grid_bracket(x: float) -> tuple[int, int, float]:
    """The grid points around ``x`` and the weight of the upper one.

    Examples
    --------
    >>> grid_bracket(5), grid_bracket(4), grid_bracket(0.5)
    ((4, 6, 0.5), (4, 6, 0.0), (0, 1, 0.5))
    """
    lo = _grid_below(x)
    hi = _grid_above(lo)
    return lo, hi, (x - lo) / (hi - lo)


def _lerp(a: PassCost, b: PassCost, w: float) -> PassCost:
    if w == 0:
        return a
    values = [
        (1 - w) * getattr(a, f.name) + w * getattr(b, f.name) for f in dataclasses.fields(PassCost)
    ]
    return PassCost(*values)


@dataclass
class PoolPricer:
    """Steps of a replica of ``pool`` (its ``t``, ``p``, ``ep``) serving ``model`` on ``acc``
    (:class:`placement.serving_sim.StepPricer`). ``ctx``'s requests give the formats and the
    mean prompt a chunked step's prompt tokens are shaped by (a chunk shorter than the prompt
    at the mean position of a prompt's chunks, as the steady state prices it). Holds the passes it has priced."""

    model: Model
    acc: Accelerator
    pool: Layout
    ctx: ServeContext
    _passes: dict = field(default_factory=dict, repr=False)

    def _cost(self, key: tuple) -> PassCost:
        if key not in self._passes:
            kind, a, b = key
            kw = self.ctx.requests.pass_formats()
            if kind == "decode":
                p = ServingPass.decode(a, b, **kw)
            elif kind == "prefill":
                p = ServingPass.prefill(a, b, **kw)
            else:
                p = chunk_pass(a, b, self.ctx, self.model.max_positions)
            self._passes[key] = pass_cost(self.model, self.acc, self.pool, p, self.ctx)
        return self._passes[key]

    def _at(self, kind: str, a: float, b: float, floor_a: int, floor_b: int) -> PassCost:
        """Bilinear interpolation over the grid of both arguments (each at least its floor)."""
        a0, a1, wa = grid_bracket(max(a, floor_a))
        b0, b1, wb = grid_bracket(max(b, floor_b))
        row0 = _lerp(self._cost((kind, a0, b0)), self._cost((kind, a0, b1)), wb)
        if wa == 0:
            return row0
        row1 = _lerp(self._cost((kind, a1, b0)), self._cost((kind, a1, b1)), wb)
        return _lerp(row0, row1, wa)

    def _micro(self, units: int) -> int:
        """Micro-batches of a step of ``units`` sequences or prompts: one per stage, at most
        one per unit."""
        return max(1, min(self.pool.p, units))

    def decode(self, seqs: int, context: float) -> Step:
        m = self._micro(seqs)
        cost = self._at("decode", seqs / m, context, 1, 2)
        held = max(m * cost.stage_s, cost.latency_s)
        return Step(held, held, m * cost.dynamic_j)

    def prefill(self, prompts: int, tokens: float) -> Step:
        m = self._micro(prompts)
        cost = self._at("prefill", prompts / m, tokens, 1, 1)
        held = max(m * cost.stage_s, cost.latency_s)
        return Step(held, held, m * cost.dynamic_j)

    def mixed(self, decodes: int, context: float, tokens: int, prompts: int) -> Step:
        """The decodes spread over the micro-batches, the prompts' tokens over as many of
        them as there are prompts (a prompt stays in one micro-batch). The step holds the
        engine for the stages' shares of all micro-batches, or the latency of one of decodes
        only; the prompts' tokens are out after their own micro-batch's latency, while the
        other micro-batches go on (the pipeline overlaps them)."""
        m = self._micro(max(decodes, prompts))
        k = min(m, prompts)
        carrying = self._at("chunk", tokens / k, decodes / m, 1, 0)
        if decodes:
            kv = decodes / m * context
            kv *= kv_cache_bytes_per_token(self.model, self.pool.t, self.ctx.requests.kv_format)
            sustained = self.acc.hbm_bandwidth_bytes_per_s * default_settings().hbm_efficiency
            pj = tech_node(self.acc.node_nm).hbm_energy_pj_per_byte
            t, p = self.pool.t, self.pool.p
            carrying = mixed(carrying, kv / p / sustained, t * kv * pj * 1e-12, p, t * p)
        shares = k * carrying.stage_s
        energy = k * carrying.dynamic_j
        held = carrying.latency_s
        if m > k:  # micro-batches of decodes only
            rest = self._at("decode", decodes / m, context, 1, 2)
            shares += (m - k) * rest.stage_s
            energy += (m - k) * rest.dynamic_j
            held = rest.latency_s
        return Step(max(shares, held), max(shares, held, carrying.latency_s), energy)
