"""The time model against published training runs: one prediction per registry run, and
summaries of the errors by fit, GPU and framework.

A run is predicted through :func:`phaze.api.evaluate` with its complete strategy (the path of
``phaze evaluate --strategy``), on its system's preset and links, under the framework profile
the registry resolves for its stack. The error is that of the published metric: the
predicted iteration time turned into the publication's own metric (its FLOP count, its
peak, its batch's tokens), against the published figure.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from arch_space import Accelerator, Cluster, preset
from arch_space.perf.device import DeviceProfile, preset_profile
from arch_space.power import limited_clock_fraction
from phaze.api import evaluate
from phaze.model.pipeline import Evaluation
from phaze.validation.published_runs import (
    METRICS,
    PublishedRun,
    Registry,
    RunSystem,
    measured_iteration_s,
    metric_from_iteration_s,
)
from phaze.validation.rows import FitResult, ValidationRow, fit_device
from phaze_common.errors import ConfigError
from workloads import resolve_model

__all__ = [
    "RunResult",
    "Targets",
    "evaluate_published",
    "evaluate_run",
    "evaluate_runs",
    "predict_iteration_s",
    "system_device",
    "summarize",
    "outside_targets",
    "fit_preset",
    "fitted_rows",
    "model_kind",
]

_GIB: Final = 1 << 30


@dataclass(frozen=True, slots=True)
class Targets:
    """What ``phaze validate runs`` holds the model to, in % of the published metric: the
    held-out rows' mean and largest |error|, every fitted row's |error|, and the held-out
    mean within each GPU preset, each framework and the mixture-of-experts rows (a search
    goes wherever one group is over-predicted, so an overall mean is not enough)."""

    held_out_mean_pct: float = 8.0
    held_out_max_pct: float = 25.0
    fitted_max_pct: float = 8.0
    group_mean_pct: float = 12.0


@dataclass(frozen=True, slots=True)
class RunResult:
    """A run beside its prediction; ``predicted_iteration_s`` is None when the model finds
    the published layout infeasible (``reason`` says why)."""

    run: PublishedRun
    profile_used: str
    profile_note: str
    measured_iteration_s: float
    predicted_iteration_s: float | None
    reason: str = ""

    @property
    def predicted(self) -> float | None:
        """The prediction in the publication's metric."""
        if self.predicted_iteration_s is None:
            return None
        return metric_from_iteration_s(self.run, self.predicted_iteration_s)

    @property
    def error_pct(self) -> float | None:
        """Signed error of the predicted metric, in % of the published one."""
        p = self.predicted
        return None if p is None else 100.0 * (p / self.run.measured - 1.0)

    @property
    def time_error_pct(self) -> float | None:
        """Signed error of the predicted iteration time (+: the model is slower than the run),
        one sign for every metric."""
        t = self.predicted_iteration_s
        return None if t is None else 100.0 * (t / self.measured_iteration_s - 1.0)

    def record(self) -> dict[str, Any]:
        """The row as ``--json`` prints it: the inputs, the published and predicted figures."""
        r = self.run
        return {
            "id": r.id,
            "label": r.label,
            "arch": r.arch,
            "gpus": r.gpus,
            "framework": r.framework,
            "framework_version": r.framework_version,
            "profile_used": self.profile_used,
            "profile_note": self.profile_note,
            "fitted": r.fitted,
            "model": r.model,
            "seq_len": r.seq_len,
            "global_batch": r.global_batch,
            "strategy": r.strategy,
            "state_bytes": r.state_bytes,
            "optimizer_state": r.optimizer_state,
            "system": r.system.key,
            "devices_per_node": r.system.devices_per_node,
            "intra_node_bandwidth_bytes_per_s": r.system.intra_node_bandwidth_bytes_per_s,
            "inter_node_bandwidth_bytes_per_s": r.system.inter_node_bandwidth_bytes_per_s,
            "hbm_gib": r.system.hbm_gib,
            "metric": r.metric,
            "unit": METRICS[r.metric],
            "flop_convention": r.flops,
            "measured": r.measured,
            "predicted": self.predicted,
            "error_pct": self.error_pct,
            "measured_iteration_s": self.measured_iteration_s,
            "predicted_iteration_s": self.predicted_iteration_s,
            "time_error_pct": self.time_error_pct,
            "infeasible_reason": self.reason,
            "assumed": list(r.assumed),
            "source": r.citation,
            "notes": r.notes,
        }


