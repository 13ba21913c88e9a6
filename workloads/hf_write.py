"""A model as a Hugging Face ``config.json`` (:func:`to_hf_config`): the family that
expresses its architecture, with the fields :func:`workloads.hf.model_from_hf` reads back."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from phaze_common.errors import ConfigError
from workloads.hf import model_from_hf
from workloads.model import FfnKind, Model, PositionKind

__all__ = ["to_hf_config"]


def _llama_like_fields(m: Model, drop: float) -> dict[str, Any]:
    """The fields of the families built on Llama's config: DeepSeek-V3 (MLA), Gemma
    (GeGLU), Llama 4 (MoE with a shared expert), Qwen3-MoE (MoE with its own head or expert
    width, or leading dense blocks), Mixtral (MoE), Mistral (SwiGLU, a sliding window) and
    Llama (SwiGLU)."""
    common_llama = {
        "num_hidden_layers": m.layers,
        "hidden_size": m.hidden,
        "num_attention_heads": m.heads,
        "num_key_value_heads": m.kv_heads,
        "intermediate_size": m.ffn_hidden,
        "vocab_size": m.vocab,
        "max_position_embeddings": m.max_positions,
        "hidden_act": "silu",
        "tie_word_embeddings": m.tied_embeddings,
        "attention_bias": m.biases,
        "mlp_bias": m.biases,
        "attention_dropout": drop,
    }
    if m.mla:
        data = {
            "model_type": "deepseek_v3",
            **common_llama,
            "q_lora_rank": m.q_lora_rank,
            "kv_lora_rank": m.kv_lora_rank,
            "qk_nope_head_dim": m.qk_nope_head_dim,
            "qk_rope_head_dim": m.qk_rope_head_dim,
            "v_head_dim": m.v_head_dim,
            "num_nextn_predict_layers": m.mtp_layers,
        }
        if m.is_moe:
            data |= {
                "n_routed_experts": m.experts,
                "num_experts_per_tok": m.top_k,
                "moe_intermediate_size": m.expert_width,
                "n_shared_experts": m.shared_experts,
                "first_k_dense_replace": m.dense_layers,
            }
            if m.expert_groups:
                data |= {"n_group": m.expert_groups, "topk_group": m.routed_groups}
    elif m.ffn_kind is FfnKind.GEGLU:
        data = {
            "model_type": "gemma2" if m.block_norms == 4 else "gemma",
            **common_llama,
            "head_dim": m.head_dim,
            "hidden_activation": "gelu_pytorch_tanh",
            "attention_bias": m.biases,
        }
        for key in ("hidden_act", "mlp_bias"):
            del data[key]
    elif m.is_moe and m.shared_experts:
        data = _llama4_fields(m, common_llama)
    elif m.is_moe and (m.head_size or m.expert_ffn_hidden or m.dense_layers):
        data = {
            "model_type": "qwen3_moe",
            **common_llama,
            "head_dim": m.head_dim,
            "num_experts": m.experts,
            "num_experts_per_tok": m.top_k,
            "moe_intermediate_size": m.expert_width,
            "decoder_sparse_step": 1,
            "mlp_only_layers": list(range(m.dense_layers)),
        }
        del data["mlp_bias"]
    elif m.is_moe:
        data = {
            "model_type": "mixtral",
            **common_llama,
            "num_local_experts": m.experts,
            "num_experts_per_tok": m.top_k,
            "sliding_window": m.sliding_window,
        }
    elif m.sliding_window is not None:
        data = {"model_type": "mistral", **common_llama, "sliding_window": m.sliding_window}
    else:
        data = {"model_type": "llama", **common_llama}
    return data


def _llama4_fields(m: Model, common_llama: dict[str, Any]) -> dict[str, Any]:
    """The fields of Llama 4's text config (``llama4_text``): one shared expert as wide as
    each routed one (``intermediate_size``), dense blocks of ``intermediate_size_mlp``."""
    data = {
        "model_type": "llama4_text",
        **common_llama,
        "head_dim": m.head_dim,
        "intermediate_size": m.expert_width,
        "intermediate_size_mlp": m.ffn_hidden,
        "num_local_experts": m.experts,
        "num_experts_per_tok": m.top_k,
        "moe_layers": list(range(m.dense_layers, m.layers)),
    }
    del data["mlp_bias"]
    return data


def _falcon_fields(m: Model, drop: float) -> dict[str, Any]:
    """The fields of Falcon's config (a parallel block)."""
    return {
        "model_type": "falcon",
        "num_hidden_layers": m.layers,
        "hidden_size": m.hidden,
        "num_attention_heads": m.heads,
        "num_kv_heads": m.kv_heads,
        "new_decoder_architecture": m.block_norms == 2,
        "multi_query": m.kv_heads == 1,
        "parallel_attn": True,
        "ffn_hidden_size": m.ffn_hidden,
        "vocab_size": m.vocab,
        "max_position_embeddings": m.max_positions,
        "alibi": m.positions is PositionKind.ALIBI,
        "bias": m.biases,
        "tie_word_embeddings": m.tied_embeddings,
        "hidden_dropout": drop,
        "attention_dropout": drop,
    }


