"""Multi-token prediction (DeepSeek-V3's MTP module): parameters, the head layer's graphs and
stash, FLOPs, the switch that turns it off, and the last pipeline stage it lengthens."""

import json

import pytest

import phaze
from arch_space import Cluster, preset
from phaze_common.errors import ConfigError
from workloads import TrainingSetup, build_layer_graph, get_model, load_hf_config, resolve_model
from workloads.flops import block_forward_flops, forward_flops_per_sequence, mtp_forward_flops

# HF deepseek-ai/DeepSeek-V3 model card: "685B ... 671B of the Main Model weights and 14B of
# the Multi-Token Prediction (MTP) Module weights"; the 14B hold the checkpoint's copies of
# the shared embedding and head, which training shares (counted once here)
V3_WITH_MTP = 685e9


def test_deepseek_v3_with_its_mtp_module_is_the_published_685b_within_2_percent():
    m = get_model("deepseek-v3")
    assert m.mtp_layers == 1
    total = m.parameters + m.mtp_parameters()
    assert abs(total / V3_WITH_MTP - 1) < 0.02
    assert abs(m.parameters / 671e9 - 1) < 0.005  # the main model alone, as before


def test_the_mtp_module_is_one_block_plus_its_projection_and_norms():
    m = get_model("deepseek-v3")
    h = m.hidden
    assert m.mtp_parameters() == m.block_parameters() + 2 * h * h + 3 * h
    assert resolve_model("deepseek-v3:mtp_layers=0").mtp_parameters() == 0


def test_config_json_num_nextn_predict_layers_becomes_mtp_layers(tmp_path):
    from tests.test_workloads_hf_deepseek import DEEPSEEK_V3

    for n in (0, 2):
        path = tmp_path / f"c{n}.json"
        path.write_text(json.dumps(DEEPSEEK_V3 | {"num_nextn_predict_layers": n}))
        assert load_hf_config(path).mtp_layers == n
    megatron = {k: v for k, v in DEEPSEEK_V3.items() if k != "num_nextn_predict_layers"}
    path = tmp_path / "megatron.json"
    path.write_text(json.dumps(megatron | {"mtp_num_layers": 3}))
    assert load_hf_config(path).mtp_layers == 3
    path.write_text(json.dumps(megatron | {"mtp_num_layers": -1}))
    with pytest.raises(ConfigError, match="mtp_num_layers = -1"):
        load_hf_config(path)


@pytest.mark.parametrize("bad", ["x", "-1", "1.5"])
def test_a_bad_mtp_override_is_one_error_naming_it(bad):
    with pytest.raises(ConfigError, match=f"mtp_layers = '{bad}' must be a non-negative integer"):
        resolve_model(f"deepseek-v3:mtp_layers={bad}")


def test_model_flops_count_the_mtp_block_projection_and_logits_as_megatron_does():
    m, s = get_model("deepseek-v3"), 4096
    off = resolve_model("deepseek-v3:mtp_layers=0")
    extra = block_forward_flops(m, s) + 2 * s * 2 * m.hidden**2 + 2 * s * m.hidden * m.vocab
    assert mtp_forward_flops(m, s) == extra
    assert forward_flops_per_sequence(m, s) - forward_flops_per_sequence(off, s) == extra


@pytest.mark.parametrize("recompute", ["none", "full"])
def test_the_head_layer_carries_the_mtp_module_and_runs_the_block_class_once_more(recompute):
    m = get_model("deepseek-v3")
    setup = TrainingSetup(1024, 1, recompute=recompute, sequence_parallel=True)
    on = build_layer_graph(m, setup, 8)
    off = build_layer_graph(resolve_model("deepseek-v3:mtp_layers=0"), setup, 8)
    head, bare, block = on.layers[-1], off.layers[-1], on.layers[-2]
    assert head.classes == ("head", block.class_id) and bare.classes == ("head",)
    assert head.parameters - bare.parameters == m.mtp_parameters(8)
    assert head.expert_parameters == block.expert_parameters > 0
    assert head.dispatch_bytes == block.dispatch_bytes > 0
    assert head.tied_parameters > 0 == bare.tied_parameters  # the embedding, shared
    assert head.activation_bytes > bare.activation_bytes + block.activation_bytes
    # beside the main head: the projection and a second head's logits (tp = 8 shards)
    tokens, h = 1024, m.hidden
    gemms = 2 * tokens * 2 * h * h // 8 + 2 * tokens * h * (-(-m.vocab // 8))
    flops = on.op_graphs["head"].forward.flops - off.op_graphs["head"].forward.flops
    assert gemms < flops < 1.05 * gemms
    assert on.op_graphs["head"].recompute.flops == 0  # the block's recompute is the class's
    assert on.layers[:-1] == off.layers[:-1]  # the rest of the model is unchanged


def _stages(workload: str, framework: str = "megatron-core-2024"):
    """A small DeepSeek-V3-like model (4 blocks, 8 experts) on two H100s, p = 2."""
    ev = phaze.evaluate(
        workload,
        preset("h100"),
        Cluster(devices=2, devices_per_node=8),
        seq_len=1024,
        global_batch=8,
        tokens_to_train=8192,
        strategy="t=1,p=2,d=1,v=1,mbs=1,recompute=none,sp=off,zero=1,ep=1,cp=1",
        framework=framework,
    )
    assert ev.feasible, ev.reason
    return ev.placement.stages


@pytest.fixture
def small_v3(tmp_path):
    from tests.test_workloads_hf_deepseek import DEEPSEEK_V3

    small = DEEPSEEK_V3 | {
        "hidden_size": 1024,
        "intermediate_size": 2048,
        "moe_intermediate_size": 256,
        "num_attention_heads": 8,
        "num_key_value_heads": 8,
        "q_lora_rank": 256,
        "kv_lora_rank": 128,
        "n_routed_experts": 8,
        "num_experts_per_tok": 2,
        "n_group": 1,
        "topk_group": 1,
        "first_k_dense_replace": 0,
        "num_hidden_layers": 4,
        "vocab_size": 32000,
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(small))
    return str(path)


def test_the_last_stage_grows_by_the_mtp_block_and_the_first_does_not(small_v3):
    on, off = _stages(small_v3), _stages(f"{small_v3}:mtp_layers=0")
    assert on[0].compute_s == pytest.approx(off[0].compute_s)
    grown = on[1].compute_s - off[1].compute_s
    block = off[0].compute_s / 2  # the first stage: two blocks and the cheap embedding
    assert grown > block
    assert on[1].parameters > off[1].parameters


def test_the_last_stage_copies_the_embedding_unless_dualpipe_puts_it_on_the_first_rank(small_v3):
    """1F1B: the last stage keeps a copy of the embedding the MTP module shares; DualPipe's
    rank 0 holds the first and the last stage, which share it physically (dsv3-report
    Sec. 3.2.1)."""
    table = 32000 * 1024
    assert _stages(small_v3)[-1].tied_parameters == table
    assert _stages(f"{small_v3}:mtp_layers=0")[-1].tied_parameters == 0
    assert _stages(small_v3, "deepseek-2024")[-1].tied_parameters == 0
