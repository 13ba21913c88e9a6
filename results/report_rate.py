"""The report's sections of a serving sweep at a rate (``[sweep] rate``): each design's
cheapest point that meets the SLO at the rate with its latency percentiles, SLO attainment
and goodput there, and, with ``[sweep] pairs``, the front of the prefill-decode design pairs
against the single designs' (docs/serving.md)."""

from __future__ import annotations

import html
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from results.display import design_label, fmt_values, workload_title
from results.pairs import FRONT_AXES, cheapest, front, single_points
from results.pareto import best_per_design
from results.plots import _CLOUD_COLOR, _FRONT_COLOR, Plot, _better_arrow, _panels, _scale
from results.schema import COLUMNS, PAIR_COLUMNS
from results.summary import by_workload

__all__ = ["rate_sections", "pair_figure"]

_AT_RATE = (
    "batch",
    "ttft_p50_s",
    "ttft_p99_s",
    "tpot_p50_s",
    "tpot_p99_s",
    "slo_attainment",
    "goodput_requests_per_s",
    "usd_per_million_tokens_at_rate",
    "usd_per_million_tokens",
)
_PAIR = (
    "devices",
    "kv_transfer_s",
    "ttft_p99_s",
    "tpot_p99_s",
    "slo_attainment",
    "goodput_requests_per_s",
    "usd_per_million_tokens_at_rate",
)
_PAIR_LABELS = {c.name: c.label for c in PAIR_COLUMNS}
_PAIR_COLOR = "C1"


def _limits_text(cfg: Mapping[str, Any]) -> str:
    """The limits each request is held to at the rate: the p99 ones when given, else the
    mean ones."""
    p99 = [("p99 TTFT", cfg.get("p99_ttft_limit_s")), ("p99 TPOT", cfg.get("p99_tpot_limit_s"))]
    if all(v is None for _, v in p99):
        p99 = [("TTFT", cfg.get("ttft_limit_s")), ("TPOT", cfg.get("tpot_limit_s"))]
    said = [f"{n} &le; {v * 1e3:g} ms" for n, v in p99 if v is not None]
    return ", ".join(said) or "none"


def _table(
    rows: Sequence[Mapping[str, Any]],
    columns: Sequence[str],
    lead: Sequence[tuple[str, Callable[[Mapping[str, Any]], str]]],
    labels: Mapping[str, str],
) -> str:
    """Rows with ``lead`` columns (header, HTML of a row) before the figures."""
    cells = {c: fmt_values(c, [r.get(c) for r in rows]) for c in columns}
    head = "".join(f"<th>{html.escape(h)}</th>" for h, _ in lead)
    head += "".join(f"<th>{html.escape(labels[c])}</th>" for c in columns)
    body = []
    for i, r in enumerate(rows):
        tds = "".join(f"<td>{f(r)}</td>" for _, f in lead)
        tds += "".join(f'<td class="num">{html.escape(cells[c][i])}</td>' for c in columns)
        body.append(f"<tr>{tds}</tr>")
    return f'<div class="scroll"><table><tr>{head}</tr>{"".join(body)}</table></div>'


def _layout(text: str) -> str:
    escaped = html.escape(text).replace(",", ",<wbr>").replace(";", ";<wbr>")
    return f'<code class="layout">{escaped}</code>'


def _point_layout(p: Mapping[str, Any]) -> str:
    return _layout(json.loads(p["placement"])["strategy"] if p.get("placement") else "")


