"""Falcon and Gemma config.json import: published parameter counts, FLOPs, clear errors.

Each config holds the architecture keys of the published ``config.json`` on the Hugging Face
Hub (main branch). Published counts are the model cards' or papers' rounded figures, so each
tolerance is half a unit of the last digit the source states, unless noted.
"""

import json
from dataclasses import replace

import networkx as nx
import pytest

from phaze_common.errors import ConfigError
from workloads import build_layer_graph, get_model, load_hf_config, to_hf_config
from workloads.flops import block_forward_flops, forward_flops_per_sequence
from workloads.memory import block_activation_bytes
from workloads.model import FfnKind
from workloads.setup import TrainingSetup

# tiiuae/falcon-7b config.json; the card says "7B", the Falcon paper (Almazrouei et al. 2023)
# 6.9B (so ±0.05B); the module listing (query_key_value 4544 -> 4672, one input_layernorm,
# dense_h_to_4h 18176, tied lm_head) gives the exact count checked below.
FALCON_7B = {
    "model_type": "falcon",
    "alibi": False,
    "apply_residual_connection_post_layernorm": False,
    "attention_dropout": 0.0,
    "bias": False,
    "hidden_dropout": 0.0,
    "hidden_size": 4544,
    "layer_norm_epsilon": 1e-05,
    "multi_query": True,
    "new_decoder_architecture": False,
    "num_attention_heads": 71,
    "num_hidden_layers": 32,
    "parallel_attn": True,
    "vocab_size": 65024,
}
# tiiuae/falcon-40b config.json; card: "a 40B parameters causal decoder-only model". The
# count is 41.3B; "40B" is a name rather than a rounding (±5 % admits it, ±2 % would not).
FALCON_40B = {
    "model_type": "falcon",
    "alibi": False,
    "bias": False,
    "hidden_size": 8192,
    "multi_query": True,
    "new_decoder_architecture": True,
    "num_attention_heads": 128,
    "num_hidden_layers": 60,
    "num_kv_heads": 8,
    "parallel_attn": True,
    "vocab_size": 65024,
}
# google/gemma-7b and gemma-2b config.json; Gemma report (Team Gemma 2024) Table 2 lists
# 7B = 7,751,248,896 non-embedding + 786,825,216 embedding parameters (8.54B) and 2B =
# 1,981,884,416 + 524,550,144 (2.51B); the report's embedding has 256,128 rows, the HF
# checkpoint's 256,000, so the HF count is ~0.05 % lower: tolerance 0.1 %.
GEMMA_7B = {
    "model_type": "gemma",
    "attention_bias": False,
    "attention_dropout": 0.0,
    "head_dim": 256,
    "hidden_act": "gelu",
    "hidden_size": 3072,
    "intermediate_size": 24576,
    "max_position_embeddings": 8192,
    "num_attention_heads": 16,
    "num_hidden_layers": 28,
    "num_key_value_heads": 16,
    "rms_norm_eps": 1e-06,
    "vocab_size": 256000,
}
GEMMA_2B = {
    **GEMMA_7B,
    "hidden_size": 2048,
    "intermediate_size": 16384,
    "num_attention_heads": 8,
    "num_hidden_layers": 18,
    "num_key_value_heads": 1,
}
# google/gemma-2-9b config.json; HF model card / Gemma 2 report: 9.24B (±0.005B).
GEMMA2_9B = {
    "model_type": "gemma2",
    "attention_bias": False,
    "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh",
    "hidden_size": 3584,
    "intermediate_size": 14336,
    "max_position_embeddings": 8192,
    "num_attention_heads": 16,
    "num_hidden_layers": 42,
    "num_key_value_heads": 8,
    "query_pre_attn_scalar": 256,
    "sliding_window": 4096,
    "vocab_size": 256000,
}


def load(tmp_path, config):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return load_hf_config(path)


@pytest.mark.parametrize(
    ("config", "published", "rel"),
    [
        (FALCON_7B, 6.9e9, 0.05 / 6.9),
        (FALCON_40B, 40e9, 0.05),
        (GEMMA_7B, 7_751_248_896 + 786_825_216, 0.001),
        (GEMMA_2B, 1_981_884_416 + 524_550_144, 0.001),
        (GEMMA2_9B, 9.24e9, 0.005 / 9.24),
    ],
)
def test_published_parameter_counts(tmp_path, config, published, rel):
    assert load(tmp_path, config).parameters == pytest.approx(published, rel=rel)


def test_falcon_7b_is_exact_multi_query_with_one_shared_norm(tmp_path):
    m = load(tmp_path, FALCON_7B)
    h, v, f = 4544, 65024, 18176
    block = h * 4672 + h * h + 2 * h * f + 2 * h  # fused QKV, dense, MLP, one LayerNorm
    assert (m.kv_heads, m.parallel_block, m.block_norms) == (1, True, 1)
    assert m.parameters == v * h + 32 * block + 2 * h  # tied head, final LayerNorm


def test_falcon_40b_has_grouped_kv_heads_and_two_norms(tmp_path):
    m = load(tmp_path, FALCON_40B)
    assert (m.kv_heads, m.block_norms) == (8, 2)
    no_norms = m.block_parameters() - 2 * 2 * 8192
    assert no_norms == 8192 * (128 + 16) * 64 + 8192 * 8192 + 2 * 8192 * 4 * 8192


