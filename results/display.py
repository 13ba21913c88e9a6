"""Human-readable values and labels for tables and plots (display only: stored values stay SI).

:func:`fmt_value` formats a column's value with :mod:`phaze_common.units` (the one formatter the CLI
and the report share); the other helpers turn a point into short labels.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any, Final

from phaze_common.units import fmt_column, fmt_percent, fmt_quantity
from results.schema import AGGREGATE_WORKLOAD, COLUMNS

__all__ = [
    "fmt_value",
    "fmt_values",
    "display_unit",
    "unit_of",
    "design_label",
    "DEFAULT_PRECISION",
    "layout_label",
    "knob_columns",
    "point_label",
    "workload_title",
    "area_headroom_text",
    "power_headroom_text",
]

# Unit suffixes of Phaze's names (STYLE §2.2), longest first.
_SUFFIX_UNITS: Final = (
    ("_bytes_per_s", "B/s"),
    ("_bytes", "B"),
    ("_kgco2e", "kgCO2e"),
    ("_usd", "USD"),
    ("_hz", "Hz"),
    ("_mm2", "mm²"),
    ("_w", "W"),
    ("_j", "J"),
    ("_s", "s"),
)
# Fractions of a whole, shown as percentages.
_FRACTIONS: Final = frozenset(
    {"mfu", "schedule_gap_max", "area_headroom", "power_headroom", "slo_attainment"}
)
_FRACTION_SUFFIXES: Final = ("_fraction", "_utilisation", "_utilization")


def fmt_value(name: str, value: Any) -> str:
    """``value`` of column ``name`` as a short string in people's units.

    Examples
    --------
    >>> fmt_value("hbm_bytes", 80 * 2**30), fmt_value("hbm_bandwidth_bytes_per_s", 2.0e12)
    ('80 GiB', '2 TB/s')
    >>> fmt_value("time_to_train_s", 864000.0), fmt_value("mfu", 0.4567)
    ('10 days', '45.7 %')
    >>> fmt_value("system_cost_usd", 1.25e6), fmt_value("tcdp", None)
    ('$1.25M', '-')
    >>> fmt_value("total_kgco2e", 1370.0), fmt_value("tcdp_kgco2e_days", 4.04e6)
    ('1.37 tCO2e', '4.04k tCO2e·days')
    >>> fmt_value("throughput_score", 0.4471), fmt_value("tp", 4)
    ('0.447', '4')
    """
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, str):
        return value
    unit = display_unit(name)
    if isinstance(value, int) and unit == "":
        return str(value)
    return fmt_quantity(value, unit)


def fmt_values(name: str, values: Sequence[Any]) -> list[str]:
    """A table column of ``name``'s values in one unit (:func:`phaze_common.units.fmt_column`);
    missing values read ``-``, text and unit-less integers as :func:`fmt_value` writes them.

    >>> fmt_values("job_energy_j", [7.2e11, 3.6e9, None])
    ['200 MWh', '1 MWh', '-']
    """
    numbers = [
        float(v)
        for v in values
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
    ]
    unit = display_unit(name)
    if not numbers or (unit == "" and all(isinstance(v, int) for v in values if v is not None)):
        return [fmt_value(name, v) for v in values]
    column = iter(fmt_column(numbers, unit))
    return [
        next(column)
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
        else fmt_value(name, v)
        for v in values
    ]


def display_unit(name: str) -> str:
    """The unit :func:`phaze_common.units.fmt_quantity` formats column ``name`` in ("%" for fractions).

    >>> display_unit("mfu"), display_unit("bubble_fraction"), display_unit("iteration_s")
    ('%', '%', 's')
    """
    if name in _FRACTIONS or name.endswith(_FRACTION_SUFFIXES):
        return "%"
    return unit_of(name)


def unit_of(name: str) -> str:
    """The unit of a column, or of any name ending in a unit suffix (``lifetime_s`` -> s).

    Examples
    --------
    >>> unit_of("tcdp"), unit_of("lifetime_s"), unit_of("link_bytes_per_s"), unit_of("pue")
    ('kgCO2e·s', 's', 'B/s', '')
    """
    if name in COLUMNS:
        return COLUMNS[name].unit
    for suffix, unit in _SUFFIX_UNITS:
        if name.endswith(suffix):
            return unit
    return ""


def design_label(p: Mapping[str, Any]) -> str:
    """A design's name, or its parameters in brief when it has none.

    Examples
    --------
    >>> design_label({"design_name": "a100"})
    'a100'
    >>> design_label({"num_tc": 4, "tc_rows": 128, "tc_cols": 128, "num_vc": 8, "glb_bytes": 2**25,
    ...               "hbm_bytes": 80 * 2**30, "design_id": "abc"})
    '4x128x128 TC, 8 VC, 32 MiB GLB, 80 GiB HBM'
    """
    if p.get("design_name"):
        return str(p["design_name"])
    parts = []
    if p.get("num_tc") is not None:
        parts.append(f"{p['num_tc']}x{p.get('tc_rows')}x{p.get('tc_cols')} TC")
    if p.get("num_vc") is not None:
        lanes = f"x{p['vc_lanes']}" if p.get("vc_lanes") is not None else ""
        parts.append(f"{p['num_vc']}{lanes} VC")
    if p.get("glb_bytes") is not None:
        parts.append(f"{fmt_value('glb_bytes', p['glb_bytes'])} GLB")
    if p.get("hbm_bytes") is not None:
        parts.append(f"{fmt_value('hbm_bytes', p['hbm_bytes'])} HBM")
    return ", ".join(parts) or str(p.get("design_id") or "?")


#: the precision recipe a layout's label leaves out (``workloads.precision.DEFAULT_PRECISION``,
#: which results does not import; a test checks they agree)
DEFAULT_PRECISION: Final = "bf16"


def layout_label(p: Mapping[str, Any]) -> str:
    """A training point's layout in brief, the one way tables, plots and reports print it:
    its degrees (none for a point without a placement), micro-batch size, recompute mode and
    precision recipe (when not bf16). The strategy string of the ``placement`` column holds
    the whole layout.

    Examples
    --------
    >>> layout_label({"tp": 2, "pp": 4, "dp": 8, "micro_batch": 2, "recompute": "full"})
    't2 p4 d8 mbs2 full'
    >>> layout_label({"tp": None, "micro_batch": 1, "recompute": "none", "precision": "fp8-te"})
    'mbs1 none fp8-te'
    """
    parts = []
    if p.get("tp") is not None:
        parts.append(f"t{p['tp']} p{p.get('pp')} d{p.get('dp')}")
    if p.get("micro_batch") is not None:
        parts.append(f"mbs{p['micro_batch']}")
    if p.get("recompute") is not None:
        parts.append(str(p["recompute"]))
    if p.get("precision") not in (None, DEFAULT_PRECISION):
        parts.append(str(p["precision"]))
    return " ".join(parts)


def knob_columns(points: Sequence[Mapping[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """(headers, one row of cells per point) of what distinguishes points of one design:
    a serving sweep's batch and serving layout (its strategy string, pools included), or a
    training sweep's layout (:func:`layout_label`; '-' where a point has none)."""
    if points and all(p.get("mode") == "serve" for p in points):
        rows = []
        for p in points:
            layout = json.loads(p["placement"]).get("strategy") if p.get("placement") else None
            batch = p.get("batch")
            rows.append(["-" if batch is None else str(batch), layout or "-"])
        return ["batch", "layout"], rows
    return ["layout"], [[layout_label(p) or "-"] for p in points]