def _classic_fields(m: Model, drop: float) -> dict[str, Any]:
    """The fields of the families before Llama: BERT (an encoder), BLOOM (ALiBi), OPT (a
    separate embedding width or ReLU), else GPT-2."""
    if not m.causal:
        data = {
            "model_type": "bert",
            "num_hidden_layers": m.layers,
            "hidden_size": m.hidden,
            "num_attention_heads": m.heads,
            "intermediate_size": m.ffn_hidden,
            "vocab_size": m.vocab,
            "max_position_embeddings": m.max_positions,
            "type_vocab_size": m.type_vocab,
            "hidden_act": "gelu",
            "tie_word_embeddings": m.tied_embeddings,
            "hidden_dropout_prob": drop,
            "attention_probs_dropout_prob": drop,
        }
    elif m.positions is PositionKind.ALIBI:
        data = {
            "model_type": "bloom",
            "n_layer": m.layers,
            "hidden_size": m.hidden,
            "n_head": m.heads,
            "vocab_size": m.vocab,
            "seq_length": m.max_positions,
            "tie_word_embeddings": m.tied_embeddings,
            "hidden_dropout": drop,
            "attention_dropout": drop,
        }
    elif m.embedding_dim != m.hidden or m.ffn_kind is FfnKind.RELU:
        data = {
            "model_type": "opt",
            "num_hidden_layers": m.layers,
            "hidden_size": m.hidden,
            "num_attention_heads": m.heads,
            "ffn_dim": m.ffn_hidden,
            "vocab_size": m.vocab,
            "max_position_embeddings": m.max_positions,
            "activation_function": str(m.ffn_kind),
            "word_embed_proj_dim": m.embedding_dim,
            "enable_bias": m.biases,
            "tie_word_embeddings": m.tied_embeddings,
            "dropout": drop,
            "attention_dropout": 0.0,
        }
    else:
        data = {
            "model_type": "gpt2",
            "n_layer": m.layers,
            "n_embd": m.hidden,
            "n_head": m.heads,
            "n_inner": m.ffn_hidden,
            "vocab_size": m.vocab,
            "n_positions": m.max_positions,
            "activation_function": "gelu_new",
            "tie_word_embeddings": m.tied_embeddings,
            "resid_pdrop": drop,
            "embd_pdrop": drop,
            "attn_pdrop": drop,
        }
    return data


def to_hf_config(model: Model) -> dict[str, Any]:
    """A ``config.json`` dictionary that :func:`model_from_hf` reads back as ``model``.

    The family follows the architecture: MLA -> ``deepseek_v3``, GeGLU -> ``gemma``
    (``gemma2`` with post-norms), a parallel block -> ``falcon``, MoE with a shared expert
    -> ``llama4_text``, MoE with its own head or expert width or dense blocks ->
    ``qwen3_moe``, other MoE -> ``mixtral``, SwiGLU
    -> ``llama`` (``mistral`` with a sliding window), encoder -> ``bert``, ALiBi -> ``bloom``, a separate embedding width or ReLU
    -> ``opt``, else ``gpt2``.

    Raises
    ------
    ConfigError
        The model combines features no supported family has (e.g. SwiGLU with learned
        positions); the message names the fields that would not survive.
    """
    m = model
    drop = 0.1 if m.dropout else 0.0
    if m.mla or m.ffn_kind is FfnKind.GEGLU:
        data = _llama_like_fields(m, drop)
    elif m.parallel_block:
        data = _falcon_fields(m, drop)
    elif m.is_moe or m.ffn_kind is FfnKind.SWIGLU:
        data = _llama_like_fields(m, drop)
    else:
        data = _classic_fields(m, drop)
    data["_name_or_path"] = m.name
    back = model_from_hf(data, m.name, m.source, m.tokens_to_train)
    lost = [
        f"{f} = {getattr(m, f)!r}"
        for f in (fld.name for fld in fields(m))
        if getattr(back, f) != getattr(m, f)
    ]
    if lost:
        raise ConfigError(
            f"model {m.name!r}: no supported config.json family ({data['model_type']} chosen) "
            f"can express {', '.join(lost)}"
        )
    return data