def system_device(
    system: RunSystem, device: DeviceProfile | None = None
) -> tuple[Accelerator, DeviceProfile | None]:
    """The preset of ``system`` with its HBM capacity and bandwidth, and the sustained rates
    (``device``, else the preset's) at its board power limit: the preset's training clock
    times the share of the clock the power model holds at the system's limit over that at
    the preset's (:func:`arch_space.power.limited_clock_fraction`). ``device`` stays None
    when the system is the preset as shipped. A system clocking the preset's die otherwise
    (``clock_hz``) runs it at that clock, measured as the preset."""
    acc = preset(system.arch)
    if system.hbm_gib is not None:
        acc = dataclasses.replace(acc, hbm_bytes=round(system.hbm_gib * _GIB))
    if system.clock_hz is not None:
        acc = dataclasses.replace(acc, clock_hz=system.clock_hz, measured_as=system.arch)
    if system.hbm_bandwidth_bytes_per_s is None and system.power_limit_w is None:
        return acc, device
    base = device or preset_profile(system.arch)  # the preset's, though its HBM changes
    if system.power_limit_w is not None:
        held = limited_clock_fraction(acc, system.power_limit_w)
        as_shipped = dataclasses.replace(acc, clock_hz=preset(system.arch).clock_hz)
        shipped = limited_clock_fraction(as_shipped, base.board_limit_w)
        base = dataclasses.replace(
            base,
            sustained_clock_fraction=base.sustained_clock_fraction * held / shipped,
            board_limit_w=system.power_limit_w,
        )
    if system.hbm_bandwidth_bytes_per_s is not None:
        acc = dataclasses.replace(acc, hbm_bandwidth_bytes_per_s=system.hbm_bandwidth_bytes_per_s)
    return acc, base


def evaluate_published(
    run: PublishedRun, framework: str, device: DeviceProfile | None = None
) -> Evaluation:
    """``run`` evaluated in its published layout and system under ``framework`` (``device``
    overrides the preset's sustained rates)."""
    acc, device = system_device(run.system, device)
    cluster = Cluster(
        devices=run.gpus,
        devices_per_node=run.system.devices_per_node,
        intra_node_bandwidth_bytes_per_s=run.system.intra_node_bandwidth_bytes_per_s,
        inter_node_bandwidth_bytes_per_s=run.system.inter_node_bandwidth_bytes_per_s,
    )
    try:
        return evaluate(
            run.model,
            acc,
            cluster,
            seq_len=run.seq_len,
            global_batch=run.global_batch,
            strategy=run.strategy,
            # whole-run figures are not validated here: one iteration's tokens
            tokens_to_train=run.global_batch * run.seq_len,
            framework=framework,
            device=device,
            state_bytes_per_parameter=run.state_bytes,
            optimizer_state=run.optimizer_state,
            # a published run trained at its length: past the context, it extended it
            # (Llama 3's long-context stage scales RoPE to 131,072 tokens)
            allow_context_extension=True,
        )
    except ConfigError as e:
        raise ConfigError(f"run {run.id}: {e}") from None


def predict_iteration_s(
    run: PublishedRun, framework: str, device: DeviceProfile | None = None
) -> tuple[float | None, str]:
    """The model's iteration time of ``run`` under ``framework`` (``device`` overrides the
    preset's sustained rates), or None and the reason when the layout does not fit."""
    ev = evaluate_published(run, framework, device)
    if ev.placement is None:
        return None, ev.reason
    return ev.placement.breakdown.iteration_s, ""


def evaluate_run(
    run: PublishedRun, registry: Registry, device: DeviceProfile | None = None
) -> RunResult:
    """``run`` predicted under the profile the registry resolves for its stack."""
    profile, note = registry.run_profile(run)
    predicted, reason = predict_iteration_s(run, profile, device)
    return RunResult(run, profile, note, measured_iteration_s(run), predicted, reason)


def evaluate_runs(
    runs: Sequence[PublishedRun],
    registry: Registry,
    progress: Callable[[int, PublishedRun], None] | None = None,
) -> list[RunResult]:
    """Every run of ``runs`` in order; ``progress(i, run)`` is called before each."""
    out = []
    for i, run in enumerate(runs):
        if progress is not None:
            progress(i, run)
        out.append(evaluate_run(run, registry))
    return out


def _group(results: Iterable[RunResult]) -> dict[str, Any]:
    results = list(results)
    errors = [abs(e) for r in results if (e := r.error_pct) is not None]
    times = [t for r in results if (t := r.time_error_pct) is not None]
    return {
        "runs": len(results),
        "infeasible": len(results) - len(errors),
        "mean_abs_error_pct": math.fsum(errors) / len(errors) if errors else None,
        "max_abs_error_pct": max(errors, default=None),
        "mean_time_error_pct": math.fsum(times) / len(times) if times else None,
    }


