"""The sections of the report of a serving sweep (``[sweep] mode = "serve"``): the answer at
the latency limits, each design's throughput-latency curve with the serving Pareto front,
and the designs at the limits ranked by cost and carbon per token (docs/serving.md)."""

from __future__ import annotations

import html
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from results.display import design_label, fmt_values
from results.plots import Plot, save_plots
from results.plots_serving import at_limits, serving_plots
from results.schema import COLUMNS
from results.summary import by_workload, objective_title

__all__ = ["best_rows", "serving_limits", "serving_sections"]

# The columns of the ranking table, in order (the design's label first).
_RANKING = (
    "hbm_bytes",
    "hbm_bandwidth_bytes_per_s",
    "glb_bytes",
    "batch",
    "ttft_s",
    "tpot_s",
    "tokens_per_s_per_device",
    "energy_per_token_j",
    "usd_per_million_tokens",
    "kgco2e_per_million_tokens",
)
_OBJECTIVES = ("tokens_per_s_per_device", "usd_per_million_tokens", "kgco2e_per_million_tokens")
# Why a serving report has no section on how exact the layer schedules are.
_NO_SCHEDULE_GAPS = (
    "The layer schedules of the serving passes are timed by the sweep's solver, but a serving "
    "point stores only their times, not their gap to a proven lower bound, so this report "
    "has no section on how exact they are (a training sweep's report has one)."
)


def serving_limits(inputs: Mapping[str, Any]) -> dict[str, float | None]:
    """The sweep's latency limits (seconds, None: none) from its stored inputs."""
    cfg = inputs.get("config", {})
    return {k: cfg.get(k) for k in ("ttft_limit_s", "tpot_limit_s")}


def _layout_html(r: Mapping[str, Any]) -> str:
    """The point's serving layout, free to wrap after each comma and semicolon."""
    layout = json.loads(r["placement"])["strategy"] if r.get("placement") else ""
    text = html.escape(layout).replace(",", ",<wbr>").replace(";", ";<wbr>")
    return f'<code class="layout">{text}</code>'


def _table(
    rows: Sequence[Mapping[str, Any]],
    columns: Sequence[str],
    first: str,
    best_for: Sequence[Sequence[str]] = (),
) -> str:
    """The rows' designs, figures and layouts; ``best_for`` (per row, what it is best for)
    leads when given."""
    cells = {c: fmt_values(c, [r.get(c) for r in rows]) for c in columns}
    head = "".join(f"<th>{html.escape(COLUMNS[c].label)}</th>" for c in columns)
    lead = "<th>best for</th>" if best_for else ""
    body = []
    for i, r in enumerate(rows):
        tds = "".join(f'<td class="num">{html.escape(cells[c][i])}</td>' for c in columns)
        why = f"<td>{'<br>'.join(map(html.escape, best_for[i]))}</td>" if best_for else ""
        body.append(
            f'<tr>{why}<td class="design">{html.escape(design_label(r))}</td>{tds}'
            f"<td>{_layout_html(r)}</td></tr>"
        )
    return (
        f'<div class="scroll"><table><tr>{lead}<th>{html.escape(first)}</th>{head}'
        f"<th>layout</th></tr>{''.join(body)}</table></div>"
    )


def best_rows(
    points: Sequence[Mapping[str, Any]],
) -> list[tuple[Mapping[str, Any], list[str]]]:
    """The best point at the limits by each objective, one row per distinct point with the
    objectives it wins (in :data:`_OBJECTIVES` order), first winner first."""
    rows: dict[str, tuple[Mapping[str, Any], list[str]]] = {}
    for m in _OBJECTIVES:
        ranked = at_limits(points, m)
        if ranked:
            p = ranked[0]
            rows.setdefault(str(p["key"]), (p, []))[1].append(m)
    return list(rows.values())


def _answer(points: Sequence[Mapping[str, Any]], limits: Mapping[str, float | None]) -> str:
    said = [
        f"{name} &le; {v * 1e3:g} ms"
        for name, v in (
            ("mean TTFT", limits["ttft_limit_s"]),
            ("mean TPOT", limits["tpot_limit_s"]),
        )
        if v is not None
    ]
    out = [
        "<p>Each design serves each workload at each batch size with its best serving layout "
        "(tensor, pipeline and expert parallelism, replicas, chunked prefill, separate prefill "
        f"and decode pools). Latency limits: {', '.join(said) or 'none'}. The best design by "
        "each objective among the points that meet them, one row per point with every "
        "objective it is best for:</p>"
    ]
    for w, pts in by_workload(points).items():
        rows = best_rows(pts)
        if not rows:
            out.append(f"<p><b>{html.escape(w)}</b>: no point meets the limits.</p>")
            continue
        out.append(f"<h3>{html.escape(w)}</h3>")
        best_for = [[objective_title(m) for m in ms] for _, ms in rows]
        out.append(_table([p for p, _ in rows], _RANKING, "design", best_for))
    out.append(f"<p>{_NO_SCHEDULE_GAPS}</p>")
    return "\n".join(out)


def _ranking(points: Sequence[Mapping[str, Any]], top: int) -> str:
    out = []
    for w, pts in by_workload(points).items():
        rows = at_limits(pts, "usd_per_million_tokens")[: 2 * top]
        if rows:
            out.append(f"<h3>{html.escape(w)}: by $ per million output tokens</h3>")
            out.append(_table(rows, _RANKING, "design"))
        carbon = at_limits(pts, "kgco2e_per_million_tokens")[: 2 * top]
        if carbon:
            out.append(f"<h3>{html.escape(w)}: by carbon per million output tokens</h3>")
            out.append(_table(carbon, _RANKING, "design"))
    return "\n".join(out) or "<p>No point meets the latency limits.</p>"


def serving_sections(
    points: Sequence[Mapping[str, Any]],
    inputs: Mapping[str, Any],
    figures: Callable[[Sequence[Plot]], str],
    *,
    top: int = 5,
    plots_dir: str | Path | None = None,
    drawn: dict[tuple[str, str], bytes] | None = None,
) -> list[tuple[str, str, str]]:
    """The report's serving sections (id, title, HTML); ``figures`` renders plots as the
    report embeds them (``drawn`` caches the drawings)."""
    feasible = [p for p in points if p.get("feasible")]
    limits = serving_limits(inputs)
    plots = {p.name: p for p in serving_plots(feasible, limits, top=top)}
    if plots_dir is not None:
        save_plots(plots.values(), plots_dir, drawn=drawn)
    return [
        ("answer", "The answer at the latency limits", _answer(feasible, limits)),
        ("fronts", "Throughput against latency", figures([plots["latency_throughput"]])),
        (
            "ranking",
            "Designs at the latency limits by cost and carbon",
            figures([plots["cost_carbon_at_limits"]]) + _ranking(feasible, top),
        ),
    ]
