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
- Barroso et al., "The Datacenter as a Computer" 2nd ed., ch. 6: the cost of owning the
  system per hour (:mod:`arch_space.tco`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, replace
from types import MappingProxyType
from typing import Any, Final, Literal

import numpy as np

from arch_space.accelerator import Accelerator
from arch_space.tco import (
    COST_VIEWS,
    SECONDS_PER_YEAR,
    CostView,
    DeviceCapex,
    DeviceHourCost,
    TcoConstants,
    device_capex,
    device_hour_cost,
    fat_tree,
)
from phaze_common.errors import ConfigError
from placement.iteration import IterationEnergy

__all__ = [
    "SECONDS_PER_YEAR",
    "FORMULAS",
    "RANGES",
    "ScoringParams",
    "BatchEnergy",
    "Score",
    "JobCarbon",
    "JobCost",
    "training_time_s",
    "wall_clock_s",
    "network_embodied_kgco2e_per_device",
    "embodied_parts_kgco2e",
    "embodied_share_kgco2e",
    "operational_kgco2e",
    "job_carbon",
    "electricity_usd",
    "job_cost",
    "job_footprint",
    "system_capex",
    "score_point",
]

_J_PER_KWH: Final = 3.6e6

FORMULAS: Final = MappingProxyType(
    {
        "tokens_per_s": "global batch x sequence length / iteration time",
        "mfu": "model FLOPs per batch (fwd + bwd, no recompute) / (iteration time x devices x peak FLOP/s)",
        "time_to_train_s (D)": "tokens to train / tokens per second / goodput (the wall-clock time the job holds the machines, restarts included)",
        "energy_per_batch_j": "IT energy: op energies (MACs with control and operand delivery, buffer, HBM, uncore share) + network + static power x iteration time + devices / devices per node x host power x iteration time (a job on part of a node pays its share of the host)",
        "job_energy_j": "energy per batch x batches to train + idle power of devices and hosts over the time lost to restarts (IT energy; the facility's is x PUE)",
        "avg_power_w": "energy per batch / iteration time (all devices and hosts)",
        "system_cost_usd": "capex: devices x (accelerator (build or buy view) + host share + fat-tree network share + data centre per provisioned watt)",
        "usd_per_device_hour": "cost to train / (devices x D): depreciation of accelerator, host, network (over the lifetime) and data centre (over its life), interest on the capital, IT maintenance, data-centre opex and electricity",
        "electricity_usd": "job energy x PUE x electricity price",
        "tokens_per_usd": "tokens to train / tco_usd",
        "tco_usd": "devices x D x cost per device-hour (whole-life: the whole capex + opex over D) + electricity",
        "embodied_kgco2e (amortised, ACT)": "devices x (board + host share + network share) x D / (lifetime x utilisation)",
        "embodied_kgco2e (whole-life)": "devices x (board + host share + network share)",
        "operational_kgco2e": "job energy x PUE x grid carbon intensity",
        "total_kgco2e (tC)": "embodied + operational",
        "tcdp": "tC x D, in kgCO2e*s (also reported in kgCO2e*days)",
    }
)

# the host server's terms, None until the server is known (ScoringParams.for_accelerator)
_HOST_TERMS: Final = ("host_w_per_node", "host_embodied_kgco2e_per_device")

# field -> (lowest, highest, lowest allowed?, highest allowed?) of a ScoringParams number
RANGES: Final = MappingProxyType(
    {
        "pue": (1.0, 4.0, True, True),
        "grid_gco2e_per_kwh": (0.0, 2000.0, True, True),
        "lifetime_s": (0.0, 30 * SECONDS_PER_YEAR, False, True),
        "utilisation": (0.0, 1.0, False, True),
        "host_w_per_node": (0.0, 1e6, True, True),
        "host_embodied_kgco2e_per_device": (0.0, 1e6, True, True),
        "usd_per_kwh": (0.0, 10.0, True, True),
        "interest": (0.0, 1.0, True, False),
        "goodput": (0.0, 1.0, False, True),
        "volume_units": (1.0, 1e12, True, True),
    }
)


def _range_text(name: str) -> str:
    lo, hi, lo_in, hi_in = RANGES[name]
    return f"{'[' if lo_in else '('}{lo:g}, {hi:g}{']' if hi_in else ')'}"


def _range_problem(name: str, value: Any) -> str | None:
    """The problem with ``name = value`` (a number in the range of :data:`RANGES`), or None."""
    lo, hi, lo_in, hi_in = RANGES[name]
    ok = (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and (lo <= value if lo_in else lo < value)
        and (value <= hi if hi_in else value < hi)
    )
    if ok:
        return None
    return f"{name} = {value!r} must be a finite number in {_range_text(name)}"


@dataclass(frozen=True, slots=True)
class ScoringParams:
    """Every default of the scoring, in SI units.

    ``pue`` 1.10 is Google's fleet-wide trailing-twelve-month PUE (Google 2023 Environmental
    Report). ``grid_gco2e_per_kwh`` None takes the intensity of ``grid_region`` (any letter
    case) from arch_space.carbon's region presets (each with its source). ``lifetime_s`` 5
    years is ACT's default device life and the IT equipment's depreciation period.
    ``host_profile`` None runs each accelerator in its own server
    (:meth:`for_accelerator`: a preset's, else a DGX A100). ``host_w_per_node`` None takes the
    power under load of the ``host_profile`` server (arch_space.system, sourced); 0 leaves
    hosts out; ``host_embodied_kgco2e_per_device`` likewise takes the server's embodied
    carbon per accelerator slot. Both wait for the accelerator while the server does. ``usd_per_kwh`` None
    takes the electricity price of ``grid_region`` (else the world's). ``cost_view`` prices
    the accelerator as built or bought (:mod:`arch_space.tco`); ``interest``, ``goodput`` and
    ``volume_units`` None take the shipped values (system.toml: Barroso et al.'s 8 %, Llama 3's
    90 % effective training time; cost.toml: a year of a flagship accelerator's production).
    """

    pue: float = 1.10
    grid_gco2e_per_kwh: float | None = None
    grid_region: str = "world"
    lifetime_s: float = 5 * SECONDS_PER_YEAR
    utilisation: float = 1.0
    embodied_mode: Literal["amortised", "whole-life"] = "amortised"
    host_profile: str | None = None
    host_w_per_node: float | None = None
    host_embodied_kgco2e_per_device: float | None = None
    usd_per_kwh: float | None = None
    cost_view: Literal["build", "buy"] = "buy"
    interest: float | None = None
    goodput: float | None = None
    volume_units: float | None = None

    def __post_init__(self) -> None:
        from arch_space import system
        from arch_space.carbon import grid_intensity
        from arch_space.cost import CostParams

        if not isinstance(self.grid_region, str):
            raise ConfigError(f"scoring: grid_region = {self.grid_region!r} must be a name")
        object.__setattr__(self, "grid_region", self.grid_region.casefold())
        if self.host_profile is not None and not isinstance(self.host_profile, str):
            raise ConfigError(f"scoring: host_profile = {self.host_profile!r} must be a name")
        host = self.host_profile
        defaults = {
            "grid_gco2e_per_kwh": lambda: grid_intensity(self.grid_region),
            "usd_per_kwh": lambda: system.electricity_usd_per_kwh(
                self.grid_region if self.grid_region in system.electricity_regions() else "world"
            ),
            "interest": lambda: TcoConstants.default().interest,
            "goodput": lambda: TcoConstants.default().goodput,
            "volume_units": lambda: CostParams.default().volume_units,
        }
        if host is not None:
            defaults["host_w_per_node"] = lambda: system.host_w_per_node(host)
            defaults["host_embodied_kgco2e_per_device"] = lambda: (
                system.host_embodied_kgco2e_per_device(host)
            )
        for name, default in defaults.items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, default())
        waiting = _HOST_TERMS if host is None else ()  # set by for_accelerator, or given
        problems = [
            p
            for name in RANGES
            if not (name in waiting and getattr(self, name) is None)
            and (p := _range_problem(name, getattr(self, name)))
        ]
        if self.embodied_mode not in ("amortised", "whole-life"):
            problems.append(
                f"embodied_mode = {self.embodied_mode!r} must be 'amortised' or 'whole-life'"
            )
        if self.cost_view not in COST_VIEWS:
            problems.append(
                f"cost_view = {self.cost_view!r} must be one of {', '.join(COST_VIEWS)}"
            )
        if problems:
            raise ConfigError("; ".join(f"scoring: {p}" for p in problems))

    def as_dict(self) -> dict[str, object]:
        return asdict(self)

    def for_accelerator(self, accelerator: str) -> ScoringParams:
        """These settings for a run of ``accelerator``: with no ``host_profile`` given, the
        server it ships in (:func:`arch_space.system.host_profile_for`: a preset's own, else
        a DGX A100) and that server's power and embodied carbon where not given. The one rule
        by which ``evaluate``, ``serve`` and the sweep choose a host."""
        if self.host_profile is not None:
            return self
        from arch_space.system import host_profile_for

        return replace(self, host_profile=host_profile_for(accelerator))

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
    usd_per_device_hour: float
    tokens_per_usd: float
    embodied_kgco2e: float
    operational_kgco2e: float
    total_kgco2e: float
    tcdp: float
    tcdp_kgco2e_days: float


