"""Scoring of one (workload, design, placement) point: throughput, MFU, energy, cost, carbon.

The formulas are docs/models.md's; :data:`FORMULAS` states them in words for the report, and
:class:`ScoringParams` holds every default (printed by the CLI and the report, overridable).

References
----------
- Gupta et al., "ACT: Designing Sustainable Computer Systems with an Architectural Carbon
  Modeling Tool", ISCA 2022: embodied carbon amortised by the job's share of device lifetime.
- Elgamal et al., "Design Space Exploration and Optimization for Carbon-Efficient Extended
  Reality Systems", arXiv:2305.01831 (https://arxiv.org/abs/2305.01831), and Elgamal et al.,
  "CORDOBA" (https://openreview.net/forum?id=IjhyMJ1PWy): tCDP, the total carbon delay
  product, is tC x D, total (embodied + operational) carbon times execution time, with
  operational carbon summed over the device's uses; here D is the time to train. For a
  fixed number of runs, the whole-life form ((embodied + runs x operational) x D) and the
  per-run form with embodied carbon amortised over the runs rank designs identically and
  differ only in scale. Phaze's default ``embodied_mode = "amortised"`` is the per-run
  form, amortised by the job's share of the lifetime (ACT); ``"whole-life"`` charges one
  job all of it.
- Narayanan et al., SC21: model FLOPs utilisation (MFU) uses model FLOPs, no recompute.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from types import MappingProxyType
from typing import Any, Final, Literal

import numpy as np

from phaze_common.errors import ConfigError
from placement.iteration import IterationEnergy

__all__ = [
    "SECONDS_PER_YEAR",
    "FORMULAS",
    "ScoringParams",
    "BatchEnergy",
    "Score",
    "JobCarbon",
    "training_time_s",
    "embodied_share_kgco2e",
    "operational_kgco2e",
    "job_carbon",
    "system_cost_usd",
    "electricity_usd",
    "tco_usd",
    "score_point",
]

# Julian year, the convention of ACT's lifetime figures.
SECONDS_PER_YEAR: Final = 365.25 * 24 * 3600
_J_PER_KWH: Final = 3.6e6

FORMULAS: Final = MappingProxyType(
    {
        "tokens_per_s": "global batch x sequence length / iteration time",
        "mfu": "model FLOPs per batch (fwd + bwd, no recompute) / (iteration time x devices x peak FLOP/s)",
        "time_to_train_s (D)": "tokens to train / tokens per second",
        "energy_per_batch_j": "IT energy: op energies (MACs with control and operand delivery, buffer, HBM, uncore share) + network + static power x iteration time + hosts x host power x iteration time",
        "job_energy_j": "energy per batch x batches to train (IT energy; the facility's is x PUE)",
        "avg_power_w": "energy per batch / iteration time (all devices and hosts)",
        "system_cost_usd": "devices x (device cost + per-device host and network share)",
        "electricity_usd": "job energy x PUE x electricity price",
        "tokens_per_usd": "tokens to train / tco_usd",
        "tco_usd": "system cost x D / (lifetime x utilisation) (all of it in whole-life mode) + electricity",
        "embodied_kgco2e (amortised, ACT)": "devices x embodied per device x D / (lifetime x utilisation)",
        "embodied_kgco2e (whole-life)": "devices x embodied per device",
        "operational_kgco2e": "job energy x PUE x grid carbon intensity",
        "total_kgco2e (tC)": "embodied + operational",
        "tcdp": "tC x D, in kgCO2e*s (also reported in kgCO2e*days)",
    }
)


@dataclass(frozen=True, slots=True)
class ScoringParams:
    """Every default of the scoring, in SI units.

    ``pue`` 1.10 is Google's fleet-wide trailing-twelve-month PUE (Google 2023 Environmental
    Report). ``grid_gco2e_per_kwh`` None takes the intensity of ``grid_region`` from
    arch_space.carbon's region presets (each with its source). ``lifetime_s`` 5 years is ACT's default device life.
    ``host_network_usd_per_device`` defaults to 0: the system cost is the accelerators alone
    unless the user adds their share of hosts and network. ``host_w_per_node`` None takes the
    power under load of a ``host_profile`` server (arch_space.system, sourced); 0 leaves hosts
    out; ``host_embodied_kgco2e_per_device`` likewise takes the server's embodied carbon per
    accelerator slot. ``usd_per_kwh`` None takes the electricity price of ``grid_region`` (else the world's).
    """

    pue: float = 1.10
    grid_gco2e_per_kwh: float | None = None
    grid_region: str = "world"
    lifetime_s: float = 5 * SECONDS_PER_YEAR
    utilisation: float = 1.0
    embodied_mode: Literal["amortised", "whole-life"] = "amortised"
    host_network_usd_per_device: float = 0.0
    host_profile: str = "dgx-a100"
    host_w_per_node: float | None = None
    host_embodied_kgco2e_per_device: float | None = None
    usd_per_kwh: float | None = None

    def __post_init__(self) -> None:
        from arch_space import system

        if self.grid_gco2e_per_kwh is None:
            from arch_space.carbon import grid_intensity

            object.__setattr__(self, "grid_gco2e_per_kwh", grid_intensity(self.grid_region))
        if self.host_w_per_node is None:
            object.__setattr__(self, "host_w_per_node", system.host_w_per_node(self.host_profile))
        if self.host_embodied_kgco2e_per_device is None:
            host = system.host_embodied_kgco2e_per_device(self.host_profile)
            object.__setattr__(self, "host_embodied_kgco2e_per_device", host)
        if self.usd_per_kwh is None:
            known = system.electricity_regions()
            region = self.grid_region if self.grid_region in known else "world"
            object.__setattr__(self, "usd_per_kwh", system.electricity_usd_per_kwh(region))
        problems = []
        for name in ("pue", "lifetime_s", "utilisation"):
            if getattr(self, name) <= 0:
                problems.append(f"scoring: {name} = {getattr(self, name)!r} must be > 0")
        if self.pue < 1:
            problems.append(f"scoring: pue = {self.pue!r} must be >= 1 (facility / IT energy)")
        if self.utilisation > 1:
            problems.append(f"scoring: utilisation = {self.utilisation!r} must be in (0, 1]")
        for name in (
            "grid_gco2e_per_kwh",
            "host_network_usd_per_device",
            "host_w_per_node",
            "host_embodied_kgco2e_per_device",
            "usd_per_kwh",
        ):
            if getattr(self, name) < 0:
                problems.append(f"scoring: {name} = {getattr(self, name)!r} must be >= 0")
        if self.embodied_mode not in ("amortised", "whole-life"):
            problems.append(
                f"scoring: embodied_mode = {self.embodied_mode!r} must be 'amortised' or 'whole-life'"
            )
        if problems:
            raise ConfigError("; ".join(problems))

    def as_dict(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))


# The energy of one iteration, by cause: the iteration model's energy terms.
BatchEnergy = IterationEnergy


@dataclass(frozen=True, slots=True)
class Score:
    """All metrics of one point (units in the names; tcdp in kgCO2e*s)."""

    iteration_s: float
    samples_per_s: float
    tokens_per_s: float
    mfu: float
    time_to_train_s: float
    energy_per_batch_j: float
    energy_compute_j: float
    energy_memory_j: float
    energy_static_j: float
    energy_network_j: float
    energy_idle_j: float
    energy_host_j: float
    job_energy_j: float
    avg_power_w: float
    system_cost_usd: float
    electricity_usd: float
    tco_usd: float
    tokens_per_usd: float
    embodied_kgco2e: float
    operational_kgco2e: float
    total_kgco2e: float
    tcdp: float
    tcdp_kgco2e_days: float


def training_time_s(tokens_to_train: float, tokens_per_s: float) -> float:
    """D, the time to train: tokens to train / tokens per second."""
    return tokens_to_train / tokens_per_s


def embodied_share_kgco2e(
    devices: int, embodied_kgco2e_per_device: float, time_to_train_s: float, params: ScoringParams
) -> float:
    """The devices' and their hosts' embodied carbon charged to a job of ``time_to_train_s``:
    its share of their lifetime at the given utilisation (ACT), or all of it in whole-life
    mode."""
    embodied_system = devices * (
        embodied_kgco2e_per_device + params.host_embodied_kgco2e_per_device
    )
    if params.embodied_mode == "amortised":
        return embodied_system * time_to_train_s / (params.lifetime_s * params.utilisation)
    return embodied_system


def operational_kgco2e(job_energy_j: float, params: ScoringParams) -> float:
    """Carbon of a job's energy: energy x PUE x grid carbon intensity."""
    return job_energy_j / _J_PER_KWH * params.pue * params.grid_gco2e_per_kwh / 1000.0


@dataclass(frozen=True, slots=True)
class JobCarbon:
    """The carbon of one training job (kgCO2e) and its tCDP (kgCO2e*s and kgCO2e*days)."""

    embodied_kgco2e: float
    operational_kgco2e: float
    total_kgco2e: float
    tcdp: float
    tcdp_kgco2e_days: float


def job_carbon(
    *,
    time_to_train_s: float,
    job_energy_j: float,
    devices: int,
    embodied_kgco2e_per_device: float,
    params: ScoringParams,
) -> JobCarbon:
    """Embodied, operational and total carbon of a job, and its tCDP (tC x D).

    Every term grows with the time and with the energy, so the sweep's optimistic bounds
    call this with the shortest time and the least energy a design could reach. Pure
    arithmetic: numpy arrays (one entry per design) give the values floats would.
    """
    embodied = embodied_share_kgco2e(devices, embodied_kgco2e_per_device, time_to_train_s, params)
    operational = operational_kgco2e(job_energy_j, params)
    total = embodied + operational
    tcdp = total * time_to_train_s
    return JobCarbon(embodied, operational, total, tcdp, tcdp / 86400.0)


def system_cost_usd(devices: int, device_cost_usd: float, params: ScoringParams) -> float:
    """Devices x (device cost + their share of hosts and network)."""
    return devices * (device_cost_usd + params.host_network_usd_per_device)


def electricity_usd(job_energy_j: float, params: ScoringParams) -> float:
    """Electricity bill of a job: energy x PUE x price per kWh."""
    return job_energy_j / _J_PER_KWH * params.pue * params.usd_per_kwh


def tco_usd(
    *, time_to_train_s: float, electricity_usd: float, system_cost_usd: float, params: ScoringParams
) -> float:
    """Cost to train: the system cost's share of its lifetime over the run (at the given
    utilisation; all of it in whole-life mode, like embodied carbon) plus electricity.

    Grows with the time and the electricity, so optimistic bounds call it with the least.
    """
    share = time_to_train_s / (params.lifetime_s * params.utilisation)
    if params.embodied_mode != "amortised":
        share = 1.0
    return system_cost_usd * share + electricity_usd


def score_point(
    *,
    iteration_s: float,
    global_batch: int,
    seq_len: int,
    model_flops_per_batch: float,
    tokens_to_train: float,
    devices: int,
    peak_flops_per_device: float,
    energy: BatchEnergy,
    device_cost_usd: float,
    embodied_kgco2e_per_device: float,
    params: ScoringParams,
) -> Score:
    """Score one evaluated placement (docs/models.md); pure arithmetic, see :data:`FORMULAS`.

    The per-device figures and ``iteration_s`` may be numpy arrays (one entry per design):
    the sweep's optimistic bounds score many designs at once.
    """
    assert np.all(np.greater(iteration_s, 0)) and devices > 0
    tokens_per_batch = global_batch * seq_len
    tokens_per_s = tokens_per_batch / iteration_s
    time_to_train_s = training_time_s(tokens_to_train, tokens_per_s)
    batches = tokens_to_train / tokens_per_batch
    job_energy_j = energy.total_j * batches
    carbon = job_carbon(
        time_to_train_s=time_to_train_s,
        job_energy_j=job_energy_j,
        devices=devices,
        embodied_kgco2e_per_device=embodied_kgco2e_per_device,
        params=params,
    )
    system_cost = system_cost_usd(devices, device_cost_usd, params)
    electricity = electricity_usd(job_energy_j, params)
    tco = tco_usd(
        time_to_train_s=time_to_train_s,
        electricity_usd=electricity,
        system_cost_usd=system_cost,
        params=params,
    )
    return Score(
        iteration_s=iteration_s,
        samples_per_s=global_batch / iteration_s,
        tokens_per_s=tokens_per_s,
        mfu=model_flops_per_batch / (iteration_s * devices * peak_flops_per_device),
        time_to_train_s=time_to_train_s,
        energy_per_batch_j=energy.total_j,
        energy_compute_j=energy.compute_j,
        energy_memory_j=energy.memory_j,
        energy_static_j=energy.static_j,
        energy_network_j=energy.network_j,
        energy_idle_j=energy.idle_j,
        energy_host_j=energy.host_j,
        job_energy_j=job_energy_j,
        avg_power_w=energy.total_j / iteration_s,
        system_cost_usd=system_cost,
        electricity_usd=electricity,
        tco_usd=tco,
        tokens_per_usd=_per_usd(tokens_to_train, tco),
        embodied_kgco2e=carbon.embodied_kgco2e,
        operational_kgco2e=carbon.operational_kgco2e,
        total_kgco2e=carbon.total_kgco2e,
        tcdp=carbon.tcdp,
        tcdp_kgco2e_days=carbon.tcdp_kgco2e_days,
    )


def _per_usd(amount: float, usd: Any) -> Any:
    """``amount / usd``, infinite where nothing is paid (a float, or an array of them)."""
    if isinstance(usd, np.ndarray):
        return np.divide(amount, usd, out=np.full(usd.shape, math.inf), where=usd > 0)
    return amount / usd if usd > 0 else math.inf
