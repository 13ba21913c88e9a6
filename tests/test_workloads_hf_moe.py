"""Qwen3-MoE, Llama 4 and Mixtral 8x22B config.json import and the MoE catalog entries.

Each config holds the architecture keys of the published ``config.json`` on the Hugging Face
Hub (Qwen/Qwen3-235B-A22B, meta-llama/Llama-4-Scout-17B-16E, mistral-community/Mixtral-8x22B-
v0.1, main branch). Exact counts are the Hugging Face module trees' tensor shapes, laid out
here independently of :class:`Model`'s formulas.
"""

import json
import math
from dataclasses import replace

import pytest

from phaze_common.errors import ConfigError
from workloads import build_layer_graph, get_model, load_hf_config, to_hf_config
from workloads.setup import TrainingSetup

QWEN3_235B = {
    "model_type": "qwen3_moe",
    "attention_bias": False,
    "attention_dropout": 0.0,
    "decoder_sparse_step": 1,
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "intermediate_size": 12288,
    "max_position_embeddings": 40960,
    "max_window_layers": 94,
    "mlp_only_layers": [],
    "moe_intermediate_size": 1536,
    "norm_topk_prob": True,
    "num_attention_heads": 64,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 94,
    "num_key_value_heads": 4,
    "rms_norm_eps": 1e-06,
    "sliding_window": None,
    "tie_word_embeddings": False,
    "use_sliding_window": False,
    "vocab_size": 151936,
}
LLAMA4_SCOUT_TEXT = {
    "model_type": "llama4_text",
    "attention_bias": False,
    "attention_chunk_size": 8192,
    "attention_dropout": 0.0,
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 5120,
    "interleave_moe_layer_step": 1,
    "intermediate_size": 8192,
    "intermediate_size_mlp": 16384,
    "max_position_embeddings": 262144,
    "moe_layers": list(range(48)),
    "no_rope_layers": [0 if i % 4 == 3 else 1 for i in range(48)],
    "num_attention_heads": 40,
    "num_experts_per_tok": 1,
    "num_hidden_layers": 48,
    "num_key_value_heads": 8,
    "num_local_experts": 16,
    "use_qk_norm": True,
    "vocab_size": 202048,
}
LLAMA4_SCOUT = {
    "model_type": "llama4",
    "text_config": LLAMA4_SCOUT_TEXT,
    "tie_word_embeddings": False,
}
MIXTRAL_8X22B = {
    "model_type": "mixtral",
    "attention_dropout": 0.0,
    "hidden_act": "silu",
    "hidden_size": 6144,
    "intermediate_size": 16384,
    "max_position_embeddings": 65536,
    "num_attention_heads": 48,
    "num_experts_per_tok": 2,
    "num_hidden_layers": 56,
    "num_key_value_heads": 8,
    "num_local_experts": 8,
    "sliding_window": None,
    "tie_word_embeddings": False,
    "vocab_size": 32000,
}

# Published (total, active) counts and where they are stated; 2 % tolerance: the figures
# are rounded, DeepSeek's and Qwen's activated counts leave out the input embedding table
# (21.4B with it, 20.9B without) and Llama 4's 109B also counts the vision encoder.
PUBLISHED = [
    ("deepseek-v2", 236e9, 21e9, "DeepSeek-V2, arXiv:2405.04434, abstract: 236B, 21B activated"),
    ("mixtral-8x22b", 141e9, 39e9, "mistral.ai/news/mixtral-8x22b: 141B, 39B active"),
    ("qwen3-235b-a22b", 235e9, 22e9, "Qwen3 Technical Report, arXiv:2505.09388, Table 2"),
    (
        "qwen3-30b-a3b",
        30.5e9,
        3.3e9,
        "Qwen3 Technical Report, arXiv:2505.09388, Table 2 (30B, 3B; the model card: 30.5B, 3.3B)",
    ),
    ("llama4-scout-17b-16e", 109e9, 17e9, "Llama 4 MODEL_CARD.md: 109B total, 17B active"),
]


def load(tmp_path, config):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return load_hf_config(path)


def strip(m):
    return replace(m, name="x", source="", tokens_to_train=None)


@pytest.mark.parametrize(("name", "total", "active", "source"), PUBLISHED)
def test_catalog_moe_counts_match_published_within_2_percent(name, total, active, source):
    m = get_model(name)
    assert m.parameters == pytest.approx(total, rel=0.02), source
    assert m.active_parameters == pytest.approx(active, rel=0.02), source


@pytest.mark.parametrize(
    ("config", "name"),
    [
        (QWEN3_235B, "qwen3-235b-a22b"),
        (LLAMA4_SCOUT, "llama4-scout-17b-16e"),
        (LLAMA4_SCOUT_TEXT, "llama4-scout-17b-16e"),
        (MIXTRAL_8X22B, "mixtral-8x22b"),
    ],
)
def test_catalog_entries_are_the_imported_configs(tmp_path, config, name):
    assert strip(load(tmp_path, config)) == strip(get_model(name))


def _moe_block_shapes(h, heads, kv, d, experts, width, shared_width):
    """Weights of one grouped-query attention + MoE block (Qwen3MoeDecoderLayer,
    Llama4TextDecoderLayer), without Qwen3's Q/K norms."""
    shapes = [(h,), (h,), (heads * d, h), (kv * d, h), (kv * d, h), (h, heads * d)]
    shapes += [(experts, h)]  # router
    for w in [width] * experts + ([shared_width] if shared_width else []):
        shapes += [(w, h), (w, h), (h, w)]  # gate, up, down
    return shapes


