"""Energy, cost and carbon of serving, per output token (docs/serving.md).

A serving layout in steady state (:class:`placement.serving_engine.EngineResult`) draws, per
second, the dynamic power of its pools' passes (compute, memory, network: each op's energy,
as the training iteration's energy counts it), the static power of every device it holds
(while it computes: ``static``; while it waits, in a pipeline's lighter stages or the pool
that outpaces the other: ``idle``, the same leakage calibrated to idle power), the links'
energy of the KV-cache transfers between pools, and its devices' share of their nodes' hosts. Static
power is charged over the wall-clock time, so a layer that the HBM floor stretches beyond its
schedule costs its static power for as long as it runs. The energy per output token is that
power over the output tokens per second.

Cost and carbon come from the scoring of training runs (:mod:`phaze.model.scoring`), for the job
of serving one million output tokens: the devices held for ``1e6 / tokens per second`` at
their cost per device-hour (:func:`arch_space.tco.device_hour_cost`) plus the electricity;
embodied carbon amortised over that share of their life plus the operational carbon. The
``tokens_to_serve`` of a serving workload give its tCDP: its carbon times the time the system
takes to serve them (Elgamal et al.'s tC x D, as for training).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from arch_space import Accelerator, embodied_kgco2e, static_power_w
from arch_space.accelerator import host_share
from phaze.model.scoring import ScoringParams, job_footprint, system_capex
from placement.serving_engine import EngineResult

__all__ = ["TokenEnergy", "ServingScore", "token_energy", "serving_score"]

_MILLION = 1e6


@dataclass(frozen=True, slots=True)
class TokenEnergy:
    """IT energy per output token by cause (J), the terms of training's energy."""

    compute_j: float
    memory_j: float
    static_j: float
    network_j: float
    idle_j: float
    host_j: float

    @property
    def total_j(self) -> float:
        return sum(getattr(self, f.name) for f in fields(self))

    def terms(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def token_energy(
    engine: EngineResult, static_w_per_device: float, host_w_per_node: float, nodes: float
) -> TokenEnergy:
    """The energy per output token of ``engine``'s pools (see the module docstring);
    ``nodes`` is the nodes' worth of hosts charged (:func:`arch_space.accelerator.host_share`)."""
    rate = engine.output_tokens_per_s
    static_w = idle_w = 0.0
    compute_w = memory_w = network_w = 0.0
    for pool in engine.pools:
        static_w += pool.devices * static_w_per_device * pool.busy
        idle_w += pool.devices * static_w_per_device * (1.0 - pool.busy)
        compute_w += pool.compute_w
        memory_w += pool.memory_w
        network_w += pool.network_w
    return TokenEnergy(
        compute_j=compute_w / rate,
        memory_j=memory_w / rate,
        static_j=static_w / rate,
        network_j=(network_w + engine.transfer_w) / rate,
        idle_j=idle_w / rate,
        host_j=nodes * host_w_per_node / rate,
    )


@dataclass(frozen=True, slots=True)
class ServingScore:
    """The serving metrics of one layout (units in the names): rates per device, energy,
    average power, cost and carbon per million output tokens, and for a workload of
    ``tokens_to_serve`` output tokens its serving time, carbon and tCDP."""

    devices: int
    tokens_per_s_per_device: float
    requests_per_s: float
    energy: TokenEnergy
    avg_power_w: float
    system_cost_usd: float
    usd_per_device_hour: float
    usd_per_million_tokens: float
    kgco2e_per_million_tokens: float
    tokens_to_serve: float
    serve_time_s: float
    serve_energy_j: float
    embodied_kgco2e: float
    operational_kgco2e: float
    total_kgco2e: float
    tcdp: float

    @property
    def energy_per_token_j(self) -> float:
        return self.energy.total_j


def serving_score(
    engine: EngineResult,
    *,
    acc: Accelerator,
    devices: int,
    devices_per_node: int,
    tokens_to_serve: float,
    params: ScoringParams,
) -> ServingScore:
    """Score a serving layout of ``devices`` accelerators ``acc`` in steady state, in its
    host server (:meth:`~phaze.model.scoring.ScoringParams.for_accelerator`)."""
    params = params.for_accelerator(acc.profile_name)
    nodes = host_share(devices, devices_per_node)
    energy = token_energy(engine, static_power_w(acc), params.host_w_per_node, nodes)
    rate = engine.output_tokens_per_s
    capex = system_capex(acc, devices, params)
    board = embodied_kgco2e(acc)

    def job(tokens: float) -> tuple:
        seconds = tokens / rate
        joules = tokens * energy.total_j
        carbon, cost = job_footprint(
            seconds,
            joules,
            devices=devices,
            capex=capex,
            embodied_kgco2e_per_device=board,
            params=params,
        )
        return seconds, joules, cost, carbon

    _, _, million_cost, million_carbon = job(_MILLION)
    seconds, joules, cost, carbon = job(tokens_to_serve)
    return ServingScore(
        devices=devices,
        tokens_per_s_per_device=rate / devices,
        requests_per_s=engine.requests_per_s,
        energy=energy,
        avg_power_w=energy.total_j * rate,
        system_cost_usd=cost.capex_usd,
        usd_per_device_hour=cost.usd_per_device_hour,
        usd_per_million_tokens=million_cost.tco_usd,
        kgco2e_per_million_tokens=million_carbon.total_kgco2e,
        tokens_to_serve=tokens_to_serve,
        serve_time_s=seconds,
        serve_energy_j=joules,
        embodied_kgco2e=carbon.embodied_kgco2e,
        operational_kgco2e=carbon.operational_kgco2e,
        total_kgco2e=carbon.total_kgco2e,
        tcdp=carbon.tcdp,
    )
