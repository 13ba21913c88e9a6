"""Human-readable values and labels for tables and plots (display only: stored values stay SI).

Bytes use binary prefixes (GiB), bandwidths decimal ones (TB/s), long times days, as an
architect reads them; every other unit comes from :data:`results.schema.POINT_COLUMNS`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final

from results.schema import AGGREGATE_WORKLOAD, COLUMNS

__all__ = [
    "si",
    "fmt_value",
    "unit_of",
    "design_label",
    "knob_label",
    "point_label",
    "workload_title",
]

_SECONDS_PER_DAY: Final = 86400.0
_SECONDS_PER_YEAR: Final = 365.25 * _SECONDS_PER_DAY  # Julian year
_BINARY: Final = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
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


def si(value: float, unit: str = "", digits: int = 3) -> str:
    """A number with an SI prefix: ``si(3.2e14, 'FLOP/s') == '320 TFLOP/s'``.

    Examples
    --------
    >>> si(3.2e14, "FLOP/s"), si(0.0042, "s"), si(0)
    ('320 TFLOP/s', '4.2 ms', '0')
    """
    if value == 0 or not math.isfinite(value):
        return f"{value:g} {unit}".strip()
    exp = max(-4, min(6, math.floor(math.log10(abs(value)) / 3)))
    prefix = "pnµm kMGTPE"[exp + 4].strip()
    return f"{value / 10 ** (3 * exp):.{digits}g} {prefix}{unit}".strip()


def fmt_value(name: str, value: Any) -> str:
    """``value`` of column ``name`` as a short string with its unit.

    Examples
    --------
    >>> fmt_value("hbm_bytes", 80 * 2**30), fmt_value("hbm_bandwidth_bytes_per_s", 2.0e12)
    ('80 GiB', '2 TB/s')
    >>> fmt_value("time_to_train_s", 864000.0), fmt_value("mfu", 0.4567)
    ('10 days', '45.7 %')
    >>> fmt_value("system_cost_usd", 1.25e6), fmt_value("tcdp", None)
    ('$1.25M', '-')
    >>> fmt_value("total_kgco2e", 1370.0), fmt_value("tcdp_kgco2e_days", 4.04e6)
    ('1.37 tCO2e', '4.04 ktCO2e·day')
    """
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, str):
        return value
    unit = unit_of(name)
    if name == "mfu":
        return f"{100 * value:.3g} %"
    if unit == "B":
        exp = 0 if value < 1 else min(int(math.log2(value) // 10), len(_BINARY) - 1)
        return f"{value / 1024**exp:.3g} {_BINARY[exp]}"
    if unit == "s":
        if abs(value) >= 2 * _SECONDS_PER_YEAR:
            return f"{value / _SECONDS_PER_YEAR:.3g} years"
        if abs(value) >= 2 * _SECONDS_PER_DAY:
            return f"{value / _SECONDS_PER_DAY:.3g} days"
        return si(value, "s")
    if unit == "USD":
        return "$" + si(value).replace(" ", "")
    if unit.startswith("kgCO2e"):  # tonnes above 1000 kg, then SI prefixes on tonnes
        if abs(value) < 1000:
            return f"{value:.3g} {unit}"
        return si(value / 1000, "t" + unit[2:])  # kt, Mt: kilo- and megatonnes
    if unit == "mm²" or (unit == "" and isinstance(value, float)):
        return f"{value:.3g} {unit}".strip()
    if isinstance(value, int) and not unit:
        return str(value)
    return si(value, unit)


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
        parts.append(f"{p['num_vc']} VC")
    if p.get("glb_bytes") is not None:
        parts.append(f"{fmt_value('glb_bytes', p['glb_bytes'])} GLB")
    if p.get("hbm_bytes") is not None:
        parts.append(f"{fmt_value('hbm_bytes', p['hbm_bytes'])} HBM")
    return ", ".join(parts) or str(p.get("design_id") or "?")


def knob_label(p: Mapping[str, Any], *, placement: bool = True) -> str:
    """The training knobs (and placement) of a point: ``mb 2, recompute full, TP2 PP4 DP8``."""
    parts = []
    if p.get("micro_batch") is not None:
        parts.append(f"mb {p['micro_batch']}")
    if p.get("recompute") is not None:
        parts.append(f"recompute {p['recompute']}")
    if placement and p.get("tp") is not None:
        parts.append(f"TP{p['tp']} PP{p.get('pp')} DP{p.get('dp')}")
    return ", ".join(parts)


def point_label(p: Mapping[str, Any]) -> str:
    """Design and knobs of one point on one line."""
    knobs = knob_label(p)
    return f"{design_label(p)} | {knobs}" if knobs else design_label(p)


def workload_title(workload: str) -> str:
    """A panel title for a workload (the aggregate rows get words, not ``*all*``)."""
    return "all workloads (aggregate)" if workload == AGGREGATE_WORKLOAD else workload
