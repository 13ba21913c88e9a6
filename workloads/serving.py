"""Inference serving workloads: passes, request batches, the KV cache, FLOPs and bytes
(docs/serving.md).

A serving engine runs a model forward in *passes* over a batch of sequences
(:class:`ServingPass`): a prefill computes a prompt's tokens (in one pass, or in chunks after
the ones already cached), a decode step one new token per sequence. Each pass writes its
tokens' keys and values into the KV cache and reads every earlier token's from it. The cache
is paged (Kwon et al., "Efficient Memory Management for Large Language Model Serving with
PagedAttention", SOSP 2023): a sequence holds whole pages of ``page_tokens`` tokens, and a
device holds as many pages as its memory leaves beside the weights and the pass's transient
workspace (:func:`workloads.serving_costs.kv_cache_capacity`). No backward pass, no optimizer, no stashed
activations.

A :class:`RequestBatch` is a batch of requests given by their input and output lengths
(ISL, OSL), one pair or a weighted mix; it gives the prefill passes and the decode step at
the mean context a decode step attends.

A stage's weights, the KV-cache capacity and a pass's FLOPs and bytes are
:mod:`workloads.serving_costs`'. Closed forms are independent of the op graphs
(:mod:`workloads.serving_ops`), which the tests check against them.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from types import MappingProxyType
from typing import Any, Final

from phaze_common.errors import ConfigError, unknown_name
from phaze_common.limits import MAX_GLOBAL_BATCH, MAX_SEQ_LEN, over_limit
from workloads.model import Model
from workloads.precision import Recipe, recipe

__all__ = [
    "KV_ADMISSIONS",
    "PREEMPTIONS",
    "ServingSettings",
    "serving_settings",
    "ServingPass",
    "RequestBatch",
    "weight_recipe",
    "kv_cache_elements_per_token",
    "kv_cache_bytes_per_token",
    "kv_cache_bytes_per_sequence",
]

_DATA_FILE = "serving.toml"
#: How a scheduler reserves a request's KV cache: pages as its tokens arrive, or its whole
#: prompt and output when it is admitted (``[scheduler] kv_admission`` of serving.toml).
KV_ADMISSIONS: Final = ("on-demand", "whole-request")
#: What a scheduler does with a running request whose next page does not fit: drop its cache
#: and prefill its prompt and generated tokens again (vLLM's recompute preemption; swapping
#: the cache to host memory is not modelled).
PREEMPTIONS: Final = ("recompute",)


@dataclass(frozen=True, slots=True)
class ServingSettings:
    """The serving engine's constants (``workloads/data/serving.toml``, with sources):
    ``page_tokens`` per KV-cache page, the ``memory_fraction`` of device memory the engine
    uses, bytes per cache element by format, the framework overlap profile of a pass,
    whether the engine all-reduces with its own kernel, the bytes of one logit as the sampler
    reads it; the scheduler's limits a serving search explores (sequences in flight, the
    token budgets of chunked prefill, a prefill pass's tokens), how it reserves a request's
    KV cache (one of :data:`KV_ADMISSIONS`) and the output tokens of the serving workload a
    point's tCDP is for."""

    page_tokens: int
    memory_fraction: float
    static_memory_fraction: float
    format_bytes: Mapping[str, int]
    weight_recipes: Mapping[str, str]
    framework: str
    custom_all_reduce: bool
    logit_bytes: int
    max_num_seqs: int
    chunk_tokens: tuple[int, ...]
    max_batched_tokens: int
    kv_admission: str
    tokens_to_serve: float


