"""A point's layout is rendered for people one way: :func:`results.display.layout_label`,
which the sweep's tables, the Pareto columns, the report and the plots all use."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from results import report
from results.display import DEFAULT_PRECISION, knob_columns, layout_label, point_label
from results.report_time import time_breakdown_html
from results.schema import TIME_TERM_COLUMNS
from workloads import precision

ROOT = Path(__file__).resolve().parent.parent
_POINT = {
    "mode": "train",
    "workload": "gpt3-175b",
    "design_name": "h100",
    "design_id": "abc",
    "micro_batch": 4,
    "recompute": "selective",
    "precision": "fp8-te",
    "tp": 8,
    "pp": 4,
    "dp": 32,
    "feasible": True,
    "tokens_per_s": 1e6,
    "iteration_s": 2.0,
    **dict.fromkeys(TIME_TERM_COLUMNS, 0.0),
    "compute_s": 1.5,
    "bubble_s": 0.5,
    "placement": json.dumps({"strategy": "t=8,p=4,d=32,v=1,mbs=4,precision=fp8-te"}),
}
_LABEL = "t8 p4 d32 mbs4 selective fp8-te"


def test_the_label_names_degrees_knobs_and_a_precision_other_than_the_default():
    assert layout_label(_POINT) == _LABEL
    bf16 = _POINT | {"precision": precision.DEFAULT_PRECISION}
    assert layout_label(bf16) == "t8 p4 d32 mbs4 selective"
    infeasible = {k: v for k, v in _POINT.items() if k not in ("tp", "pp", "dp")}
    assert layout_label(infeasible) == "mbs4 selective fp8-te"


def test_results_leave_out_the_one_default_precision():
    """results imports none of workloads: its copy of the default must be the recipe's."""
    assert DEFAULT_PRECISION == precision.DEFAULT_PRECISION


@pytest.mark.parametrize(
    "render",
    [
        lambda p: knob_columns([p])[1][0][0],
        point_label,
        report._placement_cell,
        lambda p: time_breakdown_html([p]),
    ],
    ids=["pareto", "plots", "report", "time-breakdown"],
)
def test_every_view_prints_the_one_label(render):
    assert _LABEL in render(_POINT)


# a record's value put into text as it is: {p['tp']}, {p.get("pp")}
_DEGREES = tuple(
    re.compile(rf"\{{\s*\w+(\[\s*['\"]{k}['\"]\s*\]|\.get\(\s*['\"]{k}['\"]\s*\))\s*\}}")
    for k in ("tp", "pp")
)


def test_no_other_module_formats_a_records_degrees():
    """A line formatting a record's ``tp`` and ``pp`` is a second rendering of a layout."""
    found = [
        f"{path.relative_to(ROOT)}:{i}"
        for package in ("phaze", "results", "placement")
        for path in sorted((ROOT / package).rglob("*.py"))
        if path != ROOT / "results" / "display.py"
        for i, line in enumerate(path.read_text().splitlines(), 1)
        if all(p.search(line) for p in _DEGREES)
    ]
    assert found == []
