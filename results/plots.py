"""Plots of a sweep's points: fronts, tCDP ranking, breakdowns, and the effect of the knobs.

Every function takes plain records (``Store.points()``) and returns a matplotlib ``Figure``
built without pyplot (no global figure state; the Agg renderer draws it), with one panel per
workload when the points span several. Axis labels carry units from ``results.schema``; an
axis switches to a log scale when its data spans more than :data:`LOG_SPAN` (a factor of 20).
"""

from __future__ import annotations

import io
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from phaze_common.errors import ConfigError
from phaze_common.units import fmt_quantity
from results.display import design_label, fmt_value, layout_label, point_label, workload_title
from results.pareto import ObjectiveSpec, best_per_design, pareto, parse_objectives, rank
from results.schema import AGGREGATE_WORKLOAD, COLUMNS, ENERGY_TERM_COLUMNS, TIME_TERM_COLUMNS
from results.summary import (
    DEFAULT_OBJECTIVES,
    by_workload,
    highlights,
    is_preset,
    is_pruned,
    metric_for,
    throughput_metric,
)

__all__ = [
    "LOG_SPAN",
    "Plot",
    "front_figure",
    "tcdp_ranking",
    "BREAKDOWNS",
    "breakdown_parts",
    "breakdown_figure",
    "knob_effects",
    "standard_plots",
    "png_bytes",
    "svg_text",
    "draw",
    "save_plots",
    "write_plots",
]

# Max/min ratio above which an axis is drawn in log scale ("spans decades").
LOG_SPAN: Final = 20.0
_FRONT_COLOR: Final = "C0"
_PRESET_COLOR: Final = "C3"
_CLOUD_COLOR: Final = "0.72"
_MAX_PRESET_LABELS: Final = 10  # more names than this on one panel are unreadable
_SECONDS_PER_DAY: Final = 86400.0
#: The panels of the breakdown figure: (axis label, tick unit, the total, the stored terms
#: that sum to it, stacked in this order).
BREAKDOWNS: Final = (
    ("time per iteration", "s", "iteration_s", TIME_TERM_COLUMNS),
    ("energy per batch, devices and hosts", "J", "energy_per_batch_j", ENERGY_TERM_COLUMNS),
    (
        "carbon of the training job",
        "kgCO2e",
        "total_kgco2e",
        ("embodied_kgco2e", "operational_kgco2e"),
    ),
)


@dataclass(frozen=True, slots=True)
class Plot:
    """One standard figure with the words the report prints beside it."""

    name: str
    title: str
    caption: str
    figure: Figure


