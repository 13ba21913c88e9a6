"""Import (and export) Hugging Face ``config.json`` files as :class:`~workloads.model.Model`.

Supported ``model_type`` values: :data:`SUPPORTED_MODEL_TYPES` (``qwen2`` and ``phi3`` read
as Llama: Phi-3's fused projections hold the same weights; ``bloom`` with ALiBi and its
embedding LayerNorm; ``gpt_neox`` with rotary embeddings, whose partial rotation and
parallel residual change neither parameters nor stashed bytes; ``falcon`` with its parallel
attention + MLP block; ``gemma``/``gemma2`` with GeGLU and their own head width;
``deepseek_v2``/``deepseek_v3`` with multi-head latent attention and shared experts;
``qwen3_moe`` with its own head width and no shared expert; ``llama4``/``llama4_text`` with
one shared expert, see :func:`_llama4_text` for what it leaves out). Only the
architecture is read (no weights). ``sliding_window`` of ``mistral``, ``mixtral`` and ``phi3``
(every block) is the Model's. Not modelled: Gemma 2's sliding-window layers (every other
block) and Qwen2's (``use_sliding_window``, off in its published configs), whose attention
counts the whole sequence; OPT's post-norm variant (norm placement does not change FLOPs or
stashed bytes) and OPT's two-row position offset.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from phaze_common.errors import ConfigError
from phaze_common.files import read_json
from workloads.model import FfnKind, Model, NormKind, PositionKind

__all__ = ["SUPPORTED_MODEL_TYPES", "load_hf_config", "model_from_hf"]

_GELU_ACTS = frozenset({"gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh"})
_LLAMA_TYPES = ("llama", "mistral", "mixtral", "qwen2", "phi3")
_KIND = {list: "array", dict: "object"}


class _Reader:
    """Reads keys of one config, collecting every missing or unsupported field.

    ``names`` maps each Model field read with :meth:`size` to its config.json key, so the
    Model's own errors can be told in the file's words.
    """

    def __init__(self, data: Mapping[str, Any]) -> None:
        self.data: Mapping[str, Any] = data
        self.problems: list[str] = []
        self.names: dict[str, str] = {}

    def size(self, key: str, field: str, default: Any = ...) -> Any:
        """A positive integer read from ``key`` into the Model's ``field``."""
        self.names[field] = key
        value = self.get(key, default)
        if key in self.data and value is not None and not _is_pos_int(value):
            self.problems.append(f"{key} = {value!r} must be a positive integer")
            return None
        return value

    def in_file_words(self, message: str) -> str:
        """``message`` with each Model field read by :meth:`size` named by its key."""
        for field, key in self.names.items():
            message = re.sub(rf"\b{field} = ", f"{key} = ", message)
        return message

    def get(self, key: str, default: Any = ..., check: Callable[[Any], bool] | None = None) -> Any:
        if key not in self.data or (self.data[key] is None and default is not ...):
            if default is ...:
                self.problems.append(f"missing field {key!r}")
                return None
            return default
        value = self.data[key]
        if isinstance(value, list | dict):  # every key read here holds one number, flag or name
            self.problems.append(
                f"{key} = {value!r} must be a single value, not a JSON {_KIND[type(value)]}"
            )
            return None if default is ... else default
        if check is not None and not check(value):
            self.problems.append(f"unsupported value {key} = {value!r}")
        return value

    def unsupported(self, key: str, value: Any, allowed: str) -> None:
        self.problems.append(f"unsupported value {key} = {value!r} (supported: {allowed})")


def _is_pos_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def _dropout(*rates: Any) -> bool:
    return any(isinstance(r, int | float) and r > 0 for r in rates)