@cache
def serving_settings() -> ServingSettings:
    """The packaged settings; a damaged file is one ConfigError naming what is wrong."""
    text = resources.files("workloads").joinpath("data", _DATA_FILE).read_text("utf-8")
    try:
        data = tomllib.loads(text)
        kv, engine, sched = data["kv_cache"], data["engine"], data["scheduler"]
        settings = ServingSettings(
            page_tokens=kv["page_tokens"],
            memory_fraction=kv["memory_fraction"],
            static_memory_fraction=kv["static_memory_fraction"],
            format_bytes=MappingProxyType(dict(kv["format_bytes"])),
            weight_recipes=MappingProxyType(dict(data["weights"])),
            framework=engine["framework"],
            custom_all_reduce=engine["custom_all_reduce"],
            logit_bytes=engine["logit_bytes"],
            max_num_seqs=sched["max_num_seqs"],
            chunk_tokens=tuple(sched["chunk_tokens"]),
            max_batched_tokens=sched["max_batched_tokens"],
            kv_admission=sched["kv_admission"],
            tokens_to_serve=float(data["workload"]["tokens_to_serve"]),
        )
    except (tomllib.TOMLDecodeError, KeyError, TypeError) as e:
        raise ConfigError(f"{_DATA_FILE}: unreadable ({type(e).__name__}: {e})") from None
    problems = [
        f"{name} = {value!r} must be a positive integer"
        for name, value in (
            ("page_tokens", settings.page_tokens),
            ("logit_bytes", settings.logit_bytes),
            ("max_num_seqs", settings.max_num_seqs),
            ("max_batched_tokens", settings.max_batched_tokens),
            *((f"chunk_tokens[{i}]", v) for i, v in enumerate(settings.chunk_tokens)),
            *((f"format_bytes.{k}", v) for k, v in settings.format_bytes.items()),
        )
        if not _positive_int(value)
    ]
    for fmt, name in settings.weight_recipes.items():
        try:
            recipe(name)
        except ConfigError as e:
            problems.append(f"weights.{fmt}: {e}")
    if not isinstance(settings.custom_all_reduce, bool):
        problems.append(f"custom_all_reduce = {settings.custom_all_reduce!r} must be true or false")
    if settings.kv_admission not in KV_ADMISSIONS:
        problems.append(
            f"kv_admission = {settings.kv_admission!r} must be one of {', '.join(KV_ADMISSIONS)}"
        )
    if not settings.tokens_to_serve >= 1:
        problems.append(f"tokens_to_serve = {settings.tokens_to_serve!r} must be at least 1")
    for name in ("memory_fraction", "static_memory_fraction"):
        if not 0 < getattr(settings, name) <= 1:
            problems.append(f"{name} = {getattr(settings, name)!r} must be in (0, 1]")
    if problems:
        raise ConfigError(f"{_DATA_FILE}: " + "; ".join(problems))
    return settings


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _format_bytes(kv_format: str) -> int:
    formats = serving_settings().format_bytes
    if kv_format not in formats:
        raise unknown_name("KV-cache format", str(kv_format), formats)
    return formats[kv_format]


def weight_recipe(weight_format: str) -> Recipe:
    """The precision recipe the blocks of a model stored in ``weight_format`` run
    (``[weights]`` of ``workloads/data/serving.toml``; a ConfigError naming the formats
    otherwise)."""
    recipes = serving_settings().weight_recipes
    if weight_format not in recipes:
        raise unknown_name("weight format", str(weight_format), recipes)
    return recipe(recipes[weight_format])


def _format_problems(kv_format: str, weight_format: str) -> list[str]:
    problems = []
    for field, check, value in (
        ("kv_format", _format_bytes, kv_format),
        ("weight_format", weight_recipe, weight_format),
    ):
        try:
            check(value)
        except ConfigError as e:
            problems.append(f"{field}: {e}")
    return problems


