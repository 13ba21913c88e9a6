"""DeepSeek-V2/V3 config.json import: published parameter counts, MLA and DeepSeekMoE in the
FLOPs, stashed bytes, layer graph and op graphs, clear errors.

Each config holds the architecture keys of the published ``config.json`` on the Hugging Face
Hub (deepseek-ai/DeepSeek-V3, DeepSeek-V2, DeepSeek-V2-Lite, main branch). Published counts
are the model cards' rounded figures (V3: "671B total parameters with 37B activated"; V2:
"236B total parameters, of which 21B are activated"; V2-Lite: "15.7B parameters in total,
2.4B activated"), so each tolerance is half a unit of the last digit stated, unless noted.
"""

import json
import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phaze_common.errors import ConfigError
from workloads import build_layer_graph, load_hf_config, to_hf_config
from workloads.attention_ops import flash_scores
from workloads.flops import (
    attention_core_flops,
    block_forward_flops,
    forward_flops_per_sequence,
    mtp_forward_flops,
)
from workloads.hf import model_from_hf
from workloads.memory import block_activation_bytes, dispatch_bytes, kv_bytes
from workloads.setup import TrainingSetup

DEEPSEEK_V3 = {
    "model_type": "deepseek_v3",
    "attention_bias": False,
    "attention_dropout": 0.0,
    "first_k_dense_replace": 3,
    "hidden_act": "silu",
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "kv_lora_rank": 512,
    "max_position_embeddings": 163840,
    "moe_intermediate_size": 2048,
    "moe_layer_freq": 1,
    "n_group": 8,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "norm_topk_prob": True,
    "num_attention_heads": 128,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 61,
    "num_key_value_heads": 128,
    "num_nextn_predict_layers": 1,
    "q_lora_rank": 1536,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "rms_norm_eps": 1e-06,
    "routed_scaling_factor": 2.5,
    "scoring_func": "sigmoid",
    "tie_word_embeddings": False,
    "topk_group": 4,
    "topk_method": "noaux_tc",
    "v_head_dim": 128,
    "vocab_size": 129280,
}
DEEPSEEK_V2 = {
    "model_type": "deepseek_v2",
    "attention_bias": False,
    "attention_dropout": 0.0,
    "first_k_dense_replace": 1,
    "hidden_act": "silu",
    "hidden_size": 5120,
    "intermediate_size": 12288,
    "kv_lora_rank": 512,
    "max_position_embeddings": 163840,
    "moe_intermediate_size": 1536,
    "moe_layer_freq": 1,
    "n_group": 8,
    "n_routed_experts": 160,
    "n_shared_experts": 2,
    "num_attention_heads": 128,
    "num_experts_per_tok": 6,
    "num_hidden_layers": 60,
    "num_key_value_heads": 128,
    "q_lora_rank": 1536,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "tie_word_embeddings": False,
    "topk_group": 3,
    "v_head_dim": 128,
    "vocab_size": 102400,
}
DEEPSEEK_V2_LITE = {
    **DEEPSEEK_V2,
    "hidden_size": 2048,
    "intermediate_size": 10944,
    "moe_intermediate_size": 1408,
    "n_group": 1,
    "n_routed_experts": 64,
    "num_attention_heads": 16,
    "num_hidden_layers": 27,
    "num_key_value_heads": 16,
    "q_lora_rank": None,
    "topk_group": 1,
}


def load(tmp_path, config):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return load_hf_config(path)


@pytest.mark.parametrize(
    ("config", "total", "total_tol", "active", "active_tol"),
    [
        (DEEPSEEK_V3, 671e9, 0.5e9, 37e9, 0.5e9),
        (DEEPSEEK_V2, 236e9, 0.5e9, 21e9, 0.5e9),
        # 2.451B active: the card's "2.4B" truncates rather than rounds (0.06B admits it)
        (DEEPSEEK_V2_LITE, 15.7e9, 0.05e9, 2.4e9, 0.06e9),
    ],
)
def test_published_total_and_active_parameter_counts(
    tmp_path, config, total, total_tol, active, active_tol
):
    m = load(tmp_path, config)
    assert m.parameters == pytest.approx(total, abs=total_tol)
    # DeepSeek's activated counts leave out the input embedding table (a lookup, not a
    # GEMM): the only convention that reproduces all three figures (with it: 37.6B, 2.66B)
    assert m.active_parameters - m.embedding_parameters() == pytest.approx(active, abs=active_tol)