def _gpt2(r: _Reader) -> dict[str, Any]:
    hidden = r.size("n_embd", "hidden")
    act = r.get("activation_function", "gelu_new")
    if act not in _GELU_ACTS | {"relu"}:
        r.unsupported("activation_function", act, "gelu variants, relu")
    return dict(
        layers=r.size("n_layer", "layers"),
        hidden=hidden,
        heads=r.size("n_head", "heads"),
        ffn_hidden=r.size("n_inner", "ffn_hidden", 4 * hidden if isinstance(hidden, int) else None),
        vocab=r.size("vocab_size", "vocab"),
        max_positions=r.size("n_positions", "max_positions"),
        ffn_kind=FfnKind.RELU if act == "relu" else FfnKind.GELU,
        tied_embeddings=r.get("tie_word_embeddings", True),
        dropout=_dropout(
            r.get("resid_pdrop", 0.1), r.get("embd_pdrop", 0.1), r.get("attn_pdrop", 0.1)
        ),
    )


def _opt(r: _Reader) -> dict[str, Any]:
    act = r.get("activation_function", "relu")
    if act not in _GELU_ACTS | {"relu"}:
        r.unsupported("activation_function", act, "relu, gelu variants")
    hidden = r.size("hidden_size", "hidden")
    return dict(
        layers=r.size("num_hidden_layers", "layers"),
        hidden=hidden,
        heads=r.size("num_attention_heads", "heads"),
        ffn_hidden=r.size("ffn_dim", "ffn_hidden"),
        vocab=r.size("vocab_size", "vocab"),
        max_positions=r.size("max_position_embeddings", "max_positions"),
        ffn_kind=FfnKind.RELU if act == "relu" else FfnKind.GELU,
        embedding_dim=r.size("word_embed_proj_dim", "embedding_dim", hidden),
        biases=r.get("enable_bias", True),
        tied_embeddings=r.get("tie_word_embeddings", True),
        dropout=_dropout(r.get("dropout", 0.1), r.get("attention_dropout", 0.0)),
    )


def _standard_sizes(r: _Reader) -> dict[str, Any]:
    """The six sizes most config.json files name the same way."""
    return dict(
        layers=r.size("num_hidden_layers", "layers"),
        hidden=r.size("hidden_size", "hidden"),
        heads=r.size("num_attention_heads", "heads"),
        ffn_hidden=r.size("intermediate_size", "ffn_hidden"),
        vocab=r.size("vocab_size", "vocab"),
        max_positions=r.size("max_position_embeddings", "max_positions"),
    )


def _llama(r: _Reader, model_type: str) -> dict[str, Any]:
    hidden, heads = r.size("hidden_size", "hidden"), r.size("num_attention_heads", "heads")
    act = r.get("hidden_act", "silu")
    if act != "silu":
        r.unsupported("hidden_act", act, "silu (SwiGLU)")
    head_dim = r.get("head_dim", None)
    if head_dim is not None and isinstance(hidden, int) and isinstance(heads, int) and heads:
        if head_dim * heads != hidden:
            r.unsupported(
                "head_dim", head_dim, f"hidden_size / num_attention_heads = {hidden / heads:g}"
            )
    # Qwen2 biases Q, K and V (implicitly); counted here on every projection (+0.02 %)
    attention_bias = r.get("attention_bias", model_type == "qwen2")
    mlp_bias = r.get("mlp_bias", attention_bias)
    if attention_bias != mlp_bias:
        r.unsupported("mlp_bias", mlp_bias, f"the same as attention_bias = {attention_bias}")
    moe = model_type == "mixtral"
    windowed = model_type in ("mistral", "mixtral", "phi3")  # every block (transformers)
    return dict(
        layers=r.size("num_hidden_layers", "layers"),
        hidden=hidden,
        heads=heads,
        kv_heads=r.size("num_key_value_heads", "kv_heads", heads),
        ffn_hidden=r.size("intermediate_size", "ffn_hidden"),
        vocab=r.size("vocab_size", "vocab"),
        max_positions=r.size("max_position_embeddings", "max_positions"),
        ffn_kind=FfnKind.SWIGLU,
        norm=NormKind.RMSNORM,
        positions=PositionKind.ROTARY,
        experts=r.size("num_local_experts", "experts") if moe else 1,
        top_k=r.size("num_experts_per_tok", "top_k") if moe else 1,
        tied_embeddings=r.get("tie_word_embeddings", False),
        biases=bool(attention_bias),
        dropout=_dropout(r.get("attention_dropout", 0.0)),
        sliding_window=r.size("sliding_window", "sliding_window", None) if windowed else None,
    )


