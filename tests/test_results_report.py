"""The HTML report and the plots (results.report, results.plots) on a small synthetic sweep.

``synthetic_points`` imitates a sweep's records (two workloads, a few dozen designs, micro-batch
x recompute knobs, infeasible and pruned points, two named presets and the per-design aggregate
rows); its numbers follow simple roofline-like formulas, enough to give fronts with real trades.
"""

from __future__ import annotations

import base64
import html
import html.parser
import io
import itertools
import json
import math
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from matplotlib.image import imread

from phaze.errors import ConfigError
from results.compare import compare_to_presets, comparison_rows, comparison_text
from results.display import fmt_value
from results.plots import front_figure, png_bytes, standard_plots, svg_text, write_plots
from results.report import write_report
from results.schema import AGGREGATE_WORKLOAD
from results.store import Store, load

_GIB = 2**30
WORKLOADS = {"gpt3-1.3b": (1.3e9, 3.0e11), "llama2-7b": (6.7e9, 2.0e12)}  # params, tokens to train
CONFIG = {
    "config": {
        "workloads": list(WORKLOADS),
        "space": "tiny",
        "devices": 64,
        "micro_batches": [1, 2, 4, 8],
    },
    "formulas": {
        "tokens_per_s": "global batch x sequence length / iteration time",
        "tcdp": "tC x D",
    },
    "defaults": {"pue": 1.1, "grid_gco2e_per_kwh": 481.0, "lifetime_s": 157788000.0},
    "designs": 26,
}


def _design(num_tc, rows, num_vc, glb_mib, hbm_gib, name=""):
    peak = num_tc * rows * rows * 2 * 1.0e9
    area = 40 + num_tc * rows * rows * 0.0045 + num_vc * 2.5 + glb_mib * 0.45
    cost = 30 * area + 12 * hbm_gib + 400
    did = f"{num_tc}-{rows}-{num_vc}-{glb_mib}-{hbm_gib}-{name}"
    return {
        "design_id": did,
        "design_name": name,
        "num_tc": num_tc,
        "tc_rows": rows,
        "tc_cols": rows,
        "num_vc": num_vc,
        "vc_lanes": 128,
        "glb_bytes": glb_mib * 2**20,
        "hbm_bytes": hbm_gib * _GIB,
        "hbm_bandwidth_bytes_per_s": 0.04e12 * hbm_gib,
        "clock_hz": 1.0e9,
        "node_nm": 7,
        "area_mm2": area,
        "peak_flops": peak,
        "device_cost_usd": cost,
    }