def _by(results: Sequence[RunResult], key: Callable[[RunResult], str]) -> dict[str, Any]:
    keys = dict.fromkeys(key(r) for r in results)
    return {
        k: {
            "fitted": _group(r for r in results if key(r) == k and r.run.fitted),
            "held_out": _group(r for r in results if key(r) == k and not r.run.fitted),
        }
        for k in keys
    }


def model_kind(run: PublishedRun) -> str:
    """``moe`` when the run's model routes tokens to experts, else ``dense``."""
    return "moe" if resolve_model(run.model).experts > 1 else "dense"


def summarize(results: Sequence[RunResult]) -> dict[str, Any]:
    """Mean and largest |error| (and the mean signed iteration-time error, the model's bias)
    of the fitted rows and of the held-out rows, overall, by GPU, by framework, by
    precision recipe and by model kind (dense or mixture of experts)."""
    return {
        "fitted": _group(r for r in results if r.run.fitted),
        "held_out": _group(r for r in results if not r.run.fitted),
        "by_gpu": _by(results, lambda r: r.run.arch),
        "by_framework": _by(results, lambda r: r.run.framework),
        "by_precision": _by(results, lambda r: r.run.precision),
        "by_model": _by(results, lambda r: model_kind(r.run)),
    }


def outside_targets(summary: dict[str, Any], targets: Targets) -> list[str]:
    """Each target the summary misses, in words (empty when all are met); a row the model
    finds infeasible misses its group's target."""
    held, fitted = summary["held_out"], summary["fitted"]
    misses = []
    for name, group in (("held-out", held), ("fitted", fitted)):
        if group["infeasible"]:
            misses.append(f"{group['infeasible']} {name} runs infeasible in the model")
    if held["runs"] and (held["mean_abs_error_pct"] or 0.0) > targets.held_out_mean_pct:
        misses.append(
            f"held-out mean |error| {held['mean_abs_error_pct']:.1f}% > "
            f"{targets.held_out_mean_pct:g}%"
        )
    if held["runs"] and (held["max_abs_error_pct"] or 0.0) > targets.held_out_max_pct:
        misses.append(
            f"held-out max |error| {held['max_abs_error_pct']:.1f}% > {targets.held_out_max_pct:g}%"
        )
    if fitted["runs"] and (fitted["max_abs_error_pct"] or 0.0) > targets.fitted_max_pct:
        misses.append(
            f"fitted max |error| {fitted['max_abs_error_pct']:.1f}% > {targets.fitted_max_pct:g}%"
        )
    groups = [("gpu", k, g) for k, g in summary["by_gpu"].items()]
    groups += [("framework", k, g) for k, g in summary["by_framework"].items()]
    groups += [("model", "moe", summary["by_model"]["moe"])] if "moe" in summary["by_model"] else []
    for kind, key, group in groups:
        mean = group["held_out"]["mean_abs_error_pct"]
        if mean is not None and mean > targets.group_mean_pct:
            misses.append(
                f"{kind} {key} held-out mean |error| {mean:.1f}% > {targets.group_mean_pct:g}%"
            )
    return misses


def fitted_rows(
    runs: Sequence[PublishedRun], registry: Registry, device: DeviceProfile
) -> list[ValidationRow]:
    """``runs`` predicted with ``device``'s sustained rates, as rows of the metric (what a
    fit of a preset's parameters minimises); an infeasible run is a 100 % error."""
    out = []
    for run in runs:
        r = evaluate_run(run, registry, device)
        predicted = r.predicted if r.predicted is not None else 2.0 * run.measured
        out.append(ValidationRow(run.id, run.measured, predicted, run.citation))
    return out


def fit_preset(registry: Registry, arch: str) -> tuple[FitResult, list[ValidationRow]]:
    """The :data:`arch_space.perf.device.FITTED_NAMES` parameters of preset ``arch`` fitted
    to its runs marked ``fitted`` (one value each for the preset, never per run), and those
    runs at the fitted values. ConfigError when no run of ``arch`` is marked."""
    runs = [r for r in registry.runs if r.fitted and r.arch == arch]
    if not runs:
        marked = sorted({r.arch for r in registry.runs if r.fitted})
        raise ConfigError(
            f"--fit {arch}: no run of {arch} is marked fitted in {registry.path} "
            f"(presets with fitted runs: {', '.join(marked) or 'none'})"
        )
    fit = fit_device(
        preset_profile(arch),
        lambda device: fitted_rows(runs, registry, device),
        [r.id for r in runs],
        f"the published runs of {registry.path}",
        command=f"phaze validate runs --fit {arch}",
    )
    return fit, fitted_rows(runs, registry, fit.device)
