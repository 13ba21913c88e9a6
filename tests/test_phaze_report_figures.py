"""The report's figures are the stored figures. On a real sweep (two small designs beside the
A100 and H100, on gpt3-350m over eight devices, where every placement is a two-stage
pipeline): its time bars sum to each point's ``iteration_s`` and its energy bars to
``energy_per_batch_j``; its headroom reads what ``phaze evaluate`` prints; and every ranking
table, of the report and of ``phaze sweep``, shows the column it ranks by."""

from __future__ import annotations

import math
import re
from collections import defaultdict

import pytest
import sweeps
from reports import parse_html
from spaces import space_toml

from results.display import design_label, fmt_value, fmt_values, layout_label
from results.pareto import parse_objectives
from results.plots import BREAKDOWNS, breakdown_figure
from results.report import render_report
from results.schema import AGGREGATE_WORKLOAD, COLUMNS, ENERGY_TERM_COLUMNS, TIME_TERM_COLUMNS
from results.store import load
from results.summary import objective_title, top_designs

OBJECTIVES = ("tokens_per_s", "tco_usd", "total_kgco2e", "tcdp")
EVALUATE = ("--workload", "gpt3-350m", "--devices", "8", "--devices-per-node", "4")
EVALUATE += ("--global-batch", "16", "--seq-len", "256")


@pytest.fixture(scope="module")
def sweep(cli_run, tmp_path_factory):
    """(feasible points, report HTML, the output of ``phaze sweep``) of the sweep, run once."""
    d = tmp_path_factory.mktemp("figures")
    (d / "space.toml").write_text(space_toml("figures", num_tc=(2,), tc_rows=(128,)))
    toml = sweeps.config_toml(
        d / "space.toml",
        workloads=["gpt3-350m"],
        hbm_gib=[1.0, 2.0],
        devices=8,
        global_batch=16,
        presets=["a100", "h100"],
        objectives=list(OBJECTIVES),
    )
    (d / "sweep.toml").write_text(toml)
    out = d / "out"
    result = cli_run("sweep", d / "sweep.toml", "--out", out, "--executor", "serial", "--no-report")
    assert result.exit_code == 0, result.output
    with load(out) as store:
        points = store.points(feasible_only=True)
        text = render_report(store)
    return [p for p in points if p["workload"] != AGGREGATE_WORKLOAD], text, result.stdout


def _section(text: str, sid: str) -> str:
    return text.split(f'<section id="{sid}">', 1)[1].split("</section>", 1)[0]


def _rows(table: str) -> list[list[str]]:
    """The cells of an HTML table, row by row (header first)."""
    rows = re.findall(r"<tr>(.*?)</tr>", table, re.S)
    return [parse_html(f"<table><tr>{r}</tr></table>").cells for r in rows]


def test_every_point_stores_terms_that_sum_to_its_totals(sweep):
    points, _, _ = sweep
    assert len(points) == 4 and any(p["pp"] > 1 and p["bubble_s"] > 0 for p in points)
    for p in points:
        time = [p[c] for c in TIME_TERM_COLUMNS]
        energy = [p[c] for c in ENERGY_TERM_COLUMNS]
        assert math.fsum(time) == pytest.approx(p["iteration_s"], rel=1e-12), p["key"]
        assert math.fsum(energy) == pytest.approx(p["energy_per_batch_j"], rel=1e-12), p["key"]
        assert min(time + energy) >= 0 and p["energy_idle_j"] > 0 and p["energy_host_j"] > 0


def test_the_breakdown_bars_sum_to_the_exported_totals_for_every_point(sweep):
    """Each bar of each panel ends at the point's total: the time bar at iteration_s (the
    bubble counted once), the energy bar at energy_per_batch_j (idle and host energy in),
    so the chart ranks designs as the export does."""
    points, _, _ = sweep
    fig = breakdown_figure({"gpt3-350m": [(p["key"], p) for p in points]})
    (sub,) = fig.subfigs
    assert len(sub.axes) == len(BREAKDOWNS)
    for ax, (_, _, total, terms) in zip(sub.axes, BREAKDOWNS, strict=True):
        ends: dict[float, float] = defaultdict(float)
        for bar in ax.patches:
            ends[round(bar.get_y(), 6)] += bar.get_width()
        got = [ends[y] for y in sorted(ends, reverse=True)]  # the first point is on top
        assert got == pytest.approx([p[total] for p in points], rel=1e-12), total
        legend = {t.get_text() for t in ax.get_legend().get_texts()}
        assert legend == {COLUMNS[t].label for t in terms if any(p[t] for p in points)}
    legends = {t.get_text() for ax in sub.axes for t in ax.get_legend().get_texts()}
    assert {"bubble", "idle energy", "host energy"} <= legends


