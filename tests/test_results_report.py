"""The HTML report and the plots (results.report, results.plots) on a small synthetic sweep
(:func:`reports.synthetic_points`)."""

from __future__ import annotations

import html
import html.parser
import json
import re
from pathlib import Path

import pytest
from reports import check_images, make_store, parse_html

from phaze_common.errors import ConfigError
from phaze_common.units import fmt_percent
from results.compare import compare_to_presets, comparison_rows, comparison_text
from results.display import area_headroom_text, design_label, fmt_value, power_headroom_text
from results.plots import front_figure, png_bytes, standard_plots, svg_text, write_plots
from results.report import write_report
from results.store import Store, load


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory) -> Path:
    return make_store(tmp_path_factory.mktemp("sweep"))


@pytest.fixture(scope="module")
def report_text(store_dir) -> str:
    """The report of the synthetic sweep, written once to its default place."""
    out = write_report(store_dir)
    assert out == store_dir / "report.html"
    return out.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    return make_store(tmp_path_factory.mktemp("tiny"), tiny=True)


def test_report_is_self_contained_parses_and_images_decode(report_text):
    doc = parse_html(report_text)
    assert len(doc.images) == 7
    check_images(doc)
    assert not re.search(r'(src|href)="(?!data:|#)', report_text)  # nothing external


def test_report_tables_hold_the_stored_values(store_dir, report_text):
    doc = parse_html(report_text)
    cells = set(doc.cells)
    pts = load(store_dir).points(feasible_only=True, workload="llama2-7b")
    fastest = max(pts, key=lambda p: p["tokens_per_s"])
    greenest = min(pts, key=lambda p: p["total_kgco2e"])
    for p in (fastest, greenest):
        for col in (
            "tokens_per_s",
            "system_cost_usd",
            "total_kgco2e",
            "area_mm2",
            "tcdp_kgco2e_days",
        ):
            assert fmt_value(col, p[col]) in cells, (col, p[col])
    text = " ".join(doc.text)
    # sweep inputs, defaults (with human units), formulas and manifest are shown
    for needle in (
        "481.0",
        "(5 years)",
        "tC x D",
        "global batch x sequence length / iteration time",
        "highs",
        "tiny",
    ):
        assert needle in text, needle
    assert "does not fit" in cells and "pruned" in cells  # reasons, counted by kind
    # the placement of the fastest point is in the page, in full
    pretty = json.dumps(json.loads(fastest["placement"]), indent=1, sort_keys=True)
    assert pretty in html.unescape(report_text)


def test_report_answer_marks_the_winning_values(report_text):
    # "highest throughput" row has its throughput cell in green (class best)
    assert re.search(r'<td>highest throughput[^<]*</td>.*?<td class="num best">', report_text, re.S)


def test_report_of_an_empty_store_explains_itself(tmp_path):
    Store.open(tmp_path, {"config": {}}, "h").close()
    text = write_report(tmp_path).read_text(encoding="utf-8")
    parse_html(text)
    assert "holds no points yet" in text and "<img" not in text


def test_a_failed_report_write_leaves_no_temporary_file(tmp_path):
    """The rename onto an existing directory fails: the error surfaces and the temporary
    file is gone."""
    Store.open(tmp_path, {"config": {}}, "h").close()
    out = tmp_path / "report.html"
    out.mkdir()
    with pytest.raises(OSError):
        write_report(tmp_path, out)
    assert out.is_dir() and not [p.name for p in tmp_path.iterdir() if p.suffix == ".tmp"]


def test_report_shows_every_standard_plot_in_order(report_text):
    names = re.findall(r'<figure id="fig-(\w+)">', report_text)
    assert names == [
        "throughput_vs_cost",
        "throughput_vs_embodied",
        "throughput_vs_total_carbon",
        "tcdp_ranking",
        "area_vs_throughput",
        "breakdowns",
        "knobs",
    ]


def test_report_of_infeasible_points_in_a_mixed_store(tmp_path):
    with Store.open(tmp_path, {"config": {"devices": 8}}, "h1") as s:
        s.put_point(
            {"key": "a", "workload": "w", "design_id": "d", "feasible": False, "reason": "x: y"}
        )
    Store.open(tmp_path, {"config": {"devices": 16}}, "h2", allow_config_change=True).close()
    text = write_report(tmp_path).read_text(encoding="utf-8")
    doc = parse_html(text)
    assert "No feasible points" in text and "mixes 2 configurations" in text and "<img" not in text
    assert {"x", "x: y"} <= set(doc.cells) and "16" in doc.cells


def test_front_figure_labels_units_scales_and_legend(store_dir):
    pts = load(store_dir).points(feasible_only=True)
    fig = front_figure(
        pts, "system_cost_usd", "tokens_per_s", presets=[p for p in pts if p["design_name"]]
    )
    ax = fig.axes[0]
    assert ax.get_xlabel() == "system cost" and ax.get_ylabel() == "throughput"  # units on ticks
    assert [a.get_title() for a in fig.axes] == [
        "gpt3-1.3b",
        "llama2-7b",
        "all workloads (aggregate)",
    ]
    assert ax.get_title(loc="right") == "↖ better" and ax.get_yscale() == "log"
    assert ax.get_xscale() == "linear"  # cost spans less than a factor of 20
    assert fig.axes[2].get_ylabel() == "throughput score"
    labels = ax.get_legend_handles_labels()[1]
    assert (
        any(lb.startswith("Pareto front") for lb in labels)
        and "presets (best point of each)" in labels
    )
    assert sorted(t.get_text() for t in ax.texts) == ["a100-like", "tpu-v4-like"]  # one label each
    assert png_bytes(fig).startswith(b"\x89PNG") and svg_text(fig).lstrip().startswith("<?xml")
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    assert any(t.startswith("$") for t in ticks), ticks  # the tables' units, e.g. "$40k"


