"""The one formatter of people's units (phaze_common.units) and the views built on it."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from phaze_common.units import (
    UNIT_FAMILIES,
    fmt_bytes,
    fmt_carbon,
    fmt_count,
    fmt_energy,
    fmt_percent,
    fmt_quantity,
    fmt_ratio,
    fmt_tcdp,
    fmt_time,
    fmt_usd,
)
from results.compare import compare_to_presets, comparison_rows
from results.display import fmt_value


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0 s"),
        (3e-9, "3 ns"),
        (2e-5, "20 µs"),
        (0.0042, "4.2 ms"),
        (0.9996, "1 s"),  # rounds up into the next unit, never "1e+03 ms"
        (59.4, "59.4 s"),
        (59.99, "1 min"),
        (90, "1.5 min"),
        (7200, "2 h"),
        (136e3, "1.57 days"),
        (700 * 86400, "700 days"),
        (950e6, "30.1 years"),
        (-0.5, "-500 ms"),
    ],
)
def test_time_has_no_si_prefix_above_seconds(seconds, text):
    assert fmt_time(seconds) == text
    assert fmt_quantity(seconds, "s") == text


@given(st.floats(min_value=1.0, max_value=1e12, allow_nan=False))
def test_time_never_uses_kilo_or_mega_seconds(seconds):
    text = fmt_time(seconds)
    assert not any(text.endswith(u) for u in ("ks", "Ms", "Gs", "ms", "µs", "ns"))
    assert "e+" not in text and "e-" not in text


@pytest.mark.parametrize(
    ("fn", "value", "text"),
    [
        (fmt_energy, 5e4, "50 kJ"),
        (fmt_energy, 3.6e6, "1 kWh"),
        (fmt_energy, 7.2e11, "200 MWh"),
        (fmt_carbon, 0.5, "0.5 kgCO2e"),
        (fmt_carbon, 164.2, "164 kgCO2e"),
        (fmt_carbon, 999.9, "1 tCO2e"),
        (fmt_carbon, 2.5e7, "25k tCO2e"),
        (fmt_tcdp, 86400e3, "1 tCO2e·days"),
        (fmt_usd, 950, "$950"),
        (fmt_usd, 37612.0, "$37.6k"),
        (fmt_usd, 2.5e6, "$2.5M"),
        (fmt_usd, -1500, "-$1.5k"),
        (fmt_percent, 0.313, "31.3 %"),
        (fmt_percent, 1.0, "100 %"),
        (fmt_percent, 48.0, "4800 %"),
        (fmt_bytes, 1023.9, "1 KiB"),
        (fmt_bytes, 80 * 2**30, "80 GiB"),
        (fmt_count, 0.4471, "0.447"),
        (fmt_count, 999_960, "1M"),
        (fmt_ratio, 1.5912, "1.59×"),
    ],
)
def test_each_family(fn, value, text):
    assert fn(value) == text


@pytest.mark.parametrize("unit", [*UNIT_FAMILIES, "tokens/s", "FLOP/s", "mm²", ""])
def test_zero_nan_and_infinities(unit):
    assert fmt_quantity(math.nan, unit) == "-"
    assert "∞" in fmt_quantity(math.inf, unit)
    negative = fmt_quantity(-math.inf, unit)
    assert "∞" in negative and negative.startswith("-")
    zero = fmt_quantity(0, unit)
    assert zero.replace("$", "").startswith("0") and "e" not in zero.split()[0]


@given(
    st.sampled_from([*UNIT_FAMILIES, "tokens/s", "FLOP/s", "B/s", "W"]),
    st.floats(min_value=1e-3, max_value=1e9),
)
def test_no_exponent_and_sign_symmetry(unit, value):
    """No exponent while the number shown is in the plain range: a percentage past 10**6 %,
    a tCDP below 10**-4 tCO2e·days (it has one unit) and sizes past every ladder read in
    scientific form (test_units_pairs.py)."""
    assume(unit != "%" or value < 1e3)
    assume(unit != "kgCO2e·s" or value > 1e4)
    text = fmt_quantity(value, unit)
    assert "e+" not in text and "e-" not in text
    assert fmt_quantity(-value, unit).lstrip("-") == text.lstrip("-")


def test_the_same_value_reads_the_same_in_both_tcdp_columns():
    kg_s = 20.1e9
    assert fmt_value("tcdp", kg_s) == fmt_value("tcdp_kgco2e_days", kg_s / 86400)
    assert fmt_value("tcdp", kg_s) == "233 tCO2e·days"
    assert fmt_value("mfu", 0.313) == "31.3 %"
    assert fmt_value("throughput_score", 0.447) == "0.447"


def _pt(design_id, name, area, tput, cost, tcdp, workload="w"):
    return {
        "workload": workload,
        "design_id": design_id,
        "design_name": name,
        "feasible": 1,
        "key": f"{workload}-{design_id}",
        "area_mm2": area,
        "tokens_per_s": tput,
        "system_cost_usd": cost,
        "tcdp": tcdp,
    }


def test_comparison_takes_the_best_searched_design_within_each_presets_area():
    pts = [
        _pt("pa", "small", 100.0, 10.0, 1.0, 4.0),
        _pt("pb", "big", 500.0, 40.0, 2.0, 1.0),
        _pt("s1", None, 120.0, 30.0, 1.0, 2.0),  # fastest, but larger than "small"
        _pt("s2", None, 90.0, 20.0, 1.0, 2.0),
        _pt("s3", None, 480.0, 5.0, 1.0, 9.0),  # of about "big"'s area, but slower than s1
    ]
    comps = {c.preset["design_name"]: c for c in compare_to_presets(pts)}
    assert comps["small"].searched["design_id"] == "s2"
    assert comps["small"].gains == (2.0, 2.0, 2.0)
    assert comps["big"].searched["design_id"] == "s1"
    assert comps["big"].throughput_gain == pytest.approx(0.75)
    assert comps["big"].tokens_per_usd_gain == pytest.approx(1.5)
    assert comps["big"].tcdp_gain == pytest.approx(0.5)
    assert [c.preset["design_name"] for c in compare_to_presets(pts)] == ["small", "big"]


def test_comparison_says_when_every_searched_design_is_well_below_the_presets_area():
    # The default space (339 mm2 at most) against the H100 (814 mm2): a searched design that
    # loses there says nothing about a design of the H100's size, so no gain is given.
    pts = [
        _pt("h", "h100", 814.0, 100.0, 10.0, 1.0),
        _pt("s1", None, 339.0, 50.0, 4.0, 2.0),
        _pt("s2", None, 200.0, 60.0, 4.0, 2.0),
        {**_pt("s3", None, 740.0, None, None, None), "feasible": 0},  # pruned: it counts
    ]
    (c,) = compare_to_presets(pts[:3])
    assert c.searched is None and c.gains == (None, None, None)
    assert c.well_below and c.largest_searched_mm2 == 339.0
    (row,) = comparison_rows([c])
    assert row[2] == "no searched design within 10% of its area (largest: 339 mm²)"
    assert row[3:] == ["-", "-", "-"]
    # a searched design of 740 mm2 (within 10 %), even a pruned one, makes it a comparison
    (c,) = compare_to_presets(pts)
    assert c.searched["design_id"] == "s2" and c.throughput_gain == pytest.approx(0.6)
    assert not c.well_below and c.largest_searched_mm2 == 740.0
    # so does a smaller design ahead on every column: it wins within the preset's area
    ahead = [pts[0], _pt("s4", None, 300.0, 200.0, 4.0, 0.5)]
    (c,) = compare_to_presets(ahead)
    assert c.well_below and c.gains == (2.0, 5.0, 2.0)
    assert comparison_rows([c])[0][2] == "s4 (300 mm²)"


def test_comparison_says_when_no_searched_design_fits():
    pts = [_pt("pa", "tiny", 10.0, 1.0, 1.0, 1.0), _pt("s1", None, 50.0, 2.0, 1.0, 1.0)]
    (c,) = compare_to_presets(pts)
    assert c.searched is None and c.gains == (None, None, None)
    assert comparison_rows([c])[0][2:] == ["(none fits)", "-", "-", "-"]


@given(
    values=st.lists(st.floats(0.0, 1e13, allow_nan=False), min_size=1, max_size=8),
    unit=st.sampled_from(["J", "s", "W", "USD", "kgCO2e", "B", "tokens/s"]),
)
def test_a_column_has_one_unit(values, unit):
    """fmt_column writes every value of a column in one unit: the one fmt_quantity picks
    for its largest value (counted things abbreviate their own thousands)."""
    from phaze_common.units import fmt_column

    texts = fmt_column(values, unit)
    top = fmt_quantity(max(values), unit)

    def unit_of_text(t: str) -> str:  # what follows the number (scientific form included)
        # and the k, M, B, T abbreviating a counted value's own thousands
        return re.sub(r"^[-$\d.]+(e-?\d+)?[kMBT]?", "", t)

    assert len({unit_of_text(t) for t in texts}) == 1, texts
    if max(values) > 0:
        assert unit_of_text(texts[values.index(max(values))]) == unit_of_text(top)