def test_deepseek_v3_is_the_module_sum(tmp_path):
    m = load(tmp_path, DEEPSEEK_V3)
    h, v, a = 7168, 129280, 128
    attention = (
        h * 1536 + 1536 + 1536 * a * 192  # q_a_proj, q_a_layernorm, q_b_proj
        + h * (512 + 64) + 512 + 512 * a * (128 + 128)  # kv_a_proj_with_mqa, norm, kv_b_proj
        + a * 128 * h  # o_proj
    )  # fmt: skip
    expert = 3 * h * 2048
    dense = attention + 3 * h * 18432 + 2 * h
    moe = attention + 256 * expert + expert + 256 * h + 2 * h  # routed, shared, gate
    assert m.parameters == 2 * v * h + 3 * dense + 58 * moe + h
    assert (m.dense_layers, m.moe_layers, m.shared_experts, m.expert_width) == (3, 58, 1, 2048)
    assert (m.head_dim, m.value_head_dim) == (192, 128)


def test_v2_lite_projects_queries_from_the_block_input(tmp_path):
    m = load(tmp_path, DEEPSEEK_V2_LITE)
    assert m.q_lora_rank is None
    h, a = 2048, 16
    attention = h * a * 192 + h * 576 + 512 + 512 * a * 256 + a * 128 * h
    assert m.block_parameters(dense=True) == attention + 3 * h * 10944 + 2 * h


@pytest.mark.parametrize("config", [DEEPSEEK_V3, DEEPSEEK_V2, DEEPSEEK_V2_LITE])
def test_forward_flops_are_twice_the_active_weights_plus_attention(tmp_path, config):
    m, s = load(tmp_path, config), 4096
    latent_norms = m.kv_lora_rank + (m.q_lora_rank or 0)
    norms = m.layers * (2 * m.hidden + latent_norms) + m.hidden
    weights = m.active_parameters - m.embedding_parameters() - norms
    attention = m.layers * 2 * s * s * m.heads * (m.head_dim + m.value_head_dim)
    main = forward_flops_per_sequence(m, s) - mtp_forward_flops(m, s)  # tests/test_workloads_mtp.py
    assert main == 2 * s * weights + attention
    assert attention_core_flops(m, s) * m.layers == attention


@pytest.mark.parametrize("sp", [False, True])
@pytest.mark.parametrize("tp", [1, 4])
def test_op_graph_gemm_flops_match_the_closed_form_per_block_kind(tmp_path, sp, tp):
    m, s = load(tmp_path, DEEPSEEK_V2_LITE), 256
    # the unfused attention core executes the full s x s scores the closed form counts
    setup = TrainingSetup(s, 1, sequence_parallel=sp, framework="megatron-2022")
    graph = build_layer_graph(m, setup, tp)
    dense_block, moe_block = graph.layers[1], graph.layers[2]
    assert (dense_block.class_id, moe_block.class_id) == ("dense_block", "block")
    for layer, dense in ((dense_block, True), (moe_block, False)):
        ops = graph.pass_graphs(layer).forward.ops

        # the replicated down-projections and router run on every rank: counted once
        def replicated(name):
            return ".down" in name or name == "router"

        down = sum(op.flops for op in ops if op.is_gemm and replicated(op.name))
        split = sum(op.flops for op in ops if op.is_gemm and not replicated(op.name))
        assert split * tp + down == block_forward_flops(m, s, dense=dense)
        router = 0 if dense else 2 * s * m.hidden * m.experts
        assert down == 2 * s * m.hidden * (m.kv_lora_rank + m.qk_rope_head_dim) + router
    names = {op.name for op in graph.pass_graphs(moe_block).forward.ops}
    assert {"shared.fc1.gate", "expert63.fc2", "router"} <= names


