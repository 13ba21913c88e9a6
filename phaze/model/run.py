"""Whole-run answers: time, energy, power, carbon and cost of training on a token budget.

From one scored iteration (:class:`phaze.model.scoring.Score`, with its energy terms) and the
budget it was scored for: the wall-clock time the job holds the machines (failure-free time
over the goodput), device-hours, facility energy (IT energy x PUE) and the model-card
accounting of it (device-hours x board TDP x PUE), average board power of an accelerator and
of a node with its host, carbon by part, tCDP, the system cost (capex) and the cost to train
term by term, in both cost views. Also the field's token notation (``2e12``, ``2T``, ``300B``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from arch_space import Accelerator, Cluster, embodied_kgco2e
from arch_space.system import board_limit_w
from arch_space.tco import COST_VIEWS
from phaze.model.scoring import (
    Score,
    ScoringParams,
    embodied_parts_kgco2e,
    embodied_share_kgco2e,
    job_cost,
    system_capex,
)
from phaze_common.errors import ConfigError

__all__ = ["MAX_TOKENS", "RunAnswers", "parse_tokens", "run_answers"]

_SUFFIX: Final = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}
_TOKENS: Final = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([kmbgt]?)\s*$", re.I)
#: The largest token budget accepted: 10^16, about 700 times Llama 3's 15.6T.
MAX_TOKENS: Final = 10**16


def parse_tokens(text: str) -> int:
    """A token count in the field's notation: ``2e12``, ``2T``, ``300B``, ``1.4t``.

    Examples
    --------
    >>> parse_tokens("2T"), parse_tokens("300B"), parse_tokens("2e12")
    (2000000000000, 300000000000, 2000000000000)
    """
    m = _TOKENS.match(str(text))
    value = float(m.group(1)) * _SUFFIX[m.group(2).lower()] if m else 0.0
    if value < 1:
        raise ConfigError(
            f"tokens = {text!r} must be a positive count like 2e12, 2T or 300B (K, M, B, T suffixes)"
        )
    if value > MAX_TOKENS:
        raise ConfigError(f"tokens = {text!r} must be at most 1e16 (10,000T)")
    return round(value)


@dataclass(frozen=True, slots=True)
class RunAnswers:
    """Figures of a whole training run (units in the names)."""

    tokens_to_train: float
    tokens_source: str
    time_to_train_s: float  # wall clock: the failure-free time over the goodput
    training_s: float  # failure-free
    goodput: float
    device_hours: float
    energy_j: float  # facility energy: IT energy (devices and hosts) x PUE
    it_energy_j: float
    restart_energy_j: float  # IT energy of devices idling and hosts while restarting
    energy_tdp_accounting_kwh: float  # model-card accounting: device-hours x board TDP x PUE
    tdp_accounting_kgco2e: float
    board_tdp_w: float
    avg_device_power_w: float  # one accelerator board, averaged over the run
    avg_node_power_w: float  # one node full of such devices: its accelerators and its host
    operational_kgco2e: float
    embodied_kgco2e: float  # boards and their host and network shares
    embodied_breakdown_kgco2e: Mapping[str, float]
    total_kgco2e: float
    tcdp_kgco2e_s: float
    tcdp_kgco2e_days: float
    capex_usd: float  # the whole system: accelerators, hosts, network, data centre
    cost_view: str
    accelerator_usd: Mapping[str, float]  # one accelerator, by view
    usd_per_device_hour: float
    cost_breakdown: Mapping[str, float]  # USD over the run, by term
    electricity_usd: float
    tco_usd: float
    tco_usd_by_view: Mapping[str, float]
    embodied_mode: str
    pue: float
    grid_gco2e_per_kwh: float
    usd_per_kwh: float
    interest: float


def run_answers(
    score: Score,
    *,
    acc: Accelerator,
    cluster: Cluster,
    tokens_to_train: float,
    tokens_source: str,
    params: ScoringParams,
) -> RunAnswers:
    """The whole-run figures of ``acc`` scored on ``cluster`` for ``tokens_to_train``."""
    params = params.for_accelerator(acc.profile_name)
    devices = cluster.devices
    board_j = score.energy_per_batch_j - score.energy_host_j
    batches_j = score.energy_per_batch_j * (tokens_to_train / _batch_tokens(score))
    device_hours = devices * score.time_to_train_s / 3600.0
    board_w = board_limit_w(acc.profile_name, acc.node_nm)
    tdp_kwh = device_hours * board_w / 1000.0 * params.pue
    parts = embodied_parts_kgco2e(devices, embodied_kgco2e(acc), params)
    embodied = {
        k: embodied_share_kgco2e(devices, v, score.time_to_train_s, params)
        for k, v in parts.items()
    }
    capex = {view: system_capex(acc, devices, params, view) for view in COST_VIEWS}
    costs = {
        view: job_cost(
            time_to_train_s=score.time_to_train_s,
            job_energy_j=score.job_energy_j,
            devices=devices,
            capex=c,
            params=params,
        )
        for view, c in capex.items()
    }
    chosen = costs[params.cost_view]
    return RunAnswers(
        tokens_to_train=tokens_to_train,
        tokens_source=tokens_source,
        time_to_train_s=score.time_to_train_s,
        training_s=score.time_to_train_s * params.goodput,
        goodput=params.goodput,
        device_hours=device_hours,
        energy_j=score.job_energy_j * params.pue,
        it_energy_j=score.job_energy_j,
        restart_energy_j=score.job_energy_j - batches_j,
        energy_tdp_accounting_kwh=tdp_kwh,
        tdp_accounting_kgco2e=tdp_kwh * params.grid_gco2e_per_kwh / 1000.0,
        board_tdp_w=board_w,
        avg_device_power_w=board_j / score.iteration_s / devices,
        avg_node_power_w=score.energy_per_batch_j / score.iteration_s / cluster.host_share,
        operational_kgco2e=score.operational_kgco2e,
        embodied_kgco2e=score.embodied_kgco2e,
        embodied_breakdown_kgco2e=embodied,
        total_kgco2e=score.total_kgco2e,
        tcdp_kgco2e_s=score.tcdp,
        tcdp_kgco2e_days=score.tcdp_kgco2e_days,
        capex_usd=score.system_cost_usd,
        cost_view=params.cost_view,
        accelerator_usd={v: float(c.accelerator_usd) for v, c in capex.items()},
        usd_per_device_hour=score.usd_per_device_hour,
        cost_breakdown=chosen.breakdown_usd(),
        electricity_usd=score.electricity_usd,
        tco_usd=score.tco_usd,
        tco_usd_by_view={v: c.tco_usd for v, c in costs.items()},
        embodied_mode=params.embodied_mode,
        pue=params.pue,
        grid_gco2e_per_kwh=float(params.grid_gco2e_per_kwh),
        usd_per_kwh=float(params.usd_per_kwh),
        interest=float(params.interest),
    )


def _batch_tokens(score: Score) -> float:
    """Tokens per iteration, from the score's rates."""
    return score.tokens_per_s * score.iteration_s