def _bert(r: _Reader) -> dict[str, Any]:
    act = r.get("hidden_act", "gelu")
    if act not in _GELU_ACTS:
        r.unsupported("hidden_act", act, "gelu variants")
    return dict(
        **_standard_sizes(r),
        type_vocab=r.get("type_vocab_size", 2),
        causal=False,
        embedding_norm=True,
        tied_embeddings=r.get("tie_word_embeddings", True),
        dropout=_dropout(
            r.get("hidden_dropout_prob", 0.1), r.get("attention_probs_dropout_prob", 0.1)
        ),
    )


def _bloom(r: _Reader) -> dict[str, Any]:
    heads = r.get("n_head", None) or r.get("num_attention_heads")
    hidden = r.get("hidden_size", None) or r.get("n_embed")
    return dict(
        layers=r.get("n_layer", None) or r.get("num_hidden_layers"),
        hidden=hidden,
        heads=heads,
        ffn_hidden=4 * hidden if isinstance(hidden, int) else None,
        vocab=r.get("vocab_size"),
        max_positions=r.get("seq_length", 2048),
        positions=PositionKind.ALIBI,
        embedding_norm=True,
        tied_embeddings=r.get("tie_word_embeddings", True),
        dropout=_dropout(r.get("hidden_dropout", 0.0), r.get("attention_dropout", 0.0)),
    )


def _gpt_neox(r: _Reader) -> dict[str, Any]:
    act = r.get("hidden_act", "gelu")
    if act not in _GELU_ACTS:
        r.unsupported("hidden_act", act, "gelu variants")
    return dict(
        layers=r.get("num_hidden_layers"),
        hidden=r.get("hidden_size"),
        heads=r.get("num_attention_heads"),
        ffn_hidden=r.get("intermediate_size"),
        vocab=r.get("vocab_size"),
        max_positions=r.get("max_position_embeddings"),
        positions=PositionKind.ROTARY,
        tied_embeddings=r.get("tie_word_embeddings", False),
        dropout=_dropout(r.get("hidden_dropout", 0.0), r.get("attention_dropout", 0.0)),
    )


def _falcon(r: _Reader) -> dict[str, Any]:
    """Falcon (transformers' ``FalconConfig``): K/V heads from ``num_kv_heads`` under the new
    decoder architecture (40B, 180B), one K/V head with ``multi_query``, else all heads;
    parallel attention + MLP with one shared norm (7B) or one norm each (new architecture)."""
    hidden = r.size("hidden_size", "hidden")
    heads = r.size("num_attention_heads", "heads")
    new_arch = r.get("new_decoder_architecture", False, check=lambda v: isinstance(v, bool))
    parallel = r.get("parallel_attn", True, check=lambda v: isinstance(v, bool))
    if new_arch is True:
        kv_heads = r.size("num_kv_heads", "kv_heads")
        parallel = True  # the new architecture is always parallel
    elif r.get("multi_query", True, check=lambda v: isinstance(v, bool)) is True:
        kv_heads = 1
    else:
        kv_heads = heads
    norms = 2
    if parallel is True and new_arch is not True:
        norms = 1
    elif new_arch is True:
        norms = r.get("num_ln_in_parallel_attn", None) or 2
        if norms not in (1, 2):
            r.unsupported("num_ln_in_parallel_attn", norms, "1, 2")
            norms = 2
    act = r.get("activation", "gelu")
    if act not in _GELU_ACTS:
        r.unsupported("activation", act, "gelu variants")
    default_ffn = 4 * hidden if isinstance(hidden, int) else None
    return dict(
        layers=r.size("num_hidden_layers", "layers"),
        hidden=hidden,
        heads=heads,
        kv_heads=kv_heads,
        ffn_hidden=r.size("ffn_hidden_size", "ffn_hidden", default_ffn),
        vocab=r.size("vocab_size", "vocab"),
        max_positions=r.size("max_position_embeddings", "max_positions", 2048),
        positions=PositionKind.ALIBI if r.get("alibi", False) is True else PositionKind.ROTARY,
        parallel_block=parallel is True,
        block_norms=norms,
        biases=r.get("bias", False),
        tied_embeddings=r.get("tie_word_embeddings", True),
        dropout=_dropout(r.get("hidden_dropout", 0.0), r.get("attention_dropout", 0.0)),
    )


