"""The one formatter of numbers for people: every CLI table, message and the HTML report use
it (it lives in this leaf package so that the libraries' messages, such as a placement's
"needs ... has ...", use it too).

Values arrive in SI (seconds, joules, kgCO2e, USD, bytes, fractions) and leave in the units a
practitioner reads: time in µs, ms, s, min, h, days, years (never ks or Ms); energy in J, kJ, MJ
below a kilowatt-hour and kWh, MWh, GWh from it; carbon in kgCO2e below a tonne and tCO2e from
it; money as $ with k, M, B (a fraction of a dollar with its cents); utilisations as % (to a
hundredth); rates of events as ``/s`` (never ``m/s``); tCDP in tCO2e·days; a count with its
noun in the singular for one (:func:`fmt_noun`). Three significant digits
unless asked otherwise; the prefix or unit is chosen after rounding, so 999.96 W reads ``1 kW``
and never ``1e+03 W``. A number past the top of its ladder (a million PiB) or below a
ten-thousandth of its smallest unit reads in scientific form (``4.76e6 PiB``), never as a long
row of digits. :func:`fmt_pair` formats two quantities that are compared, with enough digits to
show that they differ.

Examples
--------
>>> fmt_quantity(950e6, "s"), fmt_quantity(0.0042, "s"), fmt_quantity(136e3, "s")
('30.1 years', '4.2 ms', '1.57 days')
>>> fmt_quantity(3.6e12, "J"), fmt_quantity(2.5e6, "USD"), fmt_quantity(0.313, "%")
('1 GWh', '$2.5M', '31.3 %')
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Final

__all__ = [
    "UNIT_FAMILIES",
    "fmt_quantity",
    "fmt_time",
    "fmt_energy",
    "fmt_carbon",
    "fmt_tcdp",
    "fmt_usd",
    "fmt_percent",
    "fmt_bytes",
    "fmt_count",
    "fmt_ratio",
    "fmt_si",
    "fmt_pair",
    "fmt_column",
    "fmt_number",
    "fmt_noun",
    "MAX_DIGITS",
]

_MINUTE: Final = 60.0
_HOUR: Final = 3600.0
_DAY: Final = 86400.0
_YEAR: Final = 365.25 * _DAY  # Julian year
_KWH: Final = 3.6e6  # joules
_SI_PREFIXES: Final = "pnµm kMGTPE"  # 10**-12 .. 10**18, the space is 10**0
_COUNT_SUFFIXES: Final = ("", "k", "M", "B", "T")
_BINARY: Final = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
#: The most significant digits any formatted number shows.
MAX_DIGITS: Final = 6
_PLAIN_MIN: Final = 1e-4  # plain numbers from here ...
_PLAIN_MAX: Final = 1e6  # ... to below here; scientific form outside
_PERCENT_DECIMALS: Final = 2  # a percentage is read to a hundredth of a percent
_CENT_DECIMALS: Final = 2  # an amount of dollars with a fraction shows its cents


def _sig(value: float, digits: int) -> float:
    """``value`` rounded to ``digits`` significant digits."""
    if value == 0:
        return 0.0
    return round(value, digits - 1 - math.floor(math.log10(abs(value))))


def _num(value: float, digits: int) -> str:
    """A number with ``digits`` significant digits: plain (``1200``, ``0.0042``) from 10**-4 to
    below 10**6, else in scientific form (``4.76e6``, ``2e-9``).

    >>> _num(4_760_000_000, 3), _num(1.5e-9, 3), _num(999_999.4, 6), _num(-12_345_678, 3)
    ('4.76e9', '1.5e-9', '999999', '-1.23e7')
    """
    digits = min(digits, MAX_DIGITS)
    x = _sig(value, digits)
    if x == 0:
        return "0"
    if not _PLAIN_MIN <= abs(x) < _PLAIN_MAX:
        mantissa, exponent = f"{x:.{digits - 1}e}".split("e")
        if "." in mantissa:
            mantissa = mantissa.rstrip("0").rstrip(".")
        return f"{mantissa}e{int(exponent)}"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(x))))
    text = f"{x:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def _special(value: float, unit: str) -> str | None:
    """The text of NaN and infinities (``-``, ``∞ s``), or None for a finite value."""
    if math.isnan(value):
        return "-"
    if math.isinf(value):
        return f"{'-' if value < 0 else ''}∞ {unit}".rstrip()
    return None


def _pick(value: float, steps: tuple[tuple[float, str], ...], digits: int) -> tuple[float, str]:
    """The largest of ``steps`` (ascending (scale, name)) that ``value`` reaches once rounded."""
    scale, name = steps[0]
    for s, n in steps[1:]:
        if abs(_sig(value / s, digits)) >= 1:
            scale, name = s, n
    return scale, name


def _ladder(value: float, steps: tuple[tuple[float, str], ...], digits: int, sep: str) -> str:
    """``value`` in the largest of ``steps`` (ascending scales) it reaches once rounded."""
    scale, name = _pick(value, steps, digits)
    return f"{_num(value / scale, digits)}{sep}{name}".rstrip()


def _si_steps(unit: str) -> tuple[tuple[float, str], ...]:
    return tuple((10.0 ** (3 * (i - 4)), (p + unit).strip()) for i, p in enumerate(_SI_PREFIXES))


_COUNT_STEPS: Final = tuple((10.0 ** (3 * i), s) for i, s in enumerate(_COUNT_SUFFIXES))


def fmt_si(value: float, unit: str = "", digits: int = 3) -> str:
    """A number with an SI prefix, for units without a practical ladder (FLOP/s, B/s, Hz, W).

    >>> fmt_si(3.2e14, "FLOP/s"), fmt_si(999.96, "W"), fmt_si(0), fmt_si(-2e-9, "s")
    ('320 TFLOP/s', '1 kW', '0', '-2 ns')
    """
    special = _special(value, unit)
    if special is not None:
        return special
    if value == 0:
        return f"0 {unit}".rstrip()
    return _ladder(value, _si_steps(unit), digits, " ")


def fmt_time(seconds: float, digits: int = 3) -> str:
    """A duration: ns, µs, ms, s, min, h, days, years (two years and up).

    >>> fmt_time(59.4), fmt_time(90), fmt_time(7200), fmt_time(3 * 86400), fmt_time(2e-5)
    ('59.4 s', '1.5 min', '2 h', '3 days', '20 µs')
    """
    special = _special(seconds, "s")
    if special is not None:
        return special
    if abs(seconds) < 1:
        return fmt_si(seconds, "s", digits)
    steps = ((1.0, "s"), (_MINUTE, "min"), (_HOUR, "h"), (_DAY, "days"))
    if abs(seconds) >= 2 * _YEAR:
        return f"{_num(seconds / _YEAR, digits)} years"
    return _ladder(seconds, steps, digits, " ")


def fmt_energy(joules: float, digits: int = 3) -> str:
    """Energy: J, kJ, MJ below a kilowatt-hour; kWh, MWh, GWh, TWh from it.

    >>> fmt_energy(5e4), fmt_energy(3.6e6), fmt_energy(7.2e11)
    ('50 kJ', '1 kWh', '200 MWh')
    """
    special = _special(joules, "J")
    if special is not None:
        return special
    if abs(_sig(joules / _KWH, digits)) < 1:
        return fmt_si(joules, "J", digits)
    steps = ((1.0, "kWh"), (1e3, "MWh"), (1e6, "GWh"), (1e9, "TWh"))
    return _ladder(joules / _KWH, steps, digits, " ")


def fmt_carbon(kg_co2e: float, digits: int = 3) -> str:
    """Carbon: kgCO2e below a tonne (fractions of a kilogram too), then tCO2e (with k, M).

    >>> fmt_carbon(164.2), fmt_carbon(3670), fmt_carbon(2.5e7), fmt_carbon(0.545)
    ('164 kgCO2e', '3.67 tCO2e', '25k tCO2e', '0.545 kgCO2e')
    """
    special = _special(kg_co2e, "kgCO2e")
    if special is not None:
        return special
    if kg_co2e == 0:
        return "0 kgCO2e"
    if abs(_sig(kg_co2e / 1000, digits)) < 1:
        return f"{_num(kg_co2e, digits)} kgCO2e"
    return f"{fmt_count(kg_co2e / 1000, digits)} tCO2e"


def fmt_tcdp(kg_co2e_s: float, digits: int = 3) -> str:
    """tCDP (carbon x time to train), given in kgCO2e·s, always in tCO2e·days.

    >>> fmt_tcdp(36.1e6), fmt_tcdp(20.1e9)
    ('0.418 tCO2e·days', '233 tCO2e·days')
    """
    special = _special(kg_co2e_s, "tCO2e·days")
    if special is not None:
        return special
    return f"{fmt_count(kg_co2e_s / 1000 / _DAY, digits)} tCO2e·days"


def _dollars(usd: float, digits: int) -> str:
    """The number of a non-negative amount of dollars: whole dollars, or a fraction with its
    cents (``1.50``, never ``1.5`` beside ``1.52``), or k, M, B."""
    text = fmt_count(usd, digits)
    if "." not in text or "e" in text or not text[-1].isdigit():
        return text
    decimals = len(text) - text.index(".") - 1
    return f"{usd:.{max(decimals, _CENT_DECIMALS)}f}"


def fmt_usd(usd: float, digits: int = 3) -> str:
    """Money: ``$950``, ``$1.50``, ``$0.0042``, ``$37.6k``, ``$2.5M``, ``$1.2B``; a fraction of
    a dollar shows at least its cents, so amounts compared side by side line up.

    >>> fmt_usd(37612.0), fmt_usd(-1500), fmt_usd(0), fmt_usd(1.5), fmt_usd(0.0042)
    ('$37.6k', '-$1.5k', '$0', '$1.50', '$0.0042')
    """
    special = _special(usd, "$")
    if special is not None:
        return special
    return _usd_text(("-" if usd < 0 else "") + _dollars(abs(usd), digits))


def fmt_percent(fraction: float, digits: int = 3) -> str:
    """A fraction as a percentage: ``0.313 -> 31.3 %``, ``1 -> 100 %``, ``0.0004 -> 0.04 %``;
    read to a hundredth of a percent at most, so a rounding residue reads ``0 %``.

    >>> fmt_percent(0.313), fmt_percent(1.0), fmt_percent(0.0004), fmt_percent(3.51e-6)
    ('31.3 %', '100 %', '0.04 %', '0 %')
    """
    special = _special(fraction, "%")
    if special is not None:
        return special
    percent = round(100 * fraction, _PERCENT_DECIMALS)
    return f"{_num(percent, digits) if percent else '0'} %"


def fmt_bytes(nbytes: float, digits: int = 3) -> str:
    """Bytes with binary prefixes, as memory is sold: ``64 MiB``, ``80 GiB``.

    >>> fmt_bytes(64 * 2**20), fmt_bytes(80 * 2**30), fmt_bytes(1023.9), fmt_bytes(0)
    ('64 MiB', '80 GiB', '1 KiB', '0 B')
    """
    special = _special(nbytes, "B")
    if special is not None:
        return special
    steps = tuple((float(1024**i), name) for i, name in enumerate(_BINARY))
    return _ladder(float(nbytes), steps, digits, " ")


def fmt_count(value: float, digits: int = 3) -> str:
    """A plain number with k, M, B, T for thousands and up: ``447``, ``0.447``, ``1.39M``.

    >>> fmt_count(0.4471), fmt_count(1386000), fmt_count(175e9), fmt_count(12)
    ('0.447', '1.39M', '175B', '12')
    """
    special = _special(value, "")
    if special is not None:
        return special
    return _ladder(value, _COUNT_STEPS, digits, "")


def fmt_number(value: float | int, digits: int = MAX_DIGITS) -> str:
    """A number whose unit its name already says (``die_area_mm2``): an integer whole, any
    other number in at most ``digits`` significant digits, never a float's long tail.

    >>> fmt_number(814.0139999999999), fmt_number(1024), fmt_number(2.5e-7), fmt_number(0.1 + 0.2)
    ('814.014', '1024', '2.5e-7', '0.3')
    """
    special = _special(float(value), "")
    if special is not None:
        return special
    if isinstance(value, int):
        return str(value)
    return _num(float(value), digits)


def fmt_noun(count: float | int, noun: str, plural: str | None = None) -> str:
    """A count with its noun, singular for exactly one: ``1 device``, ``64 devices``,
    ``0 devices``; ``plural`` for nouns that do not take an ``s``.

    >>> fmt_noun(1, "device"), fmt_noun(64, "device"), fmt_noun(1.0, "stage")
    ('1 device', '64 devices', '1 stage')
    >>> fmt_noun(2, "copy", "copies"), fmt_noun(0.5, "day")
    ('2 copies', '0.5 days')
    """
    word = noun if count == 1 else (plural or f"{noun}s")
    number = str(int(count)) if float(count).is_integer() else fmt_number(count, 3)
    return f"{number} {word}"


def fmt_ratio(value: float, digits: int = 3) -> str:
    """A ratio of two like quantities, two decimals so a column of them lines up: ``1.59×``.

    >>> fmt_ratio(1.5912), fmt_ratio(0.5), fmt_ratio(1234.5)
    ('1.59×', '0.50×', '1.23k×')
    """
    special = _special(value, "×")
    if special is not None:
        return special
    if abs(value) >= 100:
        return f"{fmt_count(value, digits)}×"
    return f"{value:.2f}×"


_FAMILIES: Final = {
    "s": fmt_time,
    "J": fmt_energy,
    "kgCO2e": fmt_carbon,
    "kgCO2e·s": fmt_tcdp,
    "USD": fmt_usd,
    "%": fmt_percent,
    "B": fmt_bytes,
    "×": fmt_ratio,
}
#: The units :func:`fmt_quantity` converts to people's units; any other goes through fmt_si.
UNIT_FAMILIES: Final = tuple(_FAMILIES)
# Counted things read best with k/M suffixes and the unit spelled out after a space; so do
# rates of events (``/s``), where an SI prefix would misread (``737 m/s`` as metres).
_COUNTED: Final = (
    "",
    "tokens/s",
    "samples/s",
    "requests/s",
    "tokens",
    "samples",
    "parameters",
    "requests",
    "device-hours",
    "/s",
)


def fmt_pair(a: float, b: float, unit: str = "", digits: int = 3) -> tuple[str, str]:
    """Two quantities that are compared (``needs a ... has b``), formatted by
    :func:`fmt_quantity` with the fewest digits from ``digits`` up to :data:`MAX_DIGITS` that
    tell them apart; when even those do not, the larger reads as the smaller plus the
    difference. Equal values read the same.

    >>> fmt_pair(3.5 * 2**30, 3.4 * 2**30, "B"), fmt_pair(1, 2**30, "B")
    (('3.5 GiB', '3.4 GiB'), ('1 B', '1 GiB'))
    >>> fmt_pair(80.004 * 2**30, 80 * 2**30, "B"), fmt_pair(2**30, 2**30 + 1, "B")
    (('80.004 GiB', '80 GiB'), ('1 GiB', '1 GiB + 1 B'))
    """
    for d in range(min(digits, MAX_DIGITS), MAX_DIGITS + 1):
        ta, tb = fmt_quantity(a, unit, d), fmt_quantity(b, unit, d)
        if ta != tb or a == b or not (math.isfinite(a) and math.isfinite(b)):
            return ta, tb
    lo, hi = sorted((a, b))
    plus = f"{fmt_quantity(lo, unit, digits)} + {fmt_quantity(hi - lo, unit, digits)}"
    low = fmt_quantity(lo, unit, digits)
    return (low, plus) if a < b else (plus, low)


def fmt_quantity(value: float | int, unit: str = "", digits: int = 3) -> str:
    """``value`` (SI, in ``unit``) as people read it; the one entry point of this module.

    ``unit`` is a column's unit (:data:`results.schema.POINT_COLUMNS`) or ``"%"`` for a fraction
    shown as a percentage, ``"×"`` for a ratio. Counted units use k/M suffixes (``1.39M
    tokens/s``); FLOP/s, B/s, Hz, W and other physical units get SI prefixes.

    >>> fmt_quantity(1.386e6, "tokens/s"), fmt_quantity(2.04e12, "B/s"), fmt_quantity(826, "mm²")
    ('1.39M tokens/s', '2.04 TB/s', '826 mm²')
    >>> fmt_quantity(0.737, "/s"), fmt_quantity(2500, "/s")
    ('0.737 /s', '2.5k /s')
    """
    value = float(value)
    if unit in _FAMILIES:
        return _FAMILIES[unit](value, digits)
    if unit == "kgCO2e·day":
        return fmt_tcdp(value * _DAY, digits)
    if unit in _COUNTED:
        text = fmt_count(value, digits)
        return f"{text} {unit}".rstrip() if text != "-" else text
    if unit in ("mm²", "nm"):
        special = _special(value, unit)
        return special if special is not None else f"{_num(value, digits)} {unit}"
    return fmt_si(value, unit, digits)


def _usd_text(number: str) -> str:
    return f"-${number[1:]}" if number.startswith("-") else f"${number}"


def _column_scale(ref: float, unit: str, digits: int) -> tuple[float, Callable[[str], str]]:
    """(divisor, wrap) of the unit :func:`fmt_quantity` picks for ``ref`` (a column's largest
    magnitude): every value of the column is ``wrap(number of value / divisor)``."""

    def suffix(text: str) -> Callable[[str], str]:
        return lambda n: f"{n}{text}"

    if unit == "s":
        if ref >= 2 * _YEAR:
            return _YEAR, suffix(" years")
        steps = ((1.0, "s"), (_MINUTE, "min"), (_HOUR, "h"), (_DAY, "days"))
        scale, name = _pick(ref, _si_steps("s") if ref < 1 else steps, digits)
    elif unit == "J":
        if abs(_sig(ref / _KWH, digits)) < 1:
            scale, name = _pick(ref, _si_steps("J"), digits)
        else:
            steps = ((1.0, "kWh"), (1e3, "MWh"), (1e6, "GWh"), (1e9, "TWh"))
            scale, name = _pick(ref / _KWH, steps, digits)
            scale *= _KWH
    elif unit == "B":
        scale, name = _pick(ref, tuple((float(1024**i), n) for i, n in enumerate(_BINARY)), digits)
    elif unit in ("mm²", "nm"):
        return 1.0, suffix(f" {unit}")
    else:
        scale, name = _pick(ref, _si_steps(unit), digits)
    return scale, suffix(f" {name}".rstrip())


def _counted_column(
    values: Sequence[float], ref: float, unit: str, digits: int
) -> list[str] | None:
    """A column of counted things (dollars, tonnes of CO2e, tokens/s, ...), or None for any
    other unit: k, M, B abbreviate each value's own magnitude (``$37.6k`` above ``$950``, never
    ``$0.95k``); only a unit proper (tCO2e or kgCO2e) is the column's."""
    if unit == "USD":
        return [fmt_usd(v, digits) for v in values]
    if unit in _COUNTED:
        return [fmt_quantity(v, unit, digits) for v in values]
    if unit == "kgCO2e" and abs(_sig(ref / 1000.0, digits)) < 1:
        return [_special(v, unit) or f"{_num(v, digits)} kgCO2e" for v in values]
    if unit == "kgCO2e":
        return [_special(v, unit) or f"{fmt_count(v / 1000, digits)} tCO2e" for v in values]
    if unit == "kgCO2e·s":
        return [fmt_tcdp(v, digits) for v in values]
    return None