def test_flash_attention_multiplies_query_key_and_value_widths(tmp_path):
    m, s, tp = load(tmp_path, DEEPSEEK_V3), 1024, 8
    graph = build_layer_graph(m, TrainingSetup(s, 1, framework="overlap-all"), tp)
    ops = graph.pass_graphs(graph.layers[1]).forward.ops
    fused = [op for op in ops if op.name.endswith(".flash")]
    keys = flash_scores(s, True) // s
    macs = sum(op.flops - op.epilogue_flops for op in fused)
    # QK^T over 192-wide heads and AV over 128-wide ones, on the executed key tiles
    assert macs == 2 * (m.heads // tp) * s * keys * (192 + 128)
    assert next(op for op in ops if op.name == "proj").k == (m.heads // tp) * 128


def test_layer_graph_routed_experts_are_expert_parameters_shared_ones_dense(tmp_path):
    m = load(tmp_path, DEEPSEEK_V2)
    setup, tp = TrainingSetup(1024, 1, sequence_parallel=True), 8
    graph = build_layer_graph(m, setup, tp)
    blocks = [x for x in graph.layers if x.kind == "block"]
    expert = 3 * 5120 * 1536 // tp
    assert blocks[0].expert_parameters == 0 and blocks[0].dispatch_bytes == 0
    assert all(x.expert_parameters == 160 * expert for x in blocks[1:])
    assert all(x.dispatch_bytes == dispatch_bytes(m, setup, tp) > 0 for x in blocks[1:])
    shared = 3 * 5120 * 2 * 1536 // tp
    dense_rest = blocks[1].parameters - blocks[1].expert_parameters
    assert dense_rest == m.block_parameters(tp, active=True) - 6 * expert
    router = 160 * 5120  # replicated
    assert dense_rest - shared - router == blocks[0].parameters - 3 * 5120 * 12288 // tp
    assert sum(x.parameters for x in load_graph_at_1(m).layers) == m.parameters


def load_graph_at_1(m):
    return build_layer_graph(m, TrainingSetup(256, 1), 1)


def test_mla_stash_splits_the_per_head_tensors_and_keeps_the_latents(tmp_path):
    m = load(tmp_path, DEEPSEEK_V3)
    setup = TrainingSetup(1024, 1, recompute="selective", sequence_parallel=True)
    p, tokens, a = setup.precision_bytes, 1024, 128
    latents = p * tokens * (2 * 1536 + 2 * 512 + 64)
    one, eight = (block_activation_bytes(m, setup, t, dense=True) - latents for t in (1, 8))
    assert one == 8 * eight
    per_head = p * tokens * a * (2 * 192 + 128 + 128)  # Q, K, V, output-projection input
    assert one == p * tokens * 4 * m.hidden + per_head + 3 * p * tokens * 18432
    assert kv_bytes(m, setup, 8) == p * tokens * a * (192 + 128) // 8


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"kv_lora_rank": None}, "missing field 'kv_lora_rank'"),
        ({"qk_rope_head_dim": 0}, "qk_rope_head_dim = 0 must be a positive integer"),
        ({"moe_layer_freq": 2}, "moe_layer_freq = 2"),
        ({"attention_bias": True}, "attention_bias = True"),
        ({"hidden_act": "gelu"}, "hidden_act = 'gelu'"),
        ({"n_shared_experts": -1}, "n_shared_experts = -1"),
        ({"first_k_dense_replace": 61}, "first_k_dense_replace = 61 must be fewer than"),
        ({"num_experts_per_tok": 300}, "num_experts_per_tok = 300 must be at most"),
    ],
)
def test_bad_fields_are_named_by_their_key(tmp_path, change, message):
    data = {k: v for k, v in {**DEEPSEEK_V3, **change}.items() if v is not None}
    with pytest.raises(ConfigError, match=message):
        load(tmp_path, data)


@pytest.mark.parametrize("config", [DEEPSEEK_V3, DEEPSEEK_V2_LITE])
def test_round_trip(tmp_path, config):
    m = load(tmp_path, config)
    again = load(tmp_path, to_hf_config(m))
    assert replace(again, name=m.name, source=m.source) == m


def test_a_dense_mla_model_reads_without_experts(tmp_path):
    moe_keys = ("n_routed_experts", "n_shared_experts", "moe_intermediate_size")
    m = load(tmp_path, {k: v for k, v in DEEPSEEK_V2_LITE.items() if k not in moe_keys})
    assert not m.is_moe and m.dense_layers == 0 and m.mla


def _hf_tensor_shapes(c):
    """Every weight tensor of a DeepSeek checkpoint as the Hugging Face module tree lays it
    out (DeepseekV3ForCausalLM), independently of :class:`Model`'s formulas."""
    h, a, v = c["hidden_size"], c["num_attention_heads"], c["vocab_size"]
    nope, rope, vd, kr = (
        c[k] for k in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "kv_lora_rank")
    )
    shapes = [(v, h), (h,), (v, h)]  # embed_tokens, final norm, lm_head
    for i in range(c["num_hidden_layers"]):
        shapes += [(h,), (h,)]  # input and post-attention RMSNorms
        if c["q_lora_rank"] is None:
            shapes.append((a * (nope + rope), h))
        else:
            qr = c["q_lora_rank"]
            shapes += [(qr, h), (qr,), (a * (nope + rope), qr)]
        shapes += [(kr + rope, h), (kr,), (a * (nope + vd), kr), (h, a * vd)]
        if i < c["first_k_dense_replace"]:
            widths = [c["intermediate_size"]]
        else:
            widths = [c["moe_intermediate_size"]] * c["n_routed_experts"]
            if c["n_shared_experts"]:
                widths.append(c["n_shared_experts"] * c["moe_intermediate_size"])
            shapes.append((c["n_routed_experts"], h))  # gate
        for w in widths:
            shapes += [(w, h), (w, h), (h, w)]  # gate_proj, up_proj, down_proj
    return shapes