def _gemma(r: _Reader, model_type: str) -> dict[str, Any]:
    """Gemma and Gemma 2: GeGLU, RMSNorm, rotary, tied embeddings, ``head_dim`` independent
    of ``hidden_size / num_attention_heads``; Gemma 2 adds a norm after each sub-layer."""
    act = r.get("hidden_activation", None) or r.get("hidden_act", "gelu_pytorch_tanh")
    if act not in _GELU_ACTS:
        r.unsupported("hidden_activation", act, "gelu variants (GeGLU)")
    heads = r.size("num_attention_heads", "heads")
    bias = r.get("attention_bias", False, check=lambda v: isinstance(v, bool))
    return dict(
        layers=r.size("num_hidden_layers", "layers"),
        hidden=r.size("hidden_size", "hidden"),
        heads=heads,
        kv_heads=r.size("num_key_value_heads", "kv_heads", heads),
        head_size=r.size("head_dim", "head_size", 256),
        ffn_hidden=r.size("intermediate_size", "ffn_hidden"),
        vocab=r.size("vocab_size", "vocab"),
        max_positions=r.size("max_position_embeddings", "max_positions", 8192),
        ffn_kind=FfnKind.GEGLU,
        norm=NormKind.RMSNORM,
        positions=PositionKind.ROTARY,
        block_norms=4 if model_type == "gemma2" else 2,
        tied_embeddings=r.get("tie_word_embeddings", True),
        biases=bias is True,
        dropout=_dropout(r.get("attention_dropout", 0.0)),
    )


def _deepseek(r: _Reader) -> dict[str, Any]:
    """DeepSeek-V2/V3: multi-head latent attention, DeepSeekMoE (shared experts, the first
    ``first_k_dense_replace`` blocks dense). V3's multi-token-prediction modules
    (``num_nextn_predict_layers``) become ``mtp_layers``."""
    act = r.get("hidden_act", "silu")
    if act != "silu":
        r.unsupported("hidden_act", act, "silu (SwiGLU)")
    if r.get("attention_bias", False) is not False:
        r.unsupported("attention_bias", r.data["attention_bias"], "false")
    freq = r.get("moe_layer_freq", 1)
    if freq != 1:
        r.unsupported("moe_layer_freq", freq, "1 (every block after the dense ones is MoE)")
    experts = r.size("n_routed_experts", "experts", None)
    moe = experts is not None
    r.names |= {"dense_layers": "first_k_dense_replace", "shared_experts": "n_shared_experts"}
    return dict(
        **_standard_sizes(r),
        ffn_kind=FfnKind.SWIGLU,
        norm=NormKind.RMSNORM,
        positions=PositionKind.ROTARY,
        experts=experts if moe else 1,
        top_k=r.size("num_experts_per_tok", "top_k") if moe else 1,
        expert_ffn_hidden=r.size("moe_intermediate_size", "expert_ffn_hidden") if moe else None,
        shared_experts=(r.get("n_shared_experts", 0, check=_is_count) or 0) if moe else 0,
        dense_layers=(r.get("first_k_dense_replace", 0, check=_is_count) or 0) if moe else 0,
        mtp_layers=_mtp_layers(r),
        **(_routing_groups(r) if moe else {}),
        q_lora_rank=r.size("q_lora_rank", "q_lora_rank", None),
        kv_lora_rank=r.size("kv_lora_rank", "kv_lora_rank"),
        qk_nope_head_dim=r.size("qk_nope_head_dim", "qk_nope_head_dim"),
        qk_rope_head_dim=r.size("qk_rope_head_dim", "qk_rope_head_dim"),
        v_head_dim=r.size("v_head_dim", "v_head_dim"),
        tied_embeddings=r.get("tie_word_embeddings", False),
        biases=False,
        dropout=_dropout(r.get("attention_dropout", 0.0)),
    )


