"""Whole-run answers: time, energy, power, carbon and cost of training on a token budget.

From one scored iteration (:class:`phaze.scoring.Score`, with its energy terms) and the
budget it was scored for: device-hours, facility energy (IT energy x PUE), average board
power of an accelerator and of a node with its host, carbon, tCDP, the system cost (capex),
electricity and their sum over the run (TCO: the capex's share of the devices' lifetime plus
electricity). Also the field's token notation (``2e12``, ``2T``, ``300B``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from arch_space.accelerator import node_count
from phaze.scoring import Score, ScoringParams, embodied_share_kgco2e
from phaze_common.errors import ConfigError

__all__ = ["RunAnswers", "parse_tokens", "run_answers"]

_SUFFIX: Final = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}
_TOKENS: Final = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([kmbgt]?)\s*$", re.I)


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
    return round(value)


@dataclass(frozen=True, slots=True)
class RunAnswers:
    """Figures of a whole training run (units in the names; tcdp in kgCO2e*s)."""

    tokens_to_train: float
    tokens_source: str
    time_to_train_s: float
    device_hours: float
    energy_j: float  # facility energy: IT energy (devices and hosts) x PUE
    it_energy_j: float
    avg_device_power_w: float  # one accelerator board, averaged over the run
    avg_node_power_w: float  # one node: its accelerators and its host
    operational_kgco2e: float
    embodied_kgco2e: float  # accelerators and their hosts
    embodied_host_kgco2e: float  # the hosts' part of it
    total_kgco2e: float
    tcdp: float
    capex_usd: float
    electricity_usd: float
    tco_usd: float
    embodied_mode: str
    pue: float
    grid_gco2e_per_kwh: float
    usd_per_kwh: float


def run_answers(
    score: Score,
    *,
    devices: int,
    devices_per_node: int,
    tokens_to_train: float,
    tokens_source: str,
    params: ScoringParams,
) -> RunAnswers:
    """The whole-run figures of a point scored for ``tokens_to_train`` tokens."""
    nodes = node_count(devices, devices_per_node)
    device_j = score.energy_per_batch_j - score.energy_host_j
    return RunAnswers(
        tokens_to_train=tokens_to_train,
        tokens_source=tokens_source,
        time_to_train_s=score.time_to_train_s,
        device_hours=devices * score.time_to_train_s / 3600.0,
        energy_j=score.job_energy_j * params.pue,
        it_energy_j=score.job_energy_j,
        avg_device_power_w=device_j / score.iteration_s / devices,
        avg_node_power_w=score.energy_per_batch_j / score.iteration_s / nodes,
        operational_kgco2e=score.operational_kgco2e,
        embodied_kgco2e=score.embodied_kgco2e,
        embodied_host_kgco2e=embodied_share_kgco2e(devices, 0.0, score.time_to_train_s, params),
        total_kgco2e=score.total_kgco2e,
        tcdp=score.tcdp,
        capex_usd=score.system_cost_usd,
        electricity_usd=score.electricity_usd,
        tco_usd=score.tco_usd,
        embodied_mode=params.embodied_mode,
        pue=params.pue,
        grid_gco2e_per_kwh=float(params.grid_gco2e_per_kwh),
        usd_per_kwh=float(params.usd_per_kwh),
    )
