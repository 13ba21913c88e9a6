"""Published training runs: the registry ``phaze validate runs`` checks the time model on.

Each run (``phaze/data/published_runs.toml``) names its source, the system it ran on (a
preset, GPUs per node and the links), the training stack and its version, the model (a
catalog name), the layout (a complete strategy in the language of ``phaze evaluate
--strategy``), the batch and sequence, and the metric the source published with the FLOP
count behind it. :func:`measured_iteration_s` turns any published metric into the iteration
time it implies, so one prediction (an iteration time) answers every kind of row, and
:func:`metric_from_iteration_s` turns a predicted time back into the publication's metric.

A run is ``fitted`` when a fitted parameter of a preset (``arch_space/data/devices.toml``)
came from it; every other run is held out. A stack without a framework profile of its own is
evaluated with the closest profile the registry's ``[fallback_profiles]`` names, with the
reason; once a profile of that name exists, it is used instead.
"""

from __future__ import annotations

import difflib
import math
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

from phaze_common.errors import ConfigError
from phaze_common.files import read_text
from phaze_common.units import fmt_noun
from placement import parse_strategy
from workloads import FfnKind, Model, model_names, resolve_model
from workloads.framework import framework_names, framework_profile
from workloads.optimizer_state import OptimizerState, parse_optimizer_state

__all__ = [
    "DEFAULT_REGISTRY",
    "FLOP_CONVENTIONS",
    "METRICS",
    "PublishedRun",
    "Registry",
    "RunSource",
    "RunSystem",
    "default_registry",
    "flops_per_iteration",
    "load_registry",
    "measured_iteration_s",
    "metric_from_iteration_s",
]

#: The registry shipped with Phaze (package data).
DEFAULT_REGISTRY: Final = "published_runs.toml"


def _sc21_flops(m: Model, seq_len: int, batch: int) -> float:
    """SC21 eq. 3 (Narayanan et al. 2021): ``96 B s l h^2 (1 + s / 6h + V / 16 l h)``, the
    forward, the recomputed forward and the backward of every block (full recomputation)
    plus three passes of the logits; used by Megatron-LM's and Megatron-DeepSpeed's loggers."""
    h, layers, v = m.hidden, m.layers, m.vocab
    return 96.0 * batch * seq_len * layers * h * h * (1 + seq_len / (6 * h) + v / (16 * layers * h))