def _mtp_layers(r: _Reader) -> int:
    """Multi-token-prediction modules: ``num_nextn_predict_layers`` (DeepSeek's key), else
    ``mtp_num_layers`` (Megatron-Core's ``--mtp-num-layers`` as a config key), else none."""
    other = r.get("mtp_num_layers", 0, check=_is_count) or 0
    if "num_nextn_predict_layers" in r.data:
        r.names["mtp_layers"] = "num_nextn_predict_layers"
    elif "mtp_num_layers" in r.data:
        r.names["mtp_layers"] = "mtp_num_layers"
    return r.get("num_nextn_predict_layers", other, check=_is_count) or 0


def _routing_groups(r: _Reader) -> dict[str, int]:
    """Group-limited routing (``expert_groups``, ``routed_groups``) from ``n_group`` and
    ``topk_group``: each token's experts come from at most ``topk_group`` of the ``n_group``
    expert groups (DeepSeek-V2's device-limited and V3's node-limited routing,
    ``DeepseekV3TopkRouter`` / ``MoEGate`` in modeling_deepseek.py); none when the config has
    one group or ``topk_method = "greedy"`` (V2-Lite: no group limit)."""
    groups = r.get("n_group", 1, check=_is_pos_int)
    routed = r.get("topk_group", groups, check=_is_pos_int)
    if r.get("topk_method", "") == "greedy" or not _is_pos_int(groups) or groups <= 1:
        return {}
    return {"expert_groups": groups, "routed_groups": routed}


def _is_count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _leading_dense(r: _Reader, layers: Any, moe_blocks: Any, key: str) -> int:
    """The count of dense blocks before the MoE ones, given the MoE block indices a config
    implies; a config whose dense blocks are not all first (Llama 4 Maverick's alternating
    blocks) is refused, as a Model holds only leading dense blocks (``dense_layers``)."""
    if not _is_pos_int(layers):
        return 0
    moe = sorted(set(moe_blocks))
    if not moe or moe != list(range(layers - len(moe), layers)):
        shown = moe if len(moe) <= 8 else [*moe[:4], "...", *moe[-2:]]
        r.problems.append(
            f"unsupported MoE blocks {shown} from {key} (supported: every block an MoE block "
            "from some index on; interleaved dense blocks are not modelled)"
        )
        return 0
    return layers - len(moe)


def _index_list(r: _Reader, key: str) -> list[int]:
    """A JSON array of block indices (``mlp_only_layers``, ``moe_layers``); [] if absent."""
    value = r.data.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(_is_count(v) for v in value):
        r.problems.append(f"{key} = {value!r} must be a list of block indices")
        return []
    return value


def _gated_attention_sizes(r: _Reader) -> dict[str, Any]:
    """Sizes, attention and flags Qwen3-MoE and Llama 4 read alike: SwiGLU, RMSNorm, rotary,
    no biases, grouped K/V heads, ``head_dim`` that may differ from hidden / heads."""
    act = r.get("hidden_act", "silu")
    if act != "silu":
        r.unsupported("hidden_act", act, "silu (SwiGLU)")
    if r.get("attention_bias", False) is not False:
        r.unsupported("attention_bias", r.data["attention_bias"], "false")
    hidden, heads = r.size("hidden_size", "hidden"), r.size("num_attention_heads", "heads")
    head_dim = r.size("head_dim", "head_size", None)
    if _is_pos_int(hidden) and _is_pos_int(heads) and head_dim is not None:
        if head_dim * heads == hidden:
            head_dim = None  # the Model's default, hidden / heads
    return dict(
        layers=r.size("num_hidden_layers", "layers"),
        hidden=hidden,
        heads=heads,
        kv_heads=r.size("num_key_value_heads", "kv_heads", heads),
        head_size=head_dim,
        vocab=r.size("vocab_size", "vocab"),
        ffn_kind=FfnKind.SWIGLU,
        norm=NormKind.RMSNORM,
        positions=PositionKind.ROTARY,
        tied_embeddings=r.get("tie_word_embeddings", False),
        biases=False,
        dropout=_dropout(r.get("attention_dropout", 0.0)),
    )


