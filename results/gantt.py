"""The Gantt chart of one layer pass's schedule (``phaze schedule --gantt``).

Small accelerators get one row per core. Past :data:`PER_CORE_MAX` cores, each core kind gets
one lane instead, and an op occupies the band of the lane that its cores take up (an op on
all 432 tensor cores fills the TC lane; one on core 3 of 8 fills its eighth), so the chart
stays readable and its size fixed however many cores there are. Rectangles are drawn as one
collection per kind on fixed axis limits: drawing cost grows with the op count only.
"""

from __future__ import annotations

from collections.abc import Hashable
from pathlib import Path
from typing import TYPE_CHECKING, Final

from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter

from results.units import fmt_time

if TYPE_CHECKING:
    from ilp import Schedule

__all__ = ["PER_CORE_MAX", "gantt_figure", "draw_gantt"]

#: Up to this many cores (TC + VC) the chart has one row per core, above it one lane per kind.
PER_CORE_MAX: Final = 32
_COLOURS: Final = {"TC": "tab:blue", "VC": "tab:orange", "net": "tab:gray"}
_NAMES: Final = ("tensor cores", "vector cores", "network")
_DPI: Final = 110  # with _WIDTH_IN, 1650 px wide
_WIDTH_IN: Final = 15.0
_CHAR_PX: Final = 5.5  # width of one label character at font size 7


def _parts(ids: str) -> list[tuple[str, int, int]]:
    """``"TC0-7+VC2"`` -> ``[("TC", 0, 7), ("VC", 2, 2)]``; ``""`` (a network op) -> net."""
    if not ids:
        return [("net", 0, 0)]
    out = []
    for part in ids.split("+"):
        kind, rng = part[:2], part[2:]
        lo, _, hi = rng.partition("-")
        out.append((kind, int(lo), int(hi or lo)))
    return out


def _rows(s: Schedule, per_core: bool) -> list[tuple[str, str, int]]:
    """(label, kind, cores) of each row, top to bottom."""
    if per_core:
        return (
            [(f"TC{c}", "TC", 1) for c in range(s.num_tc)]
            + [(f"VC{c}", "VC", 1) for c in range(s.num_vc)]
            + [("net", "net", 1)]
        )
    return [
        (f"TC ×{s.num_tc}", "TC", s.num_tc),
        (f"VC ×{s.num_vc}", "VC", s.num_vc),
        ("net", "net", 1),
    ]


def gantt_figure(s: Schedule, title: str) -> Figure:
    """The chart of ``s`` as a matplotlib Figure (no pyplot state)."""
    per_core = s.num_tc + s.num_vc <= PER_CORE_MAX
    rows = _rows(s, per_core)
    row_of = {label: k for k, (label, _, _) in enumerate(rows)}
    lane_of = {kind: k for k, (_, kind, _) in enumerate(rows)}
    cores = {kind: n for _, kind, n in rows}
    span = max(s.makespan_s, 1e-12)
    row_in = 0.28 if per_core else 1.1
    fig = Figure(figsize=(_WIDTH_IN, 1.6 + row_in * len(rows)), dpi=_DPI, layout="constrained")
    ax = fig.subplots()
    boxes: dict[str, list] = {k: [] for k in _COLOURS}
    labels: list[tuple[float, float, Hashable]] = []
    for v, ids in s.core_ids.items():
        x0, d = s.start_s[v], s.duration_s[v]
        if d <= 0:
            continue
        for kind, lo, hi in _parts(ids):
            for r, y0, h in _bands(kind, lo, hi, per_core, row_of, lane_of, cores):
                boxes[kind].append([(x0, y0), (x0 + d, y0), (x0 + d, y0 + h), (x0, y0 + h)])
                if r == 0 and d / span * _WIDTH_IN * _DPI * 0.9 >= _CHAR_PX * (len(str(v)) + 1):
                    labels.append((x0 + d / 2, y0 + h / 2, v))
    for kind, verts in boxes.items():
        if verts:
            ax.add_collection(
                PolyCollection(
                    verts,
                    facecolors=_COLOURS[kind],
                    edgecolors="white",
                    linewidths=0.4,
                )
            )
    for x, y, v in labels:
        ax.text(x, y, str(v), ha="center", va="center", fontsize=7, clip_on=True)
    ax.set_xlim(0, span)
    ax.set_ylim(len(rows), 0)
    ax.set_yticks([k + 0.5 for k in range(len(rows))], [label for label, _, _ in rows])
    ax.tick_params(axis="y", labelsize=7 if per_core else 9)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: fmt_time(float(x))))
    ax.set_xlabel("time from the start of the pass")
    ax.grid(True, axis="x", alpha=0.3)
    ax.set_title(f"{title}: makespan {fmt_time(s.makespan_s)} ({s.status}, {s.method})")
    fig.legend(
        handles=[Patch(color=c, label=n) for n, c in zip(_NAMES, _COLOURS.values(), strict=True)],
        loc="outside lower center",
        ncol=3,
        frameon=False,
        fontsize=8,
    )
    return fig


def _bands(kind, lo, hi, per_core, row_of, lane_of, cores):
    """(index within the op, y, height) of the rectangles one core range of an op fills."""
    if kind == "net":
        return [(0, lane_of["net"] + 0.1, 0.8)]
    if per_core:
        return [(i, row_of[f"{kind}{c}"] + 0.1, 0.8) for i, c in enumerate(range(lo, hi + 1))]
    n = cores[kind]
    return [(0, lane_of[kind] + 0.05 + 0.9 * lo / n, 0.9 * (hi - lo + 1) / n)]


def draw_gantt(s: Schedule, path: str | Path, title: str) -> None:
    """Write the Gantt chart of ``s`` to ``path`` (PNG; at most 2000 px a side)."""
    gantt_figure(s, title).savefig(path, dpi=_DPI)
