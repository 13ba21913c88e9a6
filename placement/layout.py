"""The parallel layout of a training job: one value, its groups, and its strategy string.

A :class:`Layout` holds every choice that makes an iteration's placement reproducible: the
tensor-, pipeline- and data-parallel degrees ``t``, ``p``, ``d``, the interleaved chunks per
pipeline rank ``v``, the micro-batch size ``mbs``, the recompute mode, sequence parallelism
``sp``, the ZeRO stage, the expert- and context-parallel degrees ``ep`` and ``cp``, the
``split`` of the layers into the ``p * v`` pipeline chunks, and the ``precision`` recipe
(:mod:`workloads.precision`; bf16 unless given, never searched, printed when not bf16). Searched placements, fixed
strategies, the sweep's records and the API all carry it; :func:`parse_strategy` reads it
from the strategy language and ``str(layout)`` writes it back.

The split uses Megatron-Core's ``--pipeline-model-parallel-layout`` notation
(``megatron/core/transformer/pipeline_parallel_layer_layout.py``,
``docs/user-guide/features/pipeline_parallel_layout.md``): chunks in order (chunk ``c`` on
pipeline rank ``c mod p``) separated by ``|``, each a string of ``E`` (the embedding), ``t``
(a transformer block) and ``L`` (the final norm, LM head and loss); ``x*n`` repeats a symbol,
``(...)*n`` a group, commas are only for reading. ``E|(t|)*126L`` puts the embedding and the
head on stages of their own around 126 one-block stages. ``split`` None is Megatron-LM's
default: the blocks split evenly, the embedding with the first chunk and the head with the
last.

Ranks follow Megatron-LM's order ``tp-cp-ep-dp-pp`` (``megatron/core/parallel_state.py``), so
each group is a run of consecutive ranks (:attr:`Layout.groups`) and crosses a node exactly
when its run is longer than a node (:meth:`arch_space.Cluster.spans_nodes`), resolved once per
dimension by :meth:`Layout.links`.

Examples
--------
>>> lay = parse_strategy("t=8,p=4,d=2,mbs=2,recompute=full,sp=on")
>>> lay.devices, lay.groups.dp, sorted(lay.open)
(64, 16, ['cp', 'ep', 'v', 'zero'])
>>> str(parse_strategy("t=2,p=3,d=1,v=1,split=Et|tt|tL"))
't=2,p=3,d=1,v=1,split=Et|tt|tL'
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Set
from dataclasses import dataclass, fields, replace
from typing import Final

from arch_space.accelerator import Cluster
from phaze_common.errors import ConfigError
from phaze_common.limits import MAX_DEVICES, MAX_GLOBAL_BATCH
from workloads.precision import DEFAULT_PRECISION, recipe_names
from workloads.recompute_modules import RECOMPUTE_WORDS, recompute_problem

__all__ = [
    "DEFAULT_PRECISION",
    "ep_fits",
    "RecomputeMode",
    "RECOMPUTE_MODES",
    "ZERO_STAGES",
    "LAYER_SYMBOLS",
    "FIELDS",
    "PLACED_FIELDS",
    "Layout",
    "Groups",
    "Links",
    "parse_strategy",
    "parse_split",
    "format_split",
]

#: ``none``, ``selective``, ``full`` or ``modules:a+b`` (:mod:`workloads.recompute_modules`)
RecomputeMode = str
RECOMPUTE_MODES: Final = RECOMPUTE_WORDS
ZERO_STAGES: Final = (0, 1, 2, 3)
#: Megatron-Core's layer symbol of each layer kind of a stage graph
LAYER_SYMBOLS: Final = {"embedding": "E", "block": "t", "head": "L"}

# strategy key -> Layout field; the first key of a field is the one printed
_KEYS: Final = {
    "t": "t",
    "tp": "t",
    "p": "p",
    "pp": "p",
    "d": "d",
    "dp": "d",
    "v": "v",
    "mbs": "mbs",
    "recompute": "recompute",
    "sp": "sp",
    "zero": "zero",
    "ep": "ep",
    "cp": "cp",
    "split": "split",
    "precision": "precision",
}
# integer fields and their ranges
_COUNTS: Final = {
    "t": MAX_DEVICES,
    "p": MAX_DEVICES,
    "d": MAX_DEVICES,
    "v": MAX_DEVICES,
    "mbs": MAX_GLOBAL_BATCH,
    "ep": MAX_DEVICES,
    "cp": MAX_DEVICES,
}
_SP_WORDS: Final = {"on": True, "true": True, "1": True, "off": False, "false": False, "0": False}
_MAX_SPLIT_LAYERS: Final = 10 * MAX_DEVICES  # symbols a split may expand to


@dataclass(frozen=True, slots=True)
class Groups:
    """How many consecutive ranks each parallel group spans (Megatron's ``tp-cp-ep-dp-pp``
    order): tensor ``t``, context ``t cp``, expert ``t cp ep`` (``ep`` ranks when it folds
    over tensor x data ranks, :attr:`Layout.ep_d`), data ``t cp d`` (the ``d cp`` ranks
    holding the same weights), pipeline: the whole job."""

    tp: int
    cp: int
    ep: int
    dp: int
    pp: int


@dataclass(frozen=True, slots=True)
class Links:
    """Whether each group's ring crosses a node boundary (its inter-node link)."""

    tp: bool
    cp: bool
    ep: bool
    dp: bool
    pp: bool