def synthetic_points(tiny: bool = False) -> tuple[list[dict], list[dict]]:
    """(designs, points) of a small synthetic sweep, deterministic; ``tiny``: one workload,
    five designs (for the tests that only need the plumbing)."""
    designs = [
        _design(tc, r, vc, g, h)
        for tc, r, vc, g, h in itertools.product((2, 4, 8), (64, 128), (4, 16), (32,), (32, 80))
        if not (tc == 8 and r == 128 and vc == 4)
    ]
    designs += [_design(8, 128, 16, 40, 80, "a100-like"), _design(4, 128, 8, 32, 32, "tpu-v4-like")]
    workloads = WORKLOADS
    if tiny:
        designs = designs[:2] + designs[-5:-2] + designs[-1:]
        workloads = {"llama2-7b": WORKLOADS["llama2-7b"]}
    devices = 64
    points = []
    for (w, (params, tokens)), d, mb, rc in itertools.product(
        workloads.items(), designs, (1, 2, 4, 8), ("none", "full")
    ):
        key = f"{w}|{d['design_id']}|mbs={mb}|recompute={rc}"
        rec = {
            "key": key,
            "workload": w,
            **d,
            "devices": devices,
            "micro_batch": mb,
            "recompute": rc,
        }
        if (
            d["num_tc"] == 2
            and d["tc_rows"] == 64
            and d["num_vc"] == 4
            and d["hbm_bytes"] == 32 * _GIB
        ):
            points.append(
                {**rec, "feasible": False, "reason": "pruned: its optimistic bound is dominated"}
            )
            continue
        mem = 18 * params / 8 + (0.6 if rc == "none" else 0.08) * mb * params / 1.3e9 * _GIB * 2
        if mem > d["hbm_bytes"]:
            why = f"does not fit: {mem / _GIB:.1f} GiB per device > {d['hbm_bytes'] / _GIB:.0f} GiB HBM"
            points.append({**rec, "feasible": False, "reason": why})
            continue
        util = (
            0.55 * (1 - 0.5 / (1 + mb)) * (0.75 if rc == "full" else 1.0) * (1 + d["num_vc"] / 64)
        )
        util *= min(1.0, d["hbm_bandwidth_bytes_per_s"] / (d["peak_flops"] / 120))
        flops_per_token = 6 * params * (4 / 3 if rc == "full" else 1)
        tps = devices * d["peak_flops"] * util / flops_per_token
        it = 512 * 2048 / tps
        d_s = tokens / tps
        comp, comm = 0.78 * it, 0.12 * it
        e = {
            "energy_compute_j": 0.55e-12 * 6 * params * 512 * 2048 * 4,
            "energy_memory_j": 0.25e-12 * 6 * params * 512 * 2048 * 4,
            "energy_static_j": devices * 0.12 * d["area_mm2"] * it,
            "energy_network_j": 0.02e-12 * 6 * params * 512 * 2048 * 4 * (1 + mb / 8),
        }
        e_batch = sum(e.values())
        job_e = e_batch * tokens / (512 * 2048)
        emb = devices * (0.9 * d["area_mm2"] + 0.16 * d["hbm_bytes"] / _GIB) * d_s / (5 * 3.15576e7)
        op = job_e / 3.6e6 * 1.1 * 0.481
        points.append(
            {
                **rec,
                "feasible": True,
                "tp": 2,
                "pp": 4 if mb < 4 else 2,
                "dp": devices // (8 if mb < 4 else 4),
                "iteration_s": it,
                "samples_per_s": 512 / it,
                "tokens_per_s": tps,
                "mfu": util / (4 / 3 if rc == "full" else 1),
                "time_to_train_s": d_s,
                "compute_s": comp,
                "communication_s": comm,
                "bubble_s": it - comp - comm,
                "energy_per_batch_j": e_batch,
                **e,
                "job_energy_j": job_e,
                "avg_power_w": e_batch / it,
                "system_cost_usd": devices * d["device_cost_usd"],
                "embodied_kgco2e": emb,
                "operational_kgco2e": op,
                "total_kgco2e": emb + op,
                "tcdp": (emb + op) * d_s,
                "tcdp_kgco2e_days": (emb + op) * d_s / 86400,
                "memory_per_device_bytes": mem,
                "placement": {
                    "tp": 2,
                    "pp": 4,
                    "dp": 8,
                    "stages": [{"layers": [0, 11]}, {"layers": [12, 23]}],
                },
            }
        )
    points += _aggregate(points, workloads)
    return designs, points


