"""Plots of a serving sweep: each design's throughput-latency curve with the serving Pareto
front, and the designs at the latency limits ranked by cost and carbon per token.

A serving point is one design serving one workload at one batch size (sequences in flight
per replica) with the best layout at that batch; a design's points over the batch sizes are
its throughput-latency curve. Figures are built without pyplot, as in :mod:`results.plots`.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from results.display import design_label, workload_title
from results.pareto import pareto, rank
from results.plots import _CLOUD_COLOR, _FRONT_COLOR, Plot, _better_arrow, _panels, _scale
from results.schema import COLUMNS
from results.summary import by_workload, is_preset

__all__ = [
    "curves",
    "at_limits",
    "latency_throughput_figure",
    "cost_carbon_figure",
    "serving_plots",
]

_THROUGHPUT = "tokens_per_s_per_device"
_LATENCIES = (("tpot_s", "tpot_limit_s"), ("ttft_s", "ttft_limit_s"))
_LABEL_CHARS = 26  # a bar's label wraps past this width (a searched design's in two lines)


def curves(points: Sequence[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """Each design's feasible points, by batch size: its throughput-latency curve."""
    out: dict[str, list[Mapping[str, Any]]] = {}
    for p in sorted(points, key=lambda p: (p["design_id"], p["batch"])):
        if p.get("feasible") and p.get(_THROUGHPUT) is not None:
            out.setdefault(str(p["design_id"]), []).append(p)
    return out


def at_limits(points: Sequence[Mapping[str, Any]], metric: str) -> list[Mapping[str, Any]]:
    """The best point of each design that meets the latency limits, by ``metric`` (its
    column's sense), best design first."""
    meeting = [p for p in points if p.get("feasible") and p.get("meets_slo")]
    ranked = rank(meeting, [(metric, COLUMNS[metric].sense or "max")])
    seen: set[str] = set()
    out = []
    for p in ranked:
        if p["design_id"] not in seen:
            seen.add(p["design_id"])
            out.append(p)
    return out


def _shown(curve_of: dict[str, list[Mapping[str, Any]]], top: int) -> list[str]:
    """The designs whose curves are drawn: the presets and the ``top`` searched designs of
    highest throughput per device at the limits (else at any point)."""
    best = {d: max(p[_THROUGHPUT] for p in ps) for d, ps in curve_of.items()}
    meeting = {
        d: max((p[_THROUGHPUT] for p in ps if p.get("meets_slo")), default=-1.0)
        for d, ps in curve_of.items()
    }
    presets = [d for d, ps in curve_of.items() if is_preset(ps[0])]
    searched = sorted(
        (d for d in curve_of if d not in presets), key=lambda d: (-meeting[d], -best[d], d)
    )
    return sorted(presets, key=lambda d: design_label(curve_of[d][0])) + searched[:top]


def _panel(
    ax: Axes, pts: list[Mapping[str, Any]], latency: str, limit: float | None, top: int
) -> None:
    curve_of = curves(pts)
    xs = np.array([p[latency] for ps in curve_of.values() for p in ps], dtype=float)
    ys = np.array([p[_THROUGHPUT] for ps in curve_of.values() for p in ps], dtype=float)
    ax.scatter(xs, ys, s=9, color=_CLOUD_COLOR, label=f"all points ({len(xs)})", zorder=1)
    every = [p for ps in curve_of.values() for p in ps]
    front = sorted(
        pareto(every, [(latency, "min"), (_THROUGHPUT, "max")]), key=lambda p: p[latency]
    )
    ax.plot(
        [p[latency] for p in front],
        [p[_THROUGHPUT] for p in front],
        drawstyle="steps-post",
        color=_FRONT_COLOR,
        linewidth=2.2,
        alpha=0.45,
        label=f"serving Pareto front ({len(front)})",
        zorder=2,
    )
    for i, d in enumerate(_shown(curve_of, top)):
        # the design's own front: its points no other of its points beats on both axes
        ps = sorted(
            pareto(curve_of[d], [(latency, "min"), (_THROUGHPUT, "max")]), key=lambda p: p[latency]
        )
        preset = is_preset(ps[0])
        ax.plot(
            [p[latency] for p in ps],
            [p[_THROUGHPUT] for p in ps],
            drawstyle="steps-post",
            marker="*" if preset else "o",
            markersize=10 if preset else 4,
            linewidth=1.2,
            color=f"C{(i + 1) % 10}",
            label=design_label(ps[0]),
            zorder=3,
        )
        for p in ps:  # the batch size beside each point
            ax.annotate(
                str(p["batch"]), (p[latency], p[_THROUGHPUT]), xytext=(3, 3),
                textcoords="offset points", fontsize=6, color="0.3",
            )  # fmt: skip
    if limit is not None:
        ax.axvline(limit, color="0.25", linestyle="--", linewidth=1, label="latency limit")
    _scale(ax, "x", xs, latency)
    _scale(ax, "y", ys, _THROUGHPUT)
    ax.set_xlabel(COLUMNS[latency].label)
    ax.set_ylabel(COLUMNS[_THROUGHPUT].label)
    ax.grid(True, which="major", alpha=0.3)
    _better_arrow(ax, "min", "max")


