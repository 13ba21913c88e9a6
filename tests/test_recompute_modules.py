"""Selective recompute of named op groups (Megatron-Core's recompute modules): the rebuilt
ops, their time between no and full recompute, and the activations they leave unstashed."""

import json

import pytest

from arch_space import Cluster, preset
from phaze.api import evaluate
from phaze_common.errors import ConfigError
from placement import parse_strategy
from workloads.catalog import get_model
from workloads.flops import hardware_flops_per_sequence
from workloads.memory import block_activation_bytes
from workloads.op_graphs import block_pass_graphs
from workloads.setup import Recompute, TrainingSetup

# a small DeepSeek-V3: MLA, shared and routed experts, a leading dense block
TINY_V3 = {
    "model_type": "deepseek_v3",
    "first_k_dense_replace": 1,
    "hidden_act": "silu",
    "hidden_size": 1024,
    "intermediate_size": 2816,
    "kv_lora_rank": 128,
    "max_position_embeddings": 4096,
    "moe_intermediate_size": 256,
    "n_routed_experts": 16,
    "n_shared_experts": 1,
    "num_attention_heads": 8,
    "num_experts_per_tok": 4,
    "num_hidden_layers": 4,
    "num_key_value_heads": 8,
    "q_lora_rank": 256,
    "qk_nope_head_dim": 64,
    "qk_rope_head_dim": 32,
    "v_head_dim": 64,
    "tie_word_embeddings": False,
    "vocab_size": 32000,
}


def _setup(recompute: str, **kw) -> TrainingSetup:
    return TrainingSetup(4096, 1, recompute=recompute, precision="fp8-blockwise", **kw)


def test_modules_parse_to_one_spelling_and_refuse_unknown_groups():
    s = _setup("modules:mla_up_proj+layernorm")
    assert s.recompute is Recompute.MODULES
    assert s.recompute_mode == "modules:layernorm+mla_up_proj"
    assert parse_strategy("t=1,recompute=modules:moe_act").recompute == "modules:moe_act"
    with pytest.raises(ConfigError, match="'attn' must be among core_attn"):
        _setup("modules:attn")
    with pytest.raises(ConfigError, match="must be one of none, selective, full or modules"):
        parse_strategy("t=1,recompute=partial")


def test_the_recompute_graph_holds_the_groups_ops():
    m = get_model("deepseek-v3")
    names = {
        mode: {op.name for op in block_pass_graphs(m, _setup(mode), 8).recompute.ops}
        for mode in ("modules:layernorm+mla_up_proj", "modules:moe_act", "modules:mlp")
    }
    mla = {"q.down.norm", "kv.down.norm", "q", "k", "v", "q.rope", "k.rope"}
    assert names["modules:layernorm+mla_up_proj"] == {"ln1", "ln2"} | mla
    assert names["modules:moe_act"] == {f"expert{e}.swiglu" for e in range(256)}
    assert names["modules:mlp"] == set()  # an MoE block has no dense MLP
    dense = block_pass_graphs(m, _setup("modules:mlp"), 8, dense=True).recompute
    assert {op.name for op in dense.ops} == {"fc1.gate", "fc1.up", "swiglu", "fc2"}


@pytest.mark.parametrize("tp", [1, 8])
def test_dropped_activations_are_the_groups_outputs(tp):
    """DeepSeek-V3's recipe: norms, MLA up-projections and the experts' SwiGLU rebuilt."""
    m = get_model("deepseek-v3")
    none = _setup("none", sequence_parallel=tp > 1)
    ds = _setup("modules:layernorm+mla_up_proj+moe_act", sequence_parallel=tp > 1)
    T, h, a, p, q = 4096, m.hidden, m.heads, 2, 1  # fp8 Linear inputs
    dropped = 2 * q * T * h // tp  # the two norm outputs (the Q/K/V and MoE inputs)
    dropped += p * T * a * (2 * m.head_dim + m.value_head_dim) // tp  # Q, K, V
    dropped += p * T * (m.q_lora_rank + m.kv_lora_rank)  # the latent norms' outputs
    dropped += q * T * m.top_k * m.expert_width // tp  # the routed experts' FC2 inputs
    assert block_activation_bytes(m, none, tp) - block_activation_bytes(m, ds, tp) == dropped
    # core_attn alone is the selective mode; moe drops the whole MoE layer's stash
    assert block_activation_bytes(m, _setup("modules:core_attn"), 1) == block_activation_bytes(
        m, _setup("selective"), 1
    )
    moe = block_activation_bytes(m, _setup("modules:moe"), 1)
    assert (
        block_activation_bytes(m, _setup("full"), 1)
        < moe
        < block_activation_bytes(m, _setup("modules:moe_act"), 1)
    )


def test_time_and_memory_lie_between_no_and_full_recompute(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(TINY_V3))
    out = {}
    for mode in ("none", "modules:layernorm+mla_up_proj+moe_act", "full"):
        ev = evaluate(
            str(path),
            preset("h800"),
            Cluster(devices=8),
            seq_len=1024,
            global_batch=16,
            strategy=f"t=1,p=2,d=4,ep=4,mbs=1,recompute={mode},zero=1",
            precision="fp8-blockwise",
            tokens_to_train=10**9,
        )
        pl = ev.placement
        out[mode] = (
            pl.breakdown.terms()["recompute_s"],
            pl.breakdown.iteration_s,
            pl.memory_breakdown.activations_bytes,
        )
    none, mods, full = out.values()
    assert none[0] == 0 < mods[0] < full[0]
    assert none[1] < mods[1] < full[1]
    assert none[2] > mods[2] > full[2]


def test_hardware_flops_count_the_groups_gemms():
    m, s = get_model("deepseek-v3"), 4096
    none = hardware_flops_per_sequence(m, s, "none")
    attn = hardware_flops_per_sequence(m, s, "modules:core_attn")
    assert attn == hardware_flops_per_sequence(m, s, "selective")
    # norms and activations run on the vector cores: no GEMM FLOPs
    assert hardware_flops_per_sequence(m, s, "modules:layernorm+moe_act") == none
    every = "modules:core_attn+mla_up_proj+mlp+moe"
    assert (
        none < hardware_flops_per_sequence(m, s, every) < hardware_flops_per_sequence(m, s, "full")
    )