@dataclass(frozen=True, slots=True)
class ServingPass:
    """One forward pass of a serving engine: ``batch`` sequences each compute ``new_tokens``
    tokens after ``cached_tokens`` already in their KV cache.

    A prefill computes a prompt (``cached_tokens = 0``) or a chunk of one (chunked prefill);
    a decode step computes one token per sequence (``new_tokens = 1``). ``samples``: the pass
    ends each sequence's prompt or is a decode step, so its head computes the last token's
    logits and samples a token; a chunk that does not end its prompt does not.
    ``kv_format`` is the cache's number format and ``weight_format`` the blocks' weights'
    (``workloads/data/serving.toml``), ``precision_bytes`` the bytes per activation element
    and per weight not in a block (2 = bf16).
    """

    batch: int
    new_tokens: int
    cached_tokens: int = 0
    samples: bool = True
    kv_format: str = "bf16"
    precision_bytes: int = 2
    weight_format: str = "bf16"

    def __post_init__(self) -> None:
        problems = [
            f"{f} = {getattr(self, f)!r} must be a positive integer"
            for f in ("batch", "new_tokens", "precision_bytes")
            if not _positive_int(getattr(self, f))
        ]
        cached = self.cached_tokens
        if not isinstance(cached, int) or isinstance(cached, bool) or cached < 0:
            problems.append(f"cached_tokens = {cached!r} must be a non-negative integer")
        elif not problems:
            problems += [
                msg
                for msg in (
                    over_limit("batch", self.batch, MAX_GLOBAL_BATCH),
                    over_limit("context tokens", self.context_tokens, MAX_SEQ_LEN),
                )
                if msg
            ]
        if not isinstance(self.samples, bool):
            problems.append(f"samples = {self.samples!r} must be true or false")
        problems += _format_problems(self.kv_format, self.weight_format)
        if problems:
            raise ConfigError("serving pass: " + "; ".join(problems))

    @classmethod
    def prefill(cls, batch: int, tokens: int, cached: int = 0, **kw: Any) -> ServingPass:
        """A prefill of ``tokens`` prompt tokens per sequence after ``cached`` ones."""
        return cls(batch, tokens, cached, **kw)

    @classmethod
    def decode(cls, batch: int, context: int, **kw: Any) -> ServingPass:
        """A decode step whose new token attends ``context`` tokens (itself included)."""
        return cls(batch, 1, context - 1, **kw)

    @property
    def is_decode(self) -> bool:
        return self.new_tokens == 1

    @property
    def tokens(self) -> int:
        """Tokens the pass computes, over the batch."""
        return self.batch * self.new_tokens

    @property
    def context_tokens(self) -> int:
        """Keys the last new token of a sequence attends: cached and new."""
        return self.cached_tokens + self.new_tokens

    @property
    def kv_bytes(self) -> int:
        """Bytes per cached element."""
        return _format_bytes(self.kv_format)


@dataclass(frozen=True, slots=True)
class RequestBatch:
    """``batch`` requests in flight, their (input tokens, output tokens, weight) drawn from
    ``lengths``: one pair, or a length distribution whose weights are relative frequencies.

    The first output token comes from the prefill, each further one from a decode step; the
    step producing token ``j + 1`` attends the ``input + j`` tokens before it.
    """

    lengths: tuple[tuple[int, int, float], ...]
    batch: int = 1
    kv_format: str = "bf16"
    precision_bytes: int = 2
    weight_format: str = "bf16"

    def __post_init__(self) -> None:
        problems = []
        lengths = self.lengths
        if not isinstance(lengths, Sequence) or not lengths:
            problems.append(f"lengths = {lengths!r} must be a non-empty list of (ISL, OSL, weight)")
            lengths = ()
        for i, entry in enumerate(lengths):
            if not isinstance(entry, Sequence) or len(entry) != 3:
                problems.append(f"lengths[{i}] = {entry!r} must be (input, output, weight)")
                continue
            isl, osl, weight = entry
            for name, value in (("input_tokens", isl), ("output_tokens", osl)):
                if not _positive_int(value):
                    problems.append(f"lengths[{i}] {name} = {value!r} must be a positive integer")
            if _positive_int(isl) and _positive_int(osl):
                msg = over_limit(f"lengths[{i}] tokens", isl + osl, MAX_SEQ_LEN)
                problems += [msg] if msg else []
            if not isinstance(weight, int | float) or isinstance(weight, bool) or not weight > 0:
                problems.append(f"lengths[{i}] weight = {weight!r} must be a positive number")
        if not _positive_int(self.batch):
            problems.append(f"batch = {self.batch!r} must be a positive integer")
        elif msg := over_limit("batch", self.batch, MAX_GLOBAL_BATCH):
            problems.append(msg)
        if not _positive_int(self.precision_bytes):
            problems.append(
                f"precision_bytes = {self.precision_bytes!r} must be a positive integer"
            )
        problems += _format_problems(self.kv_format, self.weight_format)
        if problems:
            raise ConfigError("request batch: " + "; ".join(problems))
        object.__setattr__(self, "lengths", tuple((i, o, float(w)) for i, o, w in lengths))

    @classmethod
    def of(cls, input_tokens: int, output_tokens: int, batch: int = 1, **kw: Any) -> RequestBatch:
        """``batch`` requests of ``input_tokens`` in and ``output_tokens`` out."""
        return cls(((input_tokens, output_tokens, 1.0),), batch, **kw)

    def _mean(self, value: Any) -> float:
        total = sum(w for _, _, w in self.lengths)
        return sum(w * value(i, o) for i, o, w in self.lengths) / total

    @property
    def mean_input_tokens(self) -> float:
        return self._mean(lambda i, o: i)

    @property
    def mean_output_tokens(self) -> float:
        return self._mean(lambda i, o: o)

    @property
    def max_kv_tokens(self) -> int:
        """Tokens the longest request holds in the cache at its last step: ``ISL + OSL - 1``
        (the last token is sampled, never fed back)."""
        return max(i + o - 1 for i, o, _ in self.lengths)

    @property
    def decode_context_tokens(self) -> float | None:
        """The mean context of a decode step over the mix, each request weighted by its
        ``OSL - 1`` steps attending ``ISL + 1 .. ISL + OSL - 1`` keys (mean
        ``ISL + OSL / 2``); None when no request decodes (every OSL is 1)."""
        steps = sum(w * (o - 1) for _, o, w in self.lengths)
        if not steps:
            return None
        return sum(w * (o - 1) * (i + o / 2) for i, o, w in self.lengths) / steps

    def pass_formats(self) -> dict[str, Any]:
        """The formats a pass of these requests runs in (``kv_format``, ``precision_bytes``,
        ``weight_format``), as :class:`ServingPass` keyword arguments."""
        return {f: getattr(self, f) for f in ("kv_format", "precision_bytes", "weight_format")}

    def prefill_passes(self, chunk_tokens: int | None = None) -> tuple[ServingPass, ...]:
        """The prefill passes of a batch of each distinct input length, in order (chunks of
        ``chunk_tokens``, the last one sampling; None: the whole prompt in one pass)."""
        passes = []
        for isl in sorted({i for i, _, _ in self.lengths}):
            chunk = isl if chunk_tokens is None else chunk_tokens
            for start in range(0, isl, chunk):
                new = min(chunk, isl - start)
                last = start + new == isl
                kw = self.pass_formats()
                passes.append(ServingPass(self.batch, new, start, samples=last, **kw))
        return tuple(passes)

    def decode_pass(self) -> ServingPass | None:
        """The decode step at the mean context (rounded to whole tokens): a step's time is
        affine in its context, so the mean step is the step at the mean context; None when
        no request decodes."""
        context = self.decode_context_tokens
        if context is None:
            return None
        return ServingPass.decode(self.batch, round(context), **self.pass_formats())


