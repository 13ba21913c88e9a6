"""Request lengths for a serving run under load: fixed, or drawn from a named distribution
built from published statistics (``phaze/data/serving_lengths.toml``, docs/serving.md,
"Serving under load").

A named distribution gives each request's prompt and generated tokens, drawn independently
(the sources publish each side's statistics, not their correlation): an exponential from a
published mean (with a published largest length, the exponential truncated there whose mean
is the published one: the distribution of largest entropy on ``[0, max]`` with that mean), a
lognormal from a published mean and median (``mu = ln(median)``,
``sigma**2 = 2 ln(mean / median)``), or a published percentile table sampled by inverse CDF.
Draws are rounded to whole tokens and clipped to the model's context: a prompt to
``[1, context - 2]``, an output to ``[2, context - prompt]``. A seeded ``numpy`` generator
makes them repeatable, on a stream of its own so that the arrival gaps of the same
seed are independent of them.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import numpy as np

from phaze_common.errors import ConfigError, unknown_name

__all__ = [
    "FIXED",
    "truncated_exponential_scale",
    "LengthSide",
    "LengthDistribution",
    "length_distributions",
    "check_name",
    "sample_lengths",
]

#: The name of fixed lengths (every request has ``--input-tokens`` and ``--output-tokens``).
FIXED = "fixed"
_KINDS = ("exponential", "lognormal", "quantiles")
#: The lengths' generator is seeded with ``(seed, _STREAM)``: a stream of its own, independent
#: of the arrival gaps' (:func:`phaze.model.serving_arrivals.generate`, seeded with ``seed``).
_STREAM = 1


@dataclass(frozen=True, slots=True)
class LengthSide:
    """One side's (prompt or output) published statistics and how they are drawn: the
    mean, the median (None: not published), for ``quantiles`` the table's percents and
    tokens, and for an ``exponential`` the published largest length (None: unbounded)."""

    mean: float
    median: float | None
    percent: tuple[float, ...] = ()
    tokens: tuple[float, ...] = ()
    max: float | None = None

    def draw(self, kind: str, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` real-valued draws of this side, by ``kind``."""
        if kind == "exponential" and self.max is not None:
            scale = truncated_exponential_scale(self.mean, self.max)
            return -scale * np.log1p(-rng.random(n) * -math.expm1(-self.max / scale))
        if kind == "exponential":
            return rng.exponential(self.mean, size=n)
        if kind == "lognormal":
            sigma = math.sqrt(2.0 * math.log(self.mean / self.median))
            return rng.lognormal(math.log(self.median), sigma, size=n)
        return np.interp(100.0 * rng.random(n), self.percent, self.tokens)


@dataclass(frozen=True, slots=True)
class LengthDistribution:
    """A named distribution of request lengths, its kind, the two sides and its source."""

    name: str
    kind: str
    input: LengthSide
    output: LengthSide
    source: str


def truncated_exponential_scale(mean: float, largest: float) -> float:
    """The scale ``s`` of the exponential truncated to ``[0, largest]`` whose mean is
    ``mean`` (``s - largest / (e**(largest / s) - 1)``, rising from 0 to ``largest / 2`` with
    ``s``), by bisection; ``mean`` must lie in ``(0, largest / 2)``.

    Examples
    --------
    >>> s = truncated_exponential_scale(222.33, 1021.0)
    >>> round(s - 1021.0 / math.expm1(1021.0 / s), 2)
    222.33
    """
    if not 0 < mean < largest / 2:
        raise ValueError(f"a truncated exponential needs 0 < mean ({mean:g}) < max / 2")
    low, high = mean * 1e-3, largest * 1e6
    for _ in range(200):
        mid = 0.5 * (low + high)
        if mid - largest / math.expm1(largest / mid) < mean:
            low = mid
        else:
            high = mid
    return 0.5 * (low + high)


def _side(name: str, entry: dict, side: str) -> LengthSide:
    """``entry``'s ``side`` (``input`` or ``output``), checked against its kind."""
    kind = entry["kind"]
    mean, median = float(entry[f"{side}_mean"]), entry.get(f"{side}_median")
    median = None if median is None else float(median)
    if kind == "lognormal" and not (median is not None and 0 < median < mean):
        raise ValueError(f"{name}: a lognormal needs 0 < {side}_median < {side}_mean")
    largest = entry.get(f"{side}_max")
    if largest is not None:
        if kind != "exponential":
            raise ValueError(f"{name}: {side}_max is read for an exponential only")
        if not 0 < mean < float(largest) / 2:
            raise ValueError(
                f"{name}: a truncated exponential needs 0 < {side}_mean < {side}_max / 2"
            )
        return LengthSide(mean, median, max=float(largest))
    if kind != "quantiles":
        return LengthSide(mean, median)
    percent = tuple(float(p) for p in entry["percent"])
    tokens = tuple(float(t) for t in entry[f"{side}_tokens"])
    ordered = all(a < b for a, b in zip(percent, percent[1:], strict=False))
    rising = all(a <= b for a, b in zip(tokens, tokens[1:], strict=False))
    if not (percent[0] == 0 and percent[-1] == 100 and ordered and rising):
        raise ValueError(f"{name}: percent must rise from 0 to 100 and {side}_tokens with it")
    if len(tokens) != len(percent):
        raise ValueError(f"{name}: {side}_tokens needs one value per percent")
    return LengthSide(mean, median, percent, tokens)


@lru_cache(maxsize=1)
def length_distributions() -> dict[str, LengthDistribution]:
    """The shipped named distributions by name (a damaged file is one ConfigError)."""
    text = resources.files("phaze").joinpath("data", "serving_lengths.toml").read_text("utf-8")
    try:
        out = {}
        for name, entry in tomllib.loads(text).items():
            if entry["kind"] not in _KINDS:
                raise ValueError(f"{name}: kind {entry['kind']!r} is not one of {_KINDS}")
            sides = (_side(name, entry, s) for s in ("input", "output"))
            out[name] = LengthDistribution(name, entry["kind"], *sides, str(entry["source"]))
        return out
    except (tomllib.TOMLDecodeError, KeyError, TypeError, ValueError) as e:
        raise ConfigError(f"serving_lengths.toml: unreadable ({type(e).__name__}: {e})") from None


def check_name(name: str) -> None:
    """Raise one ConfigError naming the known lengths when ``name`` is not one."""
    known = [FIXED, *length_distributions()]
    if name not in known:
        err = unknown_name("lengths", name, known)
        raise ConfigError(f"--lengths: {err}") from None


def sample_lengths(
    name: str, requests: int, context: int, *, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """``requests`` prompt and output lengths (integer tokens) drawn from the distribution
    ``name``, clipped to a model context of ``context`` tokens, from a generator seeded
    with ``seed``.

    Examples
    --------
    >>> isl, osl = sample_lengths("sharegpt", 4, 4096, seed=1)
    >>> len(isl), bool(all(isl + osl <= 4096))
    (4, True)
    """
    check_name(name)
    if name == FIXED:
        raise ConfigError("sample_lengths: fixed lengths are --input-tokens and --output-tokens")
    dist = length_distributions()[name]
    rng = np.random.default_rng([seed, _STREAM])
    isl = np.clip(np.rint(dist.input.draw(dist.kind, rng, requests)), 1, context - 2)
    osl = np.rint(dist.output.draw(dist.kind, rng, requests))
    osl = np.clip(osl, 2, context - isl)
    return isl.astype(np.int64), osl.astype(np.int64)
