"""Option types shared by the commands: a number that must be finite and in a range.

click's ``float`` and ``FloatRange`` let ``nan`` and ``inf`` through (no comparison fails on
them); :class:`FiniteFloat` refuses them with click's one usage-error line, naming the option
and the range (exit status 2). :func:`default_seq_len` is the sequence length the commands
use when none is given.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Final

import click

if TYPE_CHECKING:
    from workloads import Model

__all__ = ["FiniteFloat", "scoring_float", "DEFAULT_SEQ_LEN", "default_seq_len"]

DEFAULT_SEQ_LEN: Final = 2048  # tokens; GPT-3's context, used where a model's is at least this


def default_seq_len(model: Model) -> int:
    """The sequence length a command uses when none is given: 2048 tokens, or the model's
    context (its position table) when that is shorter."""
    return min(DEFAULT_SEQ_LEN, model.max_positions)


class FiniteFloat(click.ParamType):
    """A finite float in ``[lo, hi]`` (an end is left out when ``lo_open`` / ``hi_open``).

    Examples
    --------
    >>> FiniteFloat(1, 4).convert("1.5", None, None), FiniteFloat(0, 1, lo_open=True).range_text
    (1.5, '(0, 1]')
    """

    name = "number"

    def __init__(self, lo: float, hi: float, *, lo_open: bool = False, hi_open: bool = False):
        self.lo, self.hi, self.lo_open, self.hi_open = lo, hi, lo_open, hi_open

    @property
    def range_text(self) -> str:
        return (
            f"{'(' if self.lo_open else '['}{self.lo:g}, {self.hi:g}{')' if self.hi_open else ']'}"
        )

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None):
        try:
            x = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number in {self.range_text}", param, ctx)
        above = x > self.lo if self.lo_open else x >= self.lo
        below = x < self.hi if self.hi_open else x <= self.hi
        if not (math.isfinite(x) and above and below):
            self.fail(f"{value} is not a finite number in {self.range_text}", param, ctx)
        return x

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return f"FLOAT {self.range_text}"


def scoring_float(name: str, per_unit: float = 1.0) -> FiniteFloat:
    """The option type of scoring number ``name`` in its range (:data:`phaze.scoring.RANGES`),
    given in units of ``per_unit`` SI units (``SECONDS_PER_YEAR`` for a lifetime in years)."""
    from phaze.scoring import RANGES

    lo, hi, lo_in, hi_in = RANGES[name]
    return FiniteFloat(lo / per_unit, hi / per_unit, lo_open=not lo_in, hi_open=not hi_in)