def _panels(
    n: int, *, width: float = 5.4, height: float = 4.3, ncols: int = 3
) -> tuple[Figure, list[Axes]]:
    cols = max(1, min(n, ncols))
    rows = max(1, math.ceil(n / cols))
    fig = Figure(figsize=(width * cols, height * rows), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel().tolist()
    for ax in axes[n:]:
        ax.set_visible(False)
    return fig, axes[: max(n, 1)]


def _scale(ax: Axes, which: str, values: np.ndarray, metric: str) -> None:
    """Log scale when positive data spans more than LOG_SPAN; ticks in the tables' units."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return
    axis = ax.xaxis if which == "x" else ax.yaxis
    if v.min() > 0 and v.max() / v.min() > LOG_SPAN:
        (ax.set_xscale if which == "x" else ax.set_yscale)("log")
        axis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        axis.set_minor_formatter(NullFormatter())
    axis.set_major_formatter(FuncFormatter(lambda x, _: fmt_value(metric, float(x))))
    if which == "x":
        ax.tick_params(axis="x", labelrotation=30)


def _empty(ax: Axes, title: str, why: str = "no feasible points") -> None:
    ax.set_title(title)
    ax.text(0.5, 0.5, why, ha="center", va="center", transform=ax.transAxes, color="0.4")
    ax.set_xticks([])
    ax.set_yticks([])


def _better_arrow(ax: Axes, x_sense: str, y_sense: str) -> None:
    """Say, above the panel's right corner, which way a better design lies (e.g. '↖ better')."""
    left, up = x_sense == "min", y_sense == "max"
    arrow = {(True, True): "↖", (False, True): "↗", (True, False): "↙", (False, False): "↘"}[
        left, up
    ]
    ax.set_title(f"{arrow} better", loc="right", fontsize=9, color="0.35")


def front_figure(
    points: Sequence[Mapping[str, Any]],
    x: ObjectiveSpec,
    y: ObjectiveSpec,
    *,
    presets: Sequence[Mapping[str, Any]] = (),
    title: str | None = None,
) -> Figure:
    """Scatter of ``y`` against ``x`` per workload, with the Pareto front drawn as a staircase.

    Grey dots are every feasible point; the blue staircase joins the Pareto-optimal points
    (the best ``y`` reachable for each ``x``); red stars are ``presets`` (records of named
    designs, labelled by ``design_name``). For the aggregate rows, throughput means
    ``throughput_score``.
    """
    xo, yo = parse_objectives([x, y])
    groups = by_workload(p for p in points if p.get("feasible", True))
    fig, axes = _panels(len(groups))
    for ax, (w, pts) in zip(axes, groups.items(), strict=False):
        xm, ym = metric_for(w, xo.metric), metric_for(w, yo.metric)
        pts = [p for p in pts if p.get(xm) is not None and p.get(ym) is not None]
        if not pts:
            _empty(ax, workload_title(w))
            continue
        xs = np.array([p[xm] for p in pts], dtype=float)
        ys = np.array([p[ym] for p in pts], dtype=float)
        ax.scatter(
            xs,
            ys,
            s=10,
            color=_CLOUD_COLOR,
            label=f"all points ({len(pts)})",
            rasterized=len(pts) > 2000,
            zorder=1,
        )
        front = sorted(pareto(pts, [(xm, xo.sense), (ym, yo.sense)]), key=lambda p: p[xm])
        ax.plot(
            np.array([p[xm] for p in front], dtype=float),
            np.array([p[ym] for p in front], dtype=float),
            drawstyle="steps-post" if xo.sense == "min" else "steps-pre",
            color=_FRONT_COLOR,
            marker="o",
            markersize=5,
            linewidth=1.6,
            label=f"Pareto front ({len(front)})",
            zorder=3,
        )
        marked = _best_per_name(
            [
                p
                for p in presets
                if p.get("workload") in (w, None)
                and p.get(xm) is not None
                and p.get(ym) is not None
            ],
            [(ym, yo.sense), (xm, xo.sense)],
        )
        if marked:
            ax.scatter(
                [p[xm] for p in marked],
                [p[ym] for p in marked],
                s=150,
                marker="*",
                color=_PRESET_COLOR,
                edgecolor="black",
                linewidth=0.6,
                label="presets (best point of each)",
                zorder=4,
            )
            for p in marked[:_MAX_PRESET_LABELS]:
                ax.annotate(
                    design_label(p),
                    (p[xm], p[ym]),
                    xytext=(6, 4),
                    textcoords="offset points",
                    fontsize=8,
                    color=_PRESET_COLOR,
                )
        _scale(ax, "x", xs, xm)
        _scale(ax, "y", ys, ym)
        ax.set_xlabel(COLUMNS[xm].label)
        ax.set_ylabel(COLUMNS[ym].label)
        ax.set_title(workload_title(w))
        ax.grid(True, which="major", alpha=0.3)
        _better_arrow(ax, xo.sense, yo.sense)
        # "best" scans every data point: only affordable for small clouds.
        ax.legend(fontsize=8, loc="best" if len(pts) <= 2000 else "lower right")
    if title:
        fig.suptitle(title, fontsize=13)
    return fig


def _best_per_name(
    points: Sequence[Mapping[str, Any]], objectives: Sequence[ObjectiveSpec]
) -> list[Mapping[str, Any]]:
    """The best point of each named design (a preset may come in several HBM sizes)."""
    seen: set[str] = set()
    out = []
    for p in rank(points, objectives):
        if design_label(p) not in seen:
            seen.add(design_label(p))
            out.append(p)
    return out


def breakdown_parts(rows: Sequence[Mapping[str, Any]], terms: Sequence[str]) -> list[str]:
    """The ``terms`` some row has a non-zero value of (the others would only crowd the legend)."""
    return [t for t in terms if any(r.get(t) for r in rows)]


def _stacked_barh(
    ax: Axes,
    rows: Sequence[Mapping[str, Any]],
    terms: Sequence[str],
    labels: Sequence[str],
    unit: str = "",
) -> None:
    """One bar per row, stacked from the row's stored ``terms`` (each term keeps its colour
    whichever others are left out)."""
    y = np.arange(len(rows))[::-1]
    left = np.zeros(len(rows))
    for part in breakdown_parts(rows, terms):
        vals = np.array([float(r.get(part) or 0.0) for r in rows])
        color = f"C{terms.index(part) % 10}"
        ax.barh(y, vals, left=left, color=color, label=COLUMNS[part].label, height=0.62)
        left += vals
    ax.set_yticks(y, labels, fontsize=8)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: fmt_quantity(v, unit)))
    ax.tick_params(axis="x", labelrotation=30)
    ax.grid(True, axis="x", alpha=0.3)


