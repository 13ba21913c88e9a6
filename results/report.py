"""The sweep report: one self-contained HTML file a person can read in a minute.

Order of the page: the answer first (the best design per objective and workload), then the
fronts and plots that show the trades, the top designs per objective as tables, why points
were infeasible, and last the inputs, formulas, defaults, manifest and a glossary of every
column. Images are embedded (base64 PNG by default, or SVG), so the file can be mailed.
"""

from __future__ import annotations

import base64
import html
import json
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final, Literal

from phaze_common.errors import ConfigError
from phaze_common.sweep_modes import MODE_KEYS
from phaze_common.units import fmt_percent
from results.display import (
    area_headroom_text,
    design_label,
    fmt_value,
    layout_label,
    power_headroom_text,
    unit_of,
    workload_title,
)
from results.pareto import Objective, ObjectiveSpec, parse_objectives
from results.plots import Plot, draw, save_plots, standard_plots
from results.report_presets import versus_presets
from results.report_rate import rate_sections
from results.report_serving import serving_sections
from results.report_style import CSS as _CSS
from results.report_time import time_breakdown_html
from results.schema import AGGREGATE_WORKLOAD, COLUMNS, HEADROOM_COLUMNS, POINT_COLUMNS
from results.store import Store, load
from results.summary import (
    DEFAULT_OBJECTIVES,
    by_workload,
    highlights,
    is_pruned,
    metric_for,
    objective_title,
    top_designs,
)

__all__ = ["REPORT_FILENAME", "write_report", "render_report"]

REPORT_FILENAME: Final = "report.html"

# Columns of the "top designs" tables: (header, column); throughput becomes the score for the
# aggregate rows.
_TOP_COLUMNS: Final = (
    ("die area", "area_mm2"),
    ("throughput", "tokens_per_s"),
    ("MFU", "mfu"),
    ("system cost", "system_cost_usd"),
    ("embodied carbon", "embodied_kgco2e"),
    ("total carbon", "total_kgco2e"),
    ("time to train", "time_to_train_s"),
    ("tCDP", "tcdp_kgco2e_days"),
)
_AGGREGATE_SKIP: Final = frozenset({"mfu"})
_AGGREGATE_HEADERS: Final = MappingProxyType(
    {
        "throughput_score": "throughput score (1 = fastest on every workload)",
        "embodied_kgco2e": "embodied carbon, all jobs",
        "total_kgco2e": "total carbon, all jobs",
        "time_to_train_s": "time to train, all jobs",
        "tcdp_kgco2e_days": "tCDP, all jobs",
        "tcdp": "tCDP, all jobs",
        "tco_usd": "cost to train, all jobs",
        "job_energy_j": "job energy, all jobs",
        "electricity_usd": "electricity, all jobs",
        "operational_kgco2e": "operational carbon, all jobs",
    }
)
# The sweep configuration's keys only one mode uses: the inputs of a sweep of the other mode
# leave them out.
_TRAINING_KEYS: Final = frozenset(MODE_KEYS["train"])
_SERVING_KEYS: Final = frozenset(MODE_KEYS["serve"])
# Columns that show the same quantity in two units: a table shows one of them.
_SAME: Final = MappingProxyType({"tcdp": "tcdp_kgco2e_days", "tcdp_kgco2e_days": "tcdp"})


