"""Pareto fronts and the best/rank reducer against brute force (results.pareto)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from phaze_common.errors import ConfigError
from results.pareto import Objective, best, nondominated, pareto, parse_objective, rank

METRICS = ("tokens_per_s", "system_cost_usd", "total_kgco2e")


def _dominates(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    return all(x <= y for x, y in zip(a, b, strict=True)) and a != b


def _reference(points, objectives):
    """O(n^2) front: minimised values, every copy of a non-dominated point kept, total order."""
    vals = []
    for p in points:
        row = [p.get(m) for m, _ in objectives]
        if any(x is None for x in row):
            continue
        vals.append(
            (tuple(-x if s == "max" else x for x, (_, s) in zip(row, objectives, strict=True)), p)
        )
    front = [(v, p) for v, p in vals if not any(_dominates(w, v) for w, _ in vals)]
    front.sort(key=lambda vp: (vp[0], vp[1]["design_id"], vp[1]["key"]))
    return [p for _, p in front]


@st.composite
def _cases(draw):
    k = draw(st.sampled_from([2, 3]))
    senses = draw(st.lists(st.sampled_from(["max", "min"]), min_size=k, max_size=k))
    value = st.one_of(st.integers(0, 3).map(float), st.none(), st.just(-0.0))
    rows = draw(st.lists(st.lists(value, min_size=k, max_size=k), max_size=40))
    points = [
        {
            "key": f"k{i:02d}",
            "design_id": f"d{draw(st.integers(0, 3))}",
            **dict(zip(METRICS, r, strict=False)),
        }
        for i, r in enumerate(rows)
    ]
    return points, list(zip(METRICS[:k], senses, strict=True))


@given(_cases())
@example(([{"key": "a", "design_id": "x", "tokens_per_s": 1.0, "system_cost_usd": 1.0}] * 3,
          [("tokens_per_s", "max"), ("system_cost_usd", "min")]))  # fmt: skip
def test_pareto_matches_brute_force(case):
    points, objectives = case
    got = pareto(points, objectives)
    assert [p["key"] for p in got] == [p["key"] for p in _reference(points, objectives)]


@given(
    st.lists(st.tuples(*[st.floats(-5, 5, allow_nan=False)] * 3), max_size=60), st.integers(1, 3)
)
def test_nondominated_kernel_matches_brute_force(rows, k):
    v = np.array([r[:k] for r in rows], dtype=float).reshape(len(rows), k)
    want = [not any(_dominates(tuple(w), tuple(x)) for w in v.tolist()) for x in v.tolist()]
    assert nondominated(v).tolist() == want


@given(_cases())
def test_rank_is_the_lexicographic_sort(case):
    points, objectives = case
    sign = {"max": -1.0, "min": 1.0}
    valid = [p for p in points if all(p.get(m) is not None for m, _ in objectives)]
    want = sorted(
        valid,
        key=lambda p: (
            tuple(sign[s] * p[m] + 0.0 for m, s in objectives),
            p["design_id"],
            p["key"],
        ),
    )
    assert [p["key"] for p in rank(points, objectives)] == [p["key"] for p in want]
    top = best(points, objectives)
    assert top is (want[0] if want else None)


def test_duplicates_are_all_kept_and_ordered_by_design_then_key():
    p = {"tokens_per_s": 10.0, "system_cost_usd": 5.0}
    pts = [
        {"key": "z", "design_id": "b", **p},
        {"key": "y", "design_id": "a", **p},
        {"key": "x", "design_id": "b", **p},
        {"key": "w", "design_id": "c", "tokens_per_s": 9.0, "system_cost_usd": 5.0},
    ]
    assert [q["key"] for q in pareto(pts, ["tokens_per_s", "system_cost_usd"])] == ["y", "x", "z"]


def test_front_returns_the_records_themselves_and_skips_missing_values():
    a = {"key": "a", "design_id": "d", "tokens_per_s": 2.0, "system_cost_usd": 2.0}
    b = {"key": "b", "design_id": "d", "tokens_per_s": None, "system_cost_usd": 1.0}
    c = {"key": "c", "design_id": "d", "tokens_per_s": float("nan"), "system_cost_usd": 0.5}
    front = pareto([a, b, c], ["tokens_per_s", "system_cost_usd"])
    assert front == [a] and front[0] is a
    assert pareto([], ["tokens_per_s", "system_cost_usd"]) == []


def test_three_objectives_closed_form():
    # On the plane x + y + z = 1 nothing dominates anything; adding (1, 1, 1) changes nothing,
    # adding (0, 0, 0) dominates all of them.
    pts = [
        {
            "key": f"k{i}",
            "design_id": "d",
            "iteration_s": x,
            "system_cost_usd": y,
            "total_kgco2e": 1 - x - y,
        }
        for i, (x, y) in enumerate([(0.2, 0.3), (0.5, 0.1), (0.0, 0.0), (0.3, 0.3)])
    ]
    objs = ["iteration_s", "system_cost_usd", "total_kgco2e"]
    assert (
        len(
            pareto(
                pts + [{"key": "big", "iteration_s": 1, "system_cost_usd": 1, "total_kgco2e": 1}],
                objs,
            )
        )
        == 4
    )
    zero = {
        "key": "zero",
        "design_id": "d",
        "iteration_s": 0,
        "system_cost_usd": 0,
        "total_kgco2e": 0,
    }
    assert pareto(pts + [zero], objs) == [zero]


def test_sense_prefix_overrides_the_schema():
    pts = [{"key": "a", "design_id": "d", "tcdp": 1.0, "area_mm2": 1.0},
           {"key": "b", "design_id": "d", "tcdp": 2.0, "area_mm2": 2.0}]  # fmt: skip
    assert [p["key"] for p in pareto(pts, ["tcdp", "area_mm2"])] == ["a"]
    assert [p["key"] for p in pareto(pts, ["+tcdp", "+area_mm2"])] == ["b"]
    assert [p["key"] for p in pareto(pts, [("tcdp", "max"), "-area_mm2"])] == ["b", "a"]


def test_parse_objective():
    assert parse_objective("tokens_per_s") == Objective("tokens_per_s", "max")
    assert parse_objective(" -tokens_per_s") == Objective("tokens_per_s", "min")
    assert parse_objective("+num_tc") == Objective("num_tc", "max")
    assert str(parse_objective("tcdp")) == "-tcdp"


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("tokens_per_sec", ["unknown metric 'tokens_per_sec'", "did you mean tokens_per_s"]),
        ("workload", ["'workload' is not a number"]),
        ("num_tc", ["'num_tc'", "no better direction", "+num_tc", "-num_tc"]),
        (("tcdp", "up"), ["(metric, 'max' | 'min')"]),
        ("", ["must be a metric name"]),
    ],
)
def test_objective_errors_name_the_problem(spec, words):
    with pytest.raises(ConfigError) as e:
        parse_objective(spec)
    for w in words:
        assert w in str(e.value)


def test_pareto_needs_two_or_three_distinct_objectives():
    with pytest.raises(ConfigError, match="two or three objectives"):
        pareto([], ["tcdp"])
    with pytest.raises(ConfigError, match="two or three objectives"):
        pareto([], ["tcdp", "area_mm2", "mfu", "iteration_s"])
    with pytest.raises(ConfigError, match="tcdp more than once"):
        pareto([], ["tcdp", "+tcdp"])
    with pytest.raises(ConfigError, match="non-number"):
        pareto([{"tcdp": "x", "mfu": 1}], ["tcdp", "mfu"])


def test_best_and_rank_break_ties_by_next_objective_then_design_then_key():
    pts = [
        {"key": "k3", "design_id": "b", "tcdp": 1.0, "tokens_per_s": 5.0},
        {"key": "k2", "design_id": "b", "tcdp": 1.0, "tokens_per_s": 5.0},
        {"key": "k1", "design_id": "c", "tcdp": 1.0, "tokens_per_s": 5.0},
        {"key": "k0", "design_id": "a", "tcdp": 1.0, "tokens_per_s": 4.0},
        {"key": "k9", "design_id": "a", "tcdp": None, "tokens_per_s": 9.0},
    ]
    assert best(pts, "tcdp")["key"] == "k0"  # design a first
    assert best(pts, ["tcdp", "tokens_per_s"])["key"] == "k2"  # faster, then design b, key k2
    assert [p["key"] for p in rank(pts, "tcdp")] == ["k0", "k2", "k3", "k1"]
    assert [p["key"] for p in rank(pts, "tokens_per_s", n=2)] == ["k9", "k2"]
    assert best([], "tcdp") is None
    assert best([{"key": "x", "tcdp": None}], "tcdp") is None
