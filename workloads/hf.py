"""Import (and export) Hugging Face ``config.json`` files as :class:`~workloads.model.Model`.

Supported ``model_type`` values: :data:`SUPPORTED_MODEL_TYPES` (``qwen2`` and ``phi3`` read
as Llama: Phi-3's fused projections hold the same weights; ``bloom`` with ALiBi and its
embedding LayerNorm; ``gpt_neox`` with rotary embeddings, whose partial rotation and
parallel residual change neither parameters nor stashed bytes; ``falcon`` with its parallel
attention + MLP block; ``gemma``/``gemma2`` with GeGLU and their own head width;
``deepseek_v2``/``deepseek_v3`` with multi-head latent attention and shared experts;
``qwen3_moe`` with its own head width and no shared expert; ``llama4``/``llama4_text`` with
one shared expert, see :func:`workloads.hf_moe.llama4_text_fields` for what it leaves out). Only the
architecture is read (no weights). ``sliding_window`` of ``mistral``, ``mixtral`` and ``phi3``
(every block) is the Model's. Not modelled: Gemma 2's sliding-window layers (every other
block) and Qwen2's (``use_sliding_window``, off in its published configs), whose attention
counts the whole sequence; OPT's post-norm variant (norm placement does not change FLOPs or
stashed bytes) and OPT's two-row position offset.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from phaze_common.errors import ConfigError
from phaze_common.files import read_json
from workloads.hf_moe import (
    deepseek_fields,
    llama4_text_config,
    llama4_text_fields,
    qwen3_moe_fields,
)
from workloads.hf_reader import Reader, has_dropout, standard_sizes
from workloads.model import FfnKind, Model, NormKind, PositionKind

__all__ = ["SUPPORTED_MODEL_TYPES", "load_hf_config", "model_from_hf"]

_GELU_ACTS = frozenset({"gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh"})
_LLAMA_TYPES = ("llama", "mistral", "mixtral", "qwen2", "phi3")


def _gpt2(r: Reader) -> dict[str, Any]:
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
        dropout=has_dropout(
            r.get("resid_pdrop", 0.1), r.get("embd_pdrop", 0.1), r.get("attn_pdrop", 0.1)
        ),
    )


def _opt(r: Reader) -> dict[str, Any]:
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
        dropout=has_dropout(r.get("dropout", 0.1), r.get("attention_dropout", 0.0)),
    )


def _llama(r: Reader, model_type: str) -> dict[str, Any]:
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
        dropout=has_dropout(r.get("attention_dropout", 0.0)),
        sliding_window=r.size("sliding_window", "sliding_window", None) if windowed else None,
    )


def _bert(r: Reader) -> dict[str, Any]:
    act = r.get("hidden_act", "gelu")
    if act not in _GELU_ACTS:
        r.unsupported("hidden_act", act, "gelu variants")
    return dict(
        **standard_sizes(r),
        type_vocab=r.get("type_vocab_size", 2),
        causal=False,
        embedding_norm=True,
        tied_embeddings=r.get("tie_word_embeddings", True),
        dropout=has_dropout(
            r.get("hidden_dropout_prob", 0.1), r.get("attention_probs_dropout_prob", 0.1)
        ),
    )


def _bloom(r: Reader) -> dict[str, Any]:
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
        dropout=has_dropout(r.get("hidden_dropout", 0.0), r.get("attention_dropout", 0.0)),
    )


def _gpt_neox(r: Reader) -> dict[str, Any]:
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
        dropout=has_dropout(r.get("hidden_dropout", 0.0), r.get("attention_dropout", 0.0)),
    )


def _falcon(r: Reader) -> dict[str, Any]:
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
        dropout=has_dropout(r.get("hidden_dropout", 0.0), r.get("attention_dropout", 0.0)),
    )


def _gemma(r: Reader, model_type: str) -> dict[str, Any]:
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
        dropout=has_dropout(r.get("attention_dropout", 0.0)),
    )


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
        data = llama4_text_config(data, source)
    r = Reader(data)
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
        kw = deepseek_fields(r)
    elif model_type == "qwen3_moe":
        kw = qwen3_moe_fields(r)
    elif model_type in ("llama4", "llama4_text"):
        kw = llama4_text_fields(r)
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
