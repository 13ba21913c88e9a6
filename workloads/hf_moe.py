"""The mixture-of-experts families of Hugging Face ``config.json``: DeepSeek-V2/V3
(multi-head latent attention, shared experts, group-limited routing, multi-token prediction),
Qwen3-MoE and Llama 4 (one shared expert; :func:`llama4_text_fields` says what it leaves
out)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from phaze_common.errors import ConfigError
from workloads.hf_reader import Reader, has_dropout, is_count, is_pos_int, standard_sizes
from workloads.model import FfnKind, NormKind, PositionKind

__all__ = ["deepseek_fields", "llama4_text_config", "llama4_text_fields", "qwen3_moe_fields"]


def deepseek_fields(r: Reader) -> dict[str, Any]:
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
        **standard_sizes(r),
        ffn_kind=FfnKind.SWIGLU,
        norm=NormKind.RMSNORM,
        positions=PositionKind.ROTARY,
        experts=experts if moe else 1,
        top_k=r.size("num_experts_per_tok", "top_k") if moe else 1,
        expert_ffn_hidden=r.size("moe_intermediate_size", "expert_ffn_hidden") if moe else None,
        shared_experts=(r.get("n_shared_experts", 0, check=is_count) or 0) if moe else 0,
        dense_layers=(r.get("first_k_dense_replace", 0, check=is_count) or 0) if moe else 0,
        mtp_layers=_mtp_layers(r),
        **(_routing_groups(r) if moe else {}),
        q_lora_rank=r.size("q_lora_rank", "q_lora_rank", None),
        kv_lora_rank=r.size("kv_lora_rank", "kv_lora_rank"),
        qk_nope_head_dim=r.size("qk_nope_head_dim", "qk_nope_head_dim"),
        qk_rope_head_dim=r.size("qk_rope_head_dim", "qk_rope_head_dim"),
        v_head_dim=r.size("v_head_dim", "v_head_dim"),
        tied_embeddings=r.get("tie_word_embeddings", False),
        biases=False,
        dropout=has_dropout(r.get("attention_dropout", 0.0)),
    )


def _mtp_layers(r: Reader) -> int:
    """Multi-token-prediction modules: ``num_nextn_predict_layers`` (DeepSeek's key), else
    ``mtp_num_layers`` (Megatron-Core's ``--mtp-num-layers`` as a config key), else none."""
    other = r.get("mtp_num_layers", 0, check=is_count) or 0
    if "num_nextn_predict_layers" in r.data:
        r.names["mtp_layers"] = "num_nextn_predict_layers"
    elif "mtp_num_layers" in r.data:
        r.names["mtp_layers"] = "mtp_num_layers"
    return r.get("num_nextn_predict_layers", other, check=is_count) or 0


def _routing_groups(r: Reader) -> dict[str, int]:
    """Group-limited routing (``expert_groups``, ``routed_groups``) from ``n_group`` and
    ``topk_group``: each token's experts come from at most ``topk_group`` of the ``n_group``
    expert groups (DeepSeek-V2's device-limited and V3's node-limited routing,
    ``DeepseekV3TopkRouter`` / ``MoEGate`` in modeling_deepseek.py); none when the config has
    one group or ``topk_method = "greedy"`` (V2-Lite: no group limit)."""
    groups = r.get("n_group", 1, check=is_pos_int)
    routed = r.get("topk_group", groups, check=is_pos_int)
    if r.get("topk_method", "") == "greedy" or not is_pos_int(groups) or groups <= 1:
        return {}
    return {"expert_groups": groups, "routed_groups": routed}


def _leading_dense(r: Reader, layers: Any, moe_blocks: Any, key: str) -> int:
    """The count of dense blocks before the MoE ones, given the MoE block indices a config
    implies; a config whose dense blocks are not all first (Llama 4 Maverick's alternating
    blocks) is refused, as a Model holds only leading dense blocks (``dense_layers``)."""
    if not is_pos_int(layers):
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


def _index_list(r: Reader, key: str) -> list[int]:
    """A JSON array of block indices (``mlp_only_layers``, ``moe_layers``); [] if absent."""
    value = r.data.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(is_count(v) for v in value):
        r.problems.append(f"{key} = {value!r} must be a list of block indices")
        return []
    return value


def _gated_attention_sizes(r: Reader) -> dict[str, Any]:
    """Sizes, attention and flags Qwen3-MoE and Llama 4 read alike: SwiGLU, RMSNorm, rotary,
    no biases, grouped K/V heads, ``head_dim`` that may differ from hidden / heads."""
    act = r.get("hidden_act", "silu")
    if act != "silu":
        r.unsupported("hidden_act", act, "silu (SwiGLU)")
    if r.get("attention_bias", False) is not False:
        r.unsupported("attention_bias", r.data["attention_bias"], "false")
    hidden, heads = r.size("hidden_size", "hidden"), r.size("num_attention_heads", "heads")
    head_dim = r.size("head_dim", "head_size", None)
    if is_pos_int(hidden) and is_pos_int(heads) and head_dim is not None:
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
        dropout=has_dropout(r.get("attention_dropout", 0.0)),
    )


def _ffn_widths(dense_width: Any, expert_width: Any, dense_layers: int) -> dict[str, Any]:
    """``ffn_hidden`` and ``expert_ffn_hidden`` in the Model's one form: without dense blocks
    the dense width is unused and ``ffn_hidden`` is the experts' width; with them,
    ``expert_ffn_hidden`` is set only if the experts' width differs."""
    if dense_layers == 0:
        return dict(ffn_hidden=expert_width, expert_ffn_hidden=None)
    same = expert_width == dense_width
    return dict(ffn_hidden=dense_width, expert_ffn_hidden=None if same else expert_width)


def qwen3_moe_fields(r: Reader) -> dict[str, Any]:
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
    if is_pos_int(layers) and is_pos_int(step):
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


def llama4_text_fields(r: Reader) -> dict[str, Any]:
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
        if is_pos_int(layers) and is_pos_int(step):
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


def llama4_text_config(data: Mapping[str, Any], source: str) -> dict[str, Any]:
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
