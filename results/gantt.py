"""The Gantt chart of one layer pass's schedule (``phaze schedule --gantt``).

Small accelerators get one row per unit of every resource kind the schedule has (its cores,
then any further kind such as a collective channel, ``channel:tp``). Past
:data:`PER_CORE_MAX` cores, each kind gets one lane instead, and an op occupies the band of
the lane that its units take up (an op on all 432 tensor cores fills the TC lane; one on core
3 of 8 fills its eighth), so the chart stays readable and its size fixed however many cores
there are. Ops that hold no unit (network transfers, joins) share the ``net`` lane. Rectangles are drawn as one
collection per kind on fixed axis limits: drawing cost grows with the op count only.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final

from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter

from phaze_common.units import fmt_time

if TYPE_CHECKING:
    from ilp import Schedule

__all__ = ["PER_CORE_MAX", "gantt_figure", "draw_gantt", "gantt_formats"]

#: Up to this many cores (units of every compute kind) the chart has one row per unit, above it
#: one lane per kind.
PER_CORE_MAX: Final = 32
_COLOURS: Final = {"TC": "tab:blue", "VC": "tab:orange", "net": "tab:gray"}
_FURTHER_COLOURS: Final = ("tab:green", "tab:purple", "tab:brown", "tab:pink", "tab:olive")
_NAMES: Final = {"TC": "tensor cores", "VC": "vector cores", "net": "network"}
_UNITS: Final = re.compile(r"(\d+)(?:-(\d+))?")
_DPI: Final = 110  # with _WIDTH_IN, 1650 px wide
_WIDTH_IN: Final = 15.0
_CHAR_PX: Final = 5.5  # width of one label character at font size 7


def _parts(ids: str, kinds: Sequence[str]) -> list[tuple[str, int, int]]:
    """The (kind, first unit, last unit) ranges of a schedule's unit label, read by its
    structure: ``+`` joins kinds, ``,`` units, each a kind name then ``N`` or ``N-M``.

    >>> _parts("TC0-7+VC2,VC5+channel:tp0", ("TC", "VC", "channel:tp"))
    [('TC', 0, 7), ('VC', 2, 2), ('VC', 5, 5), ('channel:tp', 0, 0)]
    >>> _parts("", ("TC", "VC"))
    [('net', 0, 0)]
    """
    if not ids:
        return [("net", 0, 0)]
    by_length = sorted(kinds, key=len, reverse=True)  # "channel:tp2" before "channel:tp"
    out = []
    for unit in (u for part in ids.split("+") for u in part.split(",")):
        for kind in by_length:
            m = _UNITS.fullmatch(unit, len(kind)) if unit.startswith(kind) else None
            if m:
                out.append((kind, int(m[1]), int(m[2] or m[1])))
                break
        else:
            raise ValueError(f"unit label {unit!r} names none of the kinds {', '.join(kinds)}")
    return out


def _rows(s: Schedule, per_core: bool) -> list[tuple[str, str, int, int]]:
    """(label, kind, units, first unit) of each row, top to bottom: every kind's units, then
    net."""
    rows = []
    for kind, n in s.capacity.items():
        if per_core:
            rows += [(f"{kind}{c}" if n > 1 else kind, kind, 1, c) for c in range(n)]
        else:
            rows.append((f"{kind} ×{n}" if n > 1 else kind, kind, n, 0))
    return [*rows, ("net", "net", 1, 0)]


def _colours(kinds: Sequence[str]) -> dict[str, str]:
    """A colour per kind: the cores' and the network's fixed, further kinds in turn."""
    further = (k for k in kinds if k not in _COLOURS)
    extra = {k: _FURTHER_COLOURS[i % len(_FURTHER_COLOURS)] for i, k in enumerate(further)}
    return {**_COLOURS, **extra}


def gantt_figure(s: Schedule, title: str) -> Figure:
    """The chart of ``s`` as a matplotlib Figure (no pyplot state)."""
    per_core = sum(s.capacity[k] for k in s.core_kinds) <= PER_CORE_MAX
    rows = _rows(s, per_core)
    kinds = tuple(s.capacity)
    colours = _colours(kinds)
    row_of = {(kind, c): k for k, (_, kind, _, c) in enumerate(rows)}
    lane_of = {kind: k for k, (_, kind, _, c) in enumerate(rows) if c == 0}
    cores = {kind: n for _, kind, n, _ in rows}
    span = max(s.makespan_s, 1e-12)
    row_in = 0.28 if per_core else 1.1
    fig = Figure(figsize=(_WIDTH_IN, 1.6 + row_in * len(rows)), dpi=_DPI, layout="constrained")
    ax = fig.subplots()
    boxes: dict[str, list] = {k: [] for k in colours}
    labels: list[tuple[float, float, Hashable]] = []
    for v, ids in s.core_ids.items():
        x0, d = s.start_s[v], s.duration_s[v]
        if d <= 0:
            continue
        for kind, lo, hi in _parts(ids, kinds):
            for r, y0, h in _bands(kind, lo, hi, per_core, row_of, lane_of, cores):
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
    ax.set_yticks([k + 0.5 for k in range(len(rows))], [label for label, _, _, _ in rows])
    ax.tick_params(axis="y", labelsize=7 if per_core else 9)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: fmt_time(float(x))))
    ax.set_xlabel("time from the start of the pass")
    ax.grid(True, axis="x", alpha=0.3)
    ax.set_title(f"{title}: makespan {fmt_time(s.makespan_s)} ({s.status}, {s.method})")
    fig.legend(
        handles=[Patch(color=c, label=_NAMES.get(k, k)) for k, c in colours.items() if k in cores],
        loc="outside lower center",
        ncol=len(cores),
        frameon=False,
        fontsize=8,
    )
    return fig


def _bands(kind, lo, hi, per_core, row_of, lane_of, cores):
    """(index within the op, y, height) of the rectangles one core range of an op fills."""
    if kind == "net":
        return [(0, lane_of["net"] + 0.1, 0.8)]
    if per_core:
        return [(i, row_of[kind, c] + 0.1, 0.8) for i, c in enumerate(range(lo, hi + 1))]
    n = cores[kind]
    return [(0, lane_of[kind] + 0.05 + 0.9 * lo / n, 0.9 * (hi - lo + 1) / n)]


def gantt_formats() -> tuple[str, ...]:
    """The file extensions :func:`draw_gantt` writes (matplotlib's, sorted), so that a command
    can refuse another before any work."""
    from matplotlib.backend_bases import FigureCanvasBase

    return tuple(sorted(FigureCanvasBase.get_supported_filetypes()))


def draw_gantt(s: Schedule, path: str | Path, title: str) -> None:
    """Write the Gantt chart of ``s`` to ``path``, in the format its extension names (one of
    :func:`gantt_formats`; a raster at most 2000 px a side)."""
    gantt_figure(s, title).savefig(path, dpi=_DPI)
