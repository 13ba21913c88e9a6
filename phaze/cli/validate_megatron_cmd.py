"""``phaze validate megatron``: Megatron-LM iteration times beside Phaze's predictions.

The measurements are Korthikanti et al. 2022, Table 5: GPT models on A100-80GB GPUs (8 per
node, NVLink inside a node, InfiniBand between), sequence length 2048, with full activation
recomputation and with selective recomputation plus sequence parallelism. Each row is predicted
from first principles: the layer graph of the model, the op model of the A100 preset, the layer
schedules, and the fixed strategy of the paper evaluated by :func:`placement.evaluate_fixed`
(which includes the optimizer step). The cluster is a DGX A100 pod (NVLink 3 inside a node,
one HDR InfiniBand NIC per GPU); the A100 preset's measured sustained rates
(``arch_space/data/devices.toml``) price its GEMMs and collectives.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import click

from arch_space import Cluster
from arch_space.perf.device import DeviceProfile, preset_profile, profile_from_mapping
from arch_space.presets import preset
from phaze.api import evaluate
from phaze.cli import NoFeasiblePoint
from phaze.cli.validate_cmd import ValidationRow, report_validation, tolerance_option
from phaze.cli.validate_fit import FitResult, fit_device
from phaze.cli.validate_heldout import held_out_rows
from phaze_common.errors import ConfigError
from placement import Layout

__all__ = ["MegatronRow", "TABLE5", "FRAMEWORK", "FIT_MODELS", "megatron"]

_SOURCE: Final = (
    "Korthikanti et al., 'Reducing Activation Recomputation in Large Transformer Models', "
    "arXiv:2205.05198 (2022), Table 5: A100-80GB, seq 2048, iteration time"
)


@dataclass(frozen=True, slots=True)
class MegatronRow:
    """One Table 5 configuration and its two measured iteration times (s)."""

    model: str
    gpus: int
    tp: int
    pp: int
    virtual_stages: int
    global_batch: int
    micro_batch: int
    full_recompute_s: float
    selective_sp_s: float


TABLE5: Final = (
    MegatronRow("korthikanti-22b", 8, 8, 1, 1, 4, 4, 1.42, 1.10),
    MegatronRow("korthikanti-175b", 64, 8, 8, 3, 64, 1, 18.13, 13.75),
    MegatronRow("korthikanti-530b", 280, 8, 35, 3, 280, 1, 49.05, 37.83),
    MegatronRow("korthikanti-1t", 512, 8, 64, 1, 512, 1, 94.42, 71.49),
)
_MEAN_TARGET_PCT: Final = 8.0
#: The overlap rules of the Megatron-LM code that produced Table 5.
FRAMEWORK: Final = "megatron-2022"


#: The rows the preset's unmeasured parameters are fitted to; the others are held out.
FIT_MODELS: Final = ("korthikanti-22b", "korthikanti-530b")


def _predict(
    model: str, gpus: int, strategy: Layout, global_batch: int, device: DeviceProfile | None
) -> float:
    """The predicted iteration time of ``model`` under ``strategy`` on ``gpus`` A100s."""
    ev = evaluate(
        model,
        preset("a100"),
        Cluster(devices=gpus, devices_per_node=8),
        seq_len=2048,
        global_batch=global_batch,
        strategy=strategy,
        # whole-job figures are not validated here: one iteration's tokens
        tokens_to_train=global_batch * 2048,
        framework=FRAMEWORK,
        device=device,
    )
    return ev.placement.breakdown.iteration_s if ev.placement else math.inf


def _rows(device: DeviceProfile | None = None) -> list[ValidationRow]:
    """Every Table 5 case predicted on the A100 preset (``device`` overrides its rates)."""
    out = []
    for r in TABLE5:
        for recompute, sp, measured in (
            ("full", False, r.full_recompute_s),
            ("selective", True, r.selective_sp_s),
        ):
            strategy = Layout(
                t=r.tp,
                p=r.pp,
                d=r.gpus // (r.tp * r.pp),
                mbs=r.micro_batch,
                v=r.virtual_stages,
                recompute=recompute,
                sp=sp,
            )
            predicted = _predict(r.model, r.gpus, strategy, r.global_batch, device)
            label = "full recompute" if recompute == "full" else "selective + SP"
            out.append(ValidationRow(f"{r.model} {label}", measured, predicted, _SOURCE))
    return out


def _marked(rows: list[ValidationRow], device: DeviceProfile) -> list[ValidationRow]:
    """The rows with their part in the fit named, when the device has fitted parameters."""
    if not device.fitted:
        return rows
    return [
        dataclasses.replace(
            r, case=f"{r.case} ({'fit' if r.case.startswith(FIT_MODELS) else 'held out'})"
        )
        for r in rows
    ]


def _calibration(path: Path) -> DeviceProfile:
    """The A100 profile of a calibration file (a ``devices.toml``-style table ``[a100]``)."""
    try:
        data = tomllib.loads(path.read_text("utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"calibration file {path}: cannot be read ({e})") from None
    if set(data) != {"a100"}:
        raise ConfigError(
            f"calibration file {path}: has tables {sorted(data)}; validate megatron runs the "
            "a100 preset, so it needs exactly one table [a100]"
        )
    return profile_from_mapping("a100", data["a100"], f"calibration file {path} [a100]")


def _print_fit(result: FitResult) -> None:
    click.echo(f"fitted to {', '.join(result.fit_cases)} (both recompute modes) of:")
    click.echo(f"  {_SOURCE}")
    click.echo(f"framework {FRAMEWORK}; RMS error {result.rms_error_pct:.2f}% on those rows")
    click.echo("[a100.fitted]  # arch_space/data/devices.toml")
    for name, value in result.values.items():
        click.echo(f"{name} = {value:g}")
    click.echo(f'provenance = "{result.device.provenance}"')
    click.echo("")


@click.command("megatron")
@tolerance_option("--tolerance-pct", 15.0, "any case")
@click.option(
    "--fit",
    is_flag=True,
    help="Fit the A100's unmeasured parameters to the 22B and 530B rows, print them, and "
    "validate with them (the other rows held out).",
)
@click.option(
    "--calibration",
    type=click.Path(dir_okay=False, path_type=Path),
    help="A TOML file with an [a100] table replacing the shipped A100 rates and fitted values.",
)
@click.option(
    "--held-out",
    is_flag=True,
    help="Also predict other published Megatron-LM runs (SC21 Tables 1 and 2, the 530B "
    "d = 8 run) with the same settings: informative, not part of the exit status.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def megatron(
    tolerance_pct: float, fit: bool, calibration: Path | None, held_out: bool, as_json: bool
) -> None:
    """Megatron-LM iteration times (Korthikanti et al. 2022, Table 5) against predictions,
    under the overlap rules of the Megatron-LM of that paper (framework megatron-2022).

    Rows marked (fit) were used to fit the preset's unmeasured parameters; (held out) were
    not. Exits 3 when a case is outside the tolerance or the mean |error| exceeds 8%.
    """
    device = _calibration(calibration) if calibration else preset_profile("a100")
    if fit:
        result = fit_device(device, _rows, FIT_MODELS, _SOURCE)
        device = result.device
        if not as_json:
            _print_fit(result)
    rows = _marked(_rows(device), device)
    extra = None
    if held_out:
        extra = (
            "Held out: other published Megatron-LM runs, same settings (not fitted to, "
            "no tolerance)",
            held_out_rows(lambda r: _predict(r.model, r.gpus, r.strategy, r.global_batch, device)),
        )
    report_validation(
        "Megatron-LM iteration time on A100-80GB",
        rows,
        unit="s",
        tolerance_pct=tolerance_pct,
        as_json=as_json,
        informative=extra,
    )
    mean = math.fsum(abs(r.error_pct) for r in rows) / len(rows)
    if mean > _MEAN_TARGET_PCT:
        raise NoFeasiblePoint(f"mean |error| {mean:.1f}% exceeds {_MEAN_TARGET_PCT:g}%")
