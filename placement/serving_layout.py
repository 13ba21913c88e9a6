"""The layout of a serving deployment: one value, and its strategy string.

A :class:`ServingLayout` composes the :class:`~placement.layout.Layout` of each device pool
(tensor ``t``, pipeline ``p`` and expert ``ep`` parallelism within a replica; ``d``
data-parallel replicas, ``ep`` of which share their routed experts, as in training: the
expert group is a sub-group of the data-parallel ranks) with the engine's knobs:

* ``batch``: sequences in flight per decode replica (the engine's concurrency);
* ``chunk``: the token budget of one engine step under chunked prefill (Sarathi-Serve;
  vLLM's ``max_num_batched_tokens``), or None: whole prompts prefilled in steps of their own
  ahead of the decodes (vLLM's default scheduler without chunking);
* ``batching``: ``continuous`` (iteration-level scheduling: Orca, vLLM) or ``static`` (a
  batch prefilled together, then decoded to its end: TensorRT-LLM's ``gptSessionBenchmark``);
* ``prefill``: the layout of a separate prefill pool (disaggregated prefill and decode:
  DistServe, Splitwise), or None when one pool does both;
* ``weights``: the number format the blocks' weights are stored in (``bf16``, ``fp8``, ``int8``,
  ``int4``, ``nvfp4``: ``workloads/data/serving.toml`` [weights]), or None: the request batch's (bf16 unless the
  caller says otherwise). The search never changes it.

The strategy string is ``t=8,p=1,d=1,ep=1,batch=64,chunk=2048,weights=fp8`` (one pool), or
two sections, ``prefill:t=4,p=1,d=1,ep=1;decode:t=2,p=1,d=2,ep=1,batch=64`` (disaggregated);
the engine's keys and ``weights`` belong to the decode section. ``str(layout)`` prints it and :func:`parse_serving`
reads it back; keys left out are open (a search fills them).

Examples
--------
>>> lay = parse_serving("t=8,batch=64,chunk=2048")
>>> lay.devices, lay.decode.t, lay.batch, sorted(lay.open), sorted(lay.decode.open)
(8, 8, 64, ['batching'], ['d', 'ep', 'p'])
>>> str(parse_serving("prefill:t=4,d=1;decode:t=2,d=2,batch=64,chunk=off"))
'prefill:t=4,d=1;decode:t=2,d=2,batch=64,chunk=off'
>>> parse_serving("t=2,weights=fp8").weights
'fp8'
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Final, Literal, get_args

from phaze_common.errors import ConfigError
from phaze_common.limits import MAX_GLOBAL_BATCH, MAX_SEQ_LEN
from placement.layout import FIELDS, Layout, parse_strategy
from workloads.serving import serving_settings

__all__ = [
    "Batching",
    "BATCHING",
    "POOL_FIELDS",
    "ENGINE_FIELDS",
    "ServingLayout",
    "parse_serving",
    "pool_layout",
]

Batching = Literal["continuous", "static"]
BATCHING: Final = get_args(Batching)
#: The fields of a pool's Layout that a serving layout sets; the others keep their defaults.
POOL_FIELDS: Final = ("t", "p", "d", "ep")
#: The engine's knobs (strategy keys of the decode section).
ENGINE_FIELDS: Final = ("batch", "chunk", "batching")
_ENGINE_DEFAULTS: Final = {"batch": 1, "chunk": None, "batching": "continuous"}
_POOL_KEYS: Final = frozenset({"t", "tp", "p", "pp", "d", "dp", "ep"})
#: The key of the weights' number format (decode section; not searched).
WEIGHTS_KEY: Final = "weights"
_OFF: Final = ("off", "none")


def pool_layout(t: int = 1, p: int = 1, d: int = 1, ep: int = 1) -> Layout:
    """The Layout of a serving pool: its parallel degrees fixed, nothing open."""
    return Layout(t=t, p=p, d=d, ep=ep)


def _pool_problems(name: str, lay: Layout) -> list[str]:
    problems = []
    if not isinstance(lay, Layout):
        return [f"serving layout: {name} = {lay!r} must be a placement.Layout"]
    training = [f for f in FIELDS - set(POOL_FIELDS) if lay.given(f) and f != "split"]
    defaults = Layout()
    changed = [f for f in training if getattr(lay, f) != getattr(defaults, f)]
    if lay.split is not None:
        changed.append("split")
    if changed:
        problems.append(
            f"serving layout: {name} sets {', '.join(sorted(changed))}, which serving does not "
            f"use (a pool sets {', '.join(POOL_FIELDS)})"
        )
    if lay.given("ep") and lay.given("d") and lay.d % lay.ep:
        problems.append(
            f"serving layout: {name} ep = {lay.ep} must divide d = {lay.d} (the expert group "
            "is a sub-group of the data-parallel replicas)"
        )
    return problems


@dataclass(frozen=True, slots=True)
class ServingLayout:
    """One serving deployment (see the module docstring). ``open`` names the engine fields
    left to a search; a pool's own ``open`` names its parallel degrees left to it."""

    decode: Layout
    prefill: Layout | None = None
    batch: int = 1
    chunk: int | None = None
    batching: Batching = "continuous"
    open: frozenset[str] = frozenset()
    weights: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.open, frozenset) and self.open <= set(ENGINE_FIELDS):
            for name in self.open:  # an open field holds its default: equal layouts compare equal
                object.__setattr__(self, name, _ENGINE_DEFAULTS[name])
        problems = _pool_problems("decode", self.decode)
        if self.prefill is not None:
            problems += _pool_problems("prefill", self.prefill)
        b = self.batch
        if not (isinstance(b, int) and not isinstance(b, bool) and 1 <= b <= MAX_GLOBAL_BATCH):
            problems.append(
                f"serving layout: batch = {b!r} must be an integer in [1, {MAX_GLOBAL_BATCH}]"
            )
        c = self.chunk
        if c is not None and not (
            isinstance(c, int) and not isinstance(c, bool) and 1 <= c <= MAX_SEQ_LEN
        ):
            problems.append(
                f"serving layout: chunk = {c!r} must be off or an integer in [1, {MAX_SEQ_LEN}] "
                "(tokens per engine step)"
            )
        if self.batching not in BATCHING:
            problems.append(
                f"serving layout: batching = {self.batching!r} must be one of {', '.join(BATCHING)}"
            )
        given = set(ENGINE_FIELDS) - self.open
        if self.batching == "static" and {"batching", "chunk"} <= given and c is not None:
            problems.append(
                "serving layout: static batching prefills whole prompts; chunk must be off"
            )
        if self.prefill is not None and {"batching"} <= given and self.batching == "static":
            problems.append("serving layout: static batching runs one pool; drop the prefill pool")
        formats = serving_settings().weight_recipes
        if self.weights is not None and self.weights not in formats:
            problems.append(
                f"serving layout: weights = {self.weights!r} must be one of {', '.join(formats)}"
            )
        if not self.open <= set(ENGINE_FIELDS):
            problems.append(f"serving layout: open = {sorted(self.open)} must name {ENGINE_FIELDS}")
        if problems:
            raise ConfigError("; ".join(problems))

    @property
    def disaggregated(self) -> bool:
        return self.prefill is not None

    @property
    def devices(self) -> int:
        """Devices of both pools: ``t * p * d`` each."""
        return self.decode.devices + (self.prefill.devices if self.prefill else 0)

    @property
    def replica_devices(self) -> int:
        """Devices of one decode replica: ``t * p``."""
        return self.decode.t * self.decode.p

    def given(self, name: str) -> bool:
        """Is engine field ``name`` fixed (not left to the search)?"""
        return name not in self.open

    @property
    def complete(self) -> bool:
        """Nothing left open: no engine field, no pool degree."""
        pools = (self.decode, *((self.prefill,) if self.prefill else ()))
        return not self.open and all(lay.given(f) for lay in pools for f in POOL_FIELDS)

    def __str__(self) -> str:
        """The strategy string of the fixed fields (:func:`parse_serving` reads it back)."""
        engine = []
        for name in ENGINE_FIELDS:
            if name in self.open:
                continue
            value = getattr(self, name)
            if name == "chunk" and value is None:
                value = "off"
            engine.append(f"{name}={value}")
        if self.weights is not None:
            engine.append(f"{WEIGHTS_KEY}={self.weights}")
        decode = ",".join(p for p in (_pool_text(self.decode), *engine) if p)
        if self.prefill is None:
            return decode
        return f"prefill:{_pool_text(self.prefill)};decode:{decode}"