def write_report(
    store_dir: str | Path,
    out_path: str | Path | None = None,
    *,
    image_format: Literal["png", "svg"] = "png",
    top: int = 5,
    plots_dir: str | Path | None = None,
) -> Path:
    """Write the HTML report of the sweep stored in ``store_dir``; returns its path.

    ``out_path`` defaults to ``store_dir/report.html``. The file is written to a temporary
    name and renamed, so a reader never sees half a report (nor, on failure, the temporary).
    ``plots_dir``, if given, also receives every figure as ``<name>.png`` and ``<name>.svg``.
    """
    out = Path(out_path) if out_path is not None else Path(store_dir) / REPORT_FILENAME
    with load(store_dir) as store:
        text = render_report(store, image_format=image_format, top=top, plots_dir=plots_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(out)
    except BaseException:
        tmp.unlink(missing_ok=True)  # a failed write leaves no half report behind
        raise
    return out


def render_report(
    store: Store,
    *,
    image_format: Literal["png", "svg"] = "png",
    top: int = 5,
    plots_dir: str | Path | None = None,
) -> str:
    """The report of ``store`` as HTML text (figures also saved to ``plots_dir`` if given)."""
    if image_format not in ("png", "svg"):
        raise ConfigError(
            f"report image format {image_format!r} is not supported (allowed: png, svg)"
        )
    inputs = store.inputs()
    manifest = store.manifest()
    points = store.points()
    objectives = _objectives(inputs)
    feasible = [p for p in points if p["feasible"]]
    body: list[str] = [
        "<h1>Phaze sweep report</h1>",
        f'<p class="lead">{_summary_sentence(store, points, manifest)}</p>',
    ]
    images: dict[tuple[str, str], bytes] = {}
    serving = inputs.get("config", {}).get("mode") == "serve"
    if serving:  # a serving sweep: docs/serving.md
        sections = serving_sections(
            points, inputs, lambda ps: _figures(ps, image_format, images), top=top,
            plots_dir=plots_dir, drawn=images,
        )  # fmt: skip
        sections += rate_sections(
            points, store.pairs(), inputs, lambda ps: _figures(ps, image_format, images), top=top
        )
    else:
        sections = [
            ("presets", "Searched designs against the presets", versus_presets(points)),
            ("answer", "The answer", _answer(feasible, objectives)),
            ("time", "Where the time goes", time_breakdown_html(feasible)),
        ]
    if feasible and not serving:
        plots = {p.name: p for p in standard_plots(points, objectives=objectives)}

        def figs(*names: str) -> str:
            return _figures([plots[n] for n in names], image_format, images)

        sections += [
            (
                "fronts",
                "Pareto fronts: throughput vs cost and carbon",
                figs("throughput_vs_cost", "throughput_vs_embodied", "throughput_vs_total_carbon"),
            ),
            ("tcdp", "Carbon: tCDP ranking", figs("tcdp_ranking")),
            ("area", "Area", figs("area_vs_throughput")),
            ("breakdowns", "Breakdowns", figs("breakdowns")),
            ("knobs", "Micro-batch and recomputation", figs("knobs")),
            ("top", "Top designs per objective", _top_tables(feasible, objectives, top)),
            ("headroom", "Area and power headroom", _headroom(feasible, top)),
        ]
        if plots_dir is not None:
            save_plots(plots.values(), plots_dir, drawn=images)
    sections.append(("infeasible", "Infeasible and pruned points", _reasons(points)))
    if not serving:  # serving points store no schedule gaps (the serving answer says so)
        sections.append(("schedules", "How exact the layer schedules are", _schedule_gaps(points)))
    sections += [
        ("inputs", "Sweep inputs", _inputs(inputs)),
        ("formulas", "Formulas and defaults", _formulas(inputs)),
        ("manifest", "Manifest", _mapping_table(manifest) if manifest else "<p>(empty)</p>"),
        ("glossary", "Glossary of columns", _glossary()),
    ]
    nav = " ".join(f'<a href="#{sid}">{html.escape(title)}</a>' for sid, title, _ in sections)
    body.append(f"<nav>{nav}</nav>")
    for sid, title, content in sections:
        body.append(f'<section id="{sid}"><h2>{html.escape(title)}</h2>{content}</section>')
    title = f"Phaze sweep report: {store.path.parent.name}"
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head>\n<body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )


# ---------------------------------------------------------------------------------- sections
def _summary_sentence(
    store: Store, points: Sequence[Mapping[str, Any]], manifest: Mapping[str, Any]
) -> str:
    real = [p for p in points if p["workload"] != AGGREGATE_WORKLOAD]
    if not real:
        return f"The store {_code(store.path)} holds no points yet."
    workloads = sorted({p["workload"] for p in real})
    feasible = sum(p["feasible"] for p in real)
    pruned = sum(is_pruned(p) for p in real)
    designs = len({p["design_id"] for p in real})
    version = manifest.get("tool_version")
    parts = [
        f"{len(real)} points ({feasible} feasible, {len(real) - feasible - pruned} infeasible, "
        f"{pruned} pruned by a proven bound) of {designs} designs on "
        f"{len(workloads)} workload{'s' if len(workloads) > 1 else ''} ({html.escape(', '.join(workloads))}).",
        f"Store: {_code(store.path)}.",
    ]
    if store.config_hash:
        parts.append(f"Config hash {_code(store.config_hash[:12])}.")
    configs = len(store.sweeps())
    if configs > 1:
        parts.append(
            f"<strong>The store mixes {configs} configurations</strong> (a change was allowed); "
            "the inputs below are the latest."
        )
    if version:
        parts.append(f"Phaze {html.escape(str(version))}.")
    return " ".join(parts)


def _answer(feasible: Sequence[Mapping[str, Any]], objectives: Sequence[ObjectiveSpec]) -> str:
    if not feasible:
        return "<p>No feasible points: nothing fits. See the reasons below.</p>"
    out = [
        "<p>The best point of the sweep for each objective, per workload. Green marks the value "
        "the row wins on. A point is one design with one micro-batch size, recompute mode and "
        "the placement (TP x PP x DP) the search chose for it.</p>"
    ]
    for w, pts in by_workload(feasible).items():
        rows = highlights(pts, objectives)
        out.append(f"<h3>{html.escape(workload_title(w))}</h3>")
        out.append(
            _points_table(
                w,
                [h.point for h in rows],
                first=("best for", [h.title for h in rows]),
                objectives=[metric_for(w, o.metric) for o in parse_objectives(objectives)],
                wins=[h.metrics for h in rows],
            )
        )
    return "".join(out)


def _top_tables(
    feasible: Sequence[Mapping[str, Any]], objectives: Sequence[ObjectiveSpec], top: int
) -> str:
    out = [
        f"<p>The {top} best designs per objective, each at its best micro-batch size and "
        "recompute mode (ties broken by the other objectives, then design id); the shaded "
        "column, in bold, is the one a table ranks by. Click a placement to see its "
        "pipeline stages.</p>"
    ]
    for w, pts in by_workload(feasible).items():
        out.append(f"<h3>{html.escape(workload_title(w))}</h3>")
        objs = [Objective(metric_for(w, o.metric), o.sense) for o in parse_objectives(objectives)]
        for o in objs:
            ranked = top_designs(pts, o, objs, top)
            if not ranked:
                continue
            metric = o.metric
            title = objective_title((metric, o.sense))
            out.append(f"<h4>{html.escape(title[0].upper() + title[1:])}</h4>")
            out.append(
                _points_table(
                    w,
                    ranked,
                    first=("#", [str(i + 1) for i in range(len(ranked))]),
                    objectives=[x.metric for x in objs],
                    ranked_by=metric,
                )
            )
    return "".join(out)


