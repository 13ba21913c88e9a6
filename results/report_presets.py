"""The report's comparison of the searched designs with the presets (named designs), and why
a preset of the sweep has nothing to compare: none of its points was feasible."""

from __future__ import annotations

import html
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from results.compare import (
    COMPARISON_HEADERS,
    EQUAL_AREA_TOLERANCE,
    compare_to_presets,
    comparison_rows,
    searched_designs,
)
from results.schema import AGGREGATE_WORKLOAD
from results.summary import is_preset

__all__ = ["versus_presets", "presets_without_feasible_points"]


def presets_without_feasible_points(
    points: Sequence[Mapping[str, Any]],
) -> dict[tuple[str, str], Counter[str]]:
    """Per (workload, preset) with points in the sweep but none feasible, the stored
    reasons of its points, counted."""
    real = [p for p in points if p["workload"] != AGGREGATE_WORKLOAD and is_preset(p)]
    feasible = {(p["workload"], str(p["design_name"])) for p in real if p.get("feasible")}
    out: dict[tuple[str, str], Counter[str]] = {}
    for p in real:
        k = (str(p["workload"]), str(p["design_name"]))
        if k not in feasible:
            out.setdefault(k, Counter())[str(p.get("reason") or "(no reason given)")] += 1
    return dict(sorted(out.items()))


def _infeasible_presets(points: Sequence[Mapping[str, Any]]) -> str:
    """A sentence and a table of the presets that have no feasible point, with the kinds
    of their reasons (the text before the first colon), each with one full example."""
    missing = presets_without_feasible_points(points)
    if not missing:
        return ""
    rows = []
    for (w, name), reasons in missing.items():
        kinds: Counter[str] = Counter()
        example: dict[str, str] = {}
        for reason, n in reasons.items():
            kind = reason.split(":", 1)[0].strip()
            kinds[kind] += n
            example.setdefault(kind, reason)
        why = "; ".join(
            f"{kind} ({n} point{'s' if n > 1 else ''}), e.g. {example[kind]}"
            for kind, n in sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0]))
        )
        rows.append(
            f"<tr><td>{html.escape(w)}</td><td>{html.escape(name)}</td>"
            f'<td class="num">{sum(reasons.values())}</td><td>{html.escape(why)}</td></tr>'
        )
    return (
        "<p>These presets were in the sweep but none of their points was feasible, so they "
        "are not compared; why, from each point's stored reason:</p>"
        "<table><tr><th>workload</th><th>preset</th><th>points</th><th>why infeasible</th></tr>"
        f"{''.join(rows)}</table>"
    )


def versus_presets(points: Sequence[Mapping[str, Any]]) -> str:
    """Each preset against the fastest searched design no larger than it (HTML), and the
    presets of the sweep that had no feasible point, with why."""
    comparisons = compare_to_presets(points)
    infeasible = _infeasible_presets(points)
    if not comparisons:
        if infeasible:
            return infeasible
        return "<p>The sweep has no preset (named design) to compare its searched designs with.</p>"
    head = "".join(f"<th>{html.escape(h)}</th>" for h in COMPARISON_HEADERS)
    body = ""
    for c, row in zip(comparisons, comparison_rows(comparisons), strict=True):
        labels = row[: -len(c.gains)]
        cells = [f"<td>{html.escape(x)}</td>" for x in labels]
        cells += [
            f'<td class="{"num best" if g is not None and g > 1 else "num"}">{html.escape(x)}</td>'
            for g, x in zip(c.gains, row[len(labels) :], strict=True)
        ]
        body += "<tr>" + "".join(cells) + "</tr>"
    designs = "".join(
        f"<li><code>{html.escape(d)}</code>: {html.escape(label)}</li>"
        for d, label in searched_designs(comparisons).items()
    )
    return (
        "<p>For each preset, the fastest searched design whose die is no larger than the "
        "preset's, both at their fastest point (as the Phaze paper compares its designs with "
        "TPUv4 at TPUv4's area). Where every searched design that fits is more than "
        f"{EQUAL_AREA_TOLERANCE:.0%} below the preset's area, no design of its size was "
        "searched: the row says so, and gives the gains only when the smaller design is ahead "
        "on all three. Each gain is the searched design's advantage: "
        "throughput and tokens per dollar of system cost as searched / preset, tCDP as "
        "preset / searched. "
        "Above 1.00× (green) the searched design is better.</p>"
        f'<div class="scroll"><table><tr>{head}</tr>{body}</table></div><ul>{designs}</ul>'
        + infeasible
    )