def latency_throughput_figure(
    points: Sequence[Mapping[str, Any]], limits: Mapping[str, float | None], *, top: int = 6
) -> Figure:
    """Per workload, output tokens per second per device against TPOT (left) and TTFT
    (right): grey dots every point, a line per shown design through its batch sizes (the
    batch beside each point), the serving Pareto front over all points, the limits dashed."""
    groups = {w: ps for w, ps in by_workload(points).items() if curves(ps)}
    fig, axes = _panels(2 * max(len(groups), 1), width=7.0, height=6.4, ncols=2)
    if not groups:
        for ax in axes:
            ax.set_visible(False)
        return fig
    for i, (w, pts) in enumerate(groups.items()):
        for j, (latency, limit_key) in enumerate(_LATENCIES):
            ax = axes[2 * i + j]
            _panel(ax, pts, latency, limits.get(limit_key), top)
            ax.set_title(f"{workload_title(w)}: {COLUMNS[latency].label}", loc="left")
            if j == 0:
                ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(0.0, -0.16), ncol=2)
    return fig


def cost_carbon_figure(points: Sequence[Mapping[str, Any]], *, top: int = 12) -> Figure:
    """Per workload, the designs at the latency limits (each at its cheapest point per
    token), ranked by $ per million output tokens (left), with their carbon per million
    output tokens (right)."""
    groups = {
        w: at_limits(ps, "usd_per_million_tokens")[:top] for w, ps in by_workload(points).items()
    }
    groups = {w: ps for w, ps in groups.items() if ps}
    rows = max((len(ps) for ps in groups.values()), default=1)
    fig, axes = _panels(2 * max(len(groups), 1), width=6.4, height=1.2 + 0.42 * rows, ncols=2)
    for i, (w, ps) in enumerate(groups.items()):
        # whole labels, wrapped at the commas of a searched design's parameters
        labels = [textwrap.fill(design_label(p), _LABEL_CHARS) for p in ps]
        y = np.arange(len(ps))[::-1]
        for j, (metric, color) in enumerate(
            (("usd_per_million_tokens", "C0"), ("kgco2e_per_million_tokens", "C2"))
        ):
            ax = axes[2 * i + j]
            ax.barh(y, [p[metric] for p in ps], color=color, height=0.6)
            ax.set_yticks(y, labels if j == 0 else [""] * len(ps), fontsize=8)
            _scale(ax, "x", np.array([p[metric] for p in ps], dtype=float), metric)
            ax.set_xlabel(COLUMNS[metric].label)
            ax.grid(True, axis="x", alpha=0.3)
            ax.set_title(f"{workload_title(w)}: {COLUMNS[metric].label}", loc="left")
    if not groups:
        for ax in axes:
            ax.set_visible(False)
    return fig


def serving_plots(
    points: Sequence[Mapping[str, Any]], limits: Mapping[str, float | None], *, top: int = 6
) -> list[Plot]:
    """The figures of a serving report, in reading order, with their captions."""
    feasible = [p for p in points if p.get("feasible")]
    return [
        Plot(
            "latency_throughput",
            "Throughput against latency",
            "Each point is one design at one batch size (sequences in flight per replica, "
            "printed beside it) with its best serving layout at that batch: output tokens per "
            "second per device against the mean TPOT (left) and TTFT (right). Each line is "
            "one design's throughput-latency front, the points of it that none of its other "
            "points beats on both axes (the presets are stars, then the searched designs of "
            "highest throughput); grey dots are the rest. The pale blue staircase is the "
            "serving Pareto front of every design: nothing serves more tokens per device at a "
            "lower latency. Dashed: the latency limit.",
            latency_throughput_figure(feasible, limits, top=top),
        ),
        Plot(
            "cost_carbon_at_limits",
            "Cost and carbon per token at the latency limits",
            "The designs whose best point meets the latency limits, cheapest per million "
            "output tokens at the top, each at that point: $ per million output tokens "
            "(devices' hours at the cost per device-hour, with electricity) and kgCO2e per "
            "million output tokens (embodied share and operational carbon).",
            cost_carbon_figure(feasible, top=2 * top),
        ),
    ]