def point_label(p: Mapping[str, Any]) -> str:
    """Design and knobs of one point on one line."""
    knobs = layout_label(p)
    return f"{design_label(p)} | {knobs}" if knobs else design_label(p)


def workload_title(workload: str) -> str:
    """A panel title for a workload (the aggregate rows get words, not ``*all*``)."""
    return "all workloads (aggregate)" if workload == AGGREGATE_WORKLOAD else workload


def area_headroom_text(h: Mapping[str, Any]) -> str:
    """A design's die area against its budget, from its headroom figures (the names of
    ``arch_space.power.Headroom.figures``, as a record stores them): the words ``phaze
    evaluate`` and the report both print.

    >>> area_headroom_text({"area_headroom": 0.0513, "die_area_mm2": 814.0,
    ...                     "area_budget_mm2": 858.0})
    '5.13 %: 814 of 858 mm² (reticle)'
    """
    area, budget = h["die_area_mm2"], h["area_budget_mm2"]
    return (
        f"{fmt_percent(h['area_headroom'])}: {fmt_quantity(area, '')} of "
        f"{fmt_quantity(budget, 'mm²')} (reticle)"
    )


def power_headroom_text(h: Mapping[str, Any]) -> str:
    """What a design draws under tensor load against its board limit, from its headroom
    figures; when it asks for more than it draws (a limiter holds it), the asked-for power
    too, which the headroom measures. ``phaze evaluate`` and the report both print it.

    >>> power_headroom_text({"power_headroom": -0.195, "power_drawn_w": 700.0,
    ...                      "power_asked_w": 836.8, "power_budget_w": 700.0})
    '-19.5 %: draws 700 W under tensor load, held at its 700 W board limit (asks 837 W without it)'
    """
    drawn = fmt_quantity(h["power_drawn_w"], "W")
    limit = fmt_quantity(h["power_budget_w"], "W")
    text = f"{fmt_percent(h['power_headroom'])}: draws {drawn} under tensor load"
    if h["power_asked_w"] > h["power_drawn_w"] * (1 + 1e-9):
        asked = fmt_quantity(h["power_asked_w"], "W")
        return f"{text}, held at its {limit} board limit (asks {asked} without it)"
    return f"{text} of a {limit} board limit"