def _headroom(feasible: Sequence[Mapping[str, Any]], top: int) -> str:
    """The fastest designs' die area against the reticle and power under tensor load against
    their board limit, as the sweep stored them (``arch_space.power.headroom``, the figures
    ``phaze evaluate`` prints, in the same words)."""
    best: dict[str, Mapping[str, Any]] = {}
    stored = (p for p in feasible if all(p.get(c) is not None for c in HEADROOM_COLUMNS))
    for p in sorted(stored, key=lambda p: (-(p.get("tokens_per_s") or 0.0), p["design_id"])):
        best.setdefault(p["design_id"], p)
    if not best:
        return "<p>No feasible point records its design's headroom.</p>"
    rows = "".join(
        f"<tr><td>{html.escape(design_label(p))}</td>"
        f"<td>{html.escape(area_headroom_text(p))}</td>"
        f"<td>{html.escape(power_headroom_text(p))}</td></tr>"
        for p in list(best.values())[:top]
    )
    return (
        "<p>The fastest designs against their budgets: the area of one die as made against "
        "the reticle (one exposure field), and board power under tensor load (a large GEMM) "
        "at the design's clock against its board limit (a preset's host server's, else its "
        "node's default budget). The headroom measures the power the design asks for; a "
        "preset's limiter holds what it draws at its limit, so negative power headroom says "
        "how far the limiter throttles it (a design space caps such a design's clock "
        "instead).</p>"
        "<table><tr><th>design</th><th>area headroom</th><th>power headroom</th></tr>"
        f"{rows}</table>"
    )


def _points_table(
    workload: str,
    rows: Sequence[Mapping[str, Any]],
    *,
    first: tuple[str, Sequence[str]],
    objectives: Sequence[str],
    ranked_by: str | None = None,
    wins: Sequence[frozenset[str]] | None = None,
) -> str:
    """A table of points: design, knobs, the placement, then the columns of the
    ``objectives`` (the table ranks by ``ranked_by``, shown bold) and the other key metrics,
    in people's units."""
    aggregate = workload == AGGREGATE_WORKLOAD
    cols = _metric_columns(workload, objectives)
    head = [first[0], "design", *([] if aggregate else ["layout"])]
    heads = [f"<th>{html.escape(h)}</th>" for h in head]
    heads += [
        (
            f'<th class="rank">{html.escape(h)}</th>'
            if c == ranked_by
            else f"<th>{html.escape(h)}</th>"
        )
        for h, c in cols
    ]
    lines = ['<div class="scroll"><table><tr>' + "".join(heads) + "</tr>"]
    for i, (label, p) in enumerate(zip(first[1], rows, strict=True)):
        cells = [f"<td>{html.escape(label)}</td>", f'<td class="design">{_design_cell(p)}</td>']
        if not aggregate:
            cells.append(f"<td>{_placement_cell(p)}</td>")
        for _, c in cols:
            cls = "num"
            if wins is not None and c in wins[i]:
                cls += " best"
            if c == ranked_by:
                cls += " rank"
            cells.append(f'<td class="{cls}">{html.escape(fmt_value(c, p.get(c)))}</td>')
        lines.append("<tr>" + "".join(cells) + "</tr>")
    lines.append("</table></div>")
    return "".join(lines)


def _metric_columns(workload: str, objectives: Sequence[str]) -> list[tuple[str, str]]:
    """(header, column) of a points table: each objective's column first, then the key
    metrics not already shown (one of two columns holding one quantity in two units)."""
    aggregate = workload == AGGREGATE_WORKLOAD
    names = list(dict.fromkeys(objectives))
    shown = set(names) | {_SAME[n] for n in names if n in _SAME}
    for _, c in _TOP_COLUMNS:
        c = metric_for(workload, c)
        if c not in shown and not (aggregate and c in _AGGREGATE_SKIP):
            names.append(c)
            shown.add(c)
    headers = {c: h for h, c in _TOP_COLUMNS} | (_AGGREGATE_HEADERS if aggregate else {})
    return [(headers.get(c, COLUMNS[c].label), c) for c in names]


def _design_cell(p: Mapping[str, Any]) -> str:
    return (
        f"{html.escape(design_label(p))}<br>"
        f'<span class="muted">id {html.escape(str(p.get("design_id")))}'
        f"{', ' + html.escape(fmt_value('peak_flops', p['peak_flops'])) if p.get('peak_flops') else ''}</span>"
    )