@dataclass(frozen=True, slots=True)
class Layout:
    """One parallel layout (see the module docstring); ``open`` names the fields left to a
    search (a partial strategy), which hold placeholders until it fills them."""

    t: int = 1
    p: int = 1
    d: int = 1
    v: int = 1
    mbs: int = 1
    recompute: RecomputeMode = "none"
    sp: bool = False
    zero: int = 0
    ep: int = 1
    cp: int = 1
    split: tuple[str, ...] | None = None
    precision: str = DEFAULT_PRECISION
    open: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        # the upper limits apply to what a user types (parse_strategy), not to a search
        problems = [
            f"strategy: {k} = {getattr(self, k)!r} must be an integer >= 1"
            for k in _COUNTS
            if not _is_count(getattr(self, k))
        ]
        if (why := recompute_problem(self.recompute)) is not None:
            problems.append(f"strategy: {why}")
        if not isinstance(self.sp, bool):
            problems.append(f"strategy: sp = {self.sp!r} must be on or off")
        if isinstance(self.zero, bool) or self.zero not in ZERO_STAGES:
            problems.append(f"strategy: zero = {self.zero!r} must be 0, 1, 2 or 3")
        if self.precision not in recipe_names():
            problems.append(
                f"strategy: precision = {self.precision!r} must be one of "
                f"{', '.join(recipe_names())}"
            )
        if not self.open <= FIELDS:
            problems.append(f"strategy: open = {sorted(self.open)} must name layout fields")
        if self.split is not None and not problems:
            problems += _split_problems(self)
        if problems:
            raise ConfigError("; ".join(problems))
        for name in self.open:  # an open field holds its default, so equal layouts compare equal
            object.__setattr__(self, name, _DEFAULTS[name])

    @property
    def devices(self) -> int:
        """Devices the layout uses: ``t * p * d * cp``."""
        return self.t * self.p * self.d * self.cp

    @property
    def chunks(self) -> int:
        """Model chunks of the pipeline: ``p * v``."""
        return self.p * self.v

    @property
    def folds_experts(self) -> bool:
        """Does ``ep`` fold over tensor x data ranks (expert-tensor parallelism 1)? Only when
        ``t``, ``d``, ``ep`` and ``cp`` are given, ``ep`` does not divide ``d`` and
        :func:`ep_fits` allows the fold."""
        given = not self.open & {"t", "d", "ep", "cp"}
        return given and self.d % self.ep != 0 and ep_fits(self.ep, self.t, self.d, self.cp)

    @property
    def etp(self) -> int:
        """Expert tensor-parallel size (Megatron-Core's ``--expert-tensor-parallel-size``):
        ``t`` (each expert sharded as the dense layers) unless ``ep`` folds over tensor x
        data ranks, then 1 (whole experts)."""
        return 1 if self.folds_experts else self.t

    @property
    def ep_d(self) -> int:
        """How many ways the experts split along the data-parallel ranks: ``ep``, or
        ``ep / t`` when ``ep`` folds over tensor x data ranks (the expert data-parallel
        degree is ``d / ep_d`` either way)."""
        return self.ep // self.t if self.folds_experts else self.ep

    @property
    def groups(self) -> Groups:
        t, cp = self.t, self.cp
        return Groups(tp=t, cp=t * cp, ep=t * cp * self.ep_d, dp=t * cp * self.d, pp=self.devices)

    def links(self, cluster: Cluster, pipeline_devices: int | None = None) -> Links:
        """Which groups cross a node on ``cluster``; the pipeline's boundaries do when the job
        spans nodes (``pipeline_devices``: what its stages use, default :attr:`devices`)."""
        g = self.groups
        return Links(
            tp=bool(cluster.spans_nodes(g.tp)),
            cp=bool(cluster.spans_nodes(g.cp)),
            ep=bool(cluster.spans_nodes(g.ep)),
            dp=bool(cluster.spans_nodes(g.dp)),
            pp=bool(cluster.spans_nodes(g.pp if pipeline_devices is None else pipeline_devices)),
        )

    @classmethod
    def searching(cls, **fixed: object) -> Layout:
        """A layout fixing ``fixed`` (a sweep's micro-batch and recompute mode, say) and
        leaving every other field to the search."""
        return cls(**fixed, open=FIELDS - set(fixed) - _NEVER_OPEN)

    def given(self, name: str) -> bool:
        """Is field ``name`` fixed (not left to the search)?"""
        return name not in self.open

    def completed(self, **values: object) -> Layout:
        """This layout with ``values`` set and no longer open."""
        return replace(self, **values, open=self.open - set(values))

    def __str__(self) -> str:
        """The strategy string of the fixed fields (:func:`parse_strategy` reads it back)."""
        return self.spelled((FIELDS | {"precision"}) - self.open)

    def spelled(self, names: Set[str]) -> str:
        """``key=value`` of each field of ``names`` in the strategy string's order, the one
        way a layout is written: a split left out when None, a precision when bf16.

        >>> Layout(t=2, sp=True, zero=1).spelled({"sp", "zero"})
        'sp=on,zero=1'
        """
        parts = []
        for name in _PRINTED:
            if name not in names or (name == "split" and self.split is None):
                continue
            if name == "precision" and self.precision == DEFAULT_PRECISION:
                continue
            value = getattr(self, name)
            if name == "sp":
                value = "on" if value else "off"
            elif name == "split":
                value = format_split(value)
            parts.append(f"{name}={value}")
        return ",".join(parts)