def training_time_s(tokens_to_train: float, tokens_per_s: float) -> float:
    """The failure-free training time: tokens to train / tokens per second."""
    return tokens_to_train / tokens_per_s


def wall_clock_s(training_s: Any, goodput: float) -> Any:
    """D, the time the job holds the machines: failure-free time / goodput."""
    return training_s / goodput


def network_embodied_kgco2e_per_device(devices: int) -> float:
    """Embodied carbon (kgCO2e) of the switches of a fat tree over ``devices``, per device."""
    c = TcoConstants.default()
    return fat_tree(devices, c.switch_radix).switches_per_endpoint * c.switch_embodied_kgco2e


def embodied_parts_kgco2e(
    devices: int, board_kgco2e_per_device: Any, params: ScoringParams
) -> dict[str, Any]:
    """Embodied carbon (kgCO2e) per device of the system's parts: ``board``, ``host`` share,
    ``network`` share (``params`` with its host known: :meth:`ScoringParams.for_accelerator`)."""
    if params.host_embodied_kgco2e_per_device is None:
        raise ValueError("scoring: the host server is not chosen (ScoringParams.for_accelerator)")
    return {
        "board": board_kgco2e_per_device,
        "host": params.host_embodied_kgco2e_per_device,
        "network": network_embodied_kgco2e_per_device(devices),
    }