def _aggregate(points: list[dict], workloads) -> list[dict]:
    """Per-design aggregate rows as the sweep writes them (issue 7 item 7)."""
    best = {}
    for p in points:
        if p["feasible"] and p["workload"] != AGGREGATE_WORKLOAD:
            k = (p["workload"], p["design_id"])
            if k not in best or p["tokens_per_s"] > best[k]["tokens_per_s"]:
                best[k] = p
    top = {w: max(p["tokens_per_s"] for (ww, _), p in best.items() if ww == w) for w in workloads}
    out = []
    for did in sorted({d for _, d in best}):
        rows = [best.get((w, did)) for w in workloads]
        if any(r is None for r in rows):
            continue
        score = math.exp(
            sum(math.log(r["tokens_per_s"] / top[r["workload"]]) for r in rows) / len(rows)
        )
        tot = sum(r["total_kgco2e"] for r in rows)
        d_s = sum(r["time_to_train_s"] for r in rows)
        keep = (
            "design_id",
            "design_name",
            "num_tc",
            "tc_rows",
            "tc_cols",
            "num_vc",
            "hbm_bytes",
            "area_mm2",
        )
        out.append(
            {
                **{k: rows[0][k] for k in keep},
                "key": f"{AGGREGATE_WORKLOAD}|{did}",
                "workload": AGGREGATE_WORKLOAD,
                "feasible": True,
                "throughput_score": score,
                "system_cost_usd": rows[0]["system_cost_usd"],
                "embodied_kgco2e": sum(r["embodied_kgco2e"] for r in rows),
                "operational_kgco2e": sum(r["operational_kgco2e"] for r in rows),
                "total_kgco2e": tot,
                "time_to_train_s": d_s,
                "tcdp": tot * d_s,
                "tcdp_kgco2e_days": tot * d_s / 86400,
            }
        )
    return out


def make_store(out_dir: Path, tiny: bool = False) -> Path:
    """A synthetic sweep's store in ``out_dir`` (returns the directory)."""
    designs, points = synthetic_points(tiny)
    with Store.open(out_dir, CONFIG, "synthetic-hash") as s:
        for d in designs:
            s.put_design(d)
        for p in points:
            s.put_point(p)
        s.set_manifest(
            {
                "tool_version": "0.1.0",
                "solver": {"name": "highs"},
                "wall_times_s": {"total_s": 12.5},
            }
        )
    return out_dir


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


class _Collector(html.parser.HTMLParser):
    """Collects images and table cells; fails on unbalanced tags."""

    VOID = frozenset({"img", "meta", "br", "hr", "link", "input", "col", "wbr", "source"})

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.images: list[str] = []
        self.svgs: list[str] = []
        self.cells: list[str] = []
        self._cell: list[str] | None = None
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.images.append(dict(attrs)["src"])
        if tag not in self.VOID:
            self.stack.append(tag)
        if tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag in self.VOID:
            return
        assert self.stack and self.stack[-1] == tag, f"unbalanced </{tag}> after {self.stack[-3:]}"
        self.stack.pop()
        if tag in ("td", "th") and self._cell is not None:
            self.cells.append(" ".join("".join(self._cell).split()))
            self._cell = None

    def handle_data(self, data):
        self.text.append(data)
        if self._cell is not None:
            self._cell.append(data)


def parse_html(text: str) -> _Collector:
    """Parse HTML, failing on unbalanced tags; returns images, table cells and text."""
    c = _Collector()
    c.feed(text)
    c.close()
    assert c.stack == [], f"unclosed tags {c.stack}"
    return c


def check_images(doc: _Collector) -> None:
    """Every embedded image decodes: PNG by header, IEND and imread; SVG as XML."""
    for src in doc.images:
        head, data = src.split(",", 1)
        raw = base64.b64decode(data)
        if head == "data:image/png;base64":
            assert raw.startswith(b"\x89PNG\r\n\x1a\n") and raw.endswith(b"IEND\xaeB`\x82")
            img = imread(io.BytesIO(raw), format="png")
            assert img.shape[0] > 200 and img.shape[1] > 300
        else:
            assert head == "data:image/svg+xml;base64"
            ET.fromstring(raw)


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
    pts = load(store_dir).points(feasible_only=True)
    comparisons = compare_to_presets(pts)
    assert comparisons
    for row in comparison_rows(comparisons):
        for cell in row:
            assert html.escape(cell) in section, cell


def test_sweep_summary_text_has_the_same_comparison(store_dir):
    text = comparison_text(store_dir)
    assert text.lstrip().startswith("searched designs against the presets at equal area")
    for row in comparison_rows(compare_to_presets(load(store_dir).points(feasible_only=True))):
        assert all(cell in text for cell in row), row
