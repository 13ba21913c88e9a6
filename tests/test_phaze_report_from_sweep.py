"""The report of a real (small) sweep parses, its images decode and its tables hold the
stored values; ``phaze report`` writes it and the plot files where it is told."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from reports import check_images, parse_html
from spaces import space_toml

import phaze
from arch_space import Cluster
from results.display import fmt_value
from results.store import load


def test_report_of_a_real_sweep_and_its_plot_files(cli_run, tmp_path):
    """A real sweep (gpt3-125m and gpt3-350m on two small designs beside the presets) and
    its report with SVG figures (PNGs: test_results_report) and plot files, written by
    ``phaze report DIR --out FILE --svg --plots DIR``. One test, so that the figures (the
    costly part) are drawn once, whichever xdist worker runs it."""
    space = tmp_path / "space.toml"
    space.write_text(space_toml("report-test", num_tc=(1, 4), tc_rows=(128,)))
    sweep_dir = tmp_path / "out"
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
    path, plots = tmp_path / "sub" / "r.html", tmp_path / "plots"
    path.parent.mkdir()  # an output file's directory must exist
    result = cli_run("report", sweep_dir, "--out", path, "--svg", "--plots", plots)
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

    # the command: the report's path on stdout, no temporary left, the plot files
    assert result.stdout.strip() == str(path) and not list(path.parent.glob(".*tmp"))
    assert len(doc.images) == 7 and all(
        s.startswith("data:image/svg+xml;base64,") for s in doc.images
    )
    files = sorted(p.name for p in plots.iterdir())
    assert len(files) == 14 and "tcdp_ranking.png" in files and "knobs.svg" in files
    for p in plots.glob("*.svg"):
        ET.fromstring(p.read_bytes())