def test_falcon_alibi_and_sequential_variants(tmp_path):
    alibi = load(tmp_path, {**FALCON_7B, "alibi": True, "parallel_attn": False})
    assert str(alibi.positions) == "alibi" and not alibi.parallel_block
    assert alibi.block_norms == 2
    mha = load(tmp_path, {**FALCON_7B, "multi_query": False})
    assert mha.kv_heads == 71


def test_gemma_head_width_is_independent_of_hidden(tmp_path):
    m = load(tmp_path, GEMMA_7B)
    assert m.head_dim == 256 and m.heads * m.head_dim == 4096 != m.hidden
    assert m.ffn_kind is FfnKind.GEGLU and m.tied_embeddings


@pytest.mark.parametrize("config", [FALCON_7B, FALCON_40B, GEMMA_7B, GEMMA2_9B])
def test_forward_flops_are_twice_the_active_parameters_plus_attention(tmp_path, config):
    m, s = load(tmp_path, config), 2048
    # 2 FLOPs per weight per token, minus the embedding lookup (no GEMM; tied models reuse
    # the table for the logits), plus the attention scores and values
    weights = m.active_parameters - m.embedding_parameters() + m.tied_head_parameters()
    attention = m.layers * 4 * s * s * m.heads * m.head_dim
    norm = (2 if str(m.norm) == "layernorm" else 1) * m.hidden  # norms: no GEMM FLOPs
    norms = m.layers * m.block_norms * norm + norm
    assert forward_flops_per_sequence(m, s) == 2 * s * (weights - norms) + attention


@pytest.mark.parametrize("config", [FALCON_40B, GEMMA_7B, GEMMA2_9B])
@pytest.mark.parametrize("sp", [False, True])
def test_op_graph_gemm_flops_match_the_closed_form(tmp_path, config, sp):
    m = load(tmp_path, config)
    # the unfused attention core executes the full s x s scores the closed form counts
    setup = TrainingSetup(512, 1, sequence_parallel=sp, framework="megatron-2022")
    graph = build_layer_graph(m, setup, 8 if m.kv_heads % 8 == 0 else 1)
    block = graph.pass_graphs(graph.layers[1]).forward
    tp = graph.tp
    gemm_flops = sum(op.flops for op in block.ops if op.is_gemm)
    assert gemm_flops * tp == block_forward_flops(m, 512)


@pytest.mark.parametrize(
    ("config", "change", "message"),
    [
        (FALCON_40B, {"num_kv_heads": None}, "missing field 'num_kv_heads'"),
        (FALCON_40B, {"num_kv_heads": 7}, "num_kv_heads = 7"),
        (FALCON_7B, {"hidden_size": -1}, "hidden_size = -1 must be a positive integer"),
        (FALCON_7B, {"activation": "relu"}, "activation = 'relu'"),
        (FALCON_7B, {"new_decoder_architecture": "yes"}, "new_decoder_architecture = 'yes'"),
        (GEMMA_7B, {"head_dim": 0}, "head_dim = 0 must be a positive integer"),
        (GEMMA_7B, {"hidden_act": "silu"}, "hidden_activation = 'silu'"),
        (GEMMA_7B, {"intermediate_size": None}, "missing field 'intermediate_size'"),
    ],
)
def test_bad_fields_are_named_by_their_key(tmp_path, config, change, message):
    data = {k: v for k, v in {**config, **change}.items() if v is not None}
    with pytest.raises(ConfigError, match=message):
        load(tmp_path, data)


def test_falcon_attention_and_mlp_are_independent_in_the_graph(tmp_path):
    m = load(tmp_path, FALCON_7B)
    graph = build_layer_graph(m, TrainingSetup(256, 1), 1)
    g = graph.pass_graphs(graph.layers[1]).forward.to_networkx()
    assert not nx.has_path(g, "proj", "fc1") and not nx.has_path(g, "fc1", "proj")
    assert sum(1 for n in g if n.startswith("ln")) == 1


@pytest.mark.parametrize("config", [FALCON_7B, FALCON_40B, GEMMA_2B, GEMMA2_9B])
def test_round_trip(tmp_path, config):
    m = load(tmp_path, config)
    again = load(tmp_path, to_hf_config(m))
    assert replace(again, name=m.name, source=m.source) == m


@pytest.mark.parametrize(("config", "name"), [(FALCON_40B, "falcon-40b"), (GEMMA_7B, "gemma-7b")])
def test_catalog_entries_are_the_imported_configs(tmp_path, config, name):
    strip = {"name": "x", "source": "", "tokens_to_train": None}
    assert replace(load(tmp_path, config), **strip) == replace(get_model(name), **strip)


def test_a_shared_norm_stashes_one_input_post_norms_two_more(tmp_path):
    setup, f7 = TrainingSetup(256, 1, recompute="selective"), load(tmp_path, FALCON_7B)
    two_norms = replace(f7, parallel_block=False, block_norms=2)
    p, tokens = setup.precision_bytes, 256
    saved = block_activation_bytes(two_norms, setup, 1) - block_activation_bytes(f7, setup, 1)
    assert saved == 3 * p * tokens * f7.hidden
    g9 = load(tmp_path, GEMMA2_9B)
    extra = block_activation_bytes(g9, setup, 1) - block_activation_bytes(
        replace(g9, block_norms=2), setup, 1
    )
    assert extra == 2 * p * tokens * g9.hidden