def _placement_cell(p: Mapping[str, Any]) -> str:
    short = layout_label(p) or "placement"
    raw = p.get("placement")
    if not raw:
        return html.escape(short)
    try:
        pretty = json.dumps(json.loads(raw), indent=1, sort_keys=True)
    except (TypeError, ValueError):
        pretty = str(raw)
    return f"<details><summary>{html.escape(short)}</summary><pre>{html.escape(pretty)}</pre></details>"


def _figures(plots: Sequence[Plot], fmt: str, cache: dict[tuple[str, str], bytes]) -> str:
    mime = "image/svg+xml" if fmt == "svg" else "image/png"
    out = []
    for plot in plots:
        src = f"data:{mime};base64," + base64.b64encode(draw(plot, fmt, cache)).decode()
        out.append(
            f'<figure id="fig-{plot.name}"><h3>{html.escape(plot.title)}</h3>'
            f'<img src="{src}" alt="{html.escape(plot.title)}">'
            f"<figcaption>{html.escape(plot.caption)}</figcaption></figure>"
        )
    return "".join(out)


def _reasons(points: Sequence[Mapping[str, Any]]) -> str:
    bad = [p for p in points if not p["feasible"]]
    if not bad:
        return "<p>Every point evaluated is feasible.</p>"
    kinds: Counter[tuple[str, str]] = Counter()
    example: dict[tuple[str, str], str] = {}
    for p in bad:
        reason = str(p.get("reason") or "(no reason given)")
        k = (str(p["workload"]), reason.split(":", 1)[0].strip())
        kinds[k] += 1
        example.setdefault(k, reason)
    rows = "".join(
        f'<tr><td>{html.escape(w)}</td><td>{html.escape(kind)}</td><td class="num">{n}</td>'
        f"<td>{html.escape(example[w, kind])}</td></tr>"
        for (w, kind), n in sorted(kinds.items(), key=lambda kv: (kv[0][0], -kv[1], kv[0][1]))
    )
    return (
        "<p>Infeasible points are stored with their reason; pruned points were skipped because "
        "an evaluated design provably beats their best possible outcome.</p>"
        "<table><tr><th>workload</th><th>reason</th><th>points</th><th>example</th></tr>"
        f"{rows}</table>"
    )


def _schedule_gaps(points: Sequence[Mapping[str, Any]]) -> str:
    """Evaluated points per workload by their worst layer-schedule gap (the schedule against
    its proven lower bound), so a reader sees how far from optimal the times may be."""
    buckets = (
        (0.0, "0 (proven optimal)"),
        (0.01, "up to 1 %"),
        (0.05, "1-5 %"),
        (0.10, "5-10 %"),
        (0.25, "10-25 %"),
        (float("inf"), "over 25 %"),
    )
    counts: Counter[tuple[str, str]] = Counter()
    worst: dict[str, float] = {}
    for p in points:
        gap = p.get("schedule_gap_max")
        if p["feasible"] and p["workload"] != AGGREGATE_WORKLOAD and gap is not None:
            counts[p["workload"], next(label for top, label in buckets if gap <= top)] += 1
            worst[p["workload"]] = max(worst.get(p["workload"], 0.0), gap)
    if not counts:
        return "<p>No evaluated point records how exact its layer schedules are.</p>"
    head = "".join(f"<th>{html.escape(label)}</th>" for _, label in buckets)
    rows = "".join(
        f"<tr><td>{html.escape(w)}</td>"
        + "".join(f'<td class="num">{counts[w, label]}</td>' for _, label in buckets)
        + f'<td class="num">{fmt_percent(worst[w])}</td></tr>'
        for w in sorted(worst)
    )
    return (
        "<p>Each evaluated point counts once, under the worst gap of the layer schedules its "
        "placement uses: (schedule - proven lower bound) / schedule, so the optimal schedule "
        "is at most that much shorter; 0 means every pass is proven optimal. The column "
        "<code>schedule_methods</code> says how each pass was closed (bound, branch-and-bound "
        "search, MIP, or the list schedule).</p>"
        f"<table><tr><th>workload</th>{head}<th>worst</th></tr>{rows}</table>"
    )