def test_the_time_table_reads_the_stored_terms(sweep):
    points, text, _ = sweep
    head, *rows = _rows(_section(text, "time"))
    assert head[:3] == ["design", "knobs and placement", "iteration"]
    by_label = {COLUMNS[c].label: c for c in TIME_TERM_COLUMNS}
    assert "bubble" in head
    for row in rows:
        p = next(p for p in points if (design_label(p), layout_label(p)) == tuple(row[:2]))
        assert row[2] == fmt_value("iteration_s", p["iteration_s"])
        for label, cell in zip(head[3:], row[3:], strict=True):
            assert cell.startswith(fmt_value(by_label[label], p[by_label[label]])), label


@pytest.mark.parametrize("preset", ["a100", "h100"])
def test_the_report_prints_the_headroom_evaluate_prints(sweep, cli_run, preset):
    """One function prices the headroom and one formats it: the report's row of a preset
    reads, word for word, the lines of ``phaze evaluate`` (the A100 draws its 400 W limit, as
    calibrated; the H100, at its fitted training clock, draws less than its 700 W limit)."""
    _, text, _ = sweep
    rows = {row[0]: row[1:] for row in _rows(_section(text, "headroom"))}
    result = cli_run("evaluate", *EVALUATE, "--arch", preset)
    assert result.exit_code == 0, result.output
    lines = dict(
        re.match(r"((?:area|power) headroom)\s+(.*)$", line).groups()
        for line in result.output.splitlines()
        if re.match(r"(area|power) headroom ", line)
    )
    assert rows[preset] == [lines["area headroom"], lines["power headroom"]]
    expected = {
        "a100": "draws 400 W under tensor load of a 400 W board limit",
        "h100": "draws 619 W under tensor load of a 700 W board limit",
    }
    assert expected[preset] in rows[preset][1]


def test_every_report_ranking_table_shows_the_column_it_ranks_by(sweep):
    """'Lowest cost to train' shows each design's cost to train, in rank order (bold); the
    answer shows every objective's column."""
    points, text, _ = sweep
    top = _section(text, "top")
    objectives = parse_objectives(OBJECTIVES)
    for o in objectives:
        title = objective_title(o)
        heading = f"<h4>{title[0].upper() + title[1:]}</h4>"
        table = top.split(heading, 1)[1].split("</table>", 1)[0]
        head, *rows = _rows(table)
        col = head.index(COLUMNS[o.metric].label)
        assert table.count('<th class="rank">') == 1 and f"{head[col]}</th>" in table
        ranked = top_designs(points, o, objectives, 5)
        assert [r[col] for r in rows] == [fmt_value(o.metric, p[o.metric]) for p in ranked]
        values = [p[o.metric] for p in ranked]
        assert values == sorted(values, reverse=o.sense == "max"), o.metric
    head = _rows(_section(text, "answer"))[0]
    assert {COLUMNS[m].label for m in OBJECTIVES} <= set(head)
    assert "cost to train" in head


def test_every_sweep_table_shows_the_column_it_ranks_by(sweep):
    """``phaze sweep``'s closing tables: "best by tco_usd" has a tco_usd column, values in
    rank order, the column in one unit."""
    points, _, stdout = sweep
    objectives = parse_objectives(OBJECTIVES)
    for o in objectives:
        block = stdout.split(f"gpt3-350m: best by {o.metric} (", 1)[1].split("\n\n", 1)[0]
        head, _, *rows = block.splitlines()[1:]
        assert head.split()[-1] == o.metric
        shown = [r.rsplit("  ", 1)[-1].strip() for r in rows]
        ranked = top_designs(points, o, objectives, len(rows))
        assert shown and shown == fmt_values(o.metric, [p[o.metric] for p in ranked])