def tcdp_ranking(points: Sequence[Mapping[str, Any]], *, top: int = 12) -> Figure:
    """The ``top`` designs by tCDP per workload (best on top), one bar per design.

    Each bar is a design's best point; it is split into embodied carbon x D and operational
    carbon x D (tCDP = tC x D = C_emb x D + C_op x D), so the bar shows which term to attack.
    """
    groups = {
        w: ps for w, ps in by_workload(points).items() if any(p.get("tcdp") is not None for p in ps)
    }
    heights = [
        0.34 * min(top, len({p.get("design_id") for p in ps})) + 1.3 for ps in groups.values()
    ]
    fig = Figure(figsize=(11, max(3.0, sum(heights))), layout="constrained")
    if not groups:
        _empty(fig.subplots(), "tCDP ranking")
        return fig
    axes = fig.subplots(len(groups), 1, squeeze=False, height_ratios=heights).ravel()
    for ax, (w, pts) in zip(axes, groups.items(), strict=True):
        feasible = [p for p in pts if p.get("feasible", True)]
        rows = best_per_design(
            [p for p in feasible if p.get("tcdp") is not None],
            ["tcdp", (throughput_metric(w), "max")],
        )[:top]
        tcdp = [_tcdp_tonne_days(p) for p in rows]
        split = [
            {"emb": t * _share(p), "op": t * (1 - _share(p))}
            for t, p in zip(tcdp, rows, strict=True)
        ]
        y = np.arange(len(rows))[::-1]
        ax.barh(y, [s["emb"] for s in split], color="C1", height=0.62, label="embodied carbon x D")
        ax.barh(
            y,
            [s["op"] for s in split],
            left=[s["emb"] for s in split],
            color="C2",
            height=0.62,
            label="operational carbon x D",
        )
        for yi, t, p in zip(y, tcdp, rows, strict=True):
            ax.text(t, yi, " " + fmt_value("tcdp", p["tcdp"]), va="center", fontsize=8)
        labels = [design_label(p) if w == AGGREGATE_WORKLOAD else point_label(p) for p in rows]
        ax.set_yticks(y, labels, fontsize=8)
        ax.set_xlabel("tCDP (tCO2e·days), lower is better")
        ax.set_xlim(0, max(tcdp) * 1.25)
        ax.set_title(f"{workload_title(w)}: top {len(rows)} designs by tCDP", fontsize=11)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: fmt_quantity(x, "")))
        ax.grid(True, axis="x", alpha=0.3)
        ax.legend(
            fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False
        )
    return fig


def _tcdp_tonne_days(p: Mapping[str, Any]) -> float:
    """A point's tCDP in tCO2e·days, the unit every table shows it in."""
    return float(p["tcdp"]) / 1000.0 / _SECONDS_PER_DAY


def _share(p: Mapping[str, Any]) -> float:
    """Embodied share of total carbon (0 when unknown)."""
    e, o = p.get("embodied_kgco2e"), p.get("operational_kgco2e")
    if e is None or o is None or e + o <= 0:
        return 0.0
    return e / (e + o)


def breakdown_figure(
    rows_by_workload: Mapping[str, Sequence[tuple[str, Mapping[str, Any]]]],
) -> Figure:
    """Where time, energy and carbon go, for chosen points (labelled) of each workload.

    One row of three panels per workload, stacked bars of the stored terms
    (:data:`BREAKDOWNS`): time per iteration by the terms of the iteration model (compute,
    recompute, exposed communication of each kind, bubble, optimizer), energy per batch by
    cause (compute, memory, static, network, idle, hosts) and the job's carbon (embodied,
    operational). Each bar sums to the point's stored total (``iteration_s``,
    ``energy_per_batch_j``, ``total_kgco2e``), so bars compare as the export's figures do.
    """
    groups = {w: rows for w, rows in rows_by_workload.items() if rows}
    heights = [0.55 * len(rows) + 2.2 for rows in groups.values()]
    fig = Figure(figsize=(14, max(3.0, sum(heights))), layout="constrained")
    if not groups:
        _empty(fig.subplots(), "breakdowns")
        return fig
    subfigs = fig.subfigures(len(groups), 1, squeeze=False, height_ratios=heights).ravel()
    for sub, (w, rows) in zip(subfigs, groups.items(), strict=True):
        sub.suptitle(workload_title(w), fontsize=12, x=0.01, ha="left")
        axes = sub.subplots(1, len(BREAKDOWNS), width_ratios=(1.25, 1, 1))
        labels = [f"{label}\n{design_label(p)}\n{layout_label(p)}" for label, p in rows]
        for c, (ax, (title, unit, _, terms)) in enumerate(zip(axes, BREAKDOWNS, strict=True)):
            _stacked_barh(
                ax, [p for _, p in rows], terms, labels if c == 0 else [""] * len(rows), unit
            )
            ax.set_xlabel(title)
            ax.legend(fontsize=8, loc="lower left", bbox_to_anchor=(0, 1.0), ncol=2, frameon=False)
    return fig