def _pool_text(lay: Layout) -> str:
    return ",".join(f"{f}={getattr(lay, f)}" for f in POOL_FIELDS if lay.given(f))


def _engine_value(key: str, text: str) -> tuple[object, str | None]:
    """(value, problem) of an engine key's text."""
    if key == "batch":
        if re.fullmatch(r"\d+", text) and 1 <= int(text) <= MAX_GLOBAL_BATCH:
            return int(text), None
        return None, f"strategy: batch = {text} must be an integer in [1, {MAX_GLOBAL_BATCH}]"
    if key == "chunk":
        if text.lower() in _OFF:
            return None, None
        if re.fullmatch(r"\d+", text) and 1 <= int(text) <= MAX_SEQ_LEN:
            return int(text), None
        return None, f"strategy: chunk = {text} must be off or an integer in [1, {MAX_SEQ_LEN}]"
    if key == WEIGHTS_KEY:
        formats = serving_settings().weight_recipes
        if text in formats:
            return text, None
        return None, f"strategy: weights = {text!r} must be one of {', '.join(formats)}"
    if text in BATCHING:
        return text, None
    return None, f"strategy: batching = {text!r} must be one of {', '.join(BATCHING)}"


def _section(text: str, engine_allowed: bool, problems: list[str]) -> tuple[Layout, dict]:
    """One pool's Layout (its left-out degrees open) and its engine values."""
    pool_parts, engine = [], {}
    for part in filter(None, (x.strip() for x in text.split(","))):
        key = part.partition("=")[0].strip()
        if key in ENGINE_FIELDS or key == WEIGHTS_KEY:
            if not engine_allowed:
                problems.append(f"strategy: {key} belongs to the decode section, not prefill")
                continue
            if key in engine:
                problems.append(f"strategy: {key} is given twice")
                continue
            value, problem = _engine_value(key, part.partition("=")[2].strip())
            if problem:
                problems.append(problem)
            else:
                engine[key] = value
        elif key in _POOL_KEYS or not re.fullmatch(r"\w+", key):
            pool_parts.append(part)
        else:
            known = ", ".join(sorted(_POOL_KEYS | {*ENGINE_FIELDS, WEIGHTS_KEY}))
            problems.append(f"strategy: unknown serving key {key!r} (known: {known})")
    try:
        lay = parse_strategy(",".join(pool_parts))
    except ConfigError as e:
        problems.append(str(e))
        lay = Layout.searching()
    return lay, engine


