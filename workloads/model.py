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

from phaze_common.errors import ConfigError
from phaze_common.limits import MODEL_LIMITS, over_limit

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
    """A decoder (GPT, OPT, Llama, Mixtral, DeepSeek) or encoder (BERT) transformer.

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
    expert_ffn_hidden : inner width of each routed and shared expert if it differs from
        ``ffn_hidden`` (DeepSeek: ``ffn_hidden`` is then the width of the dense layers);
        None = ffn_hidden.
    shared_experts : experts every token passes through beside its ``top_k`` routed ones,
        held as one FFN of ``shared_experts x expert_ffn_hidden`` (DeepSeekMoE).
    dense_layers : the first blocks of an MoE model have a dense FFN of ``ffn_hidden``.
    expert_groups, routed_groups : group-limited routing (DeepSeek-V3's ``n_group`` and
        ``topk_group``): the routed experts form ``expert_groups`` groups (one per node of
        the expert-parallel group in DeepSeek's layout) and each token picks its experts in
        at most ``routed_groups`` of them, so its copies cross to few nodes
        (:mod:`placement.ep_cp`). 0, 0: no limit.
    expert_load_imbalance : the busiest expert-parallel rank's routed tokens over the mean
        (1: balanced routing); its expert GEMMs set the MoE block's time
        (:func:`workloads.moe_ops.expert_tokens`).
    kv_lora_rank : multi-head latent attention (MLA, DeepSeek-V2) if set: K and V are
        up-projected per head from a ``kv_lora_rank`` latent, Q from a ``q_lora_rank``
        latent (None: projected from the block input); each Q/K head has
        ``qk_nope_head_dim + qk_rope_head_dim`` channels, each V head ``v_head_dim``.
    source : where the hyper-parameters come from.
    tokens_to_train : tokens of the published training run, where the source states it.
    sliding_window : each token attends at most this many keys, itself and those just before
        it, in every block (Mistral 7B v0.1: 4096); None = all before it. The KV cache keeps
        only those (:meth:`kv_tokens`); attention costs count only them.
    mtp_layers : multi-token-prediction modules trained beside the model (DeepSeek-V3's
        ``num_nextn_predict_layers``, Megatron-Core's ``--mtp-num-layers``; 0: none). Each
        normalises the main model's hidden state and the embedding of the next token, projects
        their concatenation (2h -> h), runs one more block of the model's kind and predicts
        one token further through the shared output head (dsv3-report Sec. 2.2); it trains
        on the last pipeline stage beside the loss (:mod:`workloads.mtp_ops`) and is not part
        of :attr:`parameters` (:meth:`mtp_parameters`).
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
    expert_ffn_hidden: int | None = None
    shared_experts: int = 0
    dense_layers: int = 0
    expert_groups: int = 0
    routed_groups: int = 0
    expert_load_imbalance: float = 1.0
    q_lora_rank: int | None = None
    kv_lora_rank: int | None = None
    qk_nope_head_dim: int | None = None
    qk_rope_head_dim: int | None = None
    v_head_dim: int | None = None
    source: str = ""
    tokens_to_train: int | None = None
    sliding_window: int | None = None
    mtp_layers: int = 0

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
        positive += tuple(f for f in _OPTIONAL_SIZES if getattr(self, f) is not None)
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
        problems += [
            p
            for f, limit in MODEL_LIMITS.items()
            if (f != "embedding_dim" or self.embedding_dim != self.hidden)  # given, not derived
            and (p := over_limit(f, getattr(self, f), limit, "far beyond any published model"))
        ]
        counts = ("type_vocab", "shared_experts", "dense_layers", "expert_groups")
        for f in (*counts, "routed_groups", "mtp_layers"):
            value = getattr(self, f)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                problems.append(f"{f} = {value!r} must be a non-negative integer")
        if self.tokens_to_train is not None and (
            not isinstance(self.tokens_to_train, int) or self.tokens_to_train <= 0
        ):
            problems.append(
                f"tokens_to_train = {self.tokens_to_train!r} must be a positive integer or unset"
            )
        imbalance = self.expert_load_imbalance
        if not (isinstance(imbalance, int | float) and not isinstance(imbalance, bool)) or not (
            1.0 <= imbalance <= 64.0
        ):
            problems.append(f"expert_load_imbalance = {imbalance!r} must be a number from 1 to 64")
        if not self.name:
            problems.append("name must not be empty")
        if not problems:
            if self.head_size is None and not self.mla and self.hidden % self.heads:
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
            if self.sliding_window is not None and not self.causal:
                problems.append("sliding_window needs a causal decoder (causal = true)")
            if self.mtp_layers and not self.causal:
                problems.append("mtp_layers needs a causal decoder (causal = true)")
            if self.top_k > self.experts:
                problems.append(f"top_k = {self.top_k} must be at most experts = {self.experts}")
            problems += self._moe_mla_problems()
        if problems:
            raise ConfigError(f"model {self.name!r}: " + "; ".join(problems))

    def _group_problems(self) -> list[str]:
        groups, routed = self.expert_groups, self.routed_groups
        if not (isinstance(groups, int) and isinstance(routed, int)) or not (groups or routed):
            return []
        if not (groups and routed):
            return [f"expert_groups = {groups} and routed_groups = {routed}: set both or neither"]
        if self.experts % groups or routed > groups:
            return [
                f"expert_groups = {groups} must divide experts = {self.experts} and be at "
                f"least routed_groups = {routed}"
            ]
        return []

    def _moe_mla_problems(self) -> list[str]:
        problems = []
        if not self.is_moe:
            for f in ("expert_ffn_hidden", "shared_experts", "dense_layers", "expert_groups"):
                if getattr(self, f):
                    problems.append(f"{f} = {getattr(self, f)} needs experts > 1 (an MoE model)")
        elif self.dense_layers >= self.layers:
            problems.append(
                f"dense_layers = {self.dense_layers} must be fewer than layers = {self.layers}"
            )
        problems += self._group_problems()
        mla = ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
        unset = [f for f in mla if getattr(self, f) is None]
        if unset and len(unset) < len(mla):
            problems.append(f"{', '.join(unset)} must be set with the other MLA sizes")
        if unset and self.q_lora_rank is not None:
            problems.append("q_lora_rank needs multi-head latent attention (kv_lora_rank)")
        if not unset:
            if self.kv_heads != self.heads or self.head_size is not None:
                problems.append(
                    "multi-head latent attention needs kv_heads = heads and no head_size"
                )
            if self.biases or self.parallel_block or self.block_norms != 2:
                problems.append(
                    "multi-head latent attention needs biases = false, parallel_block = false"
                    " and block_norms = 2"
                )
        return problems

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
        """Channels of one query/key head (MLA: its un-rotated and rotated parts)."""
        if self.mla:
            return self.qk_nope_head_dim + self.qk_rope_head_dim
        return self.head_size if self.head_size is not None else self.hidden // self.heads

    @property
    def value_head_dim(self) -> int:
        """Channels of one value head (= :attr:`head_dim` except with MLA)."""
        return self.v_head_dim if self.mla else self.head_dim

    @property
    def mla(self) -> bool:
        """Multi-head latent attention (DeepSeek-V2/V3)."""
        return self.kv_lora_rank is not None

    @property
    def is_moe(self) -> bool:
        return self.experts > 1

    @property
    def expert_width(self) -> int:
        """Inner width of each routed (and shared) expert."""
        return self.ffn_hidden if self.expert_ffn_hidden is None else self.expert_ffn_hidden

    @property
    def moe_layers(self) -> int:
        """Blocks with an MoE FFN (all but the leading :attr:`dense_layers`; 0 if dense)."""
        return self.layers - self.dense_layers if self.is_moe else 0

    def kv_tokens(self, context: int) -> int:
        """Tokens of a sequence's ``context`` its KV cache holds: all, or with a sliding
        window only the last :attr:`sliding_window` (no later token attends an older one).

        >>> m = Model("w", 2, 64, 4, 256, 100, sliding_window=4096)
        >>> m.kv_tokens(16099), m.kv_tokens(100)
        (4096, 100)
        """
        return context if self.sliding_window is None else min(context, self.sliding_window)

    def kv_heads_per_rank(self, tp: int) -> int:
        """Key/value heads one of ``tp`` tensor-parallel ranks holds: ``kv_heads / tp``, or
        one when ``tp`` is a multiple of them, each head then replicated over
        ``tp / kv_heads`` ranks (vLLM's ``QKVParallelLinear``: ``num_kv_heads = 1``,
        ``num_kv_head_replicas = tp_size / total_num_kv_heads``), so a rank's K/V weights,
        projections and cache never fall below one head's.

        >>> m = Model("g", 2, 1024, 16, 4096, 100, kv_heads=4)
        >>> m.kv_heads_per_rank(2), m.kv_heads_per_rank(4), m.kv_heads_per_rank(16)
        (2, 1, 1)
        """
        return max(1, self.kv_heads // tp)

    def context_problem(
        self, what: str, tokens: int, *, allow_extension: bool | None = None
    ) -> str | None:
        """Why ``tokens`` tokens (``what``, e.g. ``"seq_len = 8192"``) do not fit the
        model's context of :attr:`max_positions`, or None: the one check training and
        serving share.

        Rotary and ALiBi positions can be trained past the context (RoPE scaling, position
        interpolation) when ``allow_extension`` is True; None says the caller offers no
        extension (serving). A learned position table has no rows past its last, so it is
        refused even then.

        >>> from workloads.catalog import get_model
        >>> get_model("llama2-7b").context_problem("a context of 5000 tokens", 5000)
        "a context of 5000 tokens exceeds max_positions = 4096, the model's context"
        >>> get_model("llama2-7b").context_problem("seq_len = 8192", 8192, allow_extension=True)
        """
        if tokens <= self.max_positions:
            return None
        head = f"{what} exceeds max_positions = {self.max_positions}"
        if self.positions is PositionKind.LEARNED:
            never = "" if allow_extension is None else ", not even with --allow-context-extension"
            return (
                f"{head}, the rows of its learned position table (learned absolute positions "
                f"have no embedding past the last row and cannot be extended{never})"
            )
        if allow_extension is None:
            return f"{head}, the model's context"
        if allow_extension:
            return None
        return (
            f"{head}, the model's context; give --allow-context-extension "
            "(allow_context_extension = true in a [sweep] file or the Python API) if the run "
            "extends it (e.g. RoPE scaling)"
        )

    @property
    def parameters(self) -> int:
        """All trainable parameters (tied embeddings counted once)."""
        return self._total(active=False)

    @property
    def active_parameters(self) -> int:
        """Parameters one token passes through (MoE: only its ``top_k`` routed experts,
        and the shared ones)."""
        return self._total(active=True)

    def _total(self, active: bool) -> int:
        return (
            self.embedding_parameters()
            + self.dense_layers * self.block_parameters(active=active, dense=True)
            + (self.layers - self.dense_layers) * self.block_parameters(active=active)
            + self.head_parameters()
        )

    def mtp_parameters(self, tp: int = 1) -> int:
        """One tensor-parallel shard of the multi-token-prediction modules: per module the
        two input norms, the column-parallel 2h -> h projection, one block (an MoE one in an
        MoE model) and its final norm; the embedding and output head are the main model's,
        shared, and not counted again (0 without MTP).

        >>> from workloads.catalog import get_model
        >>> round(get_model("deepseek-v3").mtp_parameters() / 1e9, 2)
        11.61
        """
        h = self.hidden
        per = 3 * self._norm_parameters() + 2 * h * h // tp + self.block_parameters(tp)
        return self.mtp_layers * per

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

    def block_parameters(self, tp: int = 1, active: bool = False, dense: bool = False) -> int:
        """One tensor-parallel shard of one transformer block (Megatron sharding).

        Q/K/V and FC1 are column-parallel (weights and biases split by ``tp``); the output
        projection and FC2 are row-parallel (weights split, biases replicated); norms and the
        MoE router are replicated, and so are MLA's down-projections and latent norms
        (Megatron-LM's ``MLASelfAttention``). ``active`` counts only the ``top_k`` routed
        experts; ``dense`` gives one of an MoE model's leading :attr:`dense_layers`.
        """
        h = self.hidden
        norms = self.block_norms * self._norm_parameters()
        attention = self._attention_parameters(tp)
        if not self.is_moe or dense:
            return attention + self._ffn_parameters(self.ffn_hidden, tp) + norms
        routed = self.top_k if active else self.experts
        ffn = routed * self._ffn_parameters(self.expert_width, tp) + h * self.experts
        if self.shared_experts:
            ffn += self._ffn_parameters(self.shared_experts * self.expert_width, tp)
        return attention + ffn + norms

    def expert_parameters(self, tp: int = 1) -> int:
        """One shard of an MoE block's routed experts (what expert parallelism spreads;
        shared experts and the router are dense); 0 for a dense model."""
        return self.experts * self._ffn_parameters(self.expert_width, tp) if self.is_moe else 0

    def _attention_parameters(self, tp: int) -> int:
        h, d, t, a = self.hidden, self.head_dim, tp, self.heads
        if not self.mla:
            qkv_width = a * d // t + 2 * self.kv_heads_per_rank(t) * d
            n = h * qkv_width + a * d * h // t
            return n + (qkv_width + h if self.biases else 0)
        kr, rope, nope = self.kv_lora_rank, self.qk_rope_head_dim, self.qk_nope_head_dim
        v = self.v_head_dim
        if self.q_lora_rank is None:
            q = h * a * d // t
        else:
            qr = self.q_lora_rank
            q = h * qr + self._norm_parameters(qr) + qr * a * d // t
        kv = h * (kr + rope) + self._norm_parameters(kr) + kr * a * (nope + v) // t
        return q + kv + a * v * h // t

    def _ffn_parameters(self, width: int, tp: int) -> int:
        gemms_in = 2 if self.ffn_kind.gated else 1
        n = (gemms_in + 1) * self.hidden * width // tp
        return n + (gemms_in * width // tp + self.hidden if self.biases else 0)

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

    def _norm_parameters(self, width: int | None = None) -> int:
        n = self.hidden if width is None else width
        return 2 * n if self.norm is NormKind.LAYERNORM else n


_OPTIONAL_SIZES = (
    "head_size",
    "expert_ffn_hidden",
    "q_lora_rank",
    "kv_lora_rank",
    "qk_nope_head_dim",
    "qk_rope_head_dim",
    "v_head_dim",
    "sliding_window",
)
