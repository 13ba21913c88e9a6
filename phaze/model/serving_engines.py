"""Serving engines as named profiles (``phaze/data/serving_engines.toml``, with sources):
vLLM, TensorRT-LLM, SGLang and gpt-fast, each with its version, the gaps between the kernels
of its steps (CUDA graphs or launched kernels), its tensor-parallel all-reduce, its
scheduler's rules (batching, sequences in flight, chunked prefill and its budgets, KV
admission, preemption) and its measured decode bandwidth at small batches per preset.

A :class:`~phaze.model.serving.ServeContext` naming an engine takes its scheduler's rules as its
defaults, and :func:`phaze.model.serving.pass_cost` prices each pass under it
(:meth:`EngineProfile.device`, :meth:`EngineProfile.design`, :meth:`EngineProfile.kernel_gap_s`).
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from types import MappingProxyType
from typing import Any, Final

from arch_space import Accelerator
from arch_space.perf import default_settings
from arch_space.perf.device import DeviceProfile, custom_all_reduce_curve, device_profile
from phaze_common.errors import ConfigError, unknown_name
from workloads import get_model
from workloads.serving import KV_ADMISSIONS, PREEMPTIONS, weight_recipe
from workloads.serving_costs import weight_bytes_per_device

__all__ = [
    "ALL_REDUCES",
    "SmallBatch",
    "EngineProfile",
    "engine_profiles",
    "engine_profile",
    "engine_names",
]

_FILE = "serving_engines.toml"
#: An engine's tensor-parallel all-reduce inside a node (see the data file's header).
ALL_REDUCES: Final = ("custom", "nccl", "one-shot")
_BATCHING: Final = ("continuous", "static")


@dataclass(frozen=True, slots=True)
class SmallBatch:
    """An engine's measured decode of ``model`` at most ``sequences`` sequences on a preset,
    in tokens per second by weight format (bf16 always)."""

    sequences: int
    model: str
    tokens_per_s: Mapping[str, float]
    source: str

    def bandwidth_share(self, weight_format: str, hbm_bandwidth_bytes_per_s: float) -> float:
        """The share of the datasheet HBM bandwidth the engine streams weights at in
        ``weight_format``: the measured model's weight bytes (as the op model counts them)
        times its tokens per second (bf16's for a format not measured)."""
        fmt = weight_format if weight_format in self.tokens_per_s else "bf16"
        model = get_model(self.model)
        read = weight_bytes_per_device(model, 1, weight_format=fmt) * self.tokens_per_s[fmt]
        return read / hbm_bandwidth_bytes_per_s


@dataclass(frozen=True, slots=True)
class EngineProfile:
    """One engine (see the module docstring); ``kernel_gaps_s`` is the wait before each
    kernel of a step with and without CUDA graphs (the measured figures); ``step_cpu_s``
    the host time each scheduled step adds to the GPU's (0: the engine overlaps it, or it
    is not measured) and ``scheduler_steps`` the decode steps run per scheduling (vLLM's
    multi-step scheduling), both used by the simulation under load."""

    name: str
    label: str
    version: str
    source: str
    cuda_graphs: bool
    all_reduce: str
    batching: str
    max_num_seqs: int
    chunked_prefill: bool
    chunk_tokens: tuple[int, ...]
    token_budget: int | None
    kv_admission: str
    preemption: str
    batch_sizes: tuple[int, ...]
    small_batch: Mapping[str, SmallBatch]
    one_shot: Mapping[str, Mapping[str, Any]]
    kernel_gaps_s: tuple[float, float]
    step_cpu_s: float = 0.0
    scheduler_steps: int = 1

    @property
    def kernel_gap_s(self) -> float:
        """The wait before each kernel of a step: CUDA-graph replay or a launched kernel."""
        graph, eager = self.kernel_gaps_s
        return graph if self.cuda_graphs else eager

    @property
    def batches(self) -> tuple[int, ...]:
        """The batch sizes a serving search tries: the engine's CUDA-graph batch sizes where
        it has a fixed set, else powers of two, up to ``max_num_seqs``."""
        limit = self.max_num_seqs
        sizes = self.batch_sizes or tuple(2**i for i in range(limit.bit_length()))
        return tuple(b for b in sizes if b <= limit)

    @property
    def chunks(self) -> tuple[int | None, ...]:
        """The prefill budgets a serving search tries (None: whole prompts)."""
        return (None, *self.chunk_tokens) if self.chunked_prefill else (None,)

    def device(self, acc: Accelerator) -> DeviceProfile:
        """``acc``'s sustained rates under this engine: one kernel at a time, the
        tensor-parallel all-reduce the engine runs (its own kernel, NCCL, or the one-shot
        kernel's measured latencies on this preset)."""
        profile = device_profile(acc).alone()
        if self.all_reduce == "nccl":
            return profile
        if self.all_reduce == "one-shot":
            table = self.one_shot.get(acc.profile_name)
            if table is None:
                return profile
            curve = custom_all_reduce_curve(table, f"{_FILE} {self.name}.one_shot")
            profile = dataclasses.replace(profile, custom_all_reduce=curve)
        return profile.for_serving()

    def design(
        self, acc: Accelerator, decode_sequences: int | None, weight_format: str
    ) -> Accelerator:
        """``acc`` as a pass of this engine sees its HBM: a decode step of at most the
        measured small batch streams at the engine's measured share of the datasheet
        bandwidth (times the weight format's share), in place of the op model's generic
        sustained share; every other pass, and a preset without a measurement, as is."""
        small = self.small_batch.get(acc.profile_name)
        if small is None or decode_sequences is None or decode_sequences > small.sequences:
            return acc
        peak = acc.hbm_bandwidth_bytes_per_s
        bw = peak * small.bandwidth_share(weight_format, peak) / default_settings().hbm_efficiency
        return dataclasses.replace(acc, hbm_bandwidth_bytes_per_s=bw)


def _kernel_gaps() -> tuple[float, float]:
    """(graph, eager) seconds per kernel: the figures of
    ``arch_space/data/measured_launch_overhead.toml`` that give both."""
    text = resources.files("arch_space").joinpath("data", "measured_launch_overhead.toml")
    doc = tomllib.loads(text.read_text("utf-8"))
    for fig in doc.get("figure", ()):
        if "graph_per_kernel_s" in fig and "eager_per_kernel_s" in fig:
            return float(fig["graph_per_kernel_s"]), float(fig["eager_per_kernel_s"])
    raise ConfigError(
        "measured_launch_overhead.toml: no figure gives graph_per_kernel_s and eager_per_kernel_s"
    )


def _small_batch(name: str, data: Mapping[str, Any], sources: Mapping[str, str]) -> SmallBatch:
    rates = MappingProxyType({k: float(v) for k, v in data["tokens_per_s"].items()})
    small = SmallBatch(int(data["sequences"]), data["model"], rates, data["source"])
    problems = []
    if small.source not in sources:
        problems.append(f"source = {small.source!r} is not a [sources] key")
    if small.sequences < 1:
        problems.append(f"sequences = {small.sequences} must be at least 1")
    if "bf16" not in rates:
        problems.append("tokens_per_s must give bf16")
    problems += [
        f"tokens_per_s.{k} = {v!r} must be positive" for k, v in rates.items() if not v > 0
    ]
    try:
        get_model(small.model)
        for fmt in rates:
            weight_recipe(fmt)
    except ConfigError as e:
        problems.append(str(e))
    if problems:
        raise ConfigError(f"{_FILE}: {name}: " + "; ".join(problems))
    return small


def _profile(name: str, data: Mapping[str, Any], sources: Mapping[str, str], gaps) -> EngineProfile:
    sched = data["scheduler"]
    profile = EngineProfile(
        name=name,
        label=data["label"],
        version=data["version"],
        source=data["source"],
        cuda_graphs=data["cuda_graphs"],
        all_reduce=data["all_reduce"],
        batching=sched["batching"],
        max_num_seqs=sched["max_num_seqs"],
        chunked_prefill=sched["chunked_prefill"],
        chunk_tokens=tuple(sched["chunk_tokens"]),
        token_budget=sched.get("token_budget"),
        kv_admission=sched["kv_admission"],
        preemption=sched["preemption"],
        batch_sizes=tuple(sched.get("batch_sizes", ())),
        small_batch=MappingProxyType(
            {
                k: _small_batch(f"{name}.small_batch.{k}", v, sources)
                for k, v in data.get("small_batch", {}).items()
            }
        ),
        one_shot=MappingProxyType(dict(data.get("one_shot", {}))),
        kernel_gaps_s=gaps,
        step_cpu_s=sched.get("step_cpu_s", 0.0),
        scheduler_steps=sched.get("scheduler_steps", 1),
    )
    choices = (
        ("source", profile.source, tuple(sources)),
        ("all_reduce", profile.all_reduce, ALL_REDUCES),
        ("scheduler.batching", profile.batching, _BATCHING),
        ("scheduler.kv_admission", profile.kv_admission, KV_ADMISSIONS),
        ("scheduler.preemption", profile.preemption, PREEMPTIONS),
    )
    problems = [
        f"{k} = {v!r} must be one of {', '.join(ok)}" for k, v, ok in choices if v not in ok
    ]
    if not isinstance(profile.cuda_graphs, bool):
        problems.append(f"cuda_graphs = {profile.cuda_graphs!r} must be true or false")
    if not (
        isinstance(profile.step_cpu_s, int | float)
        and not isinstance(profile.step_cpu_s, bool)
        and 0 <= profile.step_cpu_s < 1
    ):
        problems.append(f"scheduler.step_cpu_s = {profile.step_cpu_s!r} must be seconds in [0, 1)")
    if profile.step_cpu_s and sched.get("step_cpu_source") not in sources:
        problems.append(
            f"scheduler.step_cpu_source = {sched.get('step_cpu_source')!r} is not a [sources] key"
        )
    if not isinstance(profile.chunked_prefill, bool):
        problems.append(
            f"scheduler.chunked_prefill = {profile.chunked_prefill!r} must be true or false"
        )
    for key, v in (
        ("scheduler.max_num_seqs", profile.max_num_seqs),
        ("scheduler.scheduler_steps", profile.scheduler_steps),
        *(("scheduler.chunk_tokens", c) for c in profile.chunk_tokens),
        *(("scheduler.batch_sizes", b) for b in profile.batch_sizes),
        *(
            ()
            if profile.token_budget is None
            else (("scheduler.token_budget", profile.token_budget),)
        ),
    ):
        if not (isinstance(v, int) and not isinstance(v, bool) and v > 0):
            problems.append(f"{key} = {v!r} must be a positive integer")
    for preset_name, table in profile.one_shot.items():
        try:
            custom_all_reduce_curve(table, f"{name}.one_shot.{preset_name}")
        except ConfigError as e:
            problems.append(str(e))
        if table.get("source") not in sources:
            problems.append(
                f"one_shot.{preset_name}.source = {table.get('source')!r} is not a [sources] key"
            )
    if problems:
        raise ConfigError(f"{_FILE}: engine {name}: " + "; ".join(problems))
    return profile


@cache
def engine_profiles() -> Mapping[str, EngineProfile]:
    """The shipped profiles by name; a damaged file is one ConfigError naming the problem."""
    text = resources.files("phaze").joinpath("data", _FILE).read_text("utf-8")
    try:
        doc = tomllib.loads(text)
        sources = doc["sources"]
        gaps = _kernel_gaps()
        profiles = {n: _profile(n, d, sources, gaps) for n, d in doc["engine"].items()}
    except (tomllib.TOMLDecodeError, KeyError, TypeError, ValueError) as e:
        raise ConfigError(f"{_FILE}: unreadable ({type(e).__name__}: {e})") from None
    return MappingProxyType(profiles)


def engine_names() -> tuple[str, ...]:
    return tuple(engine_profiles())


def engine_profile(name: str) -> EngineProfile:
    """The profile ``name`` (a ConfigError naming the engines otherwise)."""
    profiles = engine_profiles()
    if name not in profiles:
        raise unknown_name("serving engine", name, profiles)
    return profiles[name]
