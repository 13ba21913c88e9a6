"""Transformer model hyper-parameters and exact parameter counts (docs/models.md).

A :class:`Model` is what a paper's hyper-parameter table or a Hugging Face ``config.json``
says about an architecture, and nothing about how it is trained. Parameter counts are exact
sums of the weight and bias tensors (no closed-form approximation), so they can be checked
against the counts frameworks print.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, fields
from enum import StrEnum
from typing import Any

from phaze.errors import ConfigError

__all__ = ["FfnKind", "NormKind", "PositionKind", "Model", "padded_vocab"]


class FfnKind(StrEnum):
    """The feed-forward block: a two-GEMM MLP with GELU or ReLU, or a gated MLP whose gate
    goes through SiLU (SwiGLU) or GELU (GeGLU, Gemma)."""

    GELU = "gelu"
    RELU = "relu"
    SWIGLU = "swiglu"
    GEGLU = "geglu"

    @property
    def gated(self) -> bool:
        """Three GEMMs (gate, up, down) instead of two."""
        return self in (FfnKind.SWIGLU, FfnKind.GEGLU)


class NormKind(StrEnum):
    LAYERNORM = "layernorm"  # weight and bias per channel
    RMSNORM = "rmsnorm"  # weight per channel only


class PositionKind(StrEnum):
    LEARNED = "learned"  # an embedding table of max_positions rows
    ROTARY = "rotary"  # no parameters; rotates Q and K (RoPE)
    ALIBI = "alibi"  # no parameters; a per-head linear bias on attention scores (Press et al.)


def padded_vocab(vocab: int, tp: int) -> int:
    """The vocabulary padded up to a multiple of ``tp`` so each shard holds the same rows.

    Megatron-LM pads to a multiple of ``make_vocab_size_divisible_by × tp`` (128 × tp by
    default); we pad only as much as the sharding needs, so at ``tp = 1`` the model is the
    published one and FLOPs match the papers' closed forms.

    >>> padded_vocab(50257, 8)
    50264
    """
    return -(-vocab // tp) * tp


@dataclass(frozen=True, slots=True)
class Model:
    """A decoder (GPT, OPT, Llama, Mixtral) or encoder (BERT) transformer.

    Parameters
    ----------
    name : catalog name or the imported file's name.
    layers, hidden, heads : transformer blocks, model width, attention (query) heads.
    ffn_hidden : inner width of the FFN (of each expert for MoE).
    vocab : vocabulary size (unpadded).
    kv_heads : key/value heads (``heads`` = multi-head, fewer = GQA, 1 = MQA); None = heads.
    ffn_kind, norm, positions : see :class:`FfnKind`, :class:`NormKind`, :class:`PositionKind`.
    max_positions : longest sequence; also the learned position table's rows.
    experts, top_k : MoE experts per block and experts each token is routed to (1, 1 = dense).
    tied_embeddings : the LM head reuses the input embedding matrix.
    causal : decoder (causal LM head) if True; else an encoder with a BERT MLM head.
    biases : linear layers have biases.
    dropout : the model trains with dropout (masks are stashed for the backward pass).
    embedding_dim : width of the token embedding if it differs from ``hidden`` (OPT-350m
        projects 512-wide embeddings in and out); None = hidden.
    type_vocab : token-type (segment) embeddings (BERT: 2).
    embedding_norm : a norm right after the embeddings (BERT).
    head_size : width of one attention head if not ``hidden / heads`` (Gemma: 256); None =
        hidden / heads.
    parallel_block : attention and FFN read the same block input and their outputs are added
        in one residual (GPT-J, Falcon); else the FFN follows attention.
    block_norms : norms per block: 2 (before attention and FFN), 1 (Falcon-7B's parallel
        block shares one), 4 (Gemma 2 also normalises each sub-layer's output).
    source : where the hyper-parameters come from.
    tokens_to_train : tokens of the published training run, where the source states it.
    """

    name: str
    layers: int
    hidden: int
    heads: int
    ffn_hidden: int
    vocab: int
    kv_heads: int | None = None
    ffn_kind: FfnKind = FfnKind.GELU
    norm: NormKind = NormKind.LAYERNORM
    positions: PositionKind = PositionKind.LEARNED
    max_positions: int = 2048
    experts: int = 1
    top_k: int = 1
    tied_embeddings: bool = True
    causal: bool = True
    biases: bool = True
    dropout: bool = True
    embedding_dim: int | None = None
    type_vocab: int = 0
    embedding_norm: bool = False
    head_size: int | None = None
    parallel_block: bool = False
    block_norms: int = 2
    source: str = ""
    tokens_to_train: int | None = None

    def __post_init__(self) -> None:
        problems: list[str] = []
        for f, enum in (("ffn_kind", FfnKind), ("norm", NormKind), ("positions", PositionKind)):
            value = getattr(self, f)
            try:
                object.__setattr__(self, f, enum(value))
            except ValueError:
                allowed = ", ".join(e.value for e in enum)
                problems.append(f"{f} = {value!r} must be one of {allowed}")
        if self.kv_heads is None:
            object.__setattr__(self, "kv_heads", self.heads)
        if self.embedding_dim is None:
            object.__setattr__(self, "embedding_dim", self.hidden)
        positive = ("layers", "hidden", "heads", "ffn_hidden", "vocab", "kv_heads")
        positive += ("max_positions", "experts", "top_k", "embedding_dim")
        if self.head_size is not None:
            positive += ("head_size",)
        for f in positive:
            value = getattr(self, f)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                problems.append(f"{f} = {value!r} must be a positive integer")
        if self.block_norms not in (1, 2, 4) or isinstance(self.block_norms, bool):
            problems.append(f"block_norms = {self.block_norms!r} must be 1, 2 or 4")
        flags = ("tied_embeddings", "causal", "biases", "dropout", "embedding_norm")
        flags += ("parallel_block",)
        for f in flags:
            if not isinstance(getattr(self, f), bool):
                problems.append(f"{f} = {getattr(self, f)!r} must be true or false")
        if not isinstance(self.type_vocab, int) or self.type_vocab < 0:
            problems.append(f"type_vocab = {self.type_vocab!r} must be a non-negative integer")
        if self.tokens_to_train is not None and (
            not isinstance(self.tokens_to_train, int) or self.tokens_to_train <= 0
        ):
            problems.append(
                f"tokens_to_train = {self.tokens_to_train!r} must be a positive integer or unset"
            )
        if not self.name:
            problems.append("name must not be empty")
        if not problems:
            if self.head_size is None and self.hidden % self.heads:
                problems.append(
                    f"hidden = {self.hidden} must be a multiple of heads = {self.heads}"
                )
            if self.heads % self.kv_heads:
                problems.append(
                    f"heads = {self.heads} must be a multiple of kv_heads = {self.kv_heads}"
                )
            if self.block_norms == 1 and not self.parallel_block:
                problems.append("block_norms = 1 needs parallel_block = true (a shared norm)")
            if self.block_norms == 4 and self.parallel_block:
                problems.append("block_norms = 4 (post-norms) needs parallel_block = false")
            if self.top_k > self.experts:
                problems.append(f"top_k = {self.top_k} must be at most experts = {self.experts}")
        if problems:
            raise ConfigError(f"model {self.name!r}: " + "; ".join(problems))

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], source: str = "model") -> Model:
        """A Model from a plain mapping (a TOML table); unknown keys name the nearest field."""
        known = [f.name for f in fields(cls)]
        unknown = [k for k in data if k not in known]
        if unknown:
            hints = []
            for k in unknown:
                close = difflib.get_close_matches(k, known, n=1)
                hints.append(f"{k!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
            raise ConfigError(
                f"{source}: unknown key(s) {', '.join(hints)}; allowed: {', '.join(known)}"
            )
        missing = [f.name for f in fields(cls)[:6] if f.name not in data]
        if missing:
            raise ConfigError(f"{source}: missing key(s) {', '.join(missing)}")
        try:
            return cls(**data)
        except ConfigError as e:
            raise ConfigError(f"{source}: {e}") from None

    # ---- derived sizes -------------------------------------------------------------------

    @property
    def head_dim(self) -> int:
        return self.head_size if self.head_size is not None else self.hidden // self.heads

    @property
    def is_moe(self) -> bool:
        return self.experts > 1

    @property
    def parameters(self) -> int:
        """All trainable parameters (tied embeddings counted once)."""
        return (
            self.embedding_parameters()
            + self.layers * self.block_parameters()
            + self.head_parameters()
        )

    @property
    def active_parameters(self) -> int:
        """Parameters one token passes through (MoE: only its ``top_k`` experts)."""
        return (
            self.embedding_parameters()
            + self.layers * self.block_parameters(active=True)
            + self.head_parameters()
        )

    def embedding_parameters(self, tp: int = 1) -> int:
        """One tensor-parallel shard of the embedding layer.

        The token table is vocab-parallel (padded, see :func:`padded_vocab`); position and
        token-type tables, the embedding norm and OPT's ``project_in`` are replicated.
        """
        h, e = self.hidden, self.embedding_dim
        n = padded_vocab(self.vocab, tp) // tp * e
        if self.positions is PositionKind.LEARNED:
            n += self.max_positions * h
        n += self.type_vocab * h
        if self.embedding_norm:
            n += self._norm_parameters()
        if e != h:
            n += e * h  # project_in, no bias (HF OPT)
        return n

    def block_parameters(self, tp: int = 1, active: bool = False) -> int:
        """One tensor-parallel shard of one transformer block (Megatron sharding).

        Q/K/V and FC1 are column-parallel (weights and biases split by ``tp``); the output
        projection and FC2 are row-parallel (weights split, biases replicated); norms and the
        MoE router are replicated. ``active`` counts only the ``top_k`` routed experts.
        """
        h, d, t = self.hidden, self.head_dim, tp
        qkv_width = (self.heads + 2 * self.kv_heads) * d
        attention = h * qkv_width // t + self.heads * d * h // t
        if self.biases:
            attention += qkv_width // t + h
        f = self.ffn_hidden
        gemms_in = 2 if self.ffn_kind.gated else 1
        ffn = (gemms_in + 1) * h * f // t
        if self.biases:
            ffn += gemms_in * f // t + h
        experts = self.top_k if active else self.experts
        router = h * self.experts if self.is_moe else 0
        norms = self.block_norms * self._norm_parameters()
        return attention + experts * ffn + router + norms

    def head_parameters(self, tp: int = 1) -> int:
        """One shard of the head: final norm (decoder) or MLM transform (encoder) + LM head.

        A tied LM head reuses the embedding matrix and is not counted here (see
        :meth:`tied_head_parameters`); an MLM head's output bias is vocab-parallel.
        """
        h, e = self.hidden, self.embedding_dim
        v_shard = padded_vocab(self.vocab, tp) // tp
        n = 0
        if self.causal:
            n += self._norm_parameters()
        else:  # BERT MLM head: dense + bias, activation, norm, decoder bias
            n += h * h + h + self._norm_parameters() + v_shard
        if e != h:
            n += h * e  # project_out, no bias (HF OPT)
        if not self.tied_embeddings:
            n += v_shard * e
        return n

    def tied_head_parameters(self, tp: int = 1) -> int:
        """Shard of the tied LM-head matrix: a pipeline stage holding the head but not the
        embedding keeps a copy of these (as Megatron does), summed into the embedding's
        gradient."""
        return (
            padded_vocab(self.vocab, tp) // tp * self.embedding_dim if self.tied_embeddings else 0
        )

    def _norm_parameters(self) -> int:
        return 2 * self.hidden if self.norm is NormKind.LAYERNORM else self.hidden