def _ffn_widths(dense_width: Any, expert_width: Any, dense_layers: int) -> dict[str, Any]:
    """``ffn_hidden`` and ``expert_ffn_hidden`` in the Model's one form: without dense blocks
    the dense width is unused and ``ffn_hidden`` is the experts' width; with them,
    ``expert_ffn_hidden`` is set only if the experts' width differs."""
    if dense_layers == 0:
        return dict(ffn_hidden=expert_width, expert_ffn_hidden=None)
    same = expert_width == dense_width
    return dict(ffn_hidden=dense_width, expert_ffn_hidden=None if same else expert_width)


def _qwen3_moe(r: _Reader) -> dict[str, Any]:
    """Qwen3-MoE: routed experts of ``moe_intermediate_size`` (no shared expert), a block
    MoE when ``(i + 1) % decoder_sparse_step == 0`` and ``i`` not in ``mlp_only_layers``
    (else dense of ``intermediate_size``). Its per-head RMSNorm on Q and K (``2 x head_dim``
    weights a block) is not modelled, nor ``norm_topk_prob`` (routing weights, no cost)."""
    kw = _gated_attention_sizes(r)
    if r.get("use_sliding_window", False) is not False:
        r.unsupported("use_sliding_window", r.data["use_sliding_window"], "false")
    layers = kw["layers"]
    step = r.size("decoder_sparse_step", "decoder_sparse_step", 1)
    dense_only = set(_index_list(r, "mlp_only_layers"))
    dense_width = r.size("intermediate_size", "ffn_hidden")
    moe_blocks = []
    if _is_pos_int(layers) and _is_pos_int(step):
        moe_blocks = [i for i in range(layers) if i not in dense_only and (i + 1) % step == 0]
    key = "decoder_sparse_step and mlp_only_layers"
    dense_layers = _leading_dense(r, layers, moe_blocks, key)
    expert_width = r.size("moe_intermediate_size", "expert_ffn_hidden")
    return dict(
        **kw,
        **_ffn_widths(dense_width, expert_width, dense_layers),
        max_positions=r.size("max_position_embeddings", "max_positions"),
        experts=r.size("num_experts", "experts"),
        top_k=r.size("num_experts_per_tok", "top_k"),
        dense_layers=dense_layers,
    )


def _llama4_text(r: _Reader) -> dict[str, Any]:
    """Llama 4's text model (``llama4_text``, or the ``text_config`` of ``llama4``): routed
    experts of ``intermediate_size`` beside one shared expert of the same width, MoE blocks
    every ``interleave_moe_layer_step`` (or those ``moe_layers`` lists), dense blocks of
    ``intermediate_size_mlp``. Not modelled: the vision encoder of ``llama4``; attention
    chunked to ``attention_chunk_size`` tokens in the RoPE blocks (counted whole); the NoPE
    blocks (``no_rope_layers``, counted rotary: the rotation has no parameters); the
    weightless L2 norm on Q and K (``use_qk_norm``)."""
    kw = _gated_attention_sizes(r)
    layers = kw["layers"]
    dense_width = r.size("intermediate_size_mlp", "ffn_hidden")
    if "moe_layers" in r.data and r.data["moe_layers"] is not None:
        moe_blocks, key = _index_list(r, "moe_layers"), "moe_layers"
    else:
        step = r.size("interleave_moe_layer_step", "interleave_moe_layer_step", 1)
        moe_blocks, key = [], "interleave_moe_layer_step"
        if _is_pos_int(layers) and _is_pos_int(step):
            moe_blocks = list(range(step - 1, layers, step))
    dense_layers = _leading_dense(r, layers, moe_blocks, key)
    expert_width = r.size("intermediate_size", "expert_ffn_hidden")
    return dict(
        **kw,
        **_ffn_widths(dense_width, expert_width, dense_layers),
        max_positions=r.size("max_position_embeddings", "max_positions"),
        experts=r.size("num_local_experts", "experts"),
        top_k=r.size("num_experts_per_tok", "top_k"),
        shared_experts=1,
        dense_layers=dense_layers,
    )