def _at_rate(points: Sequence[Mapping[str, Any]], cfg: Mapping[str, Any], top: int) -> str:
    out = [
        f"<p>Every point's layout simulated under {cfg.get('requests') or 'the default number of'} "
        f"requests arriving at {cfg['rate']:g} per second (Poisson, seed {cfg.get('seed') or 0}). "
        f"Limits each request is held to: {_limits_text(cfg)}. A point meets the SLO at the "
        "rate when its run is stable and 99 % of its requests meet them; only then has it a "
        "cost per million output tokens at the rate (its devices' hours over the tokens "
        "served, idle time paid). Each design's cheapest such point, cheapest design first:</p>"
    ]
    for w, pts in by_workload(points).items():
        serve = single_points(pts)
        rows = best_per_design(
            [p for p in serve if p.get("feasible_at_rate")],
            [(m, "min") for m in FRONT_AXES],
        )[: 2 * top]
        unstable = sum(1 for p in serve if p.get("stable") == 0)
        missed = sum(1 for p in serve if p.get("stable") == 1 and not p.get("feasible_at_rate"))
        out.append(f"<h3>{html.escape(workload_title(w))}</h3>")
        out.append(
            f"<p>{len(serve)} points: {len(serve) - unstable - missed} meet the SLO at the rate, "
            f"{missed} are stable but miss the limits, {unstable} cannot keep up with the "
            "rate (their queue grows).</p>"
        )
        if not rows:
            out.append("<p>No point meets the SLO at the rate.</p>")
            continue
        lead = [
            ("design", lambda r: html.escape(design_label(r))),
            ("layout", _point_layout),
        ]
        out.append(_table(rows, _AT_RATE, lead, {c: COLUMNS[c].label for c in _AT_RATE}))
    return "\n".join(out)


def pair_figure(pairs: Sequence[Mapping[str, Any]], points: Sequence[Mapping[str, Any]]) -> Figure:
    """Per workload: every pair meeting the SLO at the rate (grey), the pairs' front and
    the single designs' front (cost per million tokens at the rate against p99 TPOT)."""
    groups = by_workload([*pairs, *points])
    fig, axes = _panels(len(groups), width=6.4, height=4.6)
    x, y = FRONT_AXES
    for ax, w in zip(axes, groups, strict=False):
        w_pairs = [p for p in pairs if p["workload"] == w and p.get("feasible_at_rate")]
        w_points = [p for p in single_points(points) if p["workload"] == w]
        every = [p[x] for p in w_pairs] + [p[x] for p in w_points if p.get("feasible_at_rate")]
        ax.scatter(
            [p[x] for p in w_pairs],
            [p[y] for p in w_pairs],
            s=8,
            color=_CLOUD_COLOR,
            label=f"pairs meeting the SLO ({len(w_pairs)})",
            zorder=1,
        )
        for records, color, marker, label in (
            (front(w_pairs), _PAIR_COLOR, "o", "pairs' front"),
            (front(w_points), _FRONT_COLOR, "s", "single designs' front"),
        ):
            ax.plot(
                np.array([r[x] for r in records], dtype=float),
                np.array([r[y] for r in records], dtype=float),
                drawstyle="steps-post",
                color=color,
                marker=marker,
                markersize=5,
                linewidth=1.6,
                label=f"{label} ({len(records)})",
                zorder=3,
            )
        ax.set_title(workload_title(w), loc="left")
        ax.set_xlabel(COLUMNS[x].axis_label)
        ax.set_ylabel(COLUMNS[y].axis_label)
        _scale(ax, "x", np.array(every, dtype=float), x)
        _scale(ax, "y", np.array([p[y] for p in w_pairs] or [np.nan], dtype=float), y)
        _better_arrow(ax, "min", "min")
        ax.legend(fontsize=8, loc="upper right")
    return fig


def _pair_label(labels: Mapping[str, str], role: str) -> Callable[[Mapping[str, Any]], str]:
    def cell(r: Mapping[str, Any]) -> str:
        did = r[f"{role}_design_id"]
        name = r.get(f"{role}_design_name") or labels.get(did, did)
        return f"{html.escape(name)}<br>{_layout(r[f'{role}_strategy'])}"

    return cell


