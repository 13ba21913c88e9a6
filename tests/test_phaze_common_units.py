"""Renderings people read wrongly, fixed in the one formatter (phaze_common/units.py) so
every table and message that uses it reads right."""

from __future__ import annotations

import pytest

from phaze_common.units import (
    fmt_column,
    fmt_noun,
    fmt_number,
    fmt_percent,
    fmt_quantity,
    fmt_usd,
)

_DAY = 86400.0


@pytest.mark.parametrize(
    ("value", "unit", "text"),
    [
        (0.737, "/s", "0.737 /s"),  # never "737 m/s", which reads as metres per second
        (0.737, "requests/s", "0.737 requests/s"),
        (2500.0, "/s", "2.5k /s"),
        (3.51e-6, "%", "0 %"),  # a power limiter's rounding residue
        (-3.51e-6, "%", "0 %"),
        (0.0004, "%", "0.04 %"),
        (1.5, "USD", "$1.50"),
        (1.52, "USD", "$1.52"),
        (12.345, "USD", "$12.35"),
        (320.0, "USD", "$320"),
        (0.0042, "USD", "$0.0042"),
        (1.5e-9, "USD", "$1.5e-9"),  # scientific form keeps its digits
        (1500.0, "USD", "$1.5k"),
    ],
)
def test_a_quantity_reads_as_people_read_it(value, unit, text):
    assert fmt_quantity(value, unit) == text


@pytest.mark.parametrize(
    ("values", "unit", "texts"),
    [
        ([820e3 * _DAY, 1.5e6 * _DAY], "kgCO2e·s", ["820 tCO2e·days", "1.5k tCO2e·days"]),
        ([8.2e5, 1.5e6], "kgCO2e·day", ["820 tCO2e·days", "1.5k tCO2e·days"]),
        ([932.0, 1200.0], "tokens/s", ["932 tokens/s", "1.2k tokens/s"]),
        ([320.0, 37612.0], "USD", ["$320", "$37.6k"]),
        ([1.5, 1.52], "USD", ["$1.50", "$1.52"]),
        ([3.51e-6, 0.25], "%", ["0 %", "25 %"]),
        ([3670.0, 164.0], "kgCO2e", ["3.67 tCO2e", "0.164 tCO2e"]),
        ([2.76e6, 9.56e3], "J", ["2.76 MJ", "0.00956 MJ"]),  # a unit proper is the column's
    ],
)
def test_a_column_never_reads_a_fraction_of_a_thousand(values, unit, texts):
    assert fmt_column(values, unit) == texts


def test_a_number_named_with_its_unit_loses_its_float_tail():
    assert fmt_number(814.0139999999999) == "814.014"
    assert fmt_number(64) == "64"


@pytest.mark.parametrize(
    ("count", "noun", "text"),
    [
        (1, "device", "1 device"),
        (8, "device", "8 devices"),
        (0, "stage", "0 stages"),
        (1, "sequence", "1 sequence"),
        (1.0, "stage", "1 stage"),
    ],
)
def test_a_count_takes_the_singular_only_for_one(count, noun, text):
    assert fmt_noun(count, noun) == text


def test_money_and_percentages_keep_their_existing_forms():
    assert fmt_usd(-1500) == "-$1.5k" and fmt_usd(0) == "$0"
    assert fmt_percent(0.313) == "31.3 %" and fmt_percent(1.0) == "100 %"


def test_the_a100_s_power_headroom_reads_zero_at_its_limit():
    """The A100 draws its 400 W limit to a few parts per million: no ``0.000351 %``."""
    from arch_space.power import headroom
    from arch_space.presets import preset
    from results.display import power_headroom_text

    figures = headroom(preset("a100")).figures()
    assert 0 < abs(figures["power_headroom"]) < 1e-4
    assert power_headroom_text(figures).startswith("0 %: draws 400 W")