# the fields a search may leave open (a precision is chosen, never searched)
FIELDS: Final = frozenset(f.name for f in fields(Layout) if f.name not in ("open", "precision"))
_DEFAULTS: Final = {f.name: f.default for f in fields(Layout)}
#: the fields a placement chooses; a stage graph's layout fixes the others
#: (:class:`placement.types.StageGraph`)
PLACED_FIELDS: Final = frozenset({"p", "d", "v", "zero"})
_PRINTED: Final = tuple(dict.fromkeys(_KEYS.values()))
# a split left out is Megatron-LM's default: no search chooses it
_NEVER_OPEN: Final = frozenset({"split"})


def ep_fits(ep: int, t: int, d: int, cp: int) -> bool:
    """Can ``ep`` expert-parallel ranks sit on ``t`` x ``d`` x ``cp`` ranks: a sub-group of
    the data-parallel replicas (``ep`` divides ``d``), or folded over tensor x data ranks
    with whole experts (``ep = t e``, ``e`` dividing ``d``, ``cp = 1``; Megatron-Core's
    ``--expert-tensor-parallel-size 1`` with ``--expert-model-parallel-size t e``).

    >>> ep_fits(4, 2, 4, 1), ep_fits(8, 2, 4, 1), ep_fits(8, 2, 4, 2), ep_fits(16, 2, 4, 1)
    (True, True, False, False)
    """
    return d % ep == 0 or (cp == 1 and ep % t == 0 and d % (ep // t) == 0)


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _split_problems(lay: Layout) -> list[str]:
    split = lay.split
    if not (isinstance(split, tuple) and all(isinstance(c, str) for c in split)):
        return [f"strategy: split = {split!r} must be a tuple of chunk strings"]
    problems = []
    if lay.given("p") and lay.given("v") and len(split) != lay.chunks:
        problems.append(
            f"strategy: split has {len(split)} chunks, p * v = {lay.p} * {lay.v} = {lay.chunks} "
            "(one per model chunk)"
        )
    if any(not c for c in split):
        problems.append("strategy: split has an empty chunk; each chunk needs a layer at least")
    bad = sorted({s for c in split for s in c} - set(LAYER_SYMBOLS.values()))
    if bad:
        problems.append(
            f"strategy: split has unknown layer symbols {bad} (known: E embedding, "
            "t transformer block, L head and loss)"
        )
    return problems


def parse_split(text: str) -> tuple[str, ...]:
    """Megatron-Core's layout notation as one string of layer symbols per chunk.

    Examples
    --------
    >>> parse_split("Et*3|(tt|)*2,L")
    ('Ettt', 'tt', 'tt', 'L')
    """
    flat = text.replace(",", "").replace(" ", "")

    def size(m: re.Match[str]) -> str:
        # expanded lengths are checked before expanding, so a huge count costs nothing
        if len(m.group(1)) * int(m.group(2)) > _MAX_SPLIT_LAYERS:
            raise ConfigError(
                f"strategy: split {text!r} repeats {m.group(0)!r}, more than "
                f"{_MAX_SPLIT_LAYERS} layers"
            )
        return m.group(1) * int(m.group(2))

    for pattern in (r"\(([^()]+)\)\*(\d+)", r"(.)\*(\d+)"):  # Megatron's two unrolling steps
        flat = re.sub(pattern, size, flat)
        if len(flat) > _MAX_SPLIT_LAYERS:
            raise ConfigError(f"strategy: split {text!r} has more than {_MAX_SPLIT_LAYERS} layers")
    if re.search(r"[()*]", flat):
        raise ConfigError(
            f"strategy: split = {text!r} must be chunks of E, t, L separated by |, with x*n "
            "and (...)*n repeats (Megatron-Core's pipeline layout)"
        )
    return tuple(flat.split("|"))


def format_split(chunks: tuple[str, ...]) -> str:
    """The shortest-reading Megatron-Core notation of ``chunks``: runs of a symbol as
    ``x*n``, runs of equal chunks as ``(c|)*n``.

    Examples
    --------
    >>> format_split(("E", *["t"] * 126, "L"))
    'E|(t|)*126L'
    """

    def chunk(c: str) -> str:
        return "".join(
            run if len(run) < 3 else f"{s}*{len(run)}"
            for run, s in ((m.group(0), m.group(1)) for m in re.finditer(r"(.)\1*", c))
        )

    out, i = [], 0
    while i < len(chunks):
        j = i
        while j + 1 < len(chunks) and chunks[j + 1] == chunks[i]:
            j += 1
        n, last = j - i + 1, j == len(chunks) - 1
        if n >= 3 and not last:  # (c|)*n reads the chunk and its separator n times
            out.append(f"({chunk(chunks[i])}|)*{n}")
        elif n >= 4:
            out.append(f"({chunk(chunks[i])}|)*{n - 1}{chunk(chunks[i])}")
        else:
            out.append("|".join([chunk(chunks[i])] * n) + ("" if last else "|"))
        i = j + 1
    return "".join(out)


def _value(key: str, name: str, text: str) -> tuple[object | None, str | None]:
    """(value, problem) of ``key=text`` for field ``name``."""
    if name in _COUNTS:
        hi = _COUNTS[name]
        if re.fullmatch(r"\d+", text) and 1 <= int(text) <= hi:
            return int(text), None
        return None, f"strategy: {key} = {text} must be an integer in [1, {hi}]"
    if name == "sp":
        if text.lower() in _SP_WORDS:
            return _SP_WORDS[text.lower()], None
        return None, f"strategy: sp = {text!r} must be on or off"
    if name == "zero":
        if text in ("0", "1", "2", "3"):
            return int(text), None
        return None, f"strategy: zero = {text} must be 0, 1, 2 or 3"
    if name == "precision":
        if text in recipe_names():
            return text, None
        return None, f"strategy: precision = {text!r} must be one of {', '.join(recipe_names())}"
    if name == "recompute":
        why = recompute_problem(text)
        return (text, None) if why is None else (None, f"strategy: {why}")
    try:
        return parse_split(text), None
    except ConfigError as e:
        return None, str(e)


def parse_strategy(text: str, options: Mapping[str, tuple[str, object]] | None = None) -> Layout:
    """The layout a strategy string gives, its left-out keys open.

    ``"t=8,p=8,d=1,mbs=1,v=3,recompute=full,sp=on,zero=1,ep=1,cp=1,split=..."``; ``tp``,
    ``pp`` and ``dp`` are accepted for ``t``, ``p``, ``d``. ``options`` maps a field to
    (its source, its value) from elsewhere (``{"mbs": ("--micro-batch", 2)}``): it fills the
    field when the string leaves it open; a different value in both is a conflict. Every
    problem is reported at once: a key given twice, an unknown key, a value out of its range,
    a conflict naming both sources, sequence parallelism without tensor parallelism (t = 1).

    Examples
    --------
    >>> parse_strategy("t=8,p=8,d=1,v=3,recompute=full,sp=on").v
    3
    >>> parse_strategy("t=2", {"mbs": ("--micro-batch", 4)}).mbs
    4
    """
    import difflib

    values: dict[str, object] = {}
    spelled: dict[str, str] = {}
    problems = []
    # a comma starts a new key only before "key="; Megatron's split may hold commas
    for part in filter(None, (x.strip() for x in re.split(r",(?=\s*\w+\s*=)", text))):
        m = re.fullmatch(r"(\w+)\s*=\s*(\S.*)", part)
        if not m:
            problems.append(f"strategy: {part!r} must look like key=value")
            continue
        key, raw = m.group(1), m.group(2).strip()
        if key not in _KEYS:
            close = difflib.get_close_matches(key, list(_KEYS), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            problems.append(f"strategy: unknown key {key!r}{hint} (known: {', '.join(_KEYS)})")
            continue
        name = _KEYS[key]
        if name in spelled:
            problems.append(f"strategy: {name} is given twice ({spelled[name]}, {key}={raw})")
            continue
        spelled[name] = f"{key}={raw}"
        value, problem = _value(key, name, raw)
        if problem:
            problems.append(problem)
        else:
            values[name] = value
    for name, (source, value) in (options or {}).items():
        if value is None:
            continue
        if name in values and values[name] != value:
            problems.append(f"strategy {spelled[name]} conflicts with {_spelled(source, value)}")
        values.setdefault(name, value)
    if values.get("sp") is True and values.get("t") == 1:
        sp = spelled.get("sp") or _spelled(*options["sp"])  # type: ignore[index]
        problems.append(
            f"strategy: {sp} needs t > 1 ({spelled['t']}): sequence parallelism splits "
            "activations over the tensor-parallel group; give t > 1 or sp=off"
        )
    if problems:
        raise ConfigError("; ".join(problems))
    # a split left out is Megatron-LM's default, a precision bf16 (no search chooses them)
    return Layout(**values, open=FIELDS - set(values) - _NEVER_OPEN)


def _spelled(source: str, value: object) -> str:
    """``--micro-batch 1``, ``--no-sp``, ``sequence_parallel=True``: a value and its source."""
    if source.startswith("--"):
        return source if isinstance(value, bool) else f"{source} {value}"
    return f"{source}={value!r}"
