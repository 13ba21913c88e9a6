"""The Gantt chart of one layer pass's schedule (``phaze schedule --gantt``).

Small accelerators get one row per compute unit. Past :data:`PER_CORE_MAX` units, each kind of
unit gets one lane instead, and an op occupies the band of the lane that its units take up (an
op on all 432 tensor cores fills the TC lane; one on core 3 of 8 fills its eighth), so the
chart stays readable and its size fixed however many units there are. Ops that hold no
compute unit (collectives, on their channel or not) share the network row. Rectangles are
drawn as one collection per kind on fixed axis limits: drawing cost grows with the op count
only.
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

#: Up to this many compute units (of every kind) the chart has one row per unit, above it one
#: lane per kind.
PER_CORE_MAX: Final = 32
_NET: Final = "net"
_NAMES: Final = {"TC": "tensor cores", "VC": "vector cores", _NET: "network"}
_PALETTE: Final = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown")
_DPI: Final = 110  # with _WIDTH_IN, 1650 px wide
_WIDTH_IN: Final = 15.0
_CHAR_PX: Final = 5.5  # width of one label character at font size 7


def _parts(s: Schedule, v: Hashable) -> list[tuple[str, tuple[int, ...]]]:
    """(kind, units) of node ``v`` on the compute units; [(net, (0,))] if it holds none."""
    parts = [(k, units) for k, units in s.assigned[v] if k in s.core_kinds]
    return parts or [(_NET, (0,))]


def _rows(s: Schedule, per_core: bool) -> list[tuple[str, str, int]]:
    """(label, kind, units) of each row, top to bottom."""
    if per_core:
        rows = [(f"{k}{c}", k, 1) for k in s.core_kinds for c in range(s.capacity[k])]
    else:
        rows = [(f"{k} ×{s.capacity[k]}", k, s.capacity[k]) for k in s.core_kinds]
    return [*rows, (_NET, _NET, 1)]


def gantt_figure(s: Schedule, title: str) -> Figure:
    """The chart of ``s`` as a matplotlib Figure (no pyplot state)."""
    per_core = sum(s.capacity[k] for k in s.core_kinds) <= PER_CORE_MAX
    rows = _rows(s, per_core)
    row_of = {label: k for k, (label, _, _) in enumerate(rows)}
    lane_of = {kind: k for k, (_, kind, _) in enumerate(rows)}
    units = {kind: n for _, kind, n in rows}
    colours = {k: _PALETTE[i % len(_PALETTE)] for i, k in enumerate(s.core_kinds)}
    colours[_NET] = "tab:gray"
    span = max(s.makespan_s, 1e-12)
    row_in = 0.28 if per_core else 1.1
    fig = Figure(figsize=(_WIDTH_IN, 1.6 + row_in * len(rows)), dpi=_DPI, layout="constrained")
    ax = fig.subplots()
    boxes: dict[str, list] = {k: [] for k in colours}
    labels: list[tuple[float, float, Hashable]] = []
    for v in s.assigned:
        x0, d = s.start_s[v], s.duration_s[v]
        if d <= 0:
            continue
        for kind, held in _parts(s, v):
            for r, y0, h in _bands(kind, held, per_core, row_of, lane_of, units):
                boxes[kind].append([(x0, y0), (x0 + d, y0), (x0 + d, y0 + h), (x0, y0 + h)])
                if r == 0 and d / span * _WIDTH_IN * _DPI * 0.9 >= _CHAR_PX * (len(str(v)) + 1):
                    labels.append((x0 + d / 2, y0 + h / 2, v))
    for kind, verts in boxes.items():
        if verts:
            ax.add_collection(
                PolyCollection(
                    verts,
                    facecolors=colours[kind],
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
        handles=[Patch(color=c, label=_NAMES.get(k, k)) for k, c in colours.items()],
        loc="outside lower center",
        ncol=len(colours),
        frameon=False,
        fontsize=8,
    )
    return fig


def _bands(kind, held, per_core, row_of, lane_of, units):
    """(index within the op, y, height) of the rectangles the units ``held`` of an op fill."""
    if kind == _NET:
        return [(0, lane_of[_NET] + 0.1, 0.8)]
    if per_core:
        return [(i, row_of[f"{kind}{c}"] + 0.1, 0.8) for i, c in enumerate(held)]
    n = units[kind]
    runs: list[list[int]] = []  # contiguous runs of unit indices, one band each
    for c in sorted(held):
        if runs and c == runs[-1][1] + 1:
            runs[-1][1] = c
        else:
            runs.append([c, c])
    return [
        (i, lane_of[kind] + 0.05 + 0.9 * lo / n, 0.9 * (hi - lo + 1) / n)
        for i, (lo, hi) in enumerate(runs)
    ]


def draw_gantt(s: Schedule, path: str | Path, title: str) -> None:
    """Write the Gantt chart of ``s`` to ``path`` (PNG; at most 2000 px a side)."""
    gantt_figure(s, title).savefig(path, dpi=_DPI)