def test_plots_of_nothing_do_not_fail():
    for plot in standard_plots([]):
        assert png_bytes(plot.figure).startswith(b"\x89PNG")


def test_bad_image_format_is_refused(tiny_dir, tmp_path):
    with pytest.raises(ConfigError, match="not supported"):
        write_plots([], tmp_path, formats=("gif",))
    with pytest.raises(ConfigError, match="not supported"):
        write_report(tiny_dir, tmp_path / "x.html", image_format="gif")


def test_report_opens_with_the_comparison_against_the_presets(store_dir, report_text):
    first = re.search(r'<section id="(\w+)"><h2>([^<]*)</h2>', report_text)
    assert first.groups() == ("presets", "Searched designs against the presets")
    section = report_text[first.start() : report_text.index("</section>", first.start())]
    comparisons = compare_to_presets(load(store_dir).points())
    assert comparisons
    for row in comparison_rows(comparisons):
        for cell in row:
            assert html.escape(cell) in section, cell


def test_report_says_when_no_searched_design_reaches_a_presets_area():
    from results.report_presets import versus_presets

    def pt(design_id, name, area, tput):
        return {
            "workload": "w",
            "design_id": design_id,
            "design_name": name,
            "feasible": 1,
            "key": design_id,
            "area_mm2": area,
            "tokens_per_s": tput,
            "system_cost_usd": 1.0,
            "tcdp": 1.0 / tput,
        }

    section = versus_presets([pt("h", "h100", 814.0, 100.0), pt("s", None, 339.0, 50.0)])
    assert "no searched design within 10% of its area (largest: 339 mm²)" in section
    assert "×" not in section.split("<table>", 1)[1]


def test_sweep_summary_text_has_the_same_comparison(store_dir):
    text = comparison_text(store_dir)
    assert text.lstrip().startswith("searched designs against the presets at equal area")
    for row in comparison_rows(compare_to_presets(load(store_dir).points())):
        assert all(cell in text for cell in row), row


def test_report_shows_the_fastest_designs_headroom_as_stored(store_dir, report_text):
    section = report_text.split('<section id="headroom">', 1)[1].split("</section>", 1)[0]
    cells = parse_html(section).cells
    pts = load(store_dir).points(feasible_only=True)
    fastest = min(
        (p for p in pts if p["tokens_per_s"]), key=lambda p: (-p["tokens_per_s"], p["design_id"])
    )
    i = cells.index(design_label(fastest))
    assert cells[i + 1] == area_headroom_text(fastest)
    assert cells[i + 2] == power_headroom_text(fastest)
    assert fmt_percent(fastest["power_headroom"]) in cells[i + 2]


def _preset_point(name, feasible, reason=None, workload="w"):
    return {
        "workload": workload,
        "design_id": name,
        "design_name": name,
        "feasible": feasible,
        "key": f"{name}-{reason}",
        "area_mm2": 800.0,
        "tokens_per_s": 10.0 if feasible else None,
        "system_cost_usd": 1.0,
        "tcdp": 1.0,
        "reason": reason,
    }


def test_presets_with_only_infeasible_points_are_named_with_their_reasons():
    from results.report_presets import versus_presets

    oom = "does not fit: weights 30 GiB exceed HBM 16 GiB at t=1"
    points = [
        _preset_point("a100", 0, oom),
        _preset_point("a100", 0, oom),
        _preset_point("tpuv4", 0, "KV cache: 256 sequences need 900 pages"),
        {**_preset_point("s", 1), "design_name": None},
    ]
    section = versus_presets(points)
    assert "no preset" not in section
    assert "none of their points was feasible" in section
    assert html.escape(f"does not fit (2 points), e.g. {oom}") in section
    assert "KV cache (1 point), e.g. KV cache: 256 sequences need 900 pages" in section
    # a preset feasible on one workload and not on another: compared, and the other named
    mixed = [_preset_point("h100", 1), _preset_point("h100", 0, oom, workload="v"), points[-1]]
    section = versus_presets(mixed)
    assert "<td>v</td><td>h100</td>" in section and "×" in section
    assert "no preset (named design)" in versus_presets([points[-1]])


def test_the_training_report_inputs_leave_out_the_serving_keys():
    from phaze.config import SweepConfig
    from results.report import _inputs

    shown = _inputs({"config": SweepConfig().as_dict()})
    for key in ("seq_len", "micro_batches", "recompute"):
        assert f"<th>{key}</th>" in shown, key
    for key in ("input_tokens", "output_tokens", "batches", "ttft_limit_s", "weight_formats"):
        assert f"<th>{key}</th>" not in shown, key
