"""Inference serving workloads: passes, request batches, the KV cache, FLOPs and bytes
(docs/serving.md).

A serving engine runs a model forward in *passes* over a batch of sequences
(:class:`ServingPass`): a prefill computes a prompt's tokens (in one pass, or in chunks after
the ones already cached), a decode step one new token per sequence. Each pass writes its
tokens' keys and values into the KV cache and reads every earlier token's from it. The cache
is paged (Kwon et al., "Efficient Memory Management for Large Language Model Serving with
PagedAttention", SOSP 2023): a sequence holds whole pages of ``page_tokens`` tokens, and a
device holds as many pages as its memory leaves beside the weights and the pass's transient
workspace (:func:`kv_cache_capacity`). No backward pass, no optimizer, no stashed
activations.

A :class:`RequestBatch` is a batch of requests given by their input and output lengths
(ISL, OSL), one pair or a weighted mix; it gives the prefill passes and the decode step at
the mean context a decode step attends.

Closed forms here are independent of the op graphs (:mod:`workloads.serving_ops`), which the
tests check against them.
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
from workloads.flops import attention_core_flops, block_forward_flops, embedding_forward_flops
from workloads.model import Model, PositionKind, padded_vocab
from workloads.moe_ops import expert_tokens
from workloads.precision import Recipe, recipe

__all__ = [
    "KV_ADMISSIONS",
    "ServingSettings",
    "serving_settings",
    "ServingPass",
    "RequestBatch",
    "KvCapacity",
    "weight_recipe",
    "kv_cache_elements_per_token",
    "kv_cache_bytes_per_token",
    "kv_cache_bytes_per_sequence",
    "attention_flops",
    "pass_flops",
    "weight_bytes_per_device",
    "pass_weight_read_bytes",
    "pass_kv_read_bytes",
    "kv_cache_capacity",
    "stage_block_counts",
    "stage_parameters",
    "stage_weight_bytes",
    "block_weight_bytes",
]

_DATA_FILE = "serving.toml"
#: How a scheduler reserves a request's KV cache: pages as its tokens arrive, or its whole
#: prompt and output when it is admitted (``[scheduler] kv_admission`` of serving.toml).
KV_ADMISSIONS: Final = ("on-demand", "whole-request")


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

    def _pass_kw(self) -> dict[str, Any]:
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
                kw = self._pass_kw()
                passes.append(ServingPass(self.batch, new, start, samples=last, **kw))
        return tuple(passes)

    def decode_pass(self) -> ServingPass | None:
        """The decode step at the mean context (rounded to whole tokens): a step's time is
        affine in its context, so the mean step is the step at the mean context; None when
        no request decodes."""
        context = self.decode_context_tokens
        if context is None:
            return None
        return ServingPass.decode(self.batch, round(context), **self._pass_kw())


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
    if not model.mla:
        per_layer //= tp
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
    """Bytes of the whole pages that hold ``tokens`` tokens of one sequence on one device."""
    page = page_tokens or serving_settings().page_tokens
    return -(-tokens // page) * page * kv_cache_bytes_per_token(model, tp, kv_format, layers)


@dataclass(frozen=True, slots=True)
class KvCapacity:
    """The paged KV cache one device holds: of its ``usable_bytes`` (the engine's share of
    memory), the weights and the largest pass's workspace are taken first, the rest is
    ``pages`` pages of ``page_tokens`` tokens, ``page_bytes`` each (all the device's
    blocks); ``pages`` is 0 when the weights and workspace do not fit."""

    usable_bytes: int
    weights_bytes: int
    workspace_bytes: int
    page_tokens: int
    page_bytes: int
    pages: int

    @property
    def tokens(self) -> int:
        return self.pages * self.page_tokens

    @property
    def kv_cache_bytes(self) -> int:
        return self.pages * self.page_bytes

    def sequences(self, tokens: int) -> int:
        """Sequences of ``tokens`` tokens each that fit at once."""
        return self.pages // -(-tokens // self.page_tokens)


def kv_cache_capacity(
    model: Model,
    tp: int,
    hbm_bytes: int,
    workspace_bytes: int,
    *,
    kv_format: str = "bf16",
    precision_bytes: int = 2,
    page_tokens: int | None = None,
    ep: int = 1,
    pp: int = 1,
    memory_fraction: float | None = None,
    weight_format: str = "bf16",
) -> KvCapacity:
    """The KV cache one device of a replica of ``pp`` pipeline stages of ``tp`` devices each
    (one of ``ep`` ranks sharing the routed experts) can keep (vLLM's sizing:
    ``gpu_memory_utilization`` x memory, less the weights and the peak activation memory
    its profiling pass measures): the stage with the fewest pages decides, every stage
    holding the cache of its own blocks for the same sequences. ``memory_fraction`` overrides
    the engine's share of the memory (a static-batch engine's is all of it)."""
    settings = serving_settings()
    page = page_tokens or settings.page_tokens
    usable = int((memory_fraction or settings.memory_fraction) * hbm_bytes)
    per_token = kv_cache_bytes_per_token(model, tp, kv_format, layers=1)
    stages = [
        (weights, page * per_token * blocks)
        for weights, blocks in zip(
            stage_weight_bytes(model, tp, ep, pp, precision_bytes, weight_format),
            stage_block_counts(model, pp),
            strict=True,
        )
    ]
    pages = min(max(0, (usable - w - workspace_bytes) // max(b, 1)) for w, b in stages)
    weights, page_bytes = max(w for w, _ in stages), max(b for _, b in stages)
    return KvCapacity(usable, weights, workspace_bytes, page, page_bytes, pages)


def stage_block_counts(model: Model, pp: int = 1) -> tuple[int, ...]:
    """Blocks on each of ``pp`` pipeline stages: as even as can be, the first stages taking
    one more when ``pp`` does not divide the blocks (vLLM's ``get_pp_indices`` gives its
    extra layers to stages before the last, Megatron's even split needs none)."""
    n, extra = divmod(model.layers, pp)
    return tuple(n + (1 if i < extra else 0) for i in range(pp))


def stage_parameters(model: Model, tp: int, ep: int = 1, pp: int = 1) -> tuple[int, ...]:
    """Parameters one device of each pipeline stage holds: its blocks' shards (an MoE
    block's routed experts over ``ep`` ranks), the embedding on the first stage, the head
    on the last (with a copy of a tied LM-head matrix when that is not the first stage)."""
    return tuple(b + e for b, e in _stage_split(model, tp, ep, pp))


def _stage_split(model: Model, tp: int, ep: int, pp: int) -> tuple[tuple[int, int], ...]:
    """(block parameters, embedding and head parameters) of each stage's device."""
    dense = model.dense_layers
    experts = model.expert_parameters(tp)
    moe = model.block_parameters(tp) - experts + experts // ep
    out, first = [], 1
    for i, n in enumerate(stage_block_counts(model, pp)):
        blocks = range(first, first + n)
        first += n
        params = sum(model.block_parameters(tp, dense=True) if b <= dense else moe for b in blocks)
        edges = model.embedding_parameters(tp) if i == 0 else 0
        if i == pp - 1:
            edges += model.head_parameters(tp) + (model.tied_head_parameters(tp) if i else 0)
        out.append((params, edges))
    return tuple(out)


def block_weight_bytes(
    precision_bytes: int = 2, weight_format: str = "bf16", row_elements: int = 1
) -> float:
    """Bytes of one block weight stored in ``weight_format``: the recipe's stored element
    and its share of the scales when it stores its weights narrower than bf16 (a
    per-output-channel scale counted once per ``row_elements`` weights), else
    ``precision_bytes``."""
    r = weight_recipe(weight_format)
    if r.stores_low_weights or r.dequantizes_weights:
        return r.weight_element_bytes(row_elements)
    return precision_bytes


def stage_weight_bytes(
    model: Model,
    tp: int,
    ep: int = 1,
    pp: int = 1,
    precision_bytes: int = 2,
    weight_format: str = "bf16",
) -> tuple[int, ...]:
    """Weight bytes one device of each stage holds: the blocks' weights in ``weight_format``
    (their norm gains too, a few thousandths of a percent of them), the embedding and head
    in ``precision_bytes`` (the fp8 recipe keeps them in bf16). A per-output-channel scale
    is counted once per ``hidden`` weights: the rows of every block matrix but the FFN's
    down projection (whose rows are longer) are ``hidden`` long."""
    block = block_weight_bytes(precision_bytes, weight_format, model.hidden)
    out = [round(block * b) + precision_bytes * e for b, e in _stage_split(model, tp, ep, pp)]
    out[-1] -= _head_saving(model, tp, precision_bytes, weight_format)
    return tuple(out)


def _head_saving(model: Model, tp: int, precision_bytes: int, weight_format: str) -> int:
    """Bytes the LM-head matrix shard (untied) saves when the weight format quantizes it too
    (gpt-fast quantizes every Linear, the output head among them), else 0."""
    r = weight_recipe(weight_format)
    if not (r.quantizes_head and (r.stores_low_weights or r.dequantizes_weights)):
        return 0
    if model.tied_embeddings:
        return 0
    e = model.embedding_dim
    lm = padded_vocab(model.vocab, tp) // tp * e
    return round((precision_bytes - r.weight_element_bytes(e)) * lm)


# ---- FLOPs and bytes of a pass ----------------------------------------------------------------


def _absorbed(model: Model, p: ServingPass) -> bool:
    """MLA decodes in the latent space (keys and values never up-projected)."""
    return model.mla and p.is_decode


def attention_flops(model: Model, p: ServingPass) -> int:
    """QK^T and PV of a pass over all heads: each of a sequence's ``C`` new tokens attends
    the ``P`` cached ones and the new ones up to itself (a causal decoder),
    ``C P + C (C + 1) / 2`` scores per head, ``2 (d_qk + d_v)`` FLOPs each (an absorbed MLA
    decode: ``2 (2 kv_lora_rank + qk_rope_head_dim)``, over the latent)."""
    c, cached = p.new_tokens, p.cached_tokens
    scores = c * cached + c * (c + 1) // 2
    if _absorbed(model, p):
        width = 2 * model.kv_lora_rank + model.qk_rope_head_dim
    else:
        width = model.head_dim + model.value_head_dim
    return 2 * p.batch * model.heads * scores * width


def pass_flops(model: Model, p: ServingPass) -> int:
    """Matmul FLOPs of one pass over all devices: ``2`` per weight per token through the
    blocks (only the ``top_k`` routed experts and the shared ones), the attention
    (:func:`attention_flops`), OPT's embedding projections, and the LM head on each
    sequence's last token only when the pass samples; MLA up-projects its cached context's
    latents in a chunked prefill."""
    b, c = p.batch, p.new_tokens
    dense = model.dense_layers
    blocks = sum(
        n * (block_forward_flops(model, c, b, dense=kind) - attention_core_flops(model, c, b))
        for n, kind in ((dense, True), (model.layers - dense, False))
    )
    if model.mla and p.cached_tokens and not p.is_decode:
        up = model.kv_lora_rank * model.heads * (model.qk_nope_head_dim + model.value_head_dim)
        blocks += 2 * b * p.cached_tokens * up * model.layers
    e, h = model.embedding_dim, model.hidden
    edges = embedding_forward_flops(model, c, b) + (2 * b * c * h * e if e != h else 0)
    head = 2 * b * e * model.vocab if p.samples else 0
    return blocks + model.layers * attention_flops(model, p) + edges + head


def weight_bytes_per_device(
    model: Model,
    tp: int,
    precision_bytes: int = 2,
    ep: int = 1,
    pp: int = 1,
    weight_format: str = "bf16",
) -> int:
    """Bytes of the weights one device holds, of a replica of ``pp`` pipeline stages of a
    tensor-parallel group of ``tp`` each (the fullest stage's; :func:`stage_weight_bytes`):
    with the whole model on one group, embedding, blocks and head shards (a tied LM head
    once)."""
    return max(stage_weight_bytes(model, tp, ep, pp, precision_bytes, weight_format))


def pass_weight_read_bytes(model: Model, tp: int, p: ServingPass, ep: int = 1) -> int:
    """Weight bytes one device must read in a pass: every block weight but, in MoE blocks,
    only the experts some token is routed to of the ``1/ep`` the device holds (balanced
    routing, :func:`~workloads.moe_ops.expert_tokens`); the final norm (and OPT's projection) and,
    when the pass samples, the LM-head matrix; the embedding rows of the pass's tokens
    (and position rows, OPT's input projection); the block weights in the pass's weight
    format."""
    dense = model.dense_layers
    blocks = dense * model.block_parameters(tp, dense=True)
    if model.is_moe:
        per_expert = model.expert_parameters(tp) // model.experts
        reached = sum(1 for n in expert_tokens(p.tokens, model, ep) if n)
        moe = model.block_parameters(tp) - model.expert_parameters(tp) + reached * per_expert
        blocks += (model.layers - dense) * moe
    else:
        blocks += (model.layers - dense) * model.block_parameters(tp)
    e, h = model.embedding_dim, model.hidden
    lm = padded_vocab(model.vocab, tp) // tp * e
    params = model.head_parameters(tp) + model.tied_head_parameters(tp) - (0 if p.samples else lm)
    rows = p.tokens * (e + (h if model.positions is PositionKind.LEARNED else 0))
    params += rows + (e * h if e != h else 0)
    block = block_weight_bytes(p.precision_bytes, p.weight_format, model.hidden)
    head = _head_saving(model, tp, p.precision_bytes, p.weight_format) if p.samples else 0
    return round(block * blocks) + p.precision_bytes * params - head


def pass_kv_read_bytes(model: Model, tp: int, p: ServingPass) -> int:
    """Cache bytes one device reads in a pass: every sequence's keys and values (or latents)
    of all its ``cached + new`` tokens, each once, in every block."""
    return p.batch * p.context_tokens * kv_cache_bytes_per_token(model, tp, p.kv_format)
