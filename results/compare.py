"""The searched designs against the presets at equal area: the comparison a sweep opens with.

For each workload and each preset (a named design such as ``tpuv4``), the best searched design
whose die is no larger than the preset's is set against it, as the Phaze paper compares its
designs with TPUv4 under TPUv4's area. Both sides are taken at their fastest point (ties broken
by lower tCDP, then design id), and three gains say how much better the searched design is:
throughput, tokens per dollar of system cost, and tCDP (the preset's over the searched one's,
so above 1x means better on every column). The comparison is at equal area only when the sweep
searched a design of about the preset's area: when every searched design no larger than the
preset is more than :data:`EQUAL_AREA_TOLERANCE` below its area (a space that stops well short
of the chip), the row says so instead of giving gains, unless the searched design is ahead on
all three (a design no larger that is better on every column wins within the preset's area
whatever its size; one behind on any says nothing about a design of the preset's size). The
sweep's summary and the report both use :func:`compare_to_presets`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from phaze_common.units import fmt_ratio
from results.display import design_label, fmt_value
from results.pareto import rank
from results.schema import AGGREGATE_WORKLOAD
from results.store import load
from results.summary import by_workload, is_preset

__all__ = [
    "COMPARISON_HEADERS",
    "EQUAL_AREA_TOLERANCE",
    "PresetComparison",
    "compare_to_presets",
    "comparison_rows",
    "comparison_text",
    "searched_designs",
]

_RANKING = [("tokens_per_s", "max"), ("tcdp", "min")]
COMPARISON_HEADERS = (
    "workload",
    "preset (die area)",
    "best searched design in that area",
    "throughput",
    "tokens per $",
    "tCDP",
)
_GAINS = 3  # the last columns, right-aligned
# How far below a preset's die area a searched design may be and still count as of equal area
# (a definition of the comparison, not a measured constant).
EQUAL_AREA_TOLERANCE = 0.10


@dataclass(frozen=True, slots=True)
class PresetComparison:
    """One preset against the best searched design no larger than it, on one workload.

    ``searched`` is None when no searched design fits in the preset's area, or when every one
    that fits is well below it (``largest_searched_mm2``, the largest searched design no larger
    than the preset, is then below ``1 - EQUAL_AREA_TOLERANCE`` of its area) and the best of
    them is not ahead on all three gains; the gains are then None too. Each gain is above 1
    when the searched design is better.
    """

    workload: str
    preset: Mapping[str, Any]
    searched: Mapping[str, Any] | None
    throughput_gain: float | None
    tokens_per_usd_gain: float | None
    tcdp_gain: float | None
    largest_searched_mm2: float | None = None

    @property
    def well_below(self) -> bool:
        """Whether every searched design that fits is more than
        :data:`EQUAL_AREA_TOLERANCE` below the preset's area."""
        area = self.preset.get("area_mm2")
        return (
            self.largest_searched_mm2 is not None
            and area is not None
            and self.largest_searched_mm2 < (1.0 - EQUAL_AREA_TOLERANCE) * float(area)
        )

    @property
    def gains(self) -> tuple[float | None, float | None, float | None]:
        """(throughput, tokens per $, tCDP) gains, the table's last columns in order."""
        return (self.throughput_gain, self.tokens_per_usd_gain, self.tcdp_gain)


def _ratio(a: Any, b: Any) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return float(a) / float(b)