def fmt_column(values: Sequence[float], unit: str = "", digits: int = 3) -> list[str]:
    """A column of values in ``unit`` (SI) with one unit for the whole column: the one
    :func:`fmt_quantity` picks for the largest magnitude, so the column reads and compares
    at a glance (``2.76 MJ`` above ``0.0096 MJ``, never ``9.56 kJ``).

    Counted things (money, tonnes, tokens/s) keep their unit proper but abbreviate each
    value's own thousands, so no value reads as a fraction of a thousand.

    >>> fmt_column([2.76e6, 9.56e3, 0.0], "J")
    ['2.76 MJ', '0.00956 MJ', '0 MJ']
    >>> fmt_column([0.0342, 1.5], "s"), fmt_column([37612.0, 950.0], "USD")
    (['0.0342 s', '1.5 s'], ['$37.6k', '$950'])
    >>> fmt_column([3670.0, 164.0], "kgCO2e"), fmt_column([1.2e6, 8.2e5], "kgCO2e·day")
    (['3.67 tCO2e', '0.164 tCO2e'], ['1.2k tCO2e·days', '820 tCO2e·days'])
    """
    values = [float(v) for v in values]
    if unit == "kgCO2e·day":
        unit, values = "kgCO2e·s", [v * _DAY for v in values]
    finite = [abs(v) for v in values if math.isfinite(v)]
    if unit in ("×", "%") or not finite or max(finite) == 0:
        return [fmt_quantity(v, unit, digits) for v in values]
    counted = _counted_column(values, max(finite), unit, digits)
    if counted is not None:
        return counted
    scale, wrap = _column_scale(max(finite), unit, digits)
    return [_special(float(v), unit) or wrap(_num(float(v) / scale, digits)) for v in values]