def embodied_share_kgco2e(
    devices: int, embodied_kgco2e_per_device: Any, time_to_train_s: Any, params: ScoringParams
) -> Any:
    """The embodied carbon of ``devices`` x ``embodied_kgco2e_per_device`` charged to a job
    holding them for ``time_to_train_s``: its share of their lifetime at the given
    utilisation (ACT), or all of it in whole-life mode."""
    embodied_system = devices * embodied_kgco2e_per_device
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
    """Embodied (boards with their host and network shares), operational and total carbon
    of a job holding the machines for ``time_to_train_s``, and its tCDP (tC x D).

    Every term grows with the time and with the energy, so the sweep's optimistic bounds
    call this with the shortest time and the least energy a design could reach. Pure
    arithmetic: numpy arrays (one entry per design) give the values floats would.
    """
    parts = embodied_parts_kgco2e(devices, embodied_kgco2e_per_device, params)
    per_device = parts["board"] + parts["host"] + parts["network"]
    embodied = embodied_share_kgco2e(devices, per_device, time_to_train_s, params)
    operational = operational_kgco2e(job_energy_j, params)
    total = embodied + operational
    tcdp = total * time_to_train_s
    return JobCarbon(embodied, operational, total, tcdp, tcdp / 86400.0)


def electricity_usd(job_energy_j: float, params: ScoringParams) -> float:
    """Electricity bill of a job: energy x PUE x price per kWh."""
    return job_energy_j / _J_PER_KWH * params.pue * params.usd_per_kwh


@dataclass(frozen=True, slots=True)
class JobCost:
    """What a job costs its owner (USD): per device-hour terms, the run's totals."""

    rates: DeviceHourCost  # USD per device-hour, electricity aside
    device_hours: Any
    capex_usd: Any  # the whole system
    electricity_usd: Any
    tco_usd: Any

    @property
    def usd_per_device_hour(self) -> Any:
        return self.tco_usd / self.device_hours

    def breakdown_usd(self) -> dict[str, Any]:
        """The cost to train by term (USD): each rate over the device-hours (the capital
        terms all at once in whole-life mode), and electricity."""
        terms = {k: v * self.device_hours for k, v in self.rates.terms().items()}
        return {**terms, "electricity": self.electricity_usd}


