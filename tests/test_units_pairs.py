"""The one formatter at the edges: two compared quantities always read differently, and no
number shows more than MAX_DIGITS significant digits or a long row of digits."""

from __future__ import annotations

import re

from hypothesis import example, given
from hypothesis import strategies as st

from phaze_common.units import MAX_DIGITS, UNIT_FAMILIES, fmt_pair, fmt_quantity

_NUMBER = re.compile(r"\d+(?:\.\d+)?(?:e-?\d+)?")
_UNITS = st.sampled_from([*UNIT_FAMILIES, "", "tokens/s", "W", "FLOP/s", "mm²"])
_POSITIVE = st.floats(min_value=1e-30, max_value=1e30, allow_nan=False, allow_infinity=False)


def _significant(token: str) -> int:
    mantissa = token.split("e")[0].replace(".", "").lstrip("0")
    return len(mantissa.rstrip("0")) if "." not in token.split("e")[0] else len(mantissa)


def _check_digits(text: str) -> None:
    for token in _NUMBER.findall(text):
        assert _significant(token) <= MAX_DIGITS, text
        assert len(token.split("e")[0].replace(".", "")) <= MAX_DIGITS + 4, text


@given(a=_POSITIVE, b=_POSITIVE, unit=_UNITS)
@example(a=1.0, b=2**30, unit="B")  # "needs 0.0 GiB ... has 0.0 GiB" before
@example(a=2793967723846435864576.0 * 2**30, b=80 * 2**30, unit="B")
@example(a=2**30, b=2**30 + 1, unit="B")
def test_two_distinct_values_read_differently_in_few_digits(a, b, unit):
    ta, tb = fmt_pair(a, b, unit)
    assert (ta != tb) == (a != b), (a, b, ta, tb)
    _check_digits(ta)
    _check_digits(tb)


@given(value=_POSITIVE | _POSITIVE.map(lambda x: -x), unit=_UNITS)
@example(value=4_760_000 * 2.0**50, unit="B")
def test_any_value_reads_in_at_most_six_significant_digits(value, unit):
    _check_digits(fmt_quantity(value, unit))
