"""The report of a real (small) sweep parses, its images decode and its
tables hold the stored values."""

from __future__ import annotations

import re

import pytest
from reports import check_images, parse_html
from spaces import space_toml

import phaze
from arch_space import Cluster
from results.display import fmt_value
from results.report import write_report
from results.store import load

SPACE = space_toml("report-test", num_tc=(1, 4), tc_rows=(128,))


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sweep")
    space = tmp / "space.toml"
    space.write_text(SPACE)
    out = tmp / "out"
    phaze.search(
        ["gpt3-125m", "gpt3-350m"],
        space=str(space),
        cluster=Cluster(devices=4, devices_per_node=4),
        micro_batches=[1],
        recompute_modes=["none"],
        seq_len=256,
        global_batch=8,
        executor="serial",
        out_dir=out,
    )
    return out


def test_report_of_a_real_sweep(sweep_dir):
    path = write_report(sweep_dir, image_format="svg")  # PNGs: test_results_report
    text = path.read_text()
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
