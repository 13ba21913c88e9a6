"""The report's time section: where one iteration's time goes, for the fastest designs.

The terms are those of :class:`placement.iteration.IterationTime`, which a sweep stores as
columns of each point (:data:`results.schema.TIME_TERM_COLUMNS`); they sum to the iteration
time.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

from phaze_common.units import fmt_percent, fmt_time
from results.display import design_label, layout_label, workload_title
from results.schema import COLUMNS, TIME_TERM_COLUMNS
from results.summary import by_workload

__all__ = ["time_terms", "time_breakdown_html"]


def time_terms(p: Mapping[str, Any]) -> Mapping[str, float] | None:
    """The stored time terms of point ``p`` (None for a point stored without them)."""
    if any(p.get(c) is None for c in TIME_TERM_COLUMNS):
        return None
    return {c: float(p[c]) for c in TIME_TERM_COLUMNS}


def time_breakdown_html(feasible: Sequence[Mapping[str, Any]], top: int = 3) -> str:
    """The iteration time of the ``top`` fastest designs of each workload, term by term."""
    out = [
        f"<p>One iteration of the {top} fastest designs per workload (by tokens/s, each at "
        "its fastest micro-batch and recompute mode), split "
        "into the terms of the iteration model: compute, recomputation, the exposed tensor-, "
        "expert-, context-, pipeline- and data-parallel communication, the pipeline bubble, "
        "the tied embedding's gradient all-reduce and the optimizer step (a term that is zero "
        "for every design of a workload is left out of its table). The terms sum to the "
        "iteration time; each cell gives the share of it.</p>"
    ]
    shown = 0
    for w, pts in by_workload(feasible).items():
        best: dict[Any, Mapping[str, Any]] = {}  # each design at its fastest point
        for p in sorted(
            (p for p in pts if p.get("tokens_per_s") and time_terms(p) is not None),
            key=lambda p: (-p["tokens_per_s"], str(p.get("key"))),
        ):
            best.setdefault(p.get("design_id"), p)
        ranked = [(p, time_terms(p) or {}) for p in list(best.values())[:top]]
        if not ranked:
            continue
        shown_terms = [k for k in TIME_TERM_COLUMNS if any(t[k] for _, t in ranked)]
        head = "".join(
            f"<th>{html.escape(h)}</th>"
            for h in (
                "design",
                "knobs and placement",
                "iteration",
                *(COLUMNS[k].label for k in shown_terms),
            )
        )
        rows = ""
        for p, terms in ranked:
            total = p["iteration_s"]
            cells = "".join(
                f'<td class="num">{html.escape(fmt_time(terms[k]))}<br>'
                f'<span class="muted">{html.escape(fmt_percent(terms[k] / total))}'
                "</span></td>"
                for k in shown_terms
            )
            rows += (
                f"<tr><td>{html.escape(design_label(p))}</td>"
                f"<td>{html.escape(layout_label(p))}</td>"
                f'<td class="num">{html.escape(fmt_time(total))}</td>{cells}</tr>'
            )
        shown += 1
        out.append(f"<h3>{html.escape(workload_title(w))}</h3>")
        out.append(f'<div class="scroll"><table><tr>{head}</tr>{rows}</table></div>')
    if not shown:
        return "<p>No feasible point records where its time goes.</p>"
    return "".join(out)