def _llama4_text_config(data: Mapping[str, Any], source: str) -> dict[str, Any]:
    """The ``text_config`` of a ``llama4`` config, with the top level's
    ``tie_word_embeddings`` (where Llama 4 states it)."""
    text = data.get("text_config")
    if not isinstance(text, Mapping):
        raise ConfigError(
            f"{source} (model_type 'llama4'): text_config = {text!r} must be a JSON object "
            "(the text model's config)"
        )
    tied = {k: data[k] for k in ("tie_word_embeddings",) if k in data}
    return {**text, **tied}


SUPPORTED_MODEL_TYPES: tuple[str, ...] = (
    "gpt2",
    "opt",
    "llama",
    "mistral",
    "mixtral",
    "qwen2",
    "phi3",
    "bert",
    "bloom",
    "gpt_neox",
    "falcon",
    "gemma",
    "gemma2",
    "deepseek_v2",
    "deepseek_v3",
    "qwen3_moe",
    "llama4",
    "llama4_text",
)


def model_from_hf(
    data: Mapping[str, Any],
    name: str,
    source: str = "config.json",
    tokens_to_train: int | None = None,
) -> Model:
    """A Model from the parsed contents of a ``config.json``.

    Raises
    ------
    ConfigError
        Naming every missing field, unsupported ``model_type`` or value, and invalid size.
    """
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: expected a JSON object, got {type(data).__name__}")
    model_type = data.get("model_type")
    if model_type not in SUPPORTED_MODEL_TYPES:
        what = (
            "missing field 'model_type'" if model_type is None else f"model_type = {model_type!r}"
        )
        raise ConfigError(
            f"{source}: {what} is not supported (supported: {', '.join(SUPPORTED_MODEL_TYPES)})"
        )
    if model_type == "llama4":
        data = _llama4_text_config(data, source)
    r = _Reader(data)
    if model_type == "gpt2":
        kw = _gpt2(r)
    elif model_type == "opt":
        kw = _opt(r)
    elif model_type == "bert":
        kw = _bert(r)
    elif model_type == "bloom":
        kw = _bloom(r)
    elif model_type == "gpt_neox":
        kw = _gpt_neox(r)
    elif model_type == "falcon":
        kw = _falcon(r)
    elif model_type in ("gemma", "gemma2"):
        kw = _gemma(r, model_type)
    elif model_type in ("deepseek_v2", "deepseek_v3"):
        kw = _deepseek(r)
    elif model_type == "qwen3_moe":
        kw = _qwen3_moe(r)
    elif model_type in ("llama4", "llama4_text"):
        kw = _llama4_text(r)
    else:
        kw = _llama(r, model_type)
    if r.problems:
        raise ConfigError(f"{source} (model_type {model_type!r}): " + "; ".join(r.problems))
    try:
        return Model(name=name, source=source, tokens_to_train=tokens_to_train, **kw)
    except (ConfigError, TypeError) as e:
        raise ConfigError(f"{source}: {r.in_file_words(str(e))}") from None


def load_hf_config(path: str | Path) -> Model:
    """Read a Hugging Face ``config.json`` (one of :data:`SUPPORTED_MODEL_TYPES`).

    The model is named after ``_name_or_path`` if the file has one, else its directory
    (for ``.../<name>/config.json``) or its file name.

    Raises
    ------
    ConfigError
        The file cannot be read, is not valid JSON (with line and column), or has a missing
        or unsupported field.
    """
    path = Path(path)
    source = str(path)
    data = read_json(path, "model config")
    name = data.get("_name_or_path") if isinstance(data, dict) else None
    if not isinstance(name, str) or not name:
        name = path.parent.name if path.name == "config.json" and path.parent.name else path.stem
    return model_from_hf(data, name=name, source=source)
