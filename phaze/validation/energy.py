"""Power, GPU-hours and energy of published training runs beside the model's predictions
(``phaze validate energy`` renders them).

Each run (``arch_space/data/energy_runs.toml``) is evaluated in its published (or stated
assumed) layout. A run published as measured system power (GPT-3) is compared with the
modelled average draw with its host's share, and that power times the published GPU-hours
(and PUE) with the published energy. A run published as GPU-hours x the board's power limit
(Llama 2, BLOOM: TDP accounting, not a measurement) is compared the same way its figures
were made: the modelled power limit (:func:`arch_space.power.tdp_w`) against the published
one, the GPU-hours the model predicts for the published tokens against the published hours,
and their product against the published energy. Its modelled average draw is reported
beside, not held to the power limit. Every run also shows its energy both ways: modelled
(average draw with the host's share x GPU-hours x PUE) and as a model card counts it
(GPU-hours x the board's TDP x PUE).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from arch_space import Cluster, preset
from arch_space._data import shipped_toml
from arch_space.power import tdp_w
from arch_space.system import board_limit_w
from phaze.api import evaluate as api_evaluate
from phaze.model.scoring import ScoringParams
from phaze.validation.rows import ValidationRow
from phaze_common.errors import Infeasible

__all__ = ["CALIBRATED_LIMITS", "J_PER_KWH", "EnergyValidation", "energy_rows"]

_J_PER_WH: Final = 3600.0  # joules per watt-hour: power (W) x GPU-hours -> J
J_PER_KWH: Final = 3.6e6  # joules per kilowatt-hour
#: Presets whose modelled power limit is a calibration target (benchmarks/calibrate_energy.py):
#: their power-limit rows are in-sample and labelled so.
CALIBRATED_LIMITS: Final = frozenset({"a100", "tpuv4"})


@dataclass(frozen=True, slots=True)
class EnergyValidation:
    """Rows of every published run: power (W), GPU-hours, energy (J), operational carbon
    (kgCO2e), and each run's modelled average board draw and draw with its host's share (W),
    its modelled energy and its model-card energy (J, GPU-hours x board TDP x PUE)."""

    power: tuple[ValidationRow, ...]
    hours: tuple[ValidationRow, ...]
    energy: tuple[ValidationRow, ...]
    carbon: tuple[ValidationRow, ...]
    runs: tuple[tuple[str, float, float, float, float], ...]


def energy_rows() -> EnergyValidation:
    """Predictions beside the published figures of every run of ``energy_runs.toml``."""
    power, hours, energy, carbon, runs = [], [], [], [], []
    for name, run in shipped_toml("energy_runs.toml")["run"].items():
        acc = preset(run["arch"])
        ev = api_evaluate(
            run["workload"],
            acc,
            Cluster(devices=run["devices"]),
            seq_len=run["seq_len"],
            global_batch=run["global_batch"],
            strategy=run["strategy"],
            framework=run["framework"],
            scoring=ScoringParams(host_profile=run["host"], pue=run["pue"]),
        )
        if not ev.feasible:
            raise Infeasible(f"{name} in its published layout: {ev.reason}")
        sc = ev.score
        with_host = sc.energy_per_batch_j / sc.iteration_s / run["devices"]
        board = (sc.energy_per_batch_j - sc.energy_host_j) / sc.iteration_s / run["devices"]
        source = (
            f"{run['source']}; layout {run['layout_source']}; "
            f"framework {run['framework']}: {run['framework_source']}"
        )
        if run["accounting"] == "tdp":
            fit = " (fit)" if run["arch"] in CALIBRATED_LIMITS else ""
            case, published_w, watts = f"power limit{fit}", run["board_w"], tdp_w(acc)
            iterations = run["tokens"] / (run["global_batch"] * run["seq_len"])
            gpu_hours = iterations * sc.iteration_s * run["devices"] / _J_PER_WH
            hours.append(ValidationRow(f"{name} GPU-hours", run["gpu_hours"], gpu_hours, source))
            published_j = run["board_energy_j"]
        else:
            case, published_w, watts = "with host", run["system_w"], with_host
            gpu_hours, published_j = run["gpu_hours"], run["facility_energy_j"]
        energy_j = watts * gpu_hours * _J_PER_WH * run["pue"]
        modelled_j = with_host * gpu_hours * _J_PER_WH * run["pue"]
        tdp_j = board_limit_w(acc.profile_name, acc.node_nm) * gpu_hours * _J_PER_WH * run["pue"]
        runs.append((name, board, with_host, modelled_j, tdp_j))
        power.append(ValidationRow(f"{name} {case} W", published_w, watts, source))
        energy.append(ValidationRow(f"{name} {case}", published_j, energy_j, source))
        kg = energy_j / J_PER_KWH * run["grid_gco2e_per_kwh"] / 1000.0
        carbon.append(ValidationRow(name, run["operational_kgco2e"], kg, source))
    return EnergyValidation(*(tuple(x) for x in (power, hours, energy, carbon, runs)))