def compare_to_presets(points: Sequence[Mapping[str, Any]]) -> list[PresetComparison]:
    """Every (workload, preset) pair of the feasible ``points``; presets smallest die first.

    Infeasible points (pruned ones included) count only towards the area the sweep searched.

    Examples
    --------
    >>> pts = [
    ...     {"workload": "w", "design_id": "p", "design_name": "tpuv4", "feasible": 1, "key": "1",
    ...      "area_mm2": 300.0, "tokens_per_s": 100.0, "system_cost_usd": 10.0, "tcdp": 4.0},
    ...     {"workload": "w", "design_id": "s", "design_name": None, "feasible": 1, "key": "2",
    ...      "area_mm2": 280.0, "tokens_per_s": 150.0, "system_cost_usd": 12.0, "tcdp": 2.0},
    ... ]
    >>> c = compare_to_presets(pts)[0]
    >>> c.preset["design_name"], c.searched["design_id"], c.throughput_gain, c.tcdp_gain
    ('tpuv4', 's', 1.5, 2.0)
    """
    out = []
    real = [p for p in points if p["workload"] != AGGREGATE_WORKLOAD]
    areas = {
        w: [float(p["area_mm2"]) for p in pts if not is_preset(p) and p.get("area_mm2")]
        for w, pts in by_workload(real).items()
    }
    feasible = [p for p in real if p.get("feasible")]
    for w, pts in by_workload(feasible).items():
        fastest_preset: dict[str, Mapping[str, Any]] = {}
        for p in rank([p for p in pts if is_preset(p)], _RANKING):
            fastest_preset.setdefault(str(p["design_name"]), p)
        searched = rank([p for p in pts if not is_preset(p)], _RANKING)
        by_area = sorted(fastest_preset, key=lambda n: (fastest_preset[n].get("area_mm2") or 0, n))
        for name in by_area:
            pre = fastest_preset[name]
            area = pre.get("area_mm2")
            best = next(
                (s for s in searched if area is not None and (s.get("area_mm2") or 0) <= area),
                None,
            )
            fits = [a for a in areas[w] if area is not None and a <= area]
            out.append(_comparison(w, pre, best, max(fits, default=None)))
    return out


def _comparison(
    w: str, pre: Mapping[str, Any], best: Mapping[str, Any] | None, largest: float | None
) -> PresetComparison:
    none = PresetComparison(w, pre, None, None, None, None, largest)
    if best is None:
        return none
    per_usd = [_ratio(p.get("tokens_per_s"), p.get("system_cost_usd")) for p in (best, pre)]
    c = PresetComparison(
        w,
        pre,
        best,
        _ratio(best.get("tokens_per_s"), pre.get("tokens_per_s")),
        _ratio(per_usd[0], per_usd[1]),
        _ratio(pre.get("tcdp"), best.get("tcdp")),
        largest,
    )
    # A smaller design ahead on every column beats the preset within its area whatever its
    # size; one that is not says nothing about a design of the preset's size.
    if c.well_below and not all(g is not None and g > 1.0 for g in c.gains):
        return none
    return c


def comparison_rows(comparisons: Sequence[PresetComparison]) -> list[list[str]]:
    """The comparisons as cells in people's units, under :data:`COMPARISON_HEADERS`."""
    rows = []
    for c in comparisons:
        s = c.searched
        if s is not None:
            searched = f"{s['design_id']} ({fmt_value('area_mm2', s.get('area_mm2'))})"
        elif c.well_below:
            searched = (
                f"no searched design within {EQUAL_AREA_TOLERANCE:.0%} of its area "
                f"(largest: {fmt_value('area_mm2', c.largest_searched_mm2)})"
            )
        else:
            searched = "(none fits)"
        rows.append(
            [
                c.workload,
                f"{c.preset['design_name']} ({fmt_value('area_mm2', c.preset.get('area_mm2'))})",
                searched,
                *("-" if g is None else fmt_ratio(g) for g in c.gains),
            ]
        )
    return rows


def searched_designs(comparisons: Sequence[PresetComparison]) -> dict[str, str]:
    """The searched designs the comparisons name: design id -> its parameters in brief."""
    return {
        str(c.searched["design_id"]): design_label(c.searched)
        for c in comparisons
        if c.searched is not None
    }


def comparison_text(store_dir: str | Path) -> str:
    """The comparison of the sweep in ``store_dir`` as a titled text table ('' without presets)."""
    with load(store_dir) as store:
        comparisons = compare_to_presets(store.points())
    if not comparisons:
        return ""
    rows = [list(COMPARISON_HEADERS), *comparison_rows(comparisons)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(COMPARISON_HEADERS))]
    first_gain = len(COMPARISON_HEADERS) - _GAINS
    lines = [
        "\nsearched designs against the presets at equal area (both at their fastest point; "
        "a gain above 1x favours the searched design):"
    ]
    for j, r in enumerate(rows):
        cells = [
            c.rjust(w) if i >= first_gain else c.ljust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
        if j == 0:
            lines.append("  ".join("-" * w for w in widths))
    lines += [f"  {d}: {label}" for d, label in searched_designs(comparisons).items()]
    return "\n".join(lines)
