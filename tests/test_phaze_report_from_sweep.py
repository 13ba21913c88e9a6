"""The report of a real (small) sweep parses, its images decode and its tables hold the
stored values; ``phaze report`` writes it and the plot files where it is told."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest
from reports import check_images, parse_html
from spaces import space_toml

import phaze
from arch_space import Cluster
from results.display import fmt_value
from results.store import load


@pytest.fixture(scope="module")
def swept_report(cli_run, tmp_path_factory):
    """A real sweep (gpt3-125m and gpt3-350m on two small designs beside the presets, run
    through ``phaze.search``) and its report, drawn once (the figures are the costly part)
    by ``phaze report --svg --plots``: (sweep directory, report, plots directory, Result)."""
    tmp = tmp_path_factory.mktemp("swept-report")
    space = tmp / "space.toml"
    space.write_text(space_toml("report-test", num_tc=(1, 4), tc_rows=(128,)))
    sweep_dir = tmp / "out"
    phaze.search(
        ["gpt3-125m", "gpt3-350m"],
        space=str(space),
        cluster=Cluster(devices=4, devices_per_node=4),
        micro_batches=[1],
        recompute_modes=["none"],
        seq_len=256,
        global_batch=8,
        executor="serial",
        out_dir=sweep_dir,
    )
    report, plots = tmp / "sub" / "r.html", tmp / "plots"
    result = cli_run("report", sweep_dir, "--out", report, "--svg", "--plots", plots)
    return sweep_dir, report, plots, result


def test_report_of_a_real_sweep(swept_report):
    """The real sweep's report, drawn as SVG (PNGs: test_results_report)."""
    sweep_dir, path, _, result = swept_report
    assert result.exit_code == 0, result.output
    text = path.read_text(encoding="utf-8")
    doc = parse_html(text)
    assert doc.images, "the report has plots"
    check_images(doc)
    assert not re.search(r'(src|href)="(?!data:|#)', text)  # self-contained
    cells = set(doc.cells)
    with load(sweep_dir) as store:
        for workload in ("gpt3-125m", "gpt3-350m"):
            pts = store.points(feasible_only=True, workload=workload)
            assert pts
            fastest = max(pts, key=lambda p: p["tokens_per_s"])
            for col in ("tokens_per_s", "system_cost_usd", "total_kgco2e"):
                assert fmt_value(col, fastest[col]) in cells, (workload, col)
        assert store.points(workload="*all*"), "the aggregate over workloads is stored"
    # the presets are swept beside the space as reference points
    assert {"a100", "h100", "tpuv4"} <= {p["design_name"] for p in load(sweep_dir).points()}


def test_report_command_svg_and_plot_files(swept_report):
    """``phaze report DIR --out FILE --svg --plots DIR``."""
    _, out, plots, r = swept_report
    assert r.exit_code == 0, r.output
    assert r.stdout.strip() == str(out) and not list(out.parent.glob(".*tmp"))
    doc = parse_html(out.read_text(encoding="utf-8"))
    assert len(doc.images) == 7 and all(
        s.startswith("data:image/svg+xml;base64,") for s in doc.images
    )
    check_images(doc)
    files = sorted(p.name for p in plots.iterdir())
    assert len(files) == 14 and "tcdp_ranking.png" in files and "knobs.svg" in files
    for p in plots.glob("*.svg"):
        ET.fromstring(p.read_bytes())