def parse_serving(text: str) -> ServingLayout:
    """The serving layout a strategy string gives, its left-out keys open (see the module
    docstring). Every problem is reported at once, each naming the key, the value and what
    is allowed.

    Examples
    --------
    >>> parse_serving("t=2,d=4,batch=32,batching=static").batching
    'static'
    >>> parse_serving("t=2,d=4,batch=32").chunk is None
    True
    """
    problems: list[str] = []
    sections = [s.strip() for s in text.split(";")]
    labelled = {}
    for s in sections:
        m = re.fullmatch(r"(prefill|decode)\s*:(.*)", s, flags=re.S)
        if m is None:
            if len(sections) > 1:
                problems.append(
                    f"strategy: section {s!r} must start with prefill: or decode: (two pools "
                    "read prefill:t=..;decode:t=..,batch=..)"
                )
            continue
        if m.group(1) in labelled:
            problems.append(f"strategy: the {m.group(1)} section is given twice")
        labelled[m.group(1)] = m.group(2)
    if len(sections) == 1 and not labelled:
        labelled = {"decode": sections[0]}
    if "decode" not in labelled and not problems:
        problems.append("strategy: a prefill section needs a decode section (decode:t=..)")
    decode, engine = _section(labelled.get("decode", ""), True, problems)
    prefill = None
    if "prefill" in labelled:
        prefill, _ = _section(labelled["prefill"], False, problems)
    if problems:
        raise ConfigError("; ".join(problems))
    weights = engine.pop(WEIGHTS_KEY, None)
    return ServingLayout(
        decode=_pool_only(decode),
        prefill=None if prefill is None else _pool_only(prefill),
        **{**_ENGINE_DEFAULTS, **engine},
        open=frozenset(set(ENGINE_FIELDS) - set(engine)),
        weights=weights,
    )


def _pool_only(lay: Layout) -> Layout:
    """``lay`` with the training fields it leaves open set to their defaults and no longer
    open: a pool leaves open only its parallel degrees."""
    return replace(lay, open=lay.open & set(POOL_FIELDS))
