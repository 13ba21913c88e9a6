"""Pareto fronts and the one "keep the best" reducer over result records.

An objective is a numeric column with a sense: maximise ("max") or minimise ("min"). Its sense
comes from :data:`results.schema.POINT_COLUMNS` unless overridden: ``"-tcdp"`` minimises,
``"+tcdp"`` maximises, and ``("tcdp", "min")`` says the same as a pair.

Definitions (all objectives turned into minimisation):

* ``a`` dominates ``b`` when ``a`` is no worse in every objective and better in at least one.
* The front is every point no other point dominates. Points with identical objective values do
  not dominate each other, so **every copy of a non-dominated point is kept** (duplicates are
  kept, never merged; they differ in design or knobs, which the architect wants to see).
* Points whose value of any objective is missing (None) or NaN are left out: infeasible points
  carry no metrics.
* The output is in one deterministic total order: by the first objective (best first), then the
  next objectives, then ``design_id``, then ``key``, so local and distributed runs agree.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from phaze_common.errors import ConfigError
from results.schema import Sense, numeric_column

__all__ = [
    "Objective",
    "parse_objective",
    "parse_objectives",
    "nondominated",
    "pareto",
    "rank",
    "best",
]

R = TypeVar("R", bound=Mapping[str, Any])

_SENSE_WORDS = {"max": "max", "+": "max", "min": "min", "-": "min"}


@dataclass(frozen=True, slots=True)
class Objective:
    """A numeric column to maximise or minimise."""

    metric: str
    sense: Sense

    def __str__(self) -> str:
        return ("+" if self.sense == "max" else "-") + self.metric


ObjectiveSpec = str | tuple[str, str] | Objective


def parse_objective(spec: ObjectiveSpec) -> Objective:
    """An :class:`Objective` from ``"metric"``, ``"+metric"``, ``"-metric"`` or ``(metric, sense)``.

    Examples
    --------
    >>> parse_objective("tokens_per_s"), parse_objective("-tcdp")
    (Objective(metric='tokens_per_s', sense='max'), Objective(metric='tcdp', sense='min'))
    >>> parse_objective(("num_tc", "max"))
    Objective(metric='num_tc', sense='max')
    """
    if isinstance(spec, Objective):
        return spec
    if isinstance(spec, tuple):
        if len(spec) != 2 or spec[1] not in _SENSE_WORDS:
            raise ConfigError(f"objective {spec!r} must be (metric, 'max' | 'min')")
        name, sense = spec[0], _SENSE_WORDS[spec[1]]
        numeric_column(name)
        return Objective(name, sense)
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError(
            f"objective {spec!r} must be a metric name, optionally prefixed by + or -"
        )
    text = spec.strip()
    prefix = text[0] if text[0] in "+-" else ""
    name = text[len(prefix) :]
    col = numeric_column(name)
    sense = _SENSE_WORDS[prefix] if prefix else col.sense
    if sense is None:
        raise ConfigError(
            f"metric {name!r} ({col.description}) has no better direction; "
            f"write +{name} to maximise it or -{name} to minimise it"
        )
    return Objective(name, sense)


def parse_objectives(specs: Iterable[ObjectiveSpec]) -> tuple[Objective, ...]:
    """Parse several objectives; the same metric twice is an error."""
    objs = tuple(parse_objective(s) for s in specs)
    names = [o.metric for o in objs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ConfigError(f"objectives name {', '.join(dup)} more than once")
    return objs


def nondominated(values: np.ndarray) -> np.ndarray:
    """Boolean mask of the rows of ``values`` (n x k, k in 1..3, all minimised) on the front.

    Rows must be free of NaN. Identical rows are all kept or all dropped.

    Notes
    -----
    The rows are sorted lexicographically (O(n log n)); a dominating row always sorts before
    the row it dominates, so one sweep over the distinct rows decides each row:
    for k = 2 a distinct row is on the front iff its second value is below every earlier one
    (a vectorised prefix minimum); for k = 3 a staircase of the earlier front's (2nd, 3rd)
    values, kept sorted, answers "is any earlier row no worse in both?" by one bisection
    (Kung, Luccio and Preparata, J. ACM 22(4), 1975): O(n log n) comparisons, plus list
    insertions that move memory (0.5 s here for 1e5 points that are all on the front).
    """
    v = np.asarray(values, dtype=float)
    if v.ndim != 2 or not 1 <= v.shape[1] <= 3:
        raise ValueError(f"values must be an n x k array with k in 1..3 (got shape {v.shape})")
    n, k = v.shape
    mask = np.zeros(n, dtype=bool)
    if n == 0:
        return mask
    v = v + 0.0  # -0.0 -> 0.0, so equal values compare equal bit for bit
    order = np.lexsort(v.T[::-1])
    s = v[order]
    first = np.ones(n, dtype=bool)  # first row of each run of identical rows
    first[1:] = np.any(s[1:] != s[:-1], axis=1)
    group = np.cumsum(first) - 1
    u = s[first]  # distinct rows, lexicographically sorted
    if k == 1:
        keep = u[:, 0] == u[0, 0]
    elif k == 2:
        keep = np.ones(len(u), dtype=bool)
        keep[1:] = u[1:, 1] < np.minimum.accumulate(u[:-1, 1])
    else:
        keep = _staircase3(u[:, 1].tolist(), u[:, 2].tolist())
    mask[order] = keep[group]
    return mask


def _staircase3(b: list[float], c: list[float]) -> np.ndarray:
    """Front mask of distinct, lexicographically sorted 3D rows given their 2nd and 3rd values."""
    keep = np.zeros(len(b), dtype=bool)
    stair_b: list[float] = []  # ascending
    stair_c: list[float] = []  # strictly descending: the (b, c) front of the rows kept so far
    for i, (bi, ci) in enumerate(zip(b, c, strict=True)):
        j = bisect.bisect_right(stair_b, bi) - 1
        if j >= 0 and stair_c[j] <= ci:
            continue  # an earlier row is no worse in all three and differs: dominated
        keep[i] = True
        lo = bisect.bisect_left(stair_b, bi)
        hi = lo
        while hi < len(stair_c) and stair_c[hi] >= ci:
            hi += 1
        stair_b[lo:hi] = [bi]
        stair_c[lo:hi] = [ci]
    return keep


def pareto(points: Sequence[R], objectives: Iterable[ObjectiveSpec]) -> list[R]:
    """The Pareto front of ``points`` over two or three objectives, in total order.

    Parameters
    ----------
    points
        Records (mappings from column names to values), e.g. ``Store.points()``.
    objectives
        Two or three objective specs: ``"tokens_per_s"``, ``"-tcdp"``, ``("area_mm2", "min")``.

    Returns
    -------
    The non-dominated records themselves (not copies), every copy of a duplicate kept, ordered
    by the objectives (best first), then ``design_id``, then ``key``.

    Examples
    --------
    >>> pts = [{"key": "a", "tokens_per_s": 10, "system_cost_usd": 5},
    ...        {"key": "b", "tokens_per_s": 8, "system_cost_usd": 6},
    ...        {"key": "c", "tokens_per_s": 4, "system_cost_usd": 1}]
    >>> [p["key"] for p in pareto(pts, ["tokens_per_s", "system_cost_usd"])]
    ['a', 'c']

    Notes
    -----
    O(n log n) time (see :func:`nondominated`); 1e5 points take well under a second.
    """
    objs = parse_objectives(objectives)
    if not 2 <= len(objs) <= 3:
        raise ConfigError(f"a Pareto front needs two or three objectives (got {len(objs)})")
    valid, v = _objective_matrix(points, objs)
    on_front = nondominated(v)
    return [points[i] for i in _ordered(valid[on_front], v[on_front], points)]


def rank(
    points: Sequence[R], objectives: ObjectiveSpec | Iterable[ObjectiveSpec], n: int | None = None
) -> list[R]:
    """Points ordered best first by the objectives (lexicographically), then design_id, key.

    Points missing a value of an objective are left out. ``n`` keeps the first ``n``.
    """
    specs = [objectives] if isinstance(objectives, str | tuple | Objective) else list(objectives)
    objs = parse_objectives(specs)
    if not objs:
        raise ConfigError("rank needs at least one objective")
    valid, v = _objective_matrix(points, objs)
    order = _ordered(valid, v, points)
    return [points[i] for i in order[:n]]


def best(points: Sequence[R], objective: ObjectiveSpec | Iterable[ObjectiveSpec]) -> R | None:
    """The one best point by ``objective`` (ties broken by the next objectives given, then
    design_id, then key), or None when no point has a value for it.

    Examples
    --------
    >>> pts = [{"key": "a", "design_id": "x", "tcdp": 3.0}, {"key": "b", "design_id": "y", "tcdp": 2.0}]
    >>> best(pts, "tcdp")["key"]
    'b'
    """
    top = rank(points, objective, n=1)
    return top[0] if top else None


def best_per_design(
    points: Sequence[R], objectives: ObjectiveSpec | Iterable[ObjectiveSpec]
) -> list[R]:
    """The best point of each design (as :func:`rank` orders them), best design first."""
    seen: set[Any] = set()
    out = []
    for p in rank(points, objectives):
        if p.get("design_id") not in seen:
            seen.add(p.get("design_id"))
            out.append(p)
    return out


def _objective_matrix(
    points: Sequence[Mapping[str, Any]], objs: Sequence[Objective]
) -> tuple[np.ndarray, np.ndarray]:
    """(indices of points with every objective present, their values as minimisation)."""
    cols = []
    for o in objs:
        raw = [p.get(o.metric) for p in points]
        try:
            col = np.array(raw, dtype=float)
        except (TypeError, ValueError):
            bad = next(x for x in raw if x is not None and not isinstance(x, int | float))
            raise ConfigError(f"metric {o.metric!r} holds a non-number ({bad!r})") from None
        cols.append(-col if o.sense == "max" else col)
    v = np.column_stack(cols).reshape(len(points), len(objs))
    valid = np.flatnonzero(~np.isnan(v).any(axis=1))
    return valid, v[valid] + 0.0


def _ordered(idx: np.ndarray, v: np.ndarray, points: Sequence[Mapping[str, Any]]) -> list[int]:
    """``idx`` (rows of ``v``) sorted by values, then design_id, then key.

    A numeric lexsort orders the values; only runs of equal values are sorted again in
    Python by (design_id, key), so big fronts stay fast.
    """
    n = len(idx)
    if n == 0:
        return []
    order = np.lexsort(v.T[::-1]) if v.shape[1] else np.arange(n)
    s = v[order]
    same = np.zeros(n + 1, dtype=bool)
    same[1:n] = np.all(s[1:] == s[:-1], axis=1)
    out = idx[order].tolist()
    starts = np.flatnonzero(~same[:n] & same[1:])  # first row of each run of equal values
    for a in starts.tolist():
        b = a + 1
        while same[b]:
            b += 1
        out[a:b] = sorted(out[a:b], key=lambda i: _tie_key(points[i]))
    return out


def _tie_key(p: Mapping[str, Any]) -> tuple[str, str]:
    return str(p.get("design_id") or ""), str(p.get("key") or "")
