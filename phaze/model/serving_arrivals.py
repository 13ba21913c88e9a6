"""Requests as they arrive at a serving system: a Poisson or gamma process at a given rate,
or a trace file (docs/serving.md, "Serving under load").

Inter-arrival times are exponential at ``rate`` requests per second (a Poisson process, the
default of vLLM's ``benchmark_serving.py`` with ``--burstiness 1``), or gamma-distributed
with coefficient of variation ``cv`` (shape ``1 / cv**2``, the same mean): ``cv > 1`` is
burstier than Poisson, ``cv < 1`` smoother. Every request has the same lengths. A trace
(CSV rows ``arrival_s,input_tokens,output_tokens``, an optional header) gives each request's
arrival and lengths. The draws come from a seeded ``numpy`` generator, so a seed repeats them.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from phaze_common.errors import ConfigError
from phaze_common.files import read_text
from phaze_common.limits import MAX_SEQ_LEN

__all__ = ["Arrivals", "generate", "read_trace"]

_HEADER = ("arrival_s", "input_tokens", "output_tokens")


@dataclass(frozen=True, slots=True)
class Arrivals:
    """Requests in order of arrival: their arrival times (s from the first) and lengths."""

    arrival_s: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray

    def __post_init__(self) -> None:
        for name in ("arrival_s", "input_tokens", "output_tokens"):
            getattr(self, name).flags.writeable = False

    def __len__(self) -> int:
        return len(self.arrival_s)

    @property
    def rate_per_s(self) -> float:
        """Requests per second over the span of the arrivals."""
        span = float(self.arrival_s[-1] - self.arrival_s[0]) if len(self) > 1 else 0.0
        return (len(self) - 1) / span if span > 0 else math.inf


def generate(
    rate_per_s: float,
    requests: int,
    input_tokens: int,
    output_tokens: int,
    *,
    cv: float = 1.0,
    seed: int = 0,
) -> Arrivals:
    """``requests`` arrivals at ``rate_per_s``: exponential gaps (``cv`` 1) or gamma gaps
    of coefficient of variation ``cv``, from a generator seeded with ``seed``.

    Examples
    --------
    >>> a = generate(2.0, 3, 128, 16, seed=1)
    >>> len(a), float(a.arrival_s[0]), int(a.input_tokens[2])
    (3, 0.0, 128)
    """
    problems = []
    if not (isinstance(rate_per_s, int | float) and 0 < rate_per_s < math.inf):
        problems.append(f"rate = {rate_per_s!r} must be a positive number of requests per second")
    if not (isinstance(cv, int | float) and 0 < cv < math.inf):
        problems.append(f"burstiness = {cv!r} must be a positive coefficient of variation")
    if not (isinstance(requests, int) and requests >= 1):
        problems.append(f"requests = {requests!r} must be a positive integer")
    if problems:
        raise ConfigError("arrivals: " + "; ".join(problems))
    rng = np.random.default_rng(seed)
    shape = 1.0 / cv**2
    gaps = rng.gamma(shape, 1.0 / (shape * rate_per_s), size=requests - 1)
    arrival = np.concatenate([[0.0], np.cumsum(gaps)])
    return Arrivals(
        arrival,
        np.full(requests, input_tokens, dtype=np.int64),
        np.full(requests, output_tokens, dtype=np.int64),
    )


def _row(fields: list[str]) -> tuple[float, int, int] | str:
    """A row's values, or what is wrong with it."""
    if len(fields) != 3:
        return f"{len(fields)} fields, expected 3 ({','.join(_HEADER)})"
    try:
        t = float(fields[0])
    except ValueError:
        return f"arrival_s = {fields[0]!r} is not a number"
    if not (math.isfinite(t) and t >= 0):
        return f"arrival_s = {fields[0]!r} must be a finite number of seconds >= 0"
    values = []
    for name, text, low in zip(_HEADER[1:], fields[1:], (1, 2), strict=True):
        text = text.strip()
        if not (text.isdigit() and low <= int(text) <= MAX_SEQ_LEN):
            return f"{name} = {text!r} must be an integer in [{low}, {MAX_SEQ_LEN}]"
        values.append(int(text))
    return t, values[0], values[1]


def read_trace(path: str | Path) -> Arrivals:
    """The requests of a CSV trace (``arrival_s,input_tokens,output_tokens``, arrivals in
    seconds, not decreasing; an optional header row), shifted to start at 0.

    Raises
    ------
    ConfigError
        One error naming every bad row by its line number.
    """
    text = read_text(path, "trace")
    rows, problems = [], []
    last = -math.inf
    for number, fields in enumerate(csv.reader(io.StringIO(text)), start=1):
        if not fields or all(not f.strip() for f in fields):
            continue
        if number == 1 and tuple(f.strip() for f in fields) == _HEADER:
            continue
        value = _row(fields)
        if isinstance(value, str):
            problems.append(f"line {number}: {value}")
        elif value[0] < last:
            problems.append(f"line {number}: arrival_s = {value[0]:g} is before the line above's")
        else:
            last = value[0]
            rows.append(value)
    if not rows and not problems:
        problems.append("no requests (rows arrival_s,input_tokens,output_tokens)")
    if problems:
        raise ConfigError(f"trace {Path(path).name}: " + "; ".join(problems))
    a = np.array(rows, dtype=float)
    return Arrivals(a[:, 0] - a[0, 0], a[:, 1].astype(np.int64), a[:, 2].astype(np.int64))
