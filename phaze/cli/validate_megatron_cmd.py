"""``phaze validate megatron``: Megatron-LM iteration times beside Phaze's predictions.

The measurements are Korthikanti et al. 2022, Table 5: GPT models on A100-80GB GPUs (8 per
node, NVLink inside a node, InfiniBand between), sequence length 2048, with full activation
recomputation and with selective recomputation plus sequence parallelism. The rows (and the
held-out ones of ``--held-out``) are runs of the registry ``phaze/data/published_runs.toml``
(suites ``megatron-table5`` and ``megatron-held-out``), predicted from first principles as
``phaze validate runs`` predicts them (:func:`phaze.validation.runs.predict_iteration_s`: the
paper's fixed strategy on the A100 preset, on Selene's links), always under the overlap rules
of ``megatron-2022``; the A100 preset's measured sustained rates
(``[devices]`` of ``arch_space/data/chips/a100.toml``) price its GEMMs and collectives.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Final

import click

from arch_space.perf.device import DeviceProfile, preset_profile, profile_from_mapping
from phaze.cli import NoFeasiblePoint
from phaze.cli.validate_cmd import report_validation, tolerance_option
from phaze.validation.published_runs import PublishedRun, default_registry, measured_iteration_s
from phaze.validation.rows import FitResult, ValidationRow, fit_device
from phaze.validation.runs import predict_iteration_s
from phaze_common.errors import ConfigError
from phaze_common.files import read_toml

__all__ = ["FRAMEWORK", "TABLE5_SUITE", "HELD_OUT_SUITE", "fit_models", "megatron"]

#: The overlap rules of the Megatron-LM code that produced Table 5.
FRAMEWORK: Final = "megatron-2022"
#: The registry's suites (phaze/data/published_runs.toml): Korthikanti et al. 2022 Table 5,
#: and the other published Megatron-LM runs held out of every fit.
TABLE5_SUITE: Final = "megatron-table5"
HELD_OUT_SUITE: Final = "megatron-held-out"
_MEAN_TARGET_PCT: Final = 8.0


def _suite(name: str) -> list[PublishedRun]:
    return [r for r in default_registry().runs if r.suite == name]


def fit_models() -> tuple[str, ...]:
    """The Table 5 models the preset's unmeasured parameters are fitted to (the registry's
    fitted rows, both recompute modes); the others are held out."""
    return tuple(dict.fromkeys(r.model for r in _suite(TABLE5_SUITE) if r.fitted))


def _predict(run: PublishedRun, device: DeviceProfile | None) -> float:
    """The predicted iteration time of ``run`` under Table 5's framework rules."""
    predicted, _ = predict_iteration_s(run, FRAMEWORK, device)
    return math.inf if predicted is None else predicted


def _rows(device: DeviceProfile | None = None) -> list[ValidationRow]:
    """Every Table 5 case predicted on the A100 preset (``device`` overrides its rates)."""
    return [
        ValidationRow(r.label, r.measured, _predict(r, device), r.citation)
        for r in _suite(TABLE5_SUITE)
    ]


def _table5_source() -> str:
    return _suite(TABLE5_SUITE)[0].citation


def _held_out_rows(device: DeviceProfile) -> list[ValidationRow]:
    """The held-out runs as iteration times (a throughput through its source's own FLOP
    count); a case resting on a setting its source leaves open says which."""
    out = []
    for r in _suite(HELD_OUT_SUITE):
        label = f"{r.label} (assumed: {', '.join(r.assumed)})" if r.assumed else r.label
        out.append(ValidationRow(label, measured_iteration_s(r), _predict(r, device), r.citation))
    return out


def _marked(rows: list[ValidationRow], device: DeviceProfile) -> list[ValidationRow]:
    """The rows with their part in the fit named, when the device has fitted parameters."""
    if not device.fitted:
        return rows
    fitted = fit_models()
    return [
        dataclasses.replace(
            r, case=f"{r.case} ({'fit' if r.case.startswith(fitted) else 'held out'})"
        )
        for r in rows
    ]


def _calibration(path: Path) -> DeviceProfile:
    """The A100 profile of a calibration file (a ``devices.toml``-style table ``[a100]``)."""
    data = read_toml(path, "calibration file")
    if set(data) != {"a100"}:
        raise ConfigError(
            f"calibration file {path}: has tables {sorted(data)}; validate megatron runs the "
            "a100 preset, so it needs exactly one table [a100]"
        )
    return profile_from_mapping("a100", data["a100"], f"calibration file {path} [a100]")


def _print_fit(result: FitResult) -> None:
    click.echo(f"fitted to {', '.join(result.fit_cases)} (both recompute modes) of:")
    click.echo(f"  {_table5_source()}")
    click.echo(f"framework {FRAMEWORK}; RMS error {result.rms_error_pct:.2f}% on those rows")
    click.echo("[devices.fitted]  # arch_space/data/chips/a100.toml")
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
    type=click.Path(path_type=Path),
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
        result = fit_device(device, _rows, fit_models(), _table5_source())
        device = result.device
        if not as_json:
            _print_fit(result)
    rows = _marked(_rows(device), device)
    extra = None
    if held_out:
        extra = (
            "Held out: other published Megatron-LM runs, same settings (not fitted to, "
            "no tolerance)",
            _held_out_rows(device),
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
