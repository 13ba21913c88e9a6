"""The report's time section: the fastest designs' iteration terms, in people's units."""

from __future__ import annotations

from dataclasses import fields

from placement.iteration import IterationTime
from results.report_time import time_breakdown_html, time_terms
from results.schema import COLUMNS, TIME_TERM_COLUMNS


def _point(design: str, tokens_per_s: float, terms: dict[str, float] | None, key: str) -> dict:
    return {
        "key": key,
        "workload": "gpt3-1.3b",
        "design_id": design,
        "design_name": design,
        "tokens_per_s": tokens_per_s,
        "iteration_s": sum((terms or {}).values()) or None,
        "micro_batch": 1,
        "recompute": "none",
        "tp": 1,
        "pp": 1,
        "dp": 8,
        **(terms or {}),
    }


TERMS = {
    "compute_s": 0.75,
    "recompute_s": 0.0,
    "tp_comm_exposed_s": 0.05,
    "ep_comm_exposed_s": 0.0,
    "cp_comm_exposed_s": 0.0,
    "pp_comm_exposed_s": 0.0,
    "bubble_s": 0.125,
    "dp_comm_exposed_s": 0.0625,
    "embedding_comm_exposed_s": 0.0,
    "optimizer_s": 0.0125,
}


def test_the_store_has_a_column_for_every_term_of_the_iteration_model():
    names = [f.name for f in fields(IterationTime) if f.name != "iteration_s"]
    assert list(TIME_TERM_COLUMNS) == names
    assert all(COLUMNS[c].unit == "s" and COLUMNS[c].sense == "min" for c in names)


def test_terms_zero_for_every_shown_design_are_left_out():
    text = time_breakdown_html([_point("a", 10.0, TERMS, "a1")])
    assert "bubble" in text and "DP comm." in text
    assert "EP all-to-all" not in text and "PP comm." not in text
    moe = {**TERMS, "ep_comm_exposed_s": 0.03}
    assert "EP all-to-all" in time_breakdown_html([_point("a", 10.0, moe, "a1")])


def test_each_design_once_at_its_fastest_point_with_every_term():
    points = [
        _point("a", 10.0, TERMS, "a1"),
        _point("a", 20.0, {**TERMS, "compute_s": 0.4}, "a2"),
        _point("b", 5.0, TERMS, "b1"),
        _point("c", 50.0, None, "c1"),  # stored before the terms were: left out
    ]
    text = time_breakdown_html(points, top=3)
    assert set(TIME_TERM_COLUMNS) == set(TERMS)
    assert text.count("<tr>") == 1 + 2  # header, a at its fastest, b
    assert "400 ms" in text and "750 ms" in text  # a's fastest point, then b
    assert text.index("400 ms") < text.index("750 ms")
    assert "125 ms" in text and "12.5 ms" in text  # bubble, optimizer in people's units
    assert "12.5 %" in text  # b's bubble is 0.125 of its 1 s iteration


def test_a_store_without_terms_says_so():
    assert time_terms(_point("c", 1.0, None, "c1")) is None
    assert "No feasible point" in time_breakdown_html([_point("c", 1.0, None, "c1")])