def _megatron_core_flops(m: Model, seq_len: int, batch: int) -> float:
    """Megatron-Core's ``num_floating_point_operations`` (megatron/training/training.py,
    core_r0.8.0 l.73-108): forward and backward (three passes) of every GEMM with the full
    ``s x s`` attention (no causal halving, no recomputation), grouped queries, gated FFNs and
    the routed experts' top-k, and the logits."""
    h, s = m.hidden, seq_len
    query = m.heads * (m.head_size or m.hidden // m.heads)
    groups = m.kv_heads or m.heads
    gated = 1.5 if m.ffn_kind in (FfnKind.SWIGLU, FfnKind.GEGLU) else 1.0
    routed = m.top_k if m.experts > 1 else 1
    attention = (1 + groups / m.heads + s / h) * query / h
    mlp = m.ffn_hidden / h * routed * gated
    logits = m.vocab / (2 * m.layers * h)
    return 12.0 * batch * s * m.layers * h * h * (attention + mlp + logits)


def _maxtext_flops(m: Model, seq_len: int, batch: int) -> float:
    """MaxText's ``calculate_training_tflops`` (MaxText/train.py at 9bc243c95, 2023-11):
    ``6 N`` per token for all ``N`` parameters (the tied embedding counted once) plus
    ``12 heads l d_head s^2`` per sequence for attention, the full ``s x s`` scores."""
    attention = 12.0 * m.heads * m.layers * m.head_dim * seq_len * seq_len
    return batch * (6.0 * m.parameters * seq_len + attention)


def _maxtext_causal_flops(m: Model, seq_len: int, batch: int) -> float:
    """MaxText's count from 2023-11-29 on (MaxText/train.py at 76bd53b0f, l.77-88): as
    ``maxtext`` with the attention term halved for the causal mask."""
    attention = 6.0 * m.heads * m.layers * m.head_dim * seq_len * seq_len
    return batch * (6.0 * m.parameters * seq_len + attention)


#: How a publication counted the FLOPs of one iteration (model, sequence, global batch).
FLOP_CONVENTIONS: Final[Mapping[str, Callable[[Model, int, int], float]]] = MappingProxyType(
    {
        "sc21": _sc21_flops,
        "megatron-core": _megatron_core_flops,
        "maxtext": _maxtext_flops,
        "maxtext-causal": _maxtext_causal_flops,
    }
)
#: Published metrics and their units: the iteration time, model FLOP/s per GPU by the run's
#: FLOP convention, MFU (that rate over ``peak_flops_per_s``), tokens per second per GPU, and
#: the device-hours of a whole run of ``train_tokens`` tokens.
METRICS: Final = MappingProxyType(
    {
        "iteration_s": "s",
        "flops_per_s_per_gpu": "FLOP/s",
        "mfu": "%",
        "tokens_per_s_per_gpu": "tokens/s",
        "device_hours": "device-hours",
    }
)


@dataclass(frozen=True, slots=True)
class RunSource:
    """A publication: its title, address and date (``YYYY-MM``)."""

    key: str
    title: str
    url: str
    date: str


@dataclass(frozen=True, slots=True)
class RunSystem:
    """The machine a run used: a preset (its HBM capacity, HBM bandwidth, board power limit
    and clock replaced when ``hbm_gib``, ``hbm_bandwidth_bytes_per_s``, ``power_limit_w``,
    ``clock_hz`` are given: a part of the preset's die built or run otherwise), GPUs per node
    and the links of one GPU (bytes/s per direction, as :class:`arch_space.Cluster`)."""

    key: str
    description: str
    arch: str
    devices_per_node: int
    intra_node_bandwidth_bytes_per_s: float
    inter_node_bandwidth_bytes_per_s: float
    hbm_gib: float | None
    source: str
    hbm_bandwidth_bytes_per_s: float | None = None
    power_limit_w: float | None = None
    clock_hz: float | None = None


@dataclass(frozen=True, slots=True)
class PublishedRun:
    """One published training run and the figure it reported (see the module docstring).

    ``assumed`` names what the source leaves open and the registry chose (a strategy key, the
    FLOP convention, ...); ``optimizer_state`` names the parts of the training state that
    differ from Adam's in mixed precision (``master=fp32,moments=bf16,grads=fp32``, as
    ``phaze evaluate --optimizer-state``); ``suite`` groups the rows another command reads
    (``phaze validate megatron``); ``framework_settings`` the run's switches of its stack's
    profile (``ep_overlap=true,moe_dispatcher=flex``, as ``--framework NAME:key=value``);
    ``train_tokens`` the tokens of a whole run a ``device_hours`` figure covers."""

    id: str
    label: str
    source: RunSource
    where: str
    system: RunSystem
    gpus: int
    framework: str
    framework_version: str
    model: str
    seq_len: int
    global_batch: int
    strategy: str
    metric: str
    measured: float
    fitted: bool
    assumed: tuple[str, ...] = ()
    flops: str | None = None
    peak_flops_per_s: float | None = None
    state_bytes: int | None = None
    optimizer_state: str | None = None
    suite: str | None = None
    framework_settings: str = ""
    train_tokens: float | None = None
    notes: str = ""

    @property
    def arch(self) -> str:
        return self.system.arch

    @property
    def precision(self) -> str:
        """The precision recipe the run trained in (its strategy's, bf16 unless given)."""
        return parse_strategy(self.strategy).precision

    @property
    def citation(self) -> str:
        """The source in one line: title, where in it, address."""
        return f"{self.source.title} ({self.source.date}), {self.where}: {self.source.url}"


@dataclass(frozen=True, slots=True)
class Registry:
    """The runs in file order, and the profile each profile-less stack is evaluated with."""

    runs: tuple[PublishedRun, ...]
    fallbacks: Mapping[str, tuple[str, str]]
    path: str

    def profile_for(self, framework: str) -> tuple[str, str]:
        """The framework profile a run of ``framework`` is evaluated with, and why that one
        (empty when the stack has a profile of its own)."""
        if framework in framework_names():
            return framework, ""
        return self.fallbacks[framework]

    def run_profile(self, run: PublishedRun) -> tuple[str, str]:
        """:meth:`profile_for` the run's stack, with the run's ``framework_settings``."""
        profile, note = self.profile_for(run.framework)
        return (f"{profile}:{run.framework_settings}" if run.framework_settings else profile), note


def flops_per_iteration(convention: str, model: str, seq_len: int, global_batch: int) -> float:
    """FLOPs of one iteration of ``model`` as the ``convention`` counts them."""
    return FLOP_CONVENTIONS[convention](resolve_model(model), seq_len, global_batch)


def measured_iteration_s(run: PublishedRun) -> float:
    """The iteration time the published figure implies (the publication's FLOP count for a
    FLOP rate, its peak for an MFU, the batch's tokens for a token rate)."""
    if run.metric == "iteration_s":
        return run.measured
    if run.metric == "device_hours":
        return run.measured * 3600.0 / (run.gpus * _iterations(run))
    return metric_from_iteration_s(run, run.measured)


def _iterations(run: PublishedRun) -> float:
    """Iterations of a whole run: its tokens over one iteration's."""
    return (run.train_tokens or math.nan) / (run.global_batch * run.seq_len)


def metric_from_iteration_s(run: PublishedRun, value: float) -> float:
    """The publication's metric for an iteration of ``value`` seconds; the map is its own
    inverse for the rate metrics (metric = work / time, time = work / metric)."""
    if run.metric == "iteration_s":
        return value
    if run.metric == "device_hours":
        return value * run.gpus * _iterations(run) / 3600.0
    if run.metric == "tokens_per_s_per_gpu":
        return run.global_batch * run.seq_len / (value * run.gpus)
    work = flops_per_iteration(run.flops or "", run.model, run.seq_len, run.global_batch) / run.gpus
    if run.metric == "mfu":
        return work / (value * (run.peak_flops_per_s or math.nan))
    return work / value


def default_registry() -> Registry:
    """The shipped registry."""
    text = resources.files("phaze").joinpath("data", DEFAULT_REGISTRY).read_text("utf-8")
    return _parse(text, f"phaze/data/{DEFAULT_REGISTRY}")


def load_registry(path: str | Path | None = None) -> Registry:
    """The registry at ``path`` (default: the shipped one); every problem in one ConfigError."""
    if path is None:
        return default_registry()
    return _parse(read_text(path, "registry"), str(path))


# --- parsing: every problem collected, named by table and key ---------------------------------

_SOURCE_KEYS: Final = {"title": str, "url": str, "date": str}
_SYSTEM_KEYS: Final = {
    "description": str,
    "arch": str,
    "devices_per_node": int,
    "intra_node_bandwidth_bytes_per_s": float,
    "inter_node_bandwidth_bytes_per_s": float,
    "hbm_gib": float,
    "hbm_bandwidth_bytes_per_s": float,
    "power_limit_w": float,
    "clock_hz": float,
    "source": str,
}
_RUN_KEYS: Final = {
    "id": str,
    "label": str,
    "source": str,
    "where": str,
    "system": str,
    "gpus": int,
    "framework": str,
    "framework_version": str,
    "model": str,
    "seq_len": int,
    "global_batch": int,
    "strategy": str,
    "metric": str,
    "measured": float,
    "fitted": bool,
    "assumed": list,
    "flops": str,
    "peak_flops_per_s": float,
    "state_bytes": int,
    "optimizer_state": str,
    "suite": str,
    "framework_settings": str,
    "train_tokens": float,
    "notes": str,
}
_OPTIONAL: Final = {
    "hbm_gib",
    "hbm_bandwidth_bytes_per_s",
    "power_limit_w",
    "clock_hz",
    "assumed",
    "flops",
    "peak_flops_per_s",
    "state_bytes",
    "optimizer_state",
    "suite",
    "framework_settings",
    "train_tokens",
    "notes",
}
_FALLBACK_KEYS: Final = {"profile": str, "reason": str}


def _fields(
    table: Any, schema: Mapping[str, type], where: str, problems: list[str]
) -> dict[str, Any] | None:
    """``table``'s values checked against ``schema`` (unknown keys named with the nearest
    known one, missing keys, wrong types), or None when it has a problem."""
    if not isinstance(table, dict):
        problems.append(f"{where}: must be a table")
        return None
    start = len(problems)
    for key in table:
        if key not in schema:
            close = difflib.get_close_matches(key, list(schema), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            problems.append(f"{where}: unknown key {key!r}{hint}")
    out: dict[str, Any] = {}
    for key, kind in schema.items():
        if key not in table:
            if key not in _OPTIONAL:
                problems.append(f"{where}: {key} is missing")
            continue
        value = table[key]
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            problems.append(f"{where}: {key} = {value!r} must be of type {kind.__name__}")
            continue
        out[key] = value
    return out if len(problems) == start else None


def _positive(values: Mapping[str, Any], keys: tuple[str, ...], where: str, problems: list[str]):
    for key in keys:
        if key in values and not values[key] > 0:
            problems.append(f"{where}: {key} = {values[key]!r} must be > 0")


def _system(key: str, table: Any, problems: list[str]) -> RunSystem | None:
    where = f"[systems.{key}]"
    v = _fields(table, _SYSTEM_KEYS, where, problems)
    if v is None:
        return None
    _positive(v, tuple(k for k, t in _SYSTEM_KEYS.items() if t in (int, float)), where, problems)
    optional = {
        k: v.pop(k, None)
        for k in ("hbm_gib", "hbm_bandwidth_bytes_per_s", "power_limit_w", "clock_hz")
    }
    return RunSystem(key=key, **optional, **v)


def _layout_problems(v: Mapping[str, Any], where: str) -> list[str]:
    """A complete strategy whose devices are the run's GPUs."""
    try:
        s = parse_strategy(v["strategy"])
    except ConfigError as e:
        return [f"{where}: {e}"]
    if s.open:
        return [f"{where}: strategy leaves {', '.join(sorted(s.open))} open; give every key"]
    used = s.devices
    if used != v["gpus"]:
        return [f"{where}: strategy uses t*p*d*cp = {fmt_noun(used, 'device')}, gpus = {v['gpus']}"]
    return []


def _metric_problems(v: Mapping[str, Any], where: str) -> list[str]:
    metric, flops = v["metric"], v.get("flops")
    if metric not in METRICS:
        return [f"{where}: metric = {metric!r} must be one of {', '.join(METRICS)}"]
    problems = []
    needs_flops = metric in ("flops_per_s_per_gpu", "mfu")
    if needs_flops and flops not in FLOP_CONVENTIONS:
        problems.append(
            f"{where}: flops = {flops!r} must be one of {', '.join(FLOP_CONVENTIONS)} "
            f"for metric {metric}"
        )
    if not needs_flops and flops is not None:
        problems.append(f"{where}: flops is only read for a FLOP-rate metric, not {metric}")
    if (metric == "mfu") != ("peak_flops_per_s" in v):
        problems.append(f"{where}: peak_flops_per_s goes with metric mfu, and only with it")
    if (metric == "device_hours") != ("train_tokens" in v):
        problems.append(f"{where}: train_tokens goes with metric device_hours, and only with it")
    return problems


def _settings_problems(v: Mapping[str, Any], where: str) -> list[str]:
    """The run's profile switches name keys and values its stack's profile takes."""
    settings, framework = v.get("framework_settings"), v["framework"]
    if not settings or framework not in framework_names():
        return [] if not settings else [f"{where}: framework_settings need a profile of its own"]
    try:
        framework_profile(f"{framework}:{settings}")
    except ConfigError as e:
        return [f"{where}: framework_settings: {e}"]
    return []


def _run(
    i: int,
    table: Any,
    sources: Mapping[str, RunSource],
    systems: Mapping[str, RunSystem],
    fallbacks: Mapping[str, tuple[str, str]],
    problems: list[str],
) -> PublishedRun | None:
    where = f"[[run]] {i + 1}" + (
        f" ({table['id']})" if isinstance(table, dict) and "id" in table else ""
    )
    v = _fields(table, _RUN_KEYS, where, problems)
    if v is None:
        return None
    found = [
        p
        for p in (
            None if v["source"] in sources else f"source {v['source']!r} is not in [sources]",
            None if v["system"] in systems else f"system {v['system']!r} is not in [systems]",
            None
            if v["model"].partition(":")[0] in model_names()
            else f"model {v['model']!r} is not in the catalog",
            None
            if v["framework"] in framework_names() or v["framework"] in fallbacks
            else f"framework {v['framework']!r} has no profile and no [fallback_profiles] entry",
        )
        if p is not None
    ]
    problems.extend(f"{where}: {p}" for p in found)
    bad = _layout_problems(v, where) + _metric_problems(v, where) + _settings_problems(v, where)
    if "optimizer_state" in v:
        try:  # the parts are checked here; the weights' bytes come from the recipe later
            parse_optimizer_state(v["optimizer_state"], OptimizerState(weight_bytes=2))
        except ConfigError as e:
            bad.append(f"{where}: {e}")
    if not all(isinstance(a, str) for a in v.get("assumed", [])):
        bad.append(f"{where}: assumed must list strings")
    positive = ("gpus", "seq_len", "global_batch", "measured", "peak_flops_per_s", "train_tokens")
    _positive(v, positive, where, bad)
    problems.extend(bad)
    if found or bad:
        return None
    return PublishedRun(
        **{k: v[k] for k in v if k not in ("source", "system", "assumed")},
        source=sources[v["source"]],
        system=systems[v["system"]],
        assumed=tuple(v.get("assumed", ())),
    )


def _parse(text: str, name: str) -> Registry:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"registry {name}: not TOML ({e})") from None
    problems: list[str] = []
    extra = set(data) - {"sources", "systems", "fallback_profiles", "run"}
    problems += [
        f"unknown table [{k}] (known: sources, systems, fallback_profiles, run)"
        for k in sorted(extra)
    ]
    for key, kind in (
        ("sources", dict),
        ("systems", dict),
        ("fallback_profiles", dict),
        ("run", list),
    ):
        if not isinstance(data.get(key, kind()), kind):
            problems.append(f"{key} must be {'tables' if kind is dict else 'an array of tables'}")
            data[key] = kind()
    sources = {}
    for key, table in data.get("sources", {}).items():
        v = _fields(table, _SOURCE_KEYS, f"[sources.{key}]", problems)
        if v is not None:
            sources[key] = RunSource(key=key, **v)
    systems = {
        key: s
        for key, table in data.get("systems", {}).items()
        if (s := _system(key, table, problems)) is not None
    }
    fallbacks = {}
    for key, table in data.get("fallback_profiles", {}).items():
        v = _fields(table, _FALLBACK_KEYS, f"[fallback_profiles.{key}]", problems)
        if v is not None and v["profile"] not in framework_names():
            problems.append(
                f"[fallback_profiles.{key}]: profile {v['profile']!r} is not a framework "
                f"profile (known: {', '.join(framework_names())})"
            )
        elif v is not None:
            fallbacks[key] = (v["profile"], v["reason"])
    raw = data.get("run", [])
    runs = [
        r for i, t in enumerate(raw) if (r := _run(i, t, sources, systems, fallbacks, problems))
    ]
    ids = [r.id for r in runs]
    problems += [
        f"run id {x!r} is given more than once"
        for x in sorted({x for x in ids if ids.count(x) > 1})
    ]
    if not raw:
        problems.append("no [[run]] tables")
    if problems:
        raise ConfigError(f"registry {name}: " + "; ".join(problems))
    return Registry(runs=tuple(runs), fallbacks=MappingProxyType(fallbacks), path=name)