def _pairs_html(
    pairs: Sequence[Mapping[str, Any]],
    points: Sequence[Mapping[str, Any]],
    figures: Callable[[Sequence[Plot]], str],
) -> str:
    labels = {str(p["design_id"]): design_label(p) for p in points}
    plot = Plot(
        "pair_front",
        "Prefill-decode pairs against single designs",
        "Cost per million output tokens at the rate against p99 TPOT there, of every pair "
        "of a design's prefill pool and a design's decode pool that meets the SLO at the "
        "rate (grey), the pairs' Pareto front (orange) and the single designs' (blue, each "
        "design serving both phases with its best layout at each batch).",
        pair_figure(pairs, points),
    )
    out = [
        "<p>Each design's best layout with separate prefill and decode pools, at each batch, "
        "lends its prefill pool and its decode pool; every prefill pool is paired with every "
        "decode pool (a design with itself too), the prompt's KV cache sent across nodes "
        "between them. Each pool is simulated alone at the rate, its requests' times "
        'combined per pair (docs/serving.md, "Pairs of designs").</p>',
        figures([plot]),
    ]
    for w, w_pairs in by_workload(pairs).items():
        singles = [p for p in single_points(points) if p["workload"] == w]
        best_pair, best_single = cheapest(w_pairs), cheapest(singles)
        out.append(f"<h3>{html.escape(workload_title(w))}</h3>")
        meeting = sum(1 for p in w_pairs if p.get("feasible_at_rate"))
        out.append(
            f"<p>{len(w_pairs)} pairs, {meeting} meet the SLO at the rate. {_verdict(best_pair, best_single)}</p>"
        )
        rows = front(w_pairs)
        if rows:
            lead = [
                ("prefill pool", _pair_label(labels, "prefill")),
                ("decode pool", _pair_label(labels, "decode")),
            ]
            out.append("<p>The pairs' front, cheapest first:</p>")
            out.append(_table(rows, _PAIR, lead, _PAIR_LABELS))
        if best_single is not None:
            lead = [
                ("design", lambda r: html.escape(design_label(r))),
                ("layout", _point_layout),
            ]
            out.append("<p>The cheapest single design at the rate:</p>")
            cols = tuple(c for c in _PAIR if c in COLUMNS)
            out.append(_table([best_single], cols, lead, {c: COLUMNS[c].label for c in cols}))
    return "\n".join(out)


def _verdict(pair: Mapping[str, Any] | None, single: Mapping[str, Any] | None) -> str:
    """The sentence comparing the cheapest pair with the cheapest single design."""
    if pair is None:
        return "No pair meets the SLO at the rate."
    x = FRONT_AXES[0]
    (p_usd, *_) = fmt_values(x, [pair[x]])
    if single is None:
        return f"The cheapest pair costs {p_usd} per million output tokens; no single design meets the SLO at the rate."
    (s_usd, *_) = fmt_values(x, [single[x]])
    change = pair[x] / single[x] - 1
    word = "less" if change < 0 else "more"
    return (
        f"The cheapest pair costs {p_usd} per million output tokens at the rate, "
        f"{abs(change):.1%} {word} than the cheapest single design ({s_usd})."
    )


def rate_sections(
    points: Sequence[Mapping[str, Any]],
    pairs: Sequence[Mapping[str, Any]],
    inputs: Mapping[str, Any],
    figures: Callable[[Sequence[Plot]], str],
    *,
    top: int = 5,
) -> list[tuple[str, str, str]]:
    """The sections (id, title, HTML) of a serving sweep at a rate: none without a rate;
    the pairs' only when the sweep paired designs."""
    cfg = inputs.get("config", {})
    if cfg.get("rate") is None:
        return []
    sections = [("at_rate", f"At {cfg['rate']:g} requests/s", _at_rate(points, cfg, top))]
    if pairs:
        sections.append(
            ("pairs", "Prefill-decode pairs at the rate", _pairs_html(pairs, points, figures))
        )
    return sections
