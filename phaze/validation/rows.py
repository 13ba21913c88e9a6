"""Published measurements beside the model's predictions (:class:`ValidationRow`), and
fitting a preset's unmeasured parameters to part of a validation table, honestly.

The ``phaze validate`` commands render these rows; what they hold and how a preset is fitted
is the model's, so the library (:mod:`phaze.validation.runs`) uses them without the CLI.

At most the parameters of :data:`arch_space.perf.device.FITTED_NAMES` are fitted, one value
each for the whole preset (never per case), by coordinate descent with golden-section line
searches on the root-mean-square % error of the fitting cases; the other cases are held out.
Deterministic: the same data give the same values.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from arch_space.perf.device import FITTED_NAMES, DeviceProfile

__all__ = [
    "ValidationRow",
    "BOUNDS",
    "golden_min",
    "coordinate_fit",
    "fit_device",
    "rms_error_pct",
]

#: Where each fitted parameter is searched: all are shares in (0, 1].
BOUNDS: Final = {
    "sustained_clock_fraction": (0.7, 1.0),
    "collective_compute_share": (0.01, 1.0),
}
_PHI: Final = (math.sqrt(5.0) - 1.0) / 2.0


@dataclass(frozen=True, slots=True)
class ValidationRow:
    """One published measurement beside the model's prediction of it (same unit)."""

    case: str
    measured: float
    predicted: float
    source: str

    @property
    def error_pct(self) -> float:
        """Signed error of the prediction, in % of the measurement."""
        return 100.0 * (self.predicted - self.measured) / self.measured

    def record(self) -> dict[str, object]:
        """The row as ``--json`` prints it."""
        return {
            "case": self.case,
            "measured": self.measured,
            "predicted": self.predicted,
            "error_pct": self.error_pct,
            "source": self.source,
        }


@dataclass(frozen=True, slots=True)
class FitResult:
    """The fitted profile, the objective it reached and the cases it was fitted on."""

    device: DeviceProfile
    values: Mapping[str, float]
    rms_error_pct: float
    fit_cases: tuple[str, ...]


def rms_error_pct(rows: Sequence[ValidationRow]) -> float:
    """Root-mean-square of the rows' % errors."""
    return math.sqrt(math.fsum(r.error_pct**2 for r in rows) / len(rows))


def golden_min(f: Callable[[float], float], lo: float, hi: float, tol: float) -> float:
    """The minimiser of a unimodal ``f`` on [lo, hi] to within ``tol`` (golden section)."""
    a, b = lo, hi
    c, d = b - _PHI * (b - a), a + _PHI * (b - a)
    fc, fd = f(c), f(d)
    while b - a > tol:
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - _PHI * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + _PHI * (b - a)
            fd = f(d)
    return round((a + b) / 2.0, 3)


def coordinate_fit(
    objective: Callable[[Mapping[str, float]], float],
    start: Mapping[str, float],
    bounds: Mapping[str, tuple[float, float]],
    *,
    sweeps: int = 2,
    tol: float = 0.005,
) -> dict[str, float]:
    """Minimise ``objective`` over the parameters of ``start`` one at a time, ``sweeps``
    times over all of them, each within its ``bounds``."""
    x = dict(start)
    for _ in range(sweeps):
        for name in x:
            lo, hi = bounds[name]
            x[name] = golden_min(lambda v, name=name: objective({**x, name: v}), lo, hi, tol)
    return x


def fit_device(
    base: DeviceProfile,
    rows_for: Callable[[DeviceProfile], Sequence[ValidationRow]],
    fit_cases: Sequence[str],
    source: str,
    command: str = "phaze validate megatron --fit",
) -> FitResult:
    """Fit the :data:`FITTED_NAMES` parameters of ``base`` to the rows of ``rows_for`` whose
    case starts with one of ``fit_cases``; ``source`` names the data and ``command`` the fit
    for the provenance."""

    def with_values(values: Mapping[str, float]) -> DeviceProfile:
        return dataclasses.replace(base, **values)

    def objective(values: Mapping[str, float]) -> float:
        rows = rows_for(with_values(values))
        return rms_error_pct([r for r in rows if r.case.startswith(tuple(fit_cases))])

    start = {name: getattr(base, name) for name in FITTED_NAMES}
    start = {k: min(max(v, BOUNDS[k][0]), BOUNDS[k][1]) for k, v in start.items()}
    values = coordinate_fit(objective, start, BOUNDS)
    rms = objective(values)
    provenance = (
        f"fitted by `{command}` to {', '.join(fit_cases)} of {source}; "
        f"RMS error {rms:.2f}% on those rows"
    )
    device = dataclasses.replace(
        with_values(values), fitted=tuple(FITTED_NAMES), provenance=provenance
    )
    return FitResult(device, values, rms, tuple(fit_cases))