# ---- KV cache --------------------------------------------------------------------------------


def kv_cache_elements_per_token(model: Model) -> int:
    """Elements one token stores in one block's KV cache: its keys and values,
    ``kv_heads x (d_qk + d_v)`` (``2 kv_heads d_head``); with multi-head latent attention
    the latent and the shared rotary key, ``kv_lora_rank + qk_rope_head_dim`` (DeepSeek-V2,
    arXiv:2405.04434, §2.1.4, ``(d_c + d_h^R) l`` elements over ``l`` layers)."""
    if model.mla:
        return model.kv_lora_rank + model.qk_rope_head_dim
    return model.kv_heads * (model.head_dim + model.value_head_dim)


def kv_cache_bytes_per_token(
    model: Model, tp: int, kv_format: str = "bf16", layers: int | None = None
) -> int:
    """Bytes one token's cache takes on one device of a tensor-parallel group of ``tp`` over
    ``layers`` blocks (default: all): the key/value heads are split by ``tp``; MLA's latent
    is the same on every rank (vLLM replicates it: "MLA is always replicated as the hidden
    dim can't be split", vllm/distributed/kv_transfer/kv_connector/utils.py).

    >>> from workloads.catalog import get_model
    >>> kv_cache_bytes_per_token(get_model("llama2-70b"), 8) == 80 * 2 * 1 * 128 * 2
    True
    """
    per_layer = kv_cache_elements_per_token(model)
    if not model.mla:  # whole heads per rank, replicated when tp exceeds them
        per_layer = model.kv_heads_per_rank(tp) * (model.head_dim + model.value_head_dim)
    blocks = model.layers if layers is None else layers
    return blocks * per_layer * _format_bytes(kv_format)


def kv_cache_bytes_per_sequence(
    model: Model,
    tp: int,
    tokens: int,
    kv_format: str = "bf16",
    page_tokens: int | None = None,
    layers: int | None = None,
) -> int:
    """Bytes of the whole pages that hold ``tokens`` tokens of one sequence on one device
    (with a sliding window, only the last window's: :meth:`Model.kv_tokens`)."""
    page = page_tokens or serving_settings().page_tokens
    held = model.kv_tokens(tokens)
    return -(-held // page) * page * kv_cache_bytes_per_token(model, tp, kv_format, layers)