def _inputs(inputs: Mapping[str, Any]) -> str:
    """The sweep's inputs, its configuration showing only the keys of the sweep's mode."""
    rest = {k: v for k, v in inputs.items() if k not in ("formulas", "defaults")}
    if not rest:
        return "<p>(none recorded)</p>"
    config = rest.get("config")
    if isinstance(config, Mapping):
        mode = "serve" if config.get("mode") == "serve" else "train"
        other = _SERVING_KEYS if mode == "train" else _TRAINING_KEYS
        rest["config"] = {k: v for k, v in config.items() if k not in other}
    return (
        "<p>Everything the sweep was given (its configuration, after defaults; only the keys "
        "of its mode).</p>" + _mapping_table(rest)
    )


def _formulas(inputs: Mapping[str, Any]) -> str:
    out = []
    for key, title in (
        ("formulas", "Formulas"),
        ("defaults", "Defaults (SI units; override in the sweep config)"),
    ):
        value = inputs.get(key)
        if value:
            out.append(f"<h3>{html.escape(title)}</h3>")
            out.append(
                _mapping_table(value)
                if isinstance(value, Mapping)
                else f"<pre>{html.escape(str(value))}</pre>"
            )
    return "".join(out) or "<p>(none recorded)</p>"


def _glossary() -> str:
    rows = "".join(
        f"<tr><td><code>{c.name}</code></td><td>{html.escape(c.unit)}</td>"
        f"<td>{ {'max': 'higher', 'min': 'lower', None: ''}[c.sense] }</td>"
        f"<td>{html.escape(c.description)}</td></tr>"
        for c in POINT_COLUMNS
    )
    return (
        "<p>Columns of the store and of <code>phaze export</code>, in SI units; the tables above "
        "show them in people's units (time in ms to days, tCDP in tCO2e·days, MFU in %).</p>"
        "<table><tr><th>column</th><th>unit</th><th>better</th><th>meaning</th></tr>"
        f"{rows}</table>"
    )


# ---------------------------------------------------------------------------------- helpers
def _objectives(inputs: Mapping[str, Any]) -> tuple[str, ...]:
    """The sweep's objectives (``objectives`` at the top of the inputs or in ``config``)."""
    for where in (inputs, inputs.get("config")):
        if isinstance(where, Mapping) and where.get("objectives"):
            return tuple(str(o) for o in where["objectives"])
    return DEFAULT_OBJECTIVES


def _code(x: Any) -> str:
    return f"<code>{html.escape(str(x))}</code>"


def _mapping_table(m: Mapping[str, Any]) -> str:
    rows = "".join(
        f"<tr><th>{html.escape(str(k))}</th><td>{_value_html(str(k), v)}</td></tr>"
        for k, v in m.items()
    )
    return f"<table>{rows}</table>"


def _value_html(key: str, v: Any) -> str:
    """A value of the inputs or manifest; numbers with a unit suffix also in human units."""
    if isinstance(v, Mapping):
        return _mapping_table(v) if v else "(empty)"
    if isinstance(v, list | tuple):
        if all(not isinstance(x, Mapping | list | tuple) for x in v):
            return html.escape(", ".join(str(x) for x in v)) or "(none)"
        return f"<pre>{html.escape(json.dumps(v, indent=1))}</pre>"
    if v is None:
        return "-"
    if isinstance(v, int | float) and not isinstance(v, bool) and unit_of(key):
        return (
            f'{html.escape(str(v))} <span class="muted">({html.escape(fmt_value(key, v))})</span>'
        )
    return html.escape(str(v))