def knob_effects(points: Sequence[Mapping[str, Any]]) -> Figure:
    """Best throughput and share of feasible points per micro-batch, per recompute mode.

    Top row: the highest tokens/s any design reaches at each micro-batch size (one line per
    recompute mode). Bottom row: the percentage of evaluated points that fit (pruned points
    are left out; bars side by side), which shows where memory runs out without recomputation.
    """
    groups = {
        w: [p for p in ps if p.get("micro_batch") is not None and not is_pruned(p)]
        for w, ps in by_workload(points).items()
        if w != AGGREGATE_WORKLOAD
    }
    groups = {w: ps for w, ps in groups.items() if ps}
    n = max(1, len(groups))
    fig = Figure(figsize=(5.2 * min(n, 3), 6.4 * math.ceil(n / 3)), layout="constrained")
    if not groups:
        _empty(fig.subplots(), "micro-batch and recompute", "no points with a micro-batch")
        return fig
    cols = min(n, 3)
    axes = fig.subplots(
        2 * math.ceil(n / 3), cols, squeeze=False, height_ratios=[1.6, 1] * math.ceil(n / 3)
    )
    for i, (w, pts) in enumerate(groups.items()):
        top, bottom = axes[2 * (i // cols), i % cols], axes[2 * (i // cols) + 1, i % cols]
        sizes = sorted({p["micro_batch"] for p in pts})
        modes = sorted({str(p.get("recompute")) for p in pts})
        x = np.arange(len(sizes))  # evenly spaced categories: sizes are usually powers of 2
        width = 0.8 / len(modes)
        for j, mode in enumerate(modes):
            best_tp, feasible = [], []
            for mb in sizes:
                sel = [p for p in pts if p["micro_batch"] == mb and str(p.get("recompute")) == mode]
                ok = [
                    p["tokens_per_s"]
                    for p in sel
                    if p.get("feasible") and p.get("tokens_per_s") is not None
                ]
                best_tp.append(max(ok) if ok else np.nan)
                feasible.append(100.0 * len(ok) / len(sel) if sel else np.nan)
            label = f"recompute {mode}"
            top.plot(x, best_tp, marker="os^Dv"[j % 5], color=f"C{j}", label=label)
            offset = (j - (len(modes) - 1) / 2) * width
            bottom.bar(x + offset, feasible, width=width, color=f"C{j}", label=label)
        for ax in (top, bottom):
            ax.set_xticks(x, [str(s) for s in sizes])
            ax.grid(True, axis="y", alpha=0.3)
        top.set_title(workload_title(w))
        top.set_ylabel("best throughput (tokens/s)")
        top.yaxis.set_major_formatter(FuncFormatter(lambda x, _: fmt_quantity(x, "")))
        top.legend(fontsize=8)
        bottom.set_ylim(0, 105)
        bottom.set_ylabel("points that fit (%)")
        bottom.set_xlabel("micro-batch size (sequences)")
    return fig


def standard_plots(
    points: Sequence[Mapping[str, Any]],
    *,
    objectives: Sequence[ObjectiveSpec] = DEFAULT_OBJECTIVES,
    top: int = 12,
) -> list[Plot]:
    """Every figure of the report, in reading order, with a title and a one-line caption.

    Presets are the feasible points of named designs (``design_name`` set).
    """
    feasible = [p for p in points if p.get("feasible")]
    presets = [p for p in feasible if is_preset(p)]
    real = {w: ps for w, ps in by_workload(feasible).items() if w != AGGREGATE_WORKLOAD}
    chosen = {w: [(h.title, h.point) for h in highlights(ps, objectives)] for w, ps in real.items()}
    cloud = "Each grey dot is one evaluated point (design x micro-batch x recompute); "
    return [
        Plot(
            "throughput_vs_cost",
            "Throughput vs system cost",
            cloud
            + "the blue staircase is the Pareto front: no point is both cheaper and faster."
            + (" Red stars are the named presets, for reference." if presets else ""),
            front_figure(feasible, "system_cost_usd", "tokens_per_s", presets=presets),
        ),
        Plot(
            "throughput_vs_embodied",
            "Throughput vs embodied carbon",
            cloud + "embodied (manufacturing) carbon charged to the job; front as above.",
            front_figure(feasible, "embodied_kgco2e", "tokens_per_s", presets=presets),
        ),
        Plot(
            "throughput_vs_total_carbon",
            "Throughput vs total carbon",
            cloud + "total carbon tC = embodied + operational, for the whole training job.",
            front_figure(feasible, "total_kgco2e", "tokens_per_s", presets=presets),
        ),
        Plot(
            "area_vs_throughput",
            "Die area vs throughput",
            cloud + "silicon area of one device against the throughput it buys.",
            front_figure(
                [p for p in feasible if p.get("workload") != AGGREGATE_WORKLOAD],
                "area_mm2",
                "tokens_per_s",
                presets=presets,
            ),
        ),
        Plot(
            "tcdp_ranking",
            "tCDP ranking",
            f"The (up to) {top} designs with the lowest total-carbon-delay product (tCDP = tC x time to "
            "train), best at the top; each bar splits into its embodied and operational parts.",
            tcdp_ranking(feasible, top=top),
        ),
        Plot(
            "breakdowns",
            "Where the time, energy and carbon go",
            "For the best point of each objective (named on the left): time per iteration, "
            "energy per batch (devices and hosts) and carbon of the job, split by cause; each "
            "bar ends at the point's total as the export gives it.",
            breakdown_figure(chosen),
        ),
        Plot(
            "knobs",
            "Effect of micro-batch size and recomputation",
            "Top: the best throughput any design reaches; bottom: how many points fit in memory.",
            knob_effects(points),
        ),
    ]


def png_bytes(fig: Figure, *, dpi: int = 100) -> bytes:
    """The figure as PNG bytes."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, metadata={"Software": None})
    return buf.getvalue()


def svg_text(fig: Figure) -> str:
    """The figure as SVG text (no date, so equal inputs give equal files)."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None})
    return buf.getvalue()


def draw(plot: Plot, fmt: str, drawn: dict[tuple[str, str], bytes] | None = None) -> bytes:
    """The plot as PNG or SVG bytes; ``drawn`` caches by (name, format) to draw each once."""
    if fmt not in ("png", "svg"):
        raise ConfigError(f"plot format {fmt!r} is not supported (allowed: png, svg)")
    if drawn is None:
        drawn = {}
    if (plot.name, fmt) not in drawn:
        drawn[plot.name, fmt] = (
            svg_text(plot.figure).encode() if fmt == "svg" else png_bytes(plot.figure)
        )
    return drawn[plot.name, fmt]


def save_plots(
    plots: Iterable[Plot],
    out_dir: str | Path,
    *,
    formats: Sequence[str] = ("png", "svg"),
    drawn: dict[tuple[str, str], bytes] | None = None,
) -> list[Path]:
    """Write each plot as ``out_dir/<name>.<format>``; returns the paths written."""
    bad = sorted(set(formats) - {"png", "svg"})
    if bad:
        raise ConfigError(f"plot formats {', '.join(bad)} are not supported (allowed: png, svg)")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for plot in plots:
        for fmt in formats:
            path = out / f"{plot.name}.{fmt}"
            path.write_bytes(draw(plot, fmt, drawn))
            written.append(path)
    return written


def write_plots(
    points: Sequence[Mapping[str, Any]],
    out_dir: str | Path,
    *,
    formats: Sequence[str] = ("png", "svg"),
    objectives: Sequence[ObjectiveSpec] = DEFAULT_OBJECTIVES,
) -> list[Path]:
    """Write every standard plot of ``points`` as ``out_dir/<name>.<format>``."""
    bad = sorted(set(formats) - {"png", "svg"})
    if bad:
        raise ConfigError(f"plot formats {', '.join(bad)} are not supported (allowed: png, svg)")
    return save_plots(standard_plots(points, objectives=objectives), out_dir, formats=formats)