def _total(shapes):
    return sum(math.prod(s) for s in shapes)


def test_qwen3_235b_is_the_module_sum_but_its_qk_norms(tmp_path):
    c = QWEN3_235B
    h, v, layers, d = c["hidden_size"], c["vocab_size"], c["num_hidden_layers"], c["head_dim"]
    block = _moe_block_shapes(h, 64, 4, d, 128, c["moe_intermediate_size"], 0)
    qk_norms = layers * 2 * d  # q_norm and k_norm weights: not modelled
    exact = _total([(v, h), (h,), (v, h)]) + layers * _total(block) + qk_norms
    m = load(tmp_path, c)
    assert m.parameters == exact - qk_norms
    assert m.head_dim == 128 and m.head_size == 128 and m.hidden // m.heads == 64
    assert m.dense_layers == 0 and m.shared_experts == 0


def test_llama4_scout_text_model_is_the_module_sum(tmp_path):
    c = LLAMA4_SCOUT_TEXT
    h, v, w = c["hidden_size"], c["vocab_size"], c["intermediate_size"]
    block = _moe_block_shapes(h, 40, 8, 128, 16, w, w)  # one shared expert of the same width
    m = load(tmp_path, LLAMA4_SCOUT)
    assert m.parameters == _total([(v, h), (h,), (v, h)]) + 48 * _total(block)
    assert m.active_parameters == _total([(v, h), (h,), (v, h)]) + 48 * _total(
        _moe_block_shapes(h, 40, 8, 128, 16, w, w)[:7] + [(w, h), (w, h), (h, w)] * 2
    )


def test_leading_dense_blocks_are_read(tmp_path):
    qwen = load(tmp_path, {**QWEN3_235B, "mlp_only_layers": [0, 1]})
    assert qwen.dense_layers == 2 and qwen.ffn_hidden == 12288
    assert qwen.expert_ffn_hidden == 1536
    llama = load(tmp_path, {**LLAMA4_SCOUT_TEXT, "moe_layers": list(range(3, 48))})
    assert llama.dense_layers == 3 and llama.ffn_hidden == 16384
    assert llama.expert_ffn_hidden == 8192


@pytest.mark.parametrize(
    ("config", "change", "message"),
    [
        (QWEN3_235B, {"decoder_sparse_step": 2}, r"MoE blocks \[1, 3, 5, 7, '...', 91, 93\]"),
        (QWEN3_235B, {"mlp_only_layers": [5]}, "from decoder_sparse_step and mlp_only_layers"),
        (QWEN3_235B, {"mlp_only_layers": "none"}, "mlp_only_layers = 'none' must be a list"),
        (QWEN3_235B, {"num_experts": 0}, "num_experts = 0 must be a positive integer"),
        (QWEN3_235B, {"attention_bias": True}, "attention_bias = True"),
        (QWEN3_235B, {"use_sliding_window": True}, "use_sliding_window = True"),
        (QWEN3_235B, {"moe_intermediate_size": None}, "missing field 'moe_intermediate_size'"),
        # Llama 4 Maverick alternates dense and MoE blocks: not expressible
        (
            LLAMA4_SCOUT_TEXT,
            {"moe_layers": None, "interleave_moe_layer_step": 2},
            "from interleave_moe_layer_step",
        ),
        (LLAMA4_SCOUT_TEXT, {"hidden_act": "gelu"}, "hidden_act = 'gelu'"),
        (LLAMA4_SCOUT_TEXT, {"num_experts_per_tok": 17}, "num_experts_per_tok = 17 must be"),
    ],
)
def test_bad_fields_are_named_by_their_key(tmp_path, config, change, message):
    data = {k: v for k, v in {**config, **change}.items() if v is not None}
    with pytest.raises(ConfigError, match=message):
        load(tmp_path, data)


def test_llama4_without_a_text_config_is_one_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="text_config = None must be a JSON object"):
        load(tmp_path, {"model_type": "llama4"})


@pytest.mark.parametrize(
    ("config", "family"),
    [
        (QWEN3_235B, "qwen3_moe"),
        ({**QWEN3_235B, "mlp_only_layers": [0, 1, 2]}, "qwen3_moe"),
        (LLAMA4_SCOUT, "llama4_text"),
        ({**LLAMA4_SCOUT_TEXT, "moe_layers": list(range(1, 48))}, "llama4_text"),
        (MIXTRAL_8X22B, "mixtral"),
    ],
)
def test_round_trip_through_the_writer(tmp_path, config, family):
    m = load(tmp_path, config)
    written = to_hf_config(m)
    assert written["model_type"] == family
    assert strip(load(tmp_path, written)) == strip(m)


def test_two_shared_experts_without_mla_are_refused_by_the_writer():
    m = replace(get_model("llama4-scout-17b-16e"), shared_experts=2)
    with pytest.raises(ConfigError, match="llama4_text chosen.*shared_experts = 2"):
        to_hf_config(m)


def test_qwen3_block_graph_uses_its_head_width():
    m = get_model("qwen3-235b-a22b")
    graph = build_layer_graph(m, TrainingSetup(256, 1), 4)
    block = graph.layers[1]
    assert block.parameters == m.block_parameters(4)
    assert block.expert_parameters == 128 * 3 * 4096 * 1536 // 4
