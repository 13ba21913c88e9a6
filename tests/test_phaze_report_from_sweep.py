"""The report of a real (small) sweep parses, its images decode and its
tables hold the stored values."""

from __future__ import annotations

import re

from reports import check_images, parse_html

from results.display import fmt_value
from results.store import load


def test_report_of_a_real_sweep(swept_report):
    """The real sweep's report, drawn as SVG (PNGs: test_results_report) in conftest.py."""
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