def system_capex(
    acc: Accelerator, devices: int, params: ScoringParams, view: CostView | None = None
) -> DeviceCapex:
    """The capital cost per device of ``devices`` accelerators ``acc`` in their hosts, network
    and data centre, with the accelerator priced in ``view`` (default: the params')."""
    params = params.for_accelerator(acc.profile_name)
    return device_capex(
        acc, devices, params.host_profile, view or params.cost_view, params.volume_units
    )


def job_cost(
    *,
    time_to_train_s: Any,
    job_energy_j: Any,
    devices: int,
    capex: DeviceCapex,
    params: ScoringParams,
) -> JobCost:
    """The cost to train: the devices held for ``time_to_train_s`` at their cost per
    device-hour, plus the electricity of ``job_energy_j``. In whole-life mode the job pays
    the whole capex (like its embodied carbon) and the running costs over its time.

    Grows with the time and the energy, so optimistic bounds call it with the least.
    """
    rates = device_hour_cost(
        capex,
        lifetime_s=params.lifetime_s,
        interest=params.interest,
        utilisation=params.utilisation,
    )
    if params.embodied_mode != "amortised":
        hours = devices * time_to_train_s / 3600.0
        zero = 0.0 * rates.accelerator
        rates = DeviceHourCost(
            accelerator=capex.accelerator_usd * devices / hours,
            host=capex.host_usd * devices / hours,
            network=capex.network_usd * devices / hours,
            datacenter=capex.datacenter_usd * devices / hours,
            interest=zero,
            maintenance=rates.maintenance,
            datacenter_opex=rates.datacenter_opex,
        )
    device_hours = devices * time_to_train_s / 3600.0
    electricity = electricity_usd(job_energy_j, params)
    return JobCost(
        rates=rates,
        device_hours=device_hours,
        capex_usd=devices * capex.total_usd,
        electricity_usd=electricity,
        tco_usd=device_hours * rates.total + electricity,
    )


def job_footprint(
    time_s: Any,
    energy_j: Any,
    *,
    devices: int,
    capex: DeviceCapex,
    embodied_kgco2e_per_device: float,
    params: ScoringParams,
) -> tuple[JobCarbon, JobCost]:
    """The carbon and the cost of a job holding ``devices`` for ``time_s`` and using
    ``energy_j``: what a training run and a serving job are both charged."""
    carbon = job_carbon(
        time_to_train_s=time_s,
        job_energy_j=energy_j,
        devices=devices,
        embodied_kgco2e_per_device=embodied_kgco2e_per_device,
        params=params,
    )
    cost = job_cost(
        time_to_train_s=time_s, job_energy_j=energy_j, devices=devices, capex=capex, params=params
    )
    return carbon, cost


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
    capex: DeviceCapex,
    idle_w_per_device: float,
    embodied_kgco2e_per_device: float,
    params: ScoringParams,
) -> Score:
    """Score one evaluated placement (docs/models.md); pure arithmetic, see :data:`FORMULAS`.

    The job holds the machines for its failure-free time over the goodput; the time lost
    to restarts costs the devices' idle power and the hosts' power. The per-device figures,
    ``capex`` and ``iteration_s`` may be numpy arrays (one entry per design): the sweep's
    optimistic bounds score many designs at once.
    """
    assert np.all(np.greater(iteration_s, 0)) and devices > 0
    tokens_per_batch = global_batch * seq_len
    tokens_per_s = tokens_per_batch / iteration_s
    training_s = training_time_s(tokens_to_train, tokens_per_s)
    time_to_train_s = wall_clock_s(training_s, params.goodput)
    batches = tokens_to_train / tokens_per_batch
    restart_w = devices * idle_w_per_device + energy.host_j / iteration_s
    job_energy_j = energy.total_j * batches + (time_to_train_s - training_s) * restart_w
    carbon, cost = job_footprint(
        time_to_train_s,
        job_energy_j,
        devices=devices,
        capex=capex,
        embodied_kgco2e_per_device=embodied_kgco2e_per_device,
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
        system_cost_usd=cost.capex_usd,
        electricity_usd=cost.electricity_usd,
        tco_usd=cost.tco_usd,
        usd_per_device_hour=cost.usd_per_device_hour,
        tokens_per_usd=_per_usd(tokens_to_train, cost.tco_usd),
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