@settings(max_examples=25, deadline=None)
@given(
    hidden=st.sampled_from([32, 64]),
    heads=st.sampled_from([2, 4]),
    q_lora=st.sampled_from([None, 16]),
    kv_lora=st.sampled_from([8, 16]),
    nope=st.sampled_from([4, 8]),
    rope=st.sampled_from([2, 4]),
    vd=st.sampled_from([4, 8]),
    experts=st.sampled_from([4, 8]),
    top_k=st.integers(1, 4),
    shared=st.integers(0, 2),
    dense=st.integers(0, 2),
    moe_layers=st.integers(1, 2),
    tp=st.sampled_from([1, 2]),
    sp=st.booleans(),
)
def test_random_shapes_match_the_module_tree_and_the_flops_closed_form(
    hidden,
    heads,
    q_lora,
    kv_lora,
    nope,
    rope,
    vd,
    experts,
    top_k,
    shared,
    dense,
    moe_layers,
    tp,
    sp,
):
    c = {
        **DEEPSEEK_V3,
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "q_lora_rank": q_lora,
        "kv_lora_rank": kv_lora,
        "qk_nope_head_dim": nope,
        "qk_rope_head_dim": rope,
        "v_head_dim": vd,
        "n_routed_experts": experts,
        "num_experts_per_tok": top_k,
        "n_group": 1,  # no group limit: the router's groups must divide the experts
        "topk_group": 1,
        "n_shared_experts": shared,
        "first_k_dense_replace": dense,
        "num_hidden_layers": dense + moe_layers,
        "intermediate_size": 48,
        "moe_intermediate_size": 16,
        "vocab_size": 100,
    }
    m = model_from_hf(c, "random")
    assert m.parameters == sum(math.prod(s) for s in _hf_tensor_shapes(c))
    s = 32
    setup = TrainingSetup(s, 1, sequence_parallel=sp, framework="megatron-2022")
    graph = build_layer_graph(m, setup, tp)
    for layer in graph.layers[1:-1]:
        dense_block = layer.class_id == "dense_block"
        ops = graph.pass_graphs(layer).forward.ops
        down = sum(
            op.flops for op in ops if op.is_gemm and (".down" in op.name or op.name == "router")
        )
        split = sum(op.flops for op in ops if op.is_gemm) - down
        assert split * tp + down == block_forward_flops(m, s, dense=dense_block)
        assert layer.expert_parameters == (0 if dense_block else experts * 3 * hidden * 16 // tp)


def test_catalog_deepseek_v3_is_its_config_json(tmp_path):
    """The catalog's deepseek-v3 has the published config.json's shape and counts: 671B
    total; 36.6B activated without the input embedding table (DeepSeek's README_WEIGHTS:
    "36.6B, including 0.9B for the output head"; the report rounds it to 37B)."""
    from workloads.catalog import get_model

    m, imported = get_model("deepseek-v3"), load(tmp_path, DEEPSEEK_V3)
    same = dict(name="x", source="", tokens_to_train=None)
    assert replace(m, **same) == replace(imported, **same)
    assert m.parameters == pytest.approx(671e9, rel=0.01)
    assert m.active_parameters - m.embedding_parameters() == pytest.approx(37e9, rel=0.011)
    assert m.tokens_to_train == 14_800_000_000_000


def test_catalog_deepseek_v2_is_its_config_json(tmp_path):
    """The catalog's deepseek-v2 has the published config.json's shape; 236B total and
    20.9B activated without the input embedding table (the card's "21B")."""
    from workloads.catalog import get_model

    m, imported = get_model("deepseek-v2"), load(tmp_path, DEEPSEEK_V2)
    same = dict(name="x", source="", tokens_to_train=None)
    assert replace(m, **same) == replace(imported, **same)
    assert m.active_parameters - m.embedding_parameters() == pytest.approx(21e9, abs=0.5e9)
    assert m.tokens_to_train == 8_100_000_000_000
